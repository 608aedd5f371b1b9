"""Purgatory: requests parked until their condition holds or their deadline passes (Kafka's
DelayedOperationPurgatory, in our own shape).

A delayed operation (a Produce waiting for acks=all, a Fetch waiting for fetch.min.bytes) is
first tried at once; only if it cannot complete is it parked, watched under the partitions
whose progress may complete it. Whoever moves a partition on (an append, a high watermark
move, a follower fetch, a leader change, a deletion) calls `check_and_complete(key)`; the
operations watching that key re-check their condition, and those that hold complete. An
operation completes exactly once: on its condition, on its deadline (`on_expiration` first),
or forced (partition removed, broker stopping).

One purgatory serves every kind of delayed operation: they are told apart by their own
`try_complete`. The clock is injected, so unit tests drive deadlines by hand (FakeClock in
tests) and the broker uses the event loop's timers. Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Iterable
from typing import Protocol

log = logging.getLogger("gregor.purgatory")

TopicPartition = tuple[str, int]


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """What the purgatory needs of time: one-shot timers."""

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> TimerHandle: ...


class LoopClock:
    """The running event loop's timers (the broker's clock)."""

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000.0, callback)


class DelayedOperation:
    """One parked request. Subclasses say when they may complete (`try_complete`, which calls
    `force_complete` when the condition holds), what to do on the deadline (`on_expiration`,
    then completion) and how to answer (`on_complete`, called exactly once)."""

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = max(delay_ms, 0)
        self.completed = False
        self._timer: TimerHandle | None = None
        self._purgatory: Purgatory | None = None
        self._keys: tuple[Hashable, ...] = ()

    def try_complete(self) -> bool:
        """Check the condition; if it holds, `force_complete()` and return True."""
        raise NotImplementedError

    def on_expiration(self) -> None:  # noqa: B027 - optional hook
        """The deadline passed before the condition held (called just before `on_complete`)."""

    def on_complete(self) -> None:
        raise NotImplementedError

    def force_complete(self) -> bool:
        """Complete now, whatever the condition; False if it already completed."""
        if self.completed:
            return False
        self.completed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._purgatory is not None:
            self._purgatory._unwatch(self)
        self.on_complete()
        return True


class PurgatoryFullError(Exception):
    """More operations are parked than the purgatory's bound allows."""


class Purgatory:
    """Delayed operations indexed by the keys (partitions) whose progress may complete them.
    At most `max_operations` are parked at once; parking one more raises PurgatoryFullError
    (its owner answers at once instead)."""

    def __init__(self, max_operations: int, clock: Clock | None = None, name: str = "delayed") -> None:
        self.max_operations = max_operations
        self.clock: Clock = clock or LoopClock()
        self.name = name
        self._watchers: dict[Hashable, set[DelayedOperation]] = {}
        self.parked = 0
        self.expired = 0  # operations completed by their deadline, since start

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """Complete `op` now if it can; else park it under `keys` with its deadline. Returns whether
        it completed now. Raises PurgatoryFullError (nothing parked) when the bound is reached."""
        if op.try_complete():
            return True
        if self.parked >= self.max_operations:
            raise PurgatoryFullError(
                f"{self.parked} {self.name} operations are waiting, the most allowed "
                "(gregor.purgatory.max.operations)")
        op._purgatory = self
        op._keys = tuple(keys)
        for key in op._keys:
            self._watchers.setdefault(key, set()).add(op)
        self.parked += 1
        # The condition may have become true between the check and the watch only if something ran in
        # between, which cannot happen on one event loop: no second check needed (Kafka needs one).
        op._timer = self.clock.call_later(op.delay_ms, lambda: self._expire(op))
        return False

    def _expire(self, op: DelayedOperation) -> None:
        op._timer = None
        if op.completed:
            return
        op.on_expiration()
        if op.force_complete():
            self.expired += 1

    def check_and_complete(self, key: Hashable) -> int:
        """Something changed on `key`: complete the operations watching it whose condition holds.
        Returns how many completed."""
        ops = self._watchers.get(key)
        if not ops:
            return 0
        done = 0
        for op in list(ops):
            if not op.completed and op.try_complete():
                done += 1
        return done

    def complete_all(self, key: Hashable) -> int:
        """Answer everything watching `key` now (its partition was removed or changed leader): each
        operation's `try_complete` sees the change and answers with its error."""
        done = 0
        for op in list(self._watchers.get(key, ())):
            if not op.completed and (op.try_complete() or op.force_complete()):
                done += 1
        return done

    def watched(self, key: Hashable) -> int:
        """How many operations watch `key`."""
        return len(self._watchers.get(key, ()))

    def _unwatch(self, op: DelayedOperation) -> None:
        op._purgatory = None
        self.parked -= 1
        for key in op._keys:
            ops = self._watchers.get(key)
            if ops is not None:
                ops.discard(op)
                if not ops:
                    del self._watchers[key]
        assert self.parked >= 0

    def shutdown(self) -> None:
        """Answer every parked operation (the broker is stopping)."""
        for ops in list(self._watchers.values()):
            for op in list(ops):
                op.force_complete()
        assert self.parked == 0, self.parked
