"""Purgatory: requests parked until their condition holds or their deadline passes.

A Fetch with fetch.min.bytes > what is available waits here instead of polling: each
append to a partition adds its bytes to every delayed fetch watching that partition, and
the fetch completes as soon as its total reaches min bytes, or when max.wait.ms expires.
Completion re-reads the log, so the answer is always fresh. (Delayed produce for acks=all
in a replicated cluster will live here too.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

TopicPartition = tuple[str, int]


class DelayedOperation:
    __slots__ = ("future", "keys", "min_bytes", "accumulated_bytes", "respond", "timer", "purgatory")

    def __init__(
        self,
        future: asyncio.Future[Any],
        keys: list[TopicPartition],
        min_bytes: int,
        respond: Callable[[], Any],
    ) -> None:
        self.future = future
        self.keys = keys
        self.min_bytes = min_bytes
        self.accumulated_bytes = 0
        self.respond = respond  # builds the response at completion time
        self.timer: asyncio.TimerHandle | None = None
        self.purgatory: Purgatory | None = None


class Purgatory:
    """Delayed operations indexed by the partitions whose progress can complete them."""

    def __init__(self, max_parked: int = 100_000) -> None:
        self._watchers: dict[TopicPartition, set[DelayedOperation]] = {}
        self.parked = 0
        self.max_parked = max_parked

    def park(self, op: DelayedOperation, timeout_ms: int) -> bool:
        """Park `op`; returns False (caller must answer now) when the purgatory is full."""
        if self.parked >= self.max_parked:
            return False
        loop = asyncio.get_running_loop()
        op.purgatory = self
        for key in op.keys:
            self._watchers.setdefault(key, set()).add(op)
        self.parked += 1
        op.timer = loop.call_later(max(timeout_ms, 0) / 1000.0, self.complete, op)
        return True

    def on_progress(self, key: TopicPartition, nbytes: int) -> None:
        """Data (or a high watermark move) arrived on `key`: complete the fetches it satisfies."""
        ops = self._watchers.get(key)
        if not ops:
            return
        for op in list(ops):
            op.accumulated_bytes += nbytes
            if op.accumulated_bytes >= op.min_bytes:
                self.complete(op)

    def complete_all(self, key: TopicPartition) -> None:
        """Answer everything watching `key` now (partition deleted, leadership changed)."""
        for op in list(self._watchers.get(key, ())):
            self.complete(op)

    def complete(self, op: DelayedOperation) -> None:
        if op.purgatory is not self:
            return  # already completed
        op.purgatory = None
        self.parked -= 1
        if op.timer is not None:
            op.timer.cancel()
        for key in op.keys:
            ops = self._watchers.get(key)
            if ops is not None:
                ops.discard(op)
                if not ops:
                    del self._watchers[key]
        if op.future.done():
            return
        try:
            op.future.set_result(op.respond())
        except Exception as e:  # surfaced to the connection, which logs and closes
            op.future.set_exception(e)

    def shutdown(self) -> None:
        for ops in list(self._watchers.values()):
            for op in list(ops):
                self.complete(op)
