"""The garbage collector's schedule: the broker's state is frozen once loaded, the old generation's growth is
frozen in steps, and cyclic garbage that was frozen is freed once the frozen part has grown enough.

These run the schedule on this test process's own collector (it is process-wide, as in a broker), and put
it back as it was after each test."""

from __future__ import annotations

import gc
import re
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gregor.broker import interpreter as collector
from gregor.broker.interpreter import SWITCH_INTERVAL_S, CollectorSchedule, tune_interpreter
from tests.broker_process import BrokerProcess


class Node:
    """A container object the collector tracks; two of them referring to each other make a cycle."""

    def __init__(self) -> None:
        self.other: Any = None


@pytest.fixture(autouse=True)
def own_collector() -> Iterator[None]:
    gc.collect()
    yield
    gc.unfreeze()
    gc.collect()


def cycles(n: int) -> list[Node]:
    out = []
    for _ in range(n):
        a, b = Node(), Node()
        a.other, b.other = b, a
        out.append(a)
    return out


def test_freeze_loaded_freezes_what_survives_a_full_collection() -> None:
    live = cycles(1000)
    garbage = cycles(1)
    dead = weakref.ref(garbage[0])
    del garbage
    s = CollectorSchedule()
    s.freeze_loaded("a test")
    assert dead() is None  # collected first, not frozen
    # Frozen objects can still be freed (by refcount, from any thread), so the count only shrinks after.
    assert 2000 <= gc.get_freeze_count() <= s.frozen_after_full
    assert len(gc.get_objects(generation=2)) < 1000  # the old generation is empty but for what came since
    assert live[0].other.other is live[0]


def test_check_freezes_the_old_generation_once_it_passes_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collector, "REFREEZE_OBJECTS", 5_000)
    s = CollectorSchedule()
    s.freeze_loaded("a test")
    frozen = gc.get_freeze_count()
    small = cycles(100)
    gc.collect()  # into the old generation
    s.check()
    assert gc.get_freeze_count() <= frozen  # under the threshold: left to the collector (frozen ones may die)
    big = cycles(5_000)
    garbage = cycles(10)
    dead = weakref.ref(garbage[0])
    gc.collect()
    del garbage
    s.check()
    assert dead() is None  # the old generation was collected before it was frozen
    assert gc.get_freeze_count() >= frozen + 10_000
    assert len(gc.get_objects(generation=2)) < 1_000
    assert small and big


def test_frozen_cyclic_garbage_is_freed_once_the_frozen_part_has_grown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collector, "REFREEZE_OBJECTS", 1_000)
    s = CollectorSchedule()
    s.freeze_loaded("a test")
    base = s.frozen_after_full
    doomed = cycles(1_000)
    dead = weakref.ref(doomed[0])
    gc.collect()
    s.check()  # frozen while alive
    del doomed
    gc.collect()
    assert dead() is not None  # garbage now, but frozen: the collector does not see it
    grow = []
    while gc.get_freeze_count() <= base * (1 + collector.FULL_GROWTH):
        grow.append(cycles(2_000))
        gc.collect()
        s.check()
    s.check()  # the frozen part has grown by half: everything is collected once
    assert dead() is None
    assert s.frozen_after_full > base


def test_a_broker_process_freezes_its_state_once_loaded(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", {"metrics.port": "0"}).start()
    try:
        text = b.log_text()
        loaded = text.index("all logs loaded")
        m = re.search(r"collected everything and froze (\d+) objects \(all logs loaded\)", text)
        assert m and m.start() < loaded, text[-3000:]  # frozen before the broker says it is loaded
        assert int(m.group(1)) > 10_000  # the modules and the broker's state
    finally:
        b.stop()


def test_tune_interpreter_shortens_the_switch_interval() -> None:
    old = sys.getswitchinterval()
    try:
        tune_interpreter()
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S) and SWITCH_INTERVAL_S < 0.005
    finally:
        sys.setswitchinterval(old)
