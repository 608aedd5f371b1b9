"""Creating and deleting partitions' logs off the event loop, chained per topic.

A CreateTopics, CreatePartitions or DeleteTopics of thousands of partitions (or a restart after a
crash in the middle of one) means files, directories and fsyncs: done on the event loop, it would
stop the broker answering everyone else. So the replica manager registers and unregisters the
Partitions at once and hands the log work to this queue, which runs it on executor threads in
slices of LOG_WORK_SLICE partitions (the loop attaches each slice's logs between calls, so the first
partitions are served from disk while later ones are still being created).

Work is chained per topic: a deletion finishes before a re-creation of the same name starts, and
while a deletion is queued or running (`is_deleting`) no log of the topic may be created on first
use, since it could be one of those about to be deleted. `done(topic)` is the future admin
responses wait on.

This is the replica manager's: it reads the hosted Partitions it is given and reports a log that
would not be created through `set_offline`; it knows nothing else of the server.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from gregor.replication.partition import Partition
from gregor.storage.config import LogConfig
from gregor.storage.errors import StorageError
from gregor.storage.log import Log
from gregor.storage.log_manager import LogManager

log = logging.getLogger("gregor.replica")

# Partitions whose logs one executor call creates or deletes: the loop attaches each slice's logs
# between calls, so the first partitions are served from disk while later ones are still created.
LOG_WORK_SLICE = 64


class LogWorkQueue:
    """The per-topic chain of log creations and deletions, run on executor threads. `partitions` is
    the replica manager's table of hosted Partitions (read, never changed here); `set_offline(topic,
    p, error)` takes a partition whose log could not be created offline."""

    def __init__(self, log_manager: LogManager, partitions: Mapping[tuple[str, int], Partition],
                 set_offline: Callable[[str, int, Exception], None]) -> None:
        self.log_manager = log_manager
        self.partitions = partitions
        self.set_offline = set_offline
        self._work: dict[str, asyncio.Future[None]] = {}  # topic -> the last queued log work on it
        self._deleting: dict[str, int] = {}  # topic -> deletions of its logs queued or running

    def done(self, topic: str) -> asyncio.Future[None] | None:
        """A future done when the log work queued so far on `topic` is done; None when nothing is queued."""
        fut = self._work.get(topic)
        return None if fut is None or fut.done() else asyncio.shield(fut)

    def is_deleting(self, topic: str) -> bool:
        """A deletion of the topic's logs is queued or running: none may be created or adopted meanwhile."""
        return bool(self._deleting.get(topic))

    def _chain(self, topic: str, work: Callable[[], Awaitable[None]]) -> None:
        """Run `work` after the log work already queued on `topic`."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (tools, tests of the storage layer): do it now
            asyncio.run(work())
            return
        prev = self._work.get(topic)

        async def run() -> None:
            if prev is not None:
                await asyncio.wait([prev])
            try:
                await work()
            except StorageError as e:  # the log manager shut down under it (broker stopping), or a disk error
                log.warning("log work on topic %s stopped: %s", topic, e)
            except Exception:
                log.exception("log work on topic %s failed", topic)

        fut = loop.create_task(run())
        self._work[topic] = fut

        def forget(f: asyncio.Future[None]) -> None:
            if self._work.get(topic) is f:
                del self._work[topic]

        fut.add_done_callback(forget)

    def queue_creation(self, topic: str, ps: list[int], cfg: LogConfig) -> None:
        """Create the logs of the topic's partitions `ps` that still have none when their turn comes."""
        # A log left by a clean shutdown is not this work's: its first user opens it, or the log manager's
        # one background thread (this work, spread over every topic's chain, took the GIL from the loop for
        # seconds after a restart of 10,000 partitions).
        ps = [p for p in ps if not self.log_manager.is_unopened(topic, p)]
        if not ps:
            return

        async def create() -> None:
            loop = asyncio.get_running_loop()
            t0 = time.monotonic()
            for i in range(0, len(ps), LOG_WORK_SLICE):
                todo = [p for p in ps[i:i + LOG_WORK_SLICE] if self._wants_log(topic, p)]
                if not todo:
                    continue
                # The Partitions these logs are for: if the topic is deleted (and perhaps re-created) while
                # the executor works, the logs belong to the deleted topic, whose deletion (queued after this
                # work) closes them; a re-created topic's Partition must never be handed one (a Fetch would
                # then meet a closed log).
                owners = {p: self.partitions.get((topic, p)) for p in todo}
                logs = await loop.run_in_executor(None, self._create_logs, topic, todo, cfg)
                for p, lg in logs:
                    part = self.partitions.get((topic, p))
                    if part is None or part is not owners[p]:
                        continue
                    if isinstance(lg, Exception):  # one partition's failure must not stop the others
                        self.set_offline(topic, p, lg)
                        continue
                    part.attach_log(lg)
            created = sum(1 for p in ps if self.partitions.get((topic, p)) is not None)  # some on first use
            if created:
                log.info("created %d log%s of %s in %.0f ms", created, "s" if created > 1 else "", topic,
                         (time.monotonic() - t0) * 1000)

        self._chain(topic, create)

    def _wants_log(self, topic: str, p: int) -> bool:
        part = self.partitions.get((topic, p))
        return part is not None and not part.has_log

    def _create_logs(self, topic: str, ps: list[int], cfg: LogConfig) -> list[tuple[int, Log | Exception]]:
        """One slice's logs in one call: the log manager fsyncs the parent dir once for all of them (and
        opens, rather than creates, the logs it holds on disk unopened since a clean start)."""
        out = self.log_manager.get_or_create_logs(topic, ps, cfg)
        if self.log_manager.closed:
            raise StorageError("the log manager is shut down")
        return out

    def queue_deletion(self, topic: str, ps: list[int]) -> None:
        """Delete the topic's logs `ps` once the log work queued before on the topic is done. Until then no
        log of the topic is created on first use (it could be one of these, about to be deleted)."""
        self._deleting[topic] = self._deleting.get(topic, 0) + 1

        async def delete() -> None:
            try:
                loop = asyncio.get_running_loop()
                t0 = time.monotonic()
                for i in range(0, len(ps), LOG_WORK_SLICE):
                    await loop.run_in_executor(None, self._delete_logs, topic, ps[i:i + LOG_WORK_SLICE])
                if len(ps) > 1:
                    log.info("deleted %d logs of %s in %.0f ms", len(ps), topic, (time.monotonic() - t0) * 1000)
            finally:
                left = self._deleting[topic] - 1
                if left:
                    self._deleting[topic] = left
                else:
                    del self._deleting[topic]

        self._chain(topic, delete)

    def _delete_logs(self, topic: str, ps: list[int]) -> None:
        for p in ps:
            self.log_manager.delete_log(topic, p)
