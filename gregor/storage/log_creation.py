"""LogCreation: the new logs of one broker, made in batches.

Each new log goes to the online log dir with the fewest logs (Kafka's rule), unless
AlterReplicaLogDirs named a dir for that replica before it was here (Kafka's preferred log dir,
LogMover.take_preferred). A batch's directories and segment files are created first, then each parent log dir is
fsynced once (as Kafka flushes the parent on log creation) before any of the new logs joins the
LogTable: a directory fsync costs ~3 ms here, more than everything else a new log needs. A log whose
creation or fsync fails gets the error instead; the dir is the caller's to fail.

Two steps, so the table's lock is held only to decide: `reserve` (under the lock) picks each new log's
dir and marks it `creating`; `create` (without it) makes the directories and files and fsyncs, then
takes the lock again to let the logs join. A batch of 64 logs held the lock ~70 ms before, and the
event loop asking for any other partition's log waited that long.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Protocol

from gregor.storage.checkpoint import TopicPartition
from gregor.storage.config import LogConfig
from gregor.storage.dir_failure import LogDirFailureChannel
from gregor.storage.errors import LogOfflineError, StorageError
from gregor.storage.files import fsync_dir
from gregor.storage.log import Log
from gregor.storage.log_dirs import create_log, logs_per_dir
from gregor.storage.log_table import LogTable
from gregor.storage.segment_files import SegmentFileCache

logger = logging.getLogger("gregor.storage.log_manager")

class Placement(Protocol):
    """What placing a new log asks of the moves between log dirs (LogMover)."""

    def take_preferred(self, tp: TopicPartition) -> str | None: ...

    def futures(self) -> list[Log]: ...


class LogCreation:
    """Where new logs go, and their creation in batches (see the module docstring)."""

    def __init__(self, table: LogTable, dirs: LogDirFailureChannel, moves: Placement, files: SegmentFileCache) -> None:
        """`moves`: the preferred dirs AlterReplicaLogDirs named, and the future replicas being filled
        (which count towards their dirs)."""
        self._table = table
        self._dirs = dirs
        self._moves = moves
        self._files = files

    def reserve(self, tps: list[TopicPartition]) -> list[tuple[TopicPartition, str | Exception]]:
        """A log dir for each of `tps` (none of them known to the table; its lock held), or the error that
        leaves it without one; each placed one is reserved in the table's `creating` until `create` ends."""
        placed: list[tuple[TopicPartition, str | Exception]] = []
        counts: dict[str, int] | None = None
        for tp in tps:
            online = self._dirs.online_dirs()
            if not online:
                placed.append((tp, LogOfflineError(f"cannot create {tp[0]}-{tp[1]}: every log dir is offline")))
                continue
            d = online[0]
            preferred = self._moves.take_preferred(tp)
            if preferred in online:
                d = preferred
                if counts is not None:
                    counts[d] += 1
            elif len(online) > 1:  # counted once per batch: per creation made bulk creation quadratic
                if counts is None:
                    counts = self._logs_per_dir()
                d = min(online, key=lambda x: counts[x])  # type: ignore[index]
                counts[d] += 1
            self._table.creating[tp] = (threading.Event(), d)
            placed.append((tp, d))
        return placed

    def create(self, placed: list[tuple[TopicPartition, str | Exception]], config: LogConfig, now: int
               ) -> tuple[dict[TopicPartition, Log | Exception], list[tuple[str, BaseException]]]:
        """Create the logs `reserve` placed, without the table's lock: each one's log, or its error; and the
        dirs where something failed, with the error (the caller fails them). The logs made durable join
        the table (under its lock) unless it closed or their dir failed meanwhile; every reservation
        ends, whatever happens."""
        out: dict[TopicPartition, Log | Exception] = {}
        created: list[tuple[TopicPartition, Log]] = []
        failed_dirs: list[tuple[str, BaseException]] = []
        try:
            for tp, d in placed:
                if isinstance(d, Exception):
                    out[tp] = d
                    continue
                try:
                    log = create_log(os.path.join(d, f"{tp[0]}-{tp[1]}"), config, now, self._files)
                except (StorageError, OSError) as e:
                    failed_dirs.append((d, e))
                    out[tp] = e
                    continue
                created.append((tp, log))
                out[tp] = log
        finally:
            # Whatever was created so far becomes durable and known, even if a later one raised.
            fsync_failure = self._fsync(created, out)
            if fsync_failure is not None:
                failed_dirs.append(fsync_failure)
            with self._table.lock:
                self._join(created, out)
                for tp, _ in placed:
                    reserved = self._table.creating.pop(tp, None)
                    if reserved is not None:
                        reserved[0].set()
        for tp, log in created:
            if out[tp] is log:
                logger.debug("created log %s", log.dir)  # callers summarize: one line per topic, not per partition
        return out, failed_dirs

    def _logs_per_dir(self) -> dict[str, int]:
        table = self._table
        counts = logs_per_dir(self._dirs.log_dirs, [*table.logs.values(), *self._moves.futures()])
        for d in [plan[0] for plan in table.lazy.values()] + [d for _, d in table.creating.values()]:
            counts[d] = counts.get(d, 0) + 1
        return counts

    def _fsync(self, created: list[tuple[TopicPartition, Log]], out: dict[TopicPartition, Log | Exception]
               ) -> tuple[str, OSError] | None:
        """fsync the parent dirs of the logs just created, before they become known. If an fsync fails,
        they are closed and each gets the error instead (the next start finds their directories); the
        failed dir and the error are returned."""
        if not created:
            return None
        d = ""
        try:
            for d in sorted({log.log_dir for _, log in created}):
                fsync_dir(d)
        except OSError as e:
            err = StorageError(f"cannot make new logs durable: {e}")
            for tp, log in created:
                log.close()
                out[tp] = err
            return d, e
        return None

    def _join(self, created: list[tuple[TopicPartition, Log]], out: dict[TopicPartition, Log | Exception]) -> None:
        """The durable new logs join the table (its lock held), unless it closed or their dir went offline
        while they were being created: then they are closed and get the error."""
        online = set(self._dirs.online_dirs())
        for tp, log in created:
            if out[tp] is not log:
                continue
            if self._table.closed or log.log_dir not in online:
                why = ("the log manager is shut down" if self._table.closed
                       else f"its log dir {log.log_dir} failed while it was being created")
                log.close()
                out[tp] = (StorageError if self._table.closed else LogOfflineError)(f"{tp[0]}-{tp[1]}: {why}")
                if not self._table.closed:
                    self._table.offline[tp] = why
                continue
            self._table.logs[tp] = log
