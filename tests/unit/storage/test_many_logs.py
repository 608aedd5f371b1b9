"""Many logs in one log manager (issue 9, "Speed": 10,000 and 100,000 partitions on a broker).

Creation is batched (one parent-directory fsync per batch) and writes no index files for an empty
segment; after a clean shutdown logs are opened on first use or by `open_lazy_logs`, never
recovered, and a crash before they are opened leaves them for a complete recovery; a clean
shutdown flushes only the logs that need it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from gregor.storage import LogConfig, LogManager, log_creation
from gregor.storage.checkpoint import RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile, read_lines
from gregor.storage.files import fsync_dir
from gregor.storage.log_manager import CLEAN_SHUTDOWN_FILE, SEGMENT_SIZES_VERSION
from tests.storage.util import append, read_all

CONFIG = LogConfig(segment_bytes=1000, index_interval_bytes=100)


def _crash(m: LogManager) -> None:
    """As a SIGKILL would leave things: no flush, no checkpoint, no marker; the locks released."""
    for lg in m.all_logs():
        lg.close()
    m._release_locks()


def test_batched_creation_fsyncs_each_parent_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    m = LogManager(dirs, CONFIG)
    synced: list[str] = []

    def counting_fsync_dir(path: str) -> None:
        synced.append(path)
        fsync_dir(path)

    monkeypatch.setattr(log_creation, "fsync_dir", counting_fsync_dir)
    got = m.get_or_create_logs("t", list(range(64)))
    assert sorted(synced) == sorted(m.log_dirs)  # one fsync per log dir for 64 new logs
    assert [p for p, _ in got] == list(range(64)) and not any(isinstance(r, Exception) for _, r in got)
    assert {len([n for n in os.listdir(d) if n.startswith("t-")]) for d in dirs} == {32}  # spread evenly
    synced.clear()
    again = m.get_or_create_logs("t", [0, 63, 64, -1])  # existing ones as they are; an illegal one alone fails
    assert again[0][1] is got[0][1] and again[1][1] is got[63][1]
    assert isinstance(again[3][1], ValueError) and not isinstance(again[2][1], Exception)
    assert len(synced) == 1
    m.shutdown()


def test_empty_logs_have_no_index_files_and_reopen_quietly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = str(tmp_path)
    m = LogManager([d], CONFIG)
    m.get_or_create_logs("e", list(range(20)))
    append(m.get_or_create_log("full", 0), 3)
    m.shutdown()
    assert os.listdir(os.path.join(d, "e-7")) == ["00000000000000000000.log"]
    assert sorted(os.listdir(os.path.join(d, "full-0"))) == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex",
        "leader-epoch-checkpoint"]
    for clean in (True, False):
        if not clean:
            os.unlink(os.path.join(d, CLEAN_SHUTDOWN_FILE))
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            m = LogManager([d], CONFIG)
            assert m.get_log("e", 7).log_end_offset == (0 if clean else 2)  # type: ignore[union-attr]
            assert m.get_log("e", 8).log_end_offset == 0  # type: ignore[union-attr]
            assert [r.value for r in read_all(m.get_log("full", 0))] == [b"v" * 10] * 3  # type: ignore[arg-type]
            append(m.get_log("e", 7), 2)  # type: ignore[arg-type]
            m.shutdown()
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    m = LogManager([d], CONFIG)
    assert m.get_log("e", 7).log_end_offset == 4  # type: ignore[union-attr]
    m.shutdown()


def test_clean_start_opens_logs_on_first_use_and_keeps_the_rest(tmp_path: Path) -> None:
    d = str(tmp_path)
    m = LogManager([d], CONFIG)
    for p in range(3):
        append(m.get_or_create_log("t", p), 5, batches=p + 1)
    m.shutdown()
    m = LogManager([d], CONFIG, load=False)
    m.load_logs(open_lazy=False)
    assert not m.loading and not m.is_loading("t", 1) and m.logs() == {}  # serving, nothing opened yet
    lg = m.get_or_create_log("t", 1)  # opened from disk, not created empty
    assert lg.log_end_offset == 10 and len(read_all(lg)) == 10
    assert set(m.logs()) == {("t", 1)}
    append(lg, 1)
    m.checkpoint()  # the unopened logs keep their entries
    points = OffsetCheckpointFile(os.path.join(d, RECOVERY_POINT_CHECKPOINT)).read()
    assert points[("t", 0)] == 5 and points[("t", 2)] == 15
    m.shutdown()
    sizes = read_lines(os.path.join(d, CLEAN_SHUTDOWN_FILE), 4, version=SEGMENT_SIZES_VERSION)
    assert {(t, int(p)) for t, p, _, _ in sizes or []} == {("t", 0), ("t", 1), ("t", 2)}  # unopened ones too
    m = LogManager([d], CONFIG)  # opens everything before returning (load=True): as before
    assert {tp: lg.log_end_offset for tp, lg in m.logs().items()} == {("t", 0): 5, ("t", 1): 11, ("t", 2): 15}
    m.shutdown()


def test_open_lazy_logs_opens_the_rest_and_a_first_use_meanwhile_gets_the_same_log(tmp_path: Path) -> None:
    d = str(tmp_path)
    m = LogManager([d], CONFIG)
    for p in range(150):
        append(m.get_or_create_log("t", p), 1)
    m.shutdown()
    m = LogManager([d], CONFIG, load=False)
    m.load_logs(open_lazy=False)
    first = m.get_or_create_log("t", 100)
    assert m.open_lazy_logs(slice_size=16) == 149
    assert m.get_log("t", 100) is first and len(m.logs()) == 150
    assert all(lg.log_end_offset == 1 for lg in m.all_logs())
    m.shutdown()


def test_crash_after_a_clean_start_before_logs_are_opened_recovers_them_all(tmp_path: Path) -> None:
    d = str(tmp_path)
    m = LogManager([d], CONFIG)
    for p in range(3):
        append(m.get_or_create_log("t", p), 5)
    m.shutdown()
    m = LogManager([d], CONFIG, load=False)
    m.load_logs(open_lazy=False)
    append(m.get_or_create_log("t", 1), 3)  # opened, written, never flushed
    m.checkpoint()
    _crash(m)
    assert not os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    m = LogManager([d], CONFIG)  # a full recovery, unopened logs included
    assert {tp: lg.log_end_offset for tp, lg in m.logs().items()} == {("t", 0): 5, ("t", 1): 8, ("t", 2): 5}
    m.shutdown()


def test_deleting_an_unopened_log_removes_it(tmp_path: Path) -> None:
    d = str(tmp_path)
    m = LogManager([d], CONFIG)
    append(m.get_or_create_log("t", 0), 5)
    m.shutdown()
    m = LogManager([d], CONFIG, load=False)
    m.load_logs(open_lazy=False)
    assert m.delete_log("t", 0)
    assert not [n for n in os.listdir(d) if n.startswith("t-0")]
    assert m.get_or_create_log("t", 0).log_end_offset == 0  # a new, empty log
    m.shutdown()


def test_clean_shutdown_flushes_only_logs_that_need_it(tmp_path: Path) -> None:
    d = str(tmp_path)
    m = LogManager([d], CONFIG)
    empty, written = m.get_or_create_log("e", 0), m.get_or_create_log("w", 0)
    assert not empty.needs_flush_at_shutdown()  # one empty segment: nothing to lose
    append(written, 2)
    assert written.needs_flush_at_shutdown()
    written.flush()
    assert not written.needs_flush_at_shutdown()
    m.shutdown()
    m = LogManager([d], CONFIG)
    assert not m.get_log("w", 0).needs_flush_at_shutdown()  # type: ignore[union-attr]
    append(m.get_log("e", 0), 1)  # type: ignore[arg-type]
    assert m.get_log("e", 0).needs_flush_at_shutdown()  # type: ignore[union-attr]
    m.shutdown()
    m = LogManager([d], CONFIG)
    assert {tp: lg.log_end_offset for tp, lg in m.logs().items()} == {("e", 0): 1, ("w", 0): 2}
    m.shutdown()


def test_new_logs_led_in_their_first_epoch_shut_down_without_an_fsync_each(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A new partition's leader assigns its epoch at offset 0 before any append: that entry holds no record
    (a load drops it), so a clean shutdown of many such logs costs the same fsyncs as of a few."""
    fsyncs: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        fsyncs.append(fd)
        real_fsync(fd)

    counts = []
    for n in (3, 60):
        d = str(tmp_path / str(n))
        m = LogManager([d], CONFIG)
        for _, lg in m.get_or_create_logs("t", list(range(n))):
            assert not isinstance(lg, Exception)
            lg.assign_leader_epoch(0)
            assert not lg.needs_flush_at_shutdown()
        fsyncs.clear()
        monkeypatch.setattr(os, "fsync", counting_fsync)
        m.shutdown()
        monkeypatch.setattr(os, "fsync", real_fsync)
        counts.append(len(fsyncs))
        assert not os.path.exists(os.path.join(d, "t-0", "leader-epoch-checkpoint"))
        m = LogManager([d], CONFIG)
        lg = m.get_log("t", 1)
        assert lg is not None and lg.leader_epoch_cache.entries() == []  # as a load leaves it with the file
        lg.assign_leader_epoch(0)
        append(lg, 2)
        m.shutdown()
        m = LogManager([d], CONFIG)
        assert m.get_log("t", 1).leader_epoch_cache.entries() == [(0, 0)]  # type: ignore[union-attr]
        m.shutdown()
    assert counts[0] == counts[1], counts
