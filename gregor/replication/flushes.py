"""flush.messages on a leader: the fsyncs its appends make due, run one at a time off the event loop.

An append that makes `flush.messages` due is in the log at once, but not on disk until an fsync covers
it. Until then the partition's high watermark stays below it (consumers never see what a crash could
take back) and its Produce answer waits. The fsync runs on an executor thread, so the event loop goes on
serving others; one runs at a time, and appends made due meanwhile are covered by the next.

A Partition holds one of these only while something is unflushed or waiting: an idle partition pays
nothing (100,000 partitions each with empty queues would cost tens of MB).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable

from gregor.storage.errors import KafkaStorageError
from gregor.storage.log import Log

log = logging.getLogger("gregor.partition")


class PendingFlushes:
    """One partition's appends made due for an fsync and the answers waiting for it. Loop thread only."""

    __slots__ = ("_name", "_log_of", "_on_flushed", "_on_flush_ms", "appends", "waiters", "running")

    def __init__(self, name: str, log_of: Callable[[], Log]) -> None:
        """`log_of()` is the partition's log when an fsync starts (a move to another log dir replaces it)."""
        self._name = name  # "topic-partition", for the log
        self._log_of = log_of
        self._on_flushed: Callable[[], None] | None = None
        self._on_flush_ms: Callable[[float], None] | None = None
        # (base, end offset) of appends made due whose fsync has not finished: the HW stays below the first.
        self.appends: collections.deque[tuple[int, int]] = collections.deque()
        self.waiters: list[tuple[int, asyncio.Future[None]]] = []  # (end offset, answer)
        self.running = False

    @property
    def idle(self) -> bool:
        """Nothing unflushed, nothing waiting, no fsync running."""
        return not self.appends and not self.waiters and not self.running

    def first_unflushed(self) -> int | None:
        """The base offset of the first append not yet on disk (the HW may not pass it), or None."""
        return self.appends[0][0] if self.appends else None

    def add_append(self, base_offset: int, end_offset: int) -> None:
        self.appends.append((base_offset, end_offset))

    def wait(self, end_offset: int, on_flushed: Callable[[], None],
             on_flush_ms: Callable[[float], None] | None) -> asyncio.Future[None]:
        """A future done once the log is fsynced up to `end_offset` (its exception if the fsync failed).
        After each fsync (done or failed) `on_flushed()` is told (the partition moves its HW past what it
        covered) and `on_flush_ms(ms)` (the metrics' flush time histogram) how long it took."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append((end_offset, fut))
        self._on_flushed = on_flushed
        self._on_flush_ms = on_flush_ms
        if not self.running:
            self._start()
        return fut

    def _start(self) -> None:
        lg = self._log_of()
        target = lg.log_end_offset
        self.running = True

        def timed_flush() -> float:
            t0 = time.perf_counter()
            lg.flush(target)
            return (time.perf_counter() - t0) * 1000.0

        job = asyncio.get_running_loop().run_in_executor(None, timed_flush)
        job.add_done_callback(lambda f: self._finished(target, f))

    def _finished(self, target: int, job: asyncio.Future[float]) -> None:
        """The fsync up to `target` finished (or failed: the appends are in the log all the same, and
        their producers are told): answer its waiters, forget the appends it covered."""
        self.running = False
        error = KafkaStorageError("the flush was cancelled") if job.cancelled() else job.exception()
        if error is not None:
            log.error("flush of %s failed: %s", self._name, error)
        elif self._on_flush_ms is not None:
            self._on_flush_ms(job.result())
        done = [w for w in self.waiters if w[0] <= target]
        self.waiters = [w for w in self.waiters if w[0] > target]
        for _, fut in done:
            if fut.done():
                continue
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(None)
        while self.appends and self.appends[0][1] <= target:
            self.appends.popleft()
        if self._on_flushed is not None:
            self._on_flushed()
        if self.waiters:  # appended while this flush ran (a closed log's flush returns at once)
            self._start()
