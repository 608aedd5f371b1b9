"""New logs are created outside the log table's lock: while one thread creates a topic's batch of logs,
another gets any other log, lists them all, or deletes one at once; asking for a log of that batch waits
for it and gets the same log; a shutdown meanwhile closes the batch instead of letting it join."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gregor.storage import LogConfig, LogManager, log_creation
from gregor.storage.errors import StorageError
from tests.waiting import wait_for

BATCH = 20


@pytest.fixture
def slow_creation(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Each new log of topic "slow" takes until `release` is set, then 5 ms: the batch is under way as long
    as the test wants."""
    release = threading.Event()
    real = log_creation.create_log

    def create(path: str, *args: Any, **kwargs: Any) -> Any:
        if "/slow-" in path:
            release.wait(30)
            time.sleep(0.005)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(log_creation, "create_log", create)
    yield release
    release.set()


def _start_batch(manager: LogManager) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(manager.get_or_create_logs("slow", list(range(BATCH))))
        except BaseException as e:  # reported by the test
            result.append(e)

    t = threading.Thread(target=run)
    t.start()
    assert _reserved(manager) == BATCH
    return t, result


def _reserved(manager: LogManager, timeout_s: float = 10.0) -> int:
    """How many names the batch reserved, once it reserved any. Read under the table's lock: `reserve`
    fills `creating` one name at a time under it, and a look without the lock can land in the middle
    (the batch thread can lose the interpreter between two names on a loaded machine)."""
    table = manager._table
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with table.lock:
            if table.creating:
                return len(table.creating)
        time.sleep(0.001)
    return 0


def test_other_logs_are_served_while_a_batch_is_created(tmp_path: Path, slow_creation: threading.Event) -> None:
    manager = LogManager([str(tmp_path / "d")], LogConfig())
    other = manager.get_or_create_log("fast", 0)
    t, result = _start_batch(manager)
    assert manager.get_or_create_log("fast", 0) is other  # the lock is free: no wait for the batch
    assert manager.get_or_create_log("fast", 1) is not None  # a new log of another topic too
    assert {log.dir for log in manager.all_logs()} >= {other.dir}
    assert manager.delete_log("fast", 1)
    assert manager.knows("slow", 3) and not result  # still being created

    waiting: list[Any] = []
    w = threading.Thread(target=lambda: waiting.append(manager.get_or_create_log("slow", 3)))
    w.start()
    time.sleep(0.05)
    assert not waiting  # one of the batch: it waits for the batch
    slow_creation.set()
    t.join(30)
    w.join(30)
    ((_, created),) = [(p, lg) for p, lg in result[0] if p == 3]
    assert waiting == [created]  # the same log, created once
    assert sorted(p for p, _ in result[0]) == list(range(BATCH))
    assert not manager._table.creating
    manager.shutdown()


def test_a_shutdown_during_a_batch_closes_it(tmp_path: Path, slow_creation: threading.Event) -> None:
    manager = LogManager([str(tmp_path / "d")], LogConfig())
    t, result = _start_batch(manager)
    stopper = threading.Thread(target=manager.shutdown)
    stopper.start()
    # The shutdown must have closed the table before the batch is let go (a started thread may not have
    # run a line yet): only then is the batch's end a shutdown's.
    wait_for(lambda: manager._table.closed, what="the shutdown to close the log table")
    time.sleep(0.05)
    assert stopper.is_alive()  # the shutdown waits for the batch
    slow_creation.set()
    stopper.join(30)
    t.join(30)
    assert all(isinstance(r, StorageError) and "shut down" in str(r) for _, r in result[0]), result
    assert manager.all_logs() == []
