"""Retention by time and size, DeleteRecords, truncation, and the flush policy."""

from __future__ import annotations

import os

import pytest

from gregor.storage import KafkaStorageError, LogConfig, OffsetOutOfRangeError
from tests.storage.util import append, open_log, read_all


def filled(tmp_path, n_segments: int = 5, per_segment: int = 4, **config: object):
    """A log whose segments i hold timestamps 1000*i and whose HW is at the LEO."""
    log = open_log(tmp_path, segment_bytes=10**6, **config)
    for i in range(n_segments):
        for _ in range(per_segment):
            append(log, 1, ts=1000 * (i + 1))
        if i < n_segments - 1:
            log.roll(now_ms=0)
    log.update_high_watermark(log.log_end_offset)
    return log


def test_retention_by_time(tmp_path) -> None:
    log = filled(tmp_path, retention_ms=2500, file_delete_delay_ms=1000)
    assert [s.base_offset for s in log.segments] == [0, 4, 8, 12, 16]
    assert log.delete_old_segments(now_ms=5000) == 2  # segments with timestamps 1000, 2000
    assert log.log_start_offset == 8 and [s.base_offset for s in log.segments] == [8, 12, 16]
    names = os.listdir(log.dir)
    assert "00000000000000000000.log.deleted" in names  # renamed now, removed after file.delete.delay.ms
    assert log.delete_old_segments(now_ms=5500) == 0  # 5500 - 3000 is not above retention.ms
    assert "00000000000000000000.log.deleted" in os.listdir(log.dir)
    assert log.delete_old_segments(now_ms=6000) == 1
    names = os.listdir(log.dir)
    assert "00000000000000000000.log.deleted" not in names and "00000000000000000004.index.deleted" not in names
    assert "00000000000000000008.log.deleted" in names
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 100)
    assert [r.offset for r in read_all(log)] == list(range(12, 20))
    log.close()  # pending deletions are done at close
    assert not [n for n in os.listdir(log.dir) if n.endswith(".deleted")]
    with pytest.raises(KafkaStorageError):
        log.read(12, 100)


def test_expired_files_can_be_unlinked_without_the_logs_lock(tmp_path) -> None:
    """The broker's retention deletes segments on its event loop but leaves the unlinks (slow for large
    files) to a thread, which takes the due segments under the log's lock and unlinks them without it."""
    import threading

    log = filled(tmp_path, retention_ms=2500, file_delete_delay_ms=1000)
    assert log.delete_old_segments(now_ms=5000, unlink_expired=False) == 2
    assert log.take_expired_segments(5500) == []  # not due yet
    assert log.delete_old_segments(now_ms=6000, unlink_expired=False) == 1
    assert "00000000000000000000.log.deleted" in os.listdir(log.dir)  # due, but left for the caller
    due = log.take_expired_segments(6000)
    assert sorted(s.base_offset for s in due) == [0, 4]
    assert log.take_expired_segments(6000) == []  # taken once
    unlinked = threading.Event()

    def unlink_elsewhere() -> None:
        for seg in due:
            seg.delete_files()
        unlinked.set()

    with log._lock:  # the log stays locked by its owner: the unlinks do not need it
        threading.Thread(target=unlink_elsewhere).start()
        assert unlinked.wait(10)
    names = os.listdir(log.dir)
    assert not [n for n in names if n.startswith(("00000000000000000000.", "00000000000000000004."))], names
    assert "00000000000000000008.log.deleted" in names
    log.close()
    assert not [n for n in os.listdir(log.dir) if n.endswith(".deleted")]


def test_retention_never_passes_the_high_watermark(tmp_path) -> None:
    log = filled(tmp_path, retention_ms=1)
    log.update_high_watermark(7)  # inside the second segment
    assert log.delete_old_segments(now_ms=10**6) == 1
    assert log.log_start_offset == 4


def test_retention_rolls_and_deletes_the_active_segment(tmp_path) -> None:
    log = filled(tmp_path, retention_ms=10)
    assert log.delete_old_segments(now_ms=10**6) == 5
    assert log.num_segments == 1 and log.active_segment.size == 0
    assert log.log_start_offset == log.log_end_offset == 20
    assert append(log, 1, ts=10**6).first_offset == 20
    assert log.delete_old_segments(now_ms=10**6) == 0  # a fresh segment is not old


def test_infinite_retention_and_compact_policy(tmp_path) -> None:
    log = filled(tmp_path, retention_ms=-1)
    assert log.delete_old_segments(now_ms=10**12) == 0
    log = filled(tmp_path / "c", retention_ms=1, retention_bytes=1, cleanup_policy="compact")
    assert log.delete_old_segments(now_ms=10**12) == 0


def test_retention_by_size(tmp_path) -> None:
    log = filled(tmp_path, retention_ms=-1)
    seg_size = log.segments[0].size
    total = log.size_bytes
    log.update_config(LogConfig(retention_ms=-1, retention_bytes=total - 2 * seg_size))
    assert log.delete_old_segments(now_ms=0) == 2
    assert log.log_start_offset == 8
    log.update_config(LogConfig(retention_ms=-1, retention_bytes=log.size_bytes - 1))
    assert log.delete_old_segments(now_ms=0) == 0  # deleting a whole segment would go below retention.bytes
    log.update_config(LogConfig(retention_ms=-1, retention_bytes=log.size_bytes - seg_size))
    assert log.delete_old_segments(now_ms=0) == 1
    assert log.delete_old_segments(now_ms=0) == 0


def test_delete_records(tmp_path) -> None:
    log = filled(tmp_path)
    log.update_high_watermark(10)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(11)
    assert log.delete_records(9) == 9
    assert [s.base_offset for s in log.segments] == [8, 12, 16]  # segments wholly below 9 are gone
    assert log.delete_records(5) == 9  # never backwards
    with pytest.raises(OffsetOutOfRangeError):
        log.read(8, 100)
    info = log.read(9, 10**6)
    assert info.log_start_offset == 9
    assert [r.offset for r in read_all(log)] == list(range(9, 20))
    assert log.delete_records(10) == 10  # up to the HW exactly
    assert log.leader_epoch_cache.entries() == [(0, 10)]


def test_log_start_offset_survives_reopen(tmp_path) -> None:
    log = filled(tmp_path)
    log.delete_records(6)
    log.flush()
    log.close()
    from gregor.storage import Log

    again = Log.open(log.dir, log.config, recovery_point=20, log_start_offset=6, clean_shutdown=True)
    assert again.log_start_offset == 6 and again.log_end_offset == 20
    assert [r.offset for r in read_all(again)] == list(range(6, 20))


def test_truncate_to(tmp_path) -> None:
    log = filled(tmp_path)  # batches of one record
    log.flush()
    assert not log.truncate_to(25)
    assert log.truncate_to(10)
    assert log.log_end_offset == 10 and log.high_watermark == 10 and log.recovery_point == 10
    assert [s.base_offset for s in log.segments] == [0, 4, 8]
    assert [r.offset for r in read_all(log)] == list(range(10))
    assert append(log, 2).first_offset == 10
    assert log.truncate_to(8)  # at a segment's base: that segment becomes empty
    assert log.log_end_offset == 8 and log.active_segment.base_offset == 8 and log.active_segment.size == 0
    append(log, 1, ts=99_000)
    assert [r.offset for r in read_all(log)] == list(range(9))
    assert log.offset_for_timestamp(99_000).offset == 8


def test_truncate_fully_and_start_at(tmp_path) -> None:
    log = filled(tmp_path)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (100, 100, 100)
    assert log.num_segments == 1 and log.leader_epoch_cache.entries() == []
    assert append(log, 1, epoch=3).first_offset == 100
    assert log.leader_epoch_cache.entries() == [(3, 100)]
    assert log.truncate_to(50)  # below the first segment: starts over there
    assert log.log_end_offset == 50 and log.log_start_offset == 50


def test_leader_epochs_follow_truncation(tmp_path) -> None:
    log = open_log(tmp_path)
    for epoch in (0, 0, 1, 1, 3):
        append(log, 2, epoch=epoch)
    cache = log.leader_epoch_cache
    assert cache.entries() == [(0, 0), (1, 4), (3, 8)]
    assert cache.end_offset_for(1, log.log_end_offset) == (1, 8)
    assert cache.end_offset_for(3, log.log_end_offset) == (3, 10)
    log.truncate_to(6)
    assert cache.entries() == [(0, 0), (1, 4)]
    log.flush()
    log.close()
    from gregor.storage import Log

    again = Log.open(log.dir, log.config, recovery_point=6, clean_shutdown=True)
    assert again.leader_epoch_cache.entries() == [(0, 0), (1, 4)]


def test_flush_policy_by_messages(tmp_path) -> None:
    log = open_log(tmp_path, flush_messages=10)
    append(log, 5)
    assert not log.flush_due(0) and not log.maybe_flush(0)
    assert log.recovery_point == 0
    append(log, 5)  # the append that reaches flush.messages fsyncs before it returns (Kafka's rule)
    assert log.recovery_point == 10 and log.unflushed_messages == 0
    assert not log.flush_due(0) and not log.maybe_flush(0)


def test_flush_policy_by_time(tmp_path) -> None:
    log = open_log(tmp_path, flush_ms=1000, now=0)
    append(log, 1)
    assert not log.maybe_flush(999)
    assert log.maybe_flush(1000) and log.recovery_point == 1
    assert not log.maybe_flush(5000)  # nothing new to flush


def test_roll_schedules_a_flush_of_the_old_segment(tmp_path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    for _ in range(5):
        append(log, 1)
    assert log.num_segments > 1
    assert log.flush_due(0)
    log.maybe_flush(0)
    assert log.recovery_point == log.active_segment.base_offset < log.log_end_offset
