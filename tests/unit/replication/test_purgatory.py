"""The purgatory on its own, with a fake clock: completion on condition, on deadline, forced; bounds."""

from __future__ import annotations

import pytest

from gregor.replication.purgatory import DelayedOperation, Purgatory, PurgatoryFullError
from tests.server.fakeclock import FakeClock


class Counter(DelayedOperation):
    """Completes when `source[0]` reaches `target`."""

    def __init__(self, delay_ms: int, source: list[int], target: int) -> None:
        super().__init__(delay_ms)
        self.source = source
        self.target = target
        self.answers: list[str] = []
        self.expired = False

    def try_complete(self) -> bool:
        if self.source[0] >= self.target:
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        self.expired = True

    def on_complete(self) -> None:
        self.answers.append("expired" if self.expired else f"done at {self.source[0]}")


def test_completes_at_once_when_the_condition_already_holds() -> None:
    clock = FakeClock()
    p = Purgatory(10, clock)
    op = Counter(1000, [5], 5)
    assert p.try_complete_else_watch(op, ["a"])
    assert op.answers == ["done at 5"] and p.parked == 0 and p.watched("a") == 0 and clock.pending == 0


def test_completes_on_progress_of_a_watched_key_only() -> None:
    clock = FakeClock()
    p = Purgatory(10, clock)
    src = [0]
    op = Counter(1000, src, 3)
    assert not p.try_complete_else_watch(op, ["a", "b"])
    assert p.parked == 1 and p.watched("a") == p.watched("b") == 1
    src[0] = 3
    assert p.check_and_complete("other") == 0 and op.answers == []
    assert p.check_and_complete("b") == 1
    assert op.answers == ["done at 3"]
    assert p.parked == 0 and p.watched("a") == 0 and clock.pending == 0  # unwatched everywhere, timer cancelled
    clock.advance(5000)
    assert op.answers == ["done at 3"]  # exactly once


def test_expires_at_its_deadline_and_not_before() -> None:
    clock = FakeClock()
    p = Purgatory(10, clock)
    op = Counter(500, [0], 3)
    p.try_complete_else_watch(op, ["a"])
    clock.advance(499)
    assert op.answers == []
    clock.advance(1)
    assert op.answers == ["expired"] and p.parked == 0 and p.expired == 1 and p.watched("a") == 0
    assert p.check_and_complete("a") == 0


def test_complete_all_forces_every_watcher_of_a_key() -> None:
    clock = FakeClock()
    p = Purgatory(10, clock)
    ops = [Counter(1000, [0], 9) for _ in range(3)]
    for op in ops[:2]:
        p.try_complete_else_watch(op, ["gone"])
    p.try_complete_else_watch(ops[2], ["kept"])
    assert p.complete_all("gone") == 2
    assert [op.answers for op in ops] == [["done at 0"], ["done at 0"], []]
    assert p.parked == 1
    p.shutdown()
    assert ops[2].answers == ["done at 0"] and p.parked == 0 and clock.pending == 0


def test_bounded_by_max_operations() -> None:
    clock = FakeClock()
    p = Purgatory(2, clock)
    for _ in range(2):
        assert not p.try_complete_else_watch(Counter(1000, [0], 1), ["a"])
    extra = Counter(1000, [0], 1)
    with pytest.raises(PurgatoryFullError, match="gregor.purgatory.max.operations"):
        p.try_complete_else_watch(extra, ["a"])
    assert p.parked == 2 and p.watched("a") == 2 and extra.answers == []
    # One that completes at once needs no room.
    assert p.try_complete_else_watch(Counter(1000, [1], 1), ["a"])
    clock.advance(1000)
    assert p.parked == 0 and p.expired == 2
    assert not p.try_complete_else_watch(extra, ["a"])  # room again
