"""A clock for the purgatory that only moves when a test says so."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable


class _Timer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """`call_later(...)` as gregor.replication.purgatory.Clock, on a time of its own; `advance(ms)` fires the
    timers that come due, in deadline order."""

    def __init__(self, start_ms: int = 1_000_000) -> None:
        self._now = start_ms
        self._timers: list[tuple[int, int, _Timer, Callable[[], None]]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self._now

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> _Timer:
        t = _Timer()
        heapq.heappush(self._timers, (self._now + max(delay_ms, 0), next(self._seq), t, callback))
        return t

    def advance(self, ms: int) -> None:
        target = self._now + ms
        while self._timers and self._timers[0][0] <= target:
            due, _, t, cb = heapq.heappop(self._timers)
            self._now = due
            if not t.cancelled:
                cb()
        self._now = target

    @property
    def pending(self) -> int:
        return sum(1 for _, _, t, _ in self._timers if not t.cancelled)
