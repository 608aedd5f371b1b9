"""LogManager: startup loading, checkpoints, clean shutdown marker, deletion, periodic work."""

from __future__ import annotations

import os

import pytest

from gregor.storage import LogConfig, LogDirInUseError, LogManager
from gregor.storage.checkpoint import OffsetCheckpointFile
from gregor.storage.log_manager import CLEAN_SHUTDOWN_FILE
from gregor.storage.segment import LogSegment
from tests.storage.util import append, read_all

TOPICS = ["plain", "with.dots", "with_underscore", "with-dashes-7", "a"]


def populate(dirs: list[str], partitions: int = 10) -> dict[tuple[str, int], int]:
    manager = LogManager(dirs, LogConfig(segment_bytes=1500))
    leos = {}
    for t_i, topic in enumerate(TOPICS):
        for p in range(partitions):
            log = manager.get_or_create_log(topic, p)
            for _ in range((t_i + p) % 7):
                append(log, 3, value=f"{topic}/{p}".encode() * 5)
            log.update_high_watermark(log.log_end_offset - 1)
            leos[(topic, p)] = log.log_end_offset
    manager.shutdown()
    return leos


def test_load_many_partitions_after_clean_shutdown(tmp_path, monkeypatch) -> None:
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    leos = populate(dirs)
    assert all(os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE)) for d in dirs)
    per_dir = [len([n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n))]) for d in dirs]
    assert per_dir == [25, 25]  # new logs go to the dir with the fewest
    calls: list[int] = []
    original = LogSegment.recover
    monkeypatch.setattr(LogSegment, "recover", lambda self, c=None: calls.append(1) or original(self, c))
    manager = LogManager(dirs, LogConfig(segment_bytes=1500))
    assert calls == []  # clean shutdown: nothing re-validated
    assert not any(os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE)) for d in dirs)
    assert {tp: log.log_end_offset for tp, log in manager.logs().items()} == leos
    for (topic, p), log in manager.logs().items():
        assert (log.topic, log.partition) == (topic, p)
        assert log.high_watermark == max(leos[(topic, p)] - 1, 0)  # from replication-offset-checkpoint
        assert log.recovery_point == leos[(topic, p)]
        assert all(r.value == f"{topic}/{p}".encode() * 5 for r in read_all(log))
    manager.shutdown()


def test_unclean_start_recovers_from_the_checkpointed_recovery_points(tmp_path, monkeypatch) -> None:
    d = str(tmp_path / "d")
    manager = LogManager([d], LogConfig(segment_bytes=1500))
    log = manager.get_or_create_log("t", 0)
    for _ in range(30):
        append(log, 3)
    log.flush()
    manager.checkpoint()
    rp = log.recovery_point
    for _ in range(5):
        append(log, 3)
    # "crash": no shutdown; release the dir lock as the dying process would
    manager._release_locks()
    calls: list[int] = []
    original = LogSegment.recover
    monkeypatch.setattr(LogSegment, "recover", lambda self, c=None: calls.append(self.base_offset) or original(self, c))
    again = LogManager([d], LogConfig(segment_bytes=1500))
    log2 = again.get_log("t", 0)
    assert log2 is not None and log2.log_end_offset == 105
    assert calls and min(calls) <= rp and all(b >= log2.segments[0].base_offset for b in calls)
    assert len(calls) < log2.num_segments  # segments wholly below the recovery point were trusted
    assert log2.recovery_point == rp
    again.shutdown()


def test_checkpoint_files(tmp_path) -> None:
    d = str(tmp_path / "d")
    manager = LogManager([d], LogConfig())
    log = manager.get_or_create_log("x.y", 2)
    append(log, 5)
    log.update_high_watermark(5)
    log.delete_records(2)
    log.flush()
    manager.checkpoint()
    assert OffsetCheckpointFile(os.path.join(d, "recovery-point-offset-checkpoint")).read() == {("x.y", 2): 5}
    assert OffsetCheckpointFile(os.path.join(d, "log-start-offset-checkpoint")).read() == {("x.y", 2): 2}
    assert OffsetCheckpointFile(os.path.join(d, "replication-offset-checkpoint")).read() == {("x.y", 2): 5}
    manager.checkpoint_high_watermarks({("x.y", 2): 4})
    assert OffsetCheckpointFile(os.path.join(d, "replication-offset-checkpoint")).read() == {("x.y", 2): 4}
    log.update_high_watermark(4)  # shutdown checkpoints the logs' own high watermarks
    manager.shutdown()
    again = LogManager([d], LogConfig())
    log = again.get_log("x.y", 2)
    assert log is not None and (log.log_start_offset, log.high_watermark, log.log_end_offset) == (2, 4, 5)
    again.shutdown()


def test_corrupt_checkpoint_means_full_recovery(tmp_path) -> None:
    d = str(tmp_path / "d")
    populate([d], partitions=2)
    with open(os.path.join(d, "recovery-point-offset-checkpoint"), "w") as f:
        f.write("0\n7\nbroken\n")
    os.unlink(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    manager = LogManager([d], LogConfig(segment_bytes=1500))
    assert all(log.recovery_point == 0 for log in manager.all_logs())
    manager.shutdown()


def test_dir_lock(tmp_path) -> None:
    d = str(tmp_path / "d")
    manager = LogManager([d], LogConfig())
    with pytest.raises(LogDirInUseError):
        LogManager([d], LogConfig())
    manager.shutdown()
    LogManager([d], LogConfig()).shutdown()


def test_delete_log(tmp_path) -> None:
    d = str(tmp_path / "d")
    manager = LogManager([d], LogConfig())
    log = manager.get_or_create_log("gone", 0)
    append(log, 2)
    assert manager.delete_log("gone", 0)
    assert not manager.delete_log("gone", 0)
    assert manager.get_log("gone", 0) is None
    assert not [n for n in os.listdir(d) if n.startswith("gone")]
    os.makedirs(os.path.join(d, "old-3.0123abcd-delete"))  # a deletion interrupted by a crash
    manager.shutdown()
    again = LogManager([d], LogConfig())
    assert not [n for n in os.listdir(d) if n.endswith("-delete")] and again.all_logs() == []
    again.shutdown()


def test_illegal_names(tmp_path) -> None:
    manager = LogManager([str(tmp_path / "d")], LogConfig())
    for topic in ("../evil", "a/b", "", "..", "sp ace"):
        with pytest.raises(ValueError):
            manager.get_or_create_log(topic, 0)
    with pytest.raises(ValueError):
        manager.get_or_create_log("ok", -1)
    manager.shutdown()


def test_periodic_work(tmp_path) -> None:
    d = str(tmp_path / "d")
    manager = LogManager([d], LogConfig(retention_ms=100, flush_ms=1000, file_delete_delay_ms=0, segment_bytes=500))
    log = manager.get_or_create_log("t", 0, now_ms=0)
    other = manager.get_or_create_log("u", 0, config=LogConfig(retention_ms=-1, segment_bytes=500), now_ms=0)
    for lg in (log, other):
        for _ in range(20):
            append(lg, 1, ts=1000, now=1000)
        lg.update_high_watermark(lg.log_end_offset)
    assert manager.flush_dirty_logs(now_ms=1000) == 2  # flush.ms since open
    assert log.recovery_point == 20
    assert manager.cleanup_logs(now_ms=5000) > 0
    assert log.log_start_offset == 20 and other.log_start_offset == 0  # per-topic config kept
    manager.update_topic_config("u", LogConfig(retention_ms=1, segment_bytes=500))
    assert other.config.retention_ms == 1
    assert manager.cleanup_logs(now_ms=5000) > 0 and other.log_start_offset == 20
    manager.shutdown()


def test_partition_sizes_are_the_segment_files_open_or_not(tmp_path) -> None:
    """DescribeLogDirs' sizes: per dir, an open log's segments, and a log not opened yet (lazy, after a
    clean shutdown) measured from its .log files; they agree with the files on disk."""
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    populate(dirs, partitions=3)

    def on_disk() -> dict[str, dict[tuple[str, int], int]]:
        out: dict[str, dict[tuple[str, int], int]] = {os.path.abspath(d): {} for d in dirs}
        for d in dirs:
            for name in os.listdir(d):
                path = os.path.join(d, name)
                if os.path.isdir(path):
                    topic, _, p = name.rpartition("-")
                    out[os.path.abspath(d)][(topic, int(p))] = sum(
                        os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".log"))
        return out

    manager = LogManager(dirs, LogConfig(segment_bytes=1500), load=False)
    try:
        assert manager.is_unopened("plain", 1)
        assert manager.partition_sizes() == on_disk()  # nothing opened: measured on disk
        manager.load_logs()
        assert not manager.is_unopened("plain", 1)
        assert manager.partition_sizes() == on_disk()  # every log open: their segments
    finally:
        manager.shutdown()
