"""Log dir events on the hosted partitions: a failed log dir, a finished log move, an I/O error.

The log manager reports these from its own threads (a failing write, the mover's copy catching up);
this brings each to the event loop and applies it there: a failed dir's partitions go offline (their
parked requests answered, their fetchers stopped; they answer KAFKA_STORAGE_ERROR) and the broker is told,
to tell the controller (Kafka's ReplicaManager.handleLogDirFailure); a future replica that caught up
takes its partition's place between two appends (AlterReplicaLogDirs).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from gregor.replication.partition import Partition
from gregor.replication.purgatory import TopicPartition
from gregor.storage.log_manager import LogManager, LogOfflineError


class LogDirEvents:
    """The log manager's dir failures and log moves, applied to the replica manager's partitions."""

    def __init__(self, log_manager: LogManager, partitions: Mapping[TopicPartition, Partition],
                 set_offline: Callable[[str, int, Exception], None],
                 on_dir_failure: Callable[[str, list[TopicPartition]], None]) -> None:
        """`partitions`: the replica manager's, read only; `set_offline(topic, p, why)` takes a partition
        offline; `on_dir_failure(dir, partitions)` tells the broker, on the loop."""
        self.log_manager = log_manager
        self.partitions = partitions
        self._set_offline = set_offline
        self._on_dir_failure = on_dir_failure
        self._loop: asyncio.AbstractEventLoop | None = None  # the broker's, once it runs
        log_manager.on_dir_failure = self._dir_failed
        log_manager.mover.on_caught_up = self._move_caught_up

    def start(self) -> None:
        """Events from now on are applied on the running loop (before it, there is nothing to apply them to)."""
        self._loop = asyncio.get_running_loop()

    def storage_failure(self, topic: str, p: int, e: BaseException) -> None:
        """An error met on the partition's log: an I/O error fails its whole log dir (LogManager.maybe_fail_dir)."""
        d = self.log_manager.dir_of(topic, p)
        if d is not None:
            self.log_manager.maybe_fail_dir(d, e)

    def take_offline_logs(self) -> None:
        """Partitions whose logs failed to open in the log manager's background opening (after a clean
        shutdown logs are opened after the broker serves) go offline, as if they had failed at startup."""
        for (topic, p), why in list(self.log_manager.offline.items()):
            if (topic, p) in self.partitions:
                self._set_offline(topic, p, LogOfflineError(why))

    def _dir_failed(self, d: str, tps: list[TopicPartition]) -> None:
        """LogManager.on_dir_failure, on any thread: handled on the loop (`_apply_dir_failure`)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._apply_dir_failure(d, tps)
        else:
            loop.call_soon_threadsafe(self._apply_dir_failure, d, tps)

    def _apply_dir_failure(self, d: str, tps: list[TopicPartition]) -> None:
        why = f"log dir {d} is offline"
        for topic, p in tps:
            self._set_offline(topic, p, LogOfflineError(why))
        self._on_dir_failure(d, tps)

    def _move_caught_up(self, tp: TopicPartition) -> None:
        """A future replica caught up (on the mover's thread): the swap runs on the loop, between appends."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(self._complete_move, tp)

    def _complete_move(self, tp: TopicPartition) -> None:
        new = self.log_manager.swap_future(*tp)
        part = self.partitions.get(tp)
        if part is None:
            return
        if new is not None:
            part.replace_log(new)
        elif tp in self.log_manager.offline:
            self._set_offline(tp[0], tp[1], LogOfflineError(self.log_manager.offline[tp]))
