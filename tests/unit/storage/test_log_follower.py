"""The follower side of a log: appends of batches the leader numbered, truncation to a divergence
point, restarts after both, and the invariant asserts that guard the offsets.

Everything runs on real files in a temporary directory; a "crash" closes the log without a flush
(so the recovery point stays where it was) and may tear the file, as a killed broker leaves it."""

from __future__ import annotations

import os

import pytest

from gregor.protocol.records import HEADER_SIZE
from gregor.storage import (
    CorruptRecordError,
    Log,
    LogConfig,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from gregor.storage.leader_epoch import LeaderEpochFileCache
from gregor.storage.local_log import LocalLog
from gregor.storage.segment import LogSegment
from tests.storage.util import append, batch, batch_headers, headers_of, open_log, read_all


def follower_log(tmp_path, **config: object) -> Log:
    return open_log(tmp_path, segment_bytes=500, index_interval_bytes=100, **config)


def leader_batches(spec: list[tuple[int, int, int]]) -> bytearray:
    """Batches numbered by a leader: (base offset, record count, leader epoch) each."""
    out = bytearray()
    for base, n, epoch in spec:
        out += batch(n, ts=1000 + base, value=b"r%d" % base, base_offset=base, leader_epoch=epoch)
    return out


def offsets(log: Log) -> list[int]:
    return [r.offset for r in read_all(log)]


def reopen(log: Log, recovery_point: int, clean: bool = False) -> Log:
    return Log.open(log.dir, log.config, recovery_point=recovery_point, clean_shutdown=clean)


# --- append_as_follower ---------------------------------------------------------------------


def test_follower_append_validates_without_headers(tmp_path) -> None:
    log = follower_log(tmp_path)
    buf = leader_batches([(0, 3, 1), (3, 2, 1)])
    info = log.append_as_follower(buf)  # validated with ValidationRules.for_follower
    assert (info.first_offset, info.last_offset, info.records_count) == (0, 4, 5)
    bad = leader_batches([(5, 2, 1)])
    bad[-1] ^= 0xFF  # the last value byte: the CRC no longer matches
    with pytest.raises(CorruptRecordError) as e:
        log.append_as_follower(bad)
    assert e.value.error == "CORRUPT_MESSAGE"
    assert log.log_end_offset == 5 and offsets(log) == list(range(5))


def test_follower_append_refuses_a_batch_over_max_message_bytes(tmp_path) -> None:
    log = follower_log(tmp_path, max_message_bytes=200)
    big = bytearray(batch(1, value=b"x" * 300, base_offset=0, leader_epoch=0))
    with pytest.raises(RecordTooLargeError):
        log.append_as_follower(big)
    assert log.log_end_offset == 0


def test_follower_append_is_all_or_nothing_on_bad_offsets(tmp_path) -> None:
    log = follower_log(tmp_path)
    log.append_as_follower(leader_batches([(0, 2, 0)]))
    for spec in ([(2, 2, 0), (3, 1, 0)], [(1, 2, 0)], [(4, 1, 0), (4, 1, 0)]):
        buf = leader_batches(spec)  # overlaps the log, or the batch before it in the same call
        with pytest.raises(UnexpectedAppendOffsetError) as e:
            log.append_as_follower(buf)
        assert e.value.log_end_offset == 2
        assert log.log_end_offset == 2 and offsets(log) == [0, 1]
    log.append_as_follower(leader_batches([(2, 1, 0), (7, 2, 0)]))  # a gap, as compaction leaves
    assert log.log_end_offset == 9 and offsets(log) == [0, 1, 2, 7, 8]


def test_follower_append_records_epochs_in_step(tmp_path) -> None:
    log = follower_log(tmp_path)
    log.append_as_follower(leader_batches([(0, 2, 1), (2, 2, 1), (4, 1, 3)]))
    log.append_as_follower(leader_batches([(5, 2, 3), (7, 1, 4), (8, 1, 2)]))  # an older epoch is not recorded
    assert log.leader_epoch_cache.entries() == [(1, 0), (3, 4), (4, 7)]
    assert log.leader_epoch_cache.end_offset_for(3, log.log_end_offset) == (3, 7)
    assert log.fetch_offset_by_timestamp(-1).leader_epoch == 4


def test_follower_appends_survive_a_clean_restart(tmp_path) -> None:
    log = follower_log(tmp_path)
    for i in range(20):
        log.append_as_follower(leader_batches([(i * 5, 3, i // 7)]))  # gaps of two between batches
    before = offsets(log)
    epochs = log.leader_epoch_cache.entries()
    assert log.num_segments > 2
    log.flush()
    leo = log.log_end_offset
    log.close()
    again = reopen(log, leo, clean=True)
    assert again.log_end_offset == leo == 98 and offsets(again) == before
    assert again.leader_epoch_cache.entries() == epochs == [(0, 0), (1, 35), (2, 70)]
    again.append_as_follower(leader_batches([(100, 1, 2)]))
    assert again.log_end_offset == 101


def test_follower_appends_survive_a_crash_and_epochs_are_rebuilt(tmp_path) -> None:
    log = follower_log(tmp_path)
    for i in range(20):
        log.append_as_follower(leader_batches([(i * 5, 3, i // 7)]))
    before = offsets(log)
    log.close()  # no flush, so the recovery point stays 0
    os.unlink(log.leader_epoch_cache.path)  # close wrote it; a crash would not have
    again = reopen(log, 0)
    assert offsets(again) == before
    assert again.leader_epoch_cache.entries() == [(0, 0), (1, 35), (2, 70)]  # from the batches


def test_torn_tail_after_a_follower_append_is_recovered(tmp_path) -> None:
    log = follower_log(tmp_path)
    log.append_as_follower(leader_batches([(0, 3, 1), (3, 3, 1)]))
    log.flush()
    rp = log.recovery_point
    log.append_as_follower(leader_batches([(10, 4, 2)]))  # then the broker dies mid-write
    last = batch_headers(log)[-1]
    path = log.active_segment.log_path
    log.close()
    os.truncate(path, last.position + HEADER_SIZE + 5)
    again = reopen(log, rp)
    assert again.log_end_offset == 6 and offsets(again) == list(range(6))
    assert again.leader_epoch_cache.entries() == [(1, 0)]  # epoch 2 began in the torn batch
    assert os.path.getsize(path) == last.position
    again.append_as_follower(leader_batches([(6, 2, 2)]))  # the leader's next fetch continues at the LEO
    assert again.leader_epoch_cache.entries() == [(1, 0), (2, 6)] and again.log_end_offset == 8


# --- truncate_to ---------------------------------------------------------------------------------


def three_segments(tmp_path) -> Log:
    """Batches of 3 records, epochs 0, 1, 2 by thirds, over several segments; HW at the LEO."""
    log = follower_log(tmp_path)
    for i in range(15):
        log.append_as_follower(leader_batches([(i * 3, 3, i // 5)]))
    log.update_high_watermark(log.log_end_offset)
    assert log.num_segments >= 3
    return log


def test_truncate_to_the_middle_of_a_batch_drops_the_whole_batch(tmp_path) -> None:
    log = three_segments(tmp_path)
    segs = [s.base_offset for s in log.segments]
    target = segs[-1] + 4  # inside the batch at segs[-1] + 3
    assert log.truncate_to(target)
    assert log.log_end_offset == segs[-1] + 3 and offsets(log) == list(range(segs[-1] + 3))
    assert [s.base_offset for s in log.segments] == segs
    assert log.high_watermark == log.log_end_offset


def test_truncate_to_across_segments_deletes_the_later_ones(tmp_path) -> None:
    log = three_segments(tmp_path)
    segs = [s.base_offset for s in log.segments]
    assert log.truncate_to(segs[1] + 1, now_ms=0)
    assert [s.base_offset for s in log.segments] == segs[:2]
    assert log.log_end_offset == segs[1] and log.active_segment.size == 0
    log.delete_old_segments(60_000)  # the truncated segments' files go after file.delete.delay.ms
    names = sorted(os.listdir(log.dir))
    assert not any(n.startswith(f"{b:020d}") and n.endswith(".log") for b in segs[2:] for n in names)


def test_truncate_below_the_high_watermark_clamps_it_and_the_epoch_cache(tmp_path) -> None:
    log = three_segments(tmp_path)
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 15), (2, 30)]
    log.flush()
    assert log.truncate_to(20)
    assert (log.log_end_offset, log.high_watermark, log.recovery_point) == (18, 18, 18)
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 15)]
    assert log.truncate_to(15)
    assert log.leader_epoch_cache.entries() == [(0, 0)] and log.high_watermark == 15
    assert not log.truncate_to(15) and not log.truncate_to(99)
    log.append_as_follower(leader_batches([(15, 2, 5)]))  # the new leader's epoch
    assert log.leader_epoch_cache.entries() == [(0, 0), (5, 15)]


def test_restart_after_truncation(tmp_path) -> None:
    log = three_segments(tmp_path)
    log.flush()
    log.truncate_to(20)
    log.flush()
    log.close()
    again = reopen(log, 18, clean=True)
    assert again.log_end_offset == 18 and offsets(again) == list(range(18))
    assert again.leader_epoch_cache.entries() == [(0, 0), (1, 15)]
    again.truncate_to(16)  # then a crash: nothing flushed after this truncation
    again.close()
    crashed = reopen(again, 0)
    assert crashed.log_end_offset == 15 and crashed.leader_epoch_cache.entries() == [(0, 0)]


def test_truncate_fully_clears_epochs_and_starts_at_the_offset(tmp_path) -> None:
    log = three_segments(tmp_path)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (500, 500, 500)
    assert log.leader_epoch_cache.entries() == []
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(leader_batches([(499, 1, 7)]))
    log.append_as_follower(leader_batches([(500, 1, 7)]))
    log.flush()
    log.close()
    again = Log.open(log.dir, log.config, recovery_point=501, log_start_offset=500, clean_shutdown=True)
    assert offsets(again) == [500] and again.leader_epoch_cache.entries() == [(7, 500)]


# --- invariants asserted where they are kept ------------------------------------------------------


def test_local_log_asserts_increasing_offsets(tmp_path) -> None:
    log = follower_log(tmp_path)
    log.append_as_follower(leader_batches([(0, 3, 0)]))
    local: LocalLog = log._local  # noqa: SLF001 - the layer below Log, fed what Log would refuse
    buf = leader_batches([(1, 1, 0)])
    with pytest.raises(AssertionError):
        local.append(buf, headers_of(buf), 1000, 0)
    assert log.log_end_offset == 3


def test_segment_asserts_increasing_offsets(tmp_path) -> None:
    seg = LogSegment.create(str(tmp_path), 10, LogConfig(), 0)
    buf = leader_batches([(10, 2, 0)])
    seg.append(buf, headers_of(buf))
    again = leader_batches([(11, 1, 0)])
    with pytest.raises(AssertionError):
        seg.append(again, headers_of(again))
    below = leader_batches([(5, 1, 0)])
    with pytest.raises(AssertionError):
        seg.append(below, headers_of(below))
    assert seg.next_offset == 12
    seg.close()


def test_local_log_asserts_recovery_point_and_segment_order(tmp_path) -> None:
    os.makedirs(tmp_path / "t-0")
    d = str(tmp_path / "t-0")
    a = LogSegment.create(d, 0, LogConfig(), 0)
    b = LogSegment.create(d, 10, LogConfig(), 0)
    with pytest.raises(AssertionError):
        LocalLog(d, "t", 0, LogConfig(), [a], log_end_offset=5, recovery_point=6, now=0)
    with pytest.raises(AssertionError):
        LocalLog(d, "t", 0, LogConfig(), [b, a], log_end_offset=10, recovery_point=0, now=0)
    with pytest.raises(AssertionError):
        LocalLog(d, "t", 0, LogConfig(), [a, b], log_end_offset=5, recovery_point=0, now=0)  # active past the LEO
    a.close()
    b.close()


def test_log_asserts_start_hw_leo(tmp_path) -> None:
    log = follower_log(tmp_path)
    log.append_as_follower(leader_batches([(0, 5, 0)]))
    d = log.dir
    cache = LeaderEpochFileCache(os.path.join(d, "other-checkpoint"))
    with pytest.raises(AssertionError):  # a log start offset above the LEO
        Log(log._local, 9, cache)  # noqa: SLF001
    with pytest.raises(ValueError):
        log.maybe_increment_high_watermark(6)
    assert log.update_high_watermark(99) == 5  # clamped: the HW never passes the LEO


def test_epoch_cache_asserts_increasing_epochs_and_offsets(tmp_path) -> None:
    cache = LeaderEpochFileCache(str(tmp_path / "leader-epoch-checkpoint"))
    cache.assign(1, 0)
    cache.assign(3, 10)
    cache._entries.append(type(cache.latest_entry)(2, 20))  # noqa: SLF001 - corrupt it behind its back
    with pytest.raises(AssertionError):
        cache._check()  # noqa: SLF001


def test_leader_append_after_follower_appends_continues_at_the_leo(tmp_path) -> None:
    log = follower_log(tmp_path)
    log.append_as_follower(leader_batches([(0, 2, 1), (5, 1, 1)]))  # became leader at epoch 2
    info = append(log, 3, epoch=2)
    assert (info.first_offset, info.last_offset) == (6, 8)
    assert log.leader_epoch_cache.entries() == [(1, 0), (2, 6)]


# --- timestamp lookups read records through the validator ------------------------------------------


def test_timestamp_lookups_answer_from_the_header_of_a_stored_batch_that_does_not_validate(tmp_path, caplog) -> None:
    log = open_log(tmp_path, index_interval_bytes=1)
    for i in range(6):
        buf = batch(3, timestamps=[1000 + 10 * i, 1005 + 10 * i, 1002 + 10 * i], base_offset=0)
        log.append_as_leader(buf, headers_of(buf), 0, 0)
    assert log.offset_for_timestamp(1023).offset == 7  # the record at 1025, the second of batch 2
    assert log.fetch_offset_by_timestamp(-3) == (16, 1055, 0)
    h = batch_headers(log)[2]
    path = log.active_segment.log_path
    log.flush()
    leo = log.log_end_offset
    log.close()
    with open(path, "r+b") as f:  # a bit flipped on disk in a record of batch 2 (offsets 6..8)
        f.seek(h.position + h.size - 2)
        byte = f.read(1)
        f.seek(h.position + h.size - 2)
        f.write(bytes([byte[0] ^ 0x01]))
    log = reopen(log, leo, clean=True)  # batch 2 is not the tail: a clean start does not re-read it
    assert log.log_end_offset == leo
    with caplog.at_level("WARNING"):
        assert log.offset_for_timestamp(1023) == (6, 1025, 0)  # from the header: its first offset
    assert "does not validate" in caplog.text
    assert log.offset_for_timestamp(1033).offset == 10  # the next batch validates
    assert log.offset_for_timestamp(10**6) is None
