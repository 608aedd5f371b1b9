"""Moving a log between log dirs in the storage layer (log_mover.py, no broker): the copy keeps every
offset and the log start, the swap renames the dirs, the rate bounds the copy, and a start after a cut
short move either begins the copy again (a `-future` dir) or finishes it (a `-moved` dir)."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from gregor.storage import LogConfig, LogManager
from gregor.storage.errors import LogDirNotFoundError, ReplicaNotAvailableError
from tests.storage.util import append, read_all
from tests.waiting import wait_for


def where(m: LogManager, topic: str, p: int) -> str | None:
    return m.dir_of(topic, p)


def two_dirs_with_t0(tmp_path, batches: int) -> tuple[list[str], LogManager, str, str]:  # type: ignore[no-untyped-def]
    """Log dirs a and b, partition t-0 with `batches` batches of 5 records: (dirs, manager, its dir, the other)."""
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    m = LogManager(dirs, LogConfig())
    log = m.get_or_create_log("t", 0)
    for _ in range(batches):
        append(log, 5)
    src = where(m, "t", 0)
    assert src is not None
    return dirs, m, src, next(d for d in dirs if d != src)


def test_move_keeps_offsets_and_log_start(tmp_path) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    m = LogManager(dirs, LogConfig(segment_bytes=2000))
    log = m.get_or_create_log("t", 0)
    for i in range(60):
        append(log, 2, value=f"v{i}".encode() * 10)
    log.update_high_watermark(log.log_end_offset)
    log.delete_records(15)
    before = [(r.offset, r.value) for r in read_all(log)]
    src = where(m, "t", 0)
    dest = next(d for d in dirs if d != src)
    with pytest.raises(LogDirNotFoundError):
        m.alter_log_dir("t", 0, str(tmp_path / "nowhere"))
    with pytest.raises(ReplicaNotAvailableError):
        m.alter_log_dir("t", 9, dest)
    m.alter_log_dir("t", 0, dest)
    wait_for(lambda: where(m, "t", 0) == dest)
    moved = m.get_log("t", 0)
    assert moved is not log and moved.dir == os.path.join(dest, "t-0")
    assert [(r.offset, r.value) for r in read_all(moved)] == before
    assert moved.log_start_offset == 15 and moved.high_watermark == log.log_end_offset
    wait_for(lambda: not any(n.startswith("t-0") for n in os.listdir(src)))
    assert m.future_replicas() == {}
    m.shutdown()
    m2 = LogManager(dirs, LogConfig(segment_bytes=2000))
    assert [(r.offset, r.value) for r in read_all(m2.get_log("t", 0))] == before
    m2.shutdown()


def test_rate_limits_the_copy_and_the_lag_shows(tmp_path) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    m = LogManager(dirs, LogConfig())
    log = m.get_or_create_log("t", 0)
    for _ in range(40):
        append(log, 10, value=b"x" * 500)  # ~200 KB
    m.mover.rate_bytes_per_s = 200_000
    dest = next(d for d in dirs if d != where(m, "t", 0))
    t0 = time.monotonic()
    m.alter_log_dir("t", 0, dest)
    time.sleep(0.3)
    size, lag = m.future_replicas()[dest][("t", 0)]
    assert 0 < lag < log.log_end_offset and size > 0
    wait_for(lambda: where(m, "t", 0) == dest)
    assert time.monotonic() - t0 >= 0.7  # ~1 s at 200 KB/s
    m.shutdown()


def test_a_cut_short_copy_begins_again(tmp_path) -> None:
    dirs, m, src, dest = two_dirs_with_t0(tmp_path, 20)
    m.mover.rate_bytes_per_s = 1  # never finishes
    m.alter_log_dir("t", 0, dest)
    wait_for(lambda: m.future_replicas().get(dest) is not None)
    m.shutdown()
    assert any(n.endswith("-future") for n in os.listdir(dest))
    m2 = LogManager(dirs, LogConfig())  # the move begins again and completes
    wait_for(lambda: where(m2, "t", 0) == dest)
    assert len(read_all(m2.get_log("t", 0))) == 100
    assert [n for n in os.listdir(dest) if n.startswith("t-0")] == ["t-0"]
    m2.shutdown()


def test_a_complete_copy_cut_short_is_finished(tmp_path) -> None:
    dirs, m, src, dest = two_dirs_with_t0(tmp_path, 20)
    m.shutdown()
    # As if a swap was cut short after step 1: a complete copy renamed `-moved`, the current log still there.
    shutil.copytree(os.path.join(src, "t-0"), os.path.join(dest, "t-0." + "ab" * 16 + "-moved"))
    m2 = LogManager(dirs, LogConfig())
    assert where(m2, "t", 0) == dest
    assert not os.path.exists(os.path.join(src, "t-0"))
    assert len(read_all(m2.get_log("t", 0))) == 100
    m2.shutdown()


def test_abandoning_a_move_mid_copy_fails_nothing(tmp_path) -> None:
    """A move redirected back and forth, then its log deleted, while the thread copies: no dir fails."""
    dirs = [str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "c")]
    m = LogManager(dirs, LogConfig())
    log = m.get_or_create_log("t", 0)
    for _ in range(200):
        append(log, 10, value=b"y" * 300)
    m.mover.rate_bytes_per_s = 2_000_000
    others = [d for d in dirs if d != where(m, "t", 0)]
    for i in range(20):
        m.alter_log_dir("t", 0, others[i % 2])
        time.sleep(0.005)
    m.delete_log("t", 0)
    time.sleep(0.1)
    assert m.offline_dirs == {} and m.future_replicas() == {}
    for d in dirs:
        assert not [n for n in os.listdir(d) if n.startswith("t-0")]
    m.shutdown()
