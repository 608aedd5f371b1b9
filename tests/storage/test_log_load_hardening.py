"""Loading never fails the broker: altered segments after a clean shutdown are caught by cheap
checks and recovered (loudly), an unloadable log goes offline alone, loading can run in the
background, and many logs load under a small RLIMIT_NOFILE."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from gregor.storage import LogConfig, LogManager
from gregor.storage.checkpoint import RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile
from gregor.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogNotLoadedError, LogOfflineError
from gregor.storage.segment import LogSegment
from tests.storage.util import append, batch_headers, read_all

CONFIG = LogConfig(segment_bytes=1000, index_interval_bytes=100)
REPO = Path(__file__).resolve().parents[2]


def _populate(d: str, batches: int = 40) -> list[list[tuple[int, int, int]]]:
    """One log t-0 of several segments, cleanly shut down. Returns per segment its batches as
    (base offset, next offset, file position)."""
    m = LogManager([d], CONFIG)
    log = m.get_or_create_log("t", 0)
    for i in range(batches):
        append(log, 2, value=f"value-{i}".encode() * 3)
    log.update_high_watermark(log.log_end_offset)
    per_segment: list[list[tuple[int, int, int]]] = []
    for seg in log.segments:
        per_segment.append([(h.base_offset, h.next_offset, h.position) for h in seg.batches()])
    m.shutdown()
    assert len(per_segment) >= 4
    return per_segment


def _seg_path(d: str, base: int, suffix: str = ".log", partition: int = 0) -> str:
    return os.path.join(d, f"t-{partition}", f"{base:020d}{suffix}")


def _flip(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)
        f.seek(position)
        f.write(bytes([b[0] ^ 0xFF]))


def _truncate_by(path: str, n: int) -> None:
    os.truncate(path, os.path.getsize(path) - n)


# Each alteration returns the LEO the recovered log must have.
def _garbage_after_middle(d: str, segs: list[list[tuple[int, int, int]]]) -> int:
    with open(_seg_path(d, segs[1][0][0]), "ab") as f:
        f.write(b"\x00\x01garbage" * 9)
    return segs[1][-1][1]


def _middle_truncated_mid_batch(d: str, segs: list[list[tuple[int, int, int]]]) -> int:
    _truncate_by(_seg_path(d, segs[1][0][0]), 7)
    return segs[1][-1][0]


def _middle_last_batch_flipped(d: str, segs: list[list[tuple[int, int, int]]]) -> int:
    _flip(_seg_path(d, segs[1][0][0]), os.path.getsize(_seg_path(d, segs[1][0][0])) - 3)
    return segs[1][-1][0]


def _active_last_batch_flipped(d: str, segs: list[list[tuple[int, int, int]]]) -> int:
    path = _seg_path(d, segs[-1][0][0])
    _flip(path, os.path.getsize(path) - 3)
    return segs[-1][-1][0]


def _active_truncated_to_a_batch_boundary(d: str, segs: list[list[tuple[int, int, int]]]) -> int:
    os.truncate(_seg_path(d, segs[-1][0][0]), segs[-1][-1][2])  # whole batches left, one fewer
    return segs[-1][-1][0]


def _offset_index_garbage(d: str, segs: list[list[tuple[int, int, int]]]) -> int:
    with open(_seg_path(d, segs[0][0][0], ".index"), "wb") as f:
        f.write(b"\x7f\xff\xff\x00\x7f\xff\xff\x00")
    return segs[-1][-1][1]


ALTERATIONS: dict[str, Callable[[str, list[list[tuple[int, int, int]]]], int]] = {
    "garbage appended to a middle segment": _garbage_after_middle,
    "middle segment truncated mid-batch": _middle_truncated_mid_batch,
    "last batch of a middle segment altered": _middle_last_batch_flipped,
    "last batch of the active segment altered": _active_last_batch_flipped,
    "active segment shortened by one batch": _active_truncated_to_a_batch_boundary,
    "offset index overwritten": _offset_index_garbage,
}


@pytest.mark.parametrize("name", list(ALTERATIONS))
def test_altered_segment_after_clean_shutdown_is_recovered(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                            name: str) -> None:
    d = str(tmp_path)
    segs = _populate(d)
    expected_leo = ALTERATIONS[name](d, segs)
    caplog.set_level(logging.WARNING)
    m = LogManager([d], CONFIG)  # must not raise
    log = m.get_log("t", 0)
    assert log is not None and log.log_end_offset == expected_leo
    records = read_all(log)  # every batch served has a valid CRC
    assert [r.offset for r in records] == list(range(expected_leo))
    assert all(r.value == f"value-{r.offset // 2}".encode() * 3 for r in records)
    assert [h.base_offset for h in batch_headers(log)] == list(range(0, expected_leo, 2))
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    if expected_leo < segs[-1][-1][1]:  # data was dropped: said loudly, with partition, offsets and bytes
        assert any("t-0" in e and f"ends at offset {expected_leo}" in e and "bytes" in e for e in errors), errors
    else:
        assert any("t-0" in e and "sanity check" in e for e in errors) or any(
            "rebuilding the indexes" in r.getMessage() for r in caplog.records), caplog.text
    append(log, 1)  # and it takes appends again
    m.shutdown()
    again = LogManager([d], CONFIG)
    assert again.get_log("t", 0).log_end_offset == expected_leo + 1  # type: ignore[union-attr]
    again.shutdown()


def test_clean_shutdown_records_segment_sizes_and_trusts_unaltered_logs(tmp_path: Path, monkeypatch) -> None:
    d = str(tmp_path)
    segs = _populate(d)
    marker = Path(d, CLEAN_SHUTDOWN_FILE).read_text().splitlines()
    assert marker[1] == str(len(segs)) and marker[2].startswith("t 0 0 ")
    calls: list[int] = []
    original = LogSegment.recover
    monkeypatch.setattr(LogSegment, "recover", lambda self, c=None: calls.append(1) or original(self, c))
    m = LogManager([d], CONFIG)
    assert calls == []  # nothing re-validated in full
    assert m.get_log("t", 0).log_end_offset == segs[-1][-1][1]  # type: ignore[union-attr]
    m.shutdown()


def test_an_unloadable_log_is_offline_and_the_others_load(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = str(tmp_path)
    m = LogManager([d], CONFIG)
    for p in range(3):
        append(m.get_or_create_log("t", p), 2)
    m.shutdown()
    bad = _seg_path(d, 0, partition=1)  # (not a replace on the path: pytest's base dir may be .../pytest-0/)
    os.unlink(bad)
    os.mkdir(bad)  # a segment that cannot even be opened
    caplog.set_level(logging.ERROR)
    m = LogManager([d], CONFIG)
    assert sorted(m.logs()) == [("t", 0), ("t", 2)]
    assert m.is_offline("t", 1) and ("t", 1) in m.offline
    assert any("t-1" in r.getMessage() and "offline" in r.getMessage() for r in caplog.records)
    with pytest.raises(LogOfflineError):
        m.get_or_create_log("t", 1)
    assert [r.offset for r in read_all(m.get_log("t", 2))] == [0, 1]  # type: ignore[arg-type]
    m.shutdown()
    assert os.path.isdir(bad)  # left for the operator


def test_background_load_reports_pending_logs_and_keeps_their_checkpoints(tmp_path: Path) -> None:
    d = str(tmp_path)
    m = LogManager([d], CONFIG)
    for p in range(3):
        append(m.get_or_create_log("t", p), 5)
    m.shutdown()
    os.unlink(os.path.join(d, CLEAN_SHUTDOWN_FILE))  # as after a crash (after a clean one, logs open lazily)
    m = LogManager([d], CONFIG, load=False)
    assert m.loading and m.is_loading("t", 1) and m.logs() == {}
    with pytest.raises(LogNotLoadedError):
        m.get_or_create_log("t", 1)
    m.get_or_create_log("new", 0)  # new partitions can be created meanwhile
    m.checkpoint()
    points = OffsetCheckpointFile(os.path.join(d, RECOVERY_POINT_CHECKPOINT)).read()
    assert points == {("t", 0): 5, ("t", 1): 5, ("t", 2): 5, ("new", 0): 0}
    m.load_logs()
    assert not m.loading and not m.is_loading("t", 1)
    assert {tp: lg.log_end_offset for tp, lg in m.logs().items()} == {("t", 0): 5, ("t", 1): 5, ("t", 2): 5,
                                                                       ("new", 0): 0}
    m.shutdown()


def test_shutdown_before_an_unclean_load_finishes_leaves_recovery_to_the_next_start(tmp_path: Path) -> None:
    d = str(tmp_path)
    m = LogManager([d], CONFIG)
    append(m.get_or_create_log("t", 0), 5)
    m.shutdown()
    os.unlink(os.path.join(d, CLEAN_SHUTDOWN_FILE))  # as after a crash
    m = LogManager([d], CONFIG, load=False)
    m.shutdown()  # nothing loaded
    assert not os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    assert OffsetCheckpointFile(os.path.join(d, RECOVERY_POINT_CHECKPOINT)).read() == {("t", 0): 5}
    m = LogManager([d], CONFIG)
    assert m.get_log("t", 0).log_end_offset == 5  # type: ignore[union-attr]
    m.shutdown()


def test_first_start_does_not_claim_an_unclean_shutdown(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    LogManager([str(tmp_path / "fresh")], CONFIG).shutdown()
    assert "unclean" not in caplog.text
    caplog.clear()
    m = LogManager([str(tmp_path / "fresh")], CONFIG)
    append(m.get_or_create_log("t", 0), 1)
    # no shutdown: as after a crash
    for lg in m.all_logs():
        lg.close()
    m._release_locks()
    LogManager([str(tmp_path / "fresh")], CONFIG).shutdown()
    assert "unclean" in caplog.text


_MANY_LOGS = textwrap.dedent("""
    import os, resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
    from gregor.storage import LogConfig, LogManager
    from gregor.storage.log_manager import CLEAN_SHUTDOWN_FILE
    from tests.storage.util import append, read_all
    d, n = sys.argv[1], int(sys.argv[2])
    cfg = LogConfig(segment_bytes=200)
    m = LogManager([d], cfg)
    for p in range(n):
        log = m.get_or_create_log("many", p)
        for _ in range(3):
            append(log, 1, value=b"x" * 60)  # one segment per batch: 3 segments per log
    assert sum(lg.num_segments for lg in m.all_logs()) >= 3 * n
    m.shutdown()
    for k, clean in enumerate((True, False)):
        if not clean:
            os.unlink(os.path.join(d, CLEAN_SHUTDOWN_FILE))
        m = LogManager([d], cfg)
        logs = m.logs()
        assert len(logs) == n and not m.offline, (len(logs), list(m.offline.items())[:3])
        for log in logs.values():
            assert [r.offset for r in read_all(log)] == list(range(3 + k))
            append(log, 1, value=b"y")
        m.shutdown()
    print("ok", n)
""")


def test_many_logs_load_under_a_small_file_descriptor_limit(tmp_path: Path) -> None:
    """200 logs of 3 segments each (600 segment files) under RLIMIT_NOFILE=128: created, reloaded
    after a clean and an unclean shutdown, read and appended to. One descriptor per segment
    (the old layout) dies with EMFILE."""
    res = subprocess.run(
        [sys.executable, "-c", _MANY_LOGS, str(tmp_path / "d"), "200"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "ok 200" in res.stdout
