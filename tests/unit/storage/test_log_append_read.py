"""Appends, rolls, indexes and reads through a real Log on the file system."""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.protocol import compression
from gregor.protocol.records import TIMESTAMP_TYPE_BIT, decode_records, iter_records, read_header
from gregor.storage import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    Log,
    LogConfig,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from tests.storage.util import append, batch, batch_headers, headers_in, headers_of, open_log, read_all


def test_offsets_are_assigned_in_place(tmp_path) -> None:
    log = open_log(tmp_path)
    buf = batch(3) + batch(2)
    hs = headers_of(buf)
    info = log.append_as_leader(buf, hs, 7, 1000)
    assert (info.first_offset, info.last_offset, info.records_count) == (0, 4, 5)
    assert info.log_append_time_ms == -1 and info.max_timestamp == 1000 and info.log_start_offset == 0
    assert [h.base_offset for h in hs] == [0, 3]
    assert read_header(buf, 61 * 0).base_offset == 0 and read_header(buf, hs[1].position).base_offset == 3
    assert read_header(buf, hs[1].position).partition_leader_epoch == 7
    headers_of(buf)  # CRCs still valid: base offset and epoch lie outside the CRC
    info = append(log, 4)
    assert (info.first_offset, info.last_offset) == (5, 8)
    assert log.log_end_offset == 9
    assert [r.offset for r in read_all(log)] == list(range(9))


def test_log_append_time(tmp_path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    info = append(log, 3, ts=1000, now=5000)
    assert info.log_append_time_ms == 5000 and info.max_timestamp == 5000 and info.offset_of_max_timestamp == 0
    data = bytes(log.read(0, 10000).records)
    h = read_header(data)
    assert h.max_timestamp == 5000 and h.attributes & TIMESTAMP_TYPE_BIT
    headers_of(data)  # the CRC was recomputed
    assert [r.timestamp for r in decode_records(data)] == [5000] * 3


def test_rejects_oversized(tmp_path) -> None:
    log = open_log(tmp_path, max_message_bytes=200, segment_bytes=1000)
    with pytest.raises(RecordTooLargeError):
        append(log, 1, value=b"x" * 300)
    with pytest.raises(RecordListTooLargeError):
        append(log, 1, value=b"x" * 50, batches=10)
    assert log.log_end_offset == 0


def test_roll_by_size(tmp_path) -> None:
    log = open_log(tmp_path, segment_bytes=1000)
    for _ in range(60):
        append(log, 2)
    segs = log.segments
    assert len(segs) > 5
    for a, b in zip(segs, segs[1:], strict=False):
        assert a.size <= 1000
        assert a.next_offset == b.base_offset  # contiguous
    names = sorted(os.listdir(log.dir))
    assert f"{segs[1].base_offset:020d}.log" in names
    assert f"{segs[1].base_offset:020d}.index" in names and f"{segs[1].base_offset:020d}.timeindex" in names
    assert [r.offset for r in read_all(log)] == list(range(120))


def test_roll_by_time_uses_record_timestamps(tmp_path) -> None:
    log = open_log(tmp_path, segment_ms=100)
    append(log, ts=1000, now=0)
    append(log, ts=1100, now=10**9)  # wall clock does not matter when batches carry timestamps
    assert log.num_segments == 1
    append(log, ts=1101, now=0)
    assert log.num_segments == 2 and log.active_segment.base_offset == 2


def test_roll_by_time_falls_back_to_wall_clock(tmp_path) -> None:
    log = open_log(tmp_path, segment_ms=100, now=0)
    append(log, ts=-1, now=50)
    append(log, ts=-1, now=100)
    assert log.num_segments == 1
    append(log, ts=-1, now=101)
    assert log.num_segments == 2


def test_roll_when_index_full(tmp_path) -> None:
    log = open_log(tmp_path, segment_index_bytes=24, index_interval_bytes=1)  # 3 offset / 2 time entries
    for _ in range(10):
        append(log)
    assert log.num_segments >= 3
    assert all(s.offset_index.entries <= 3 and s.time_index.entries <= 2 for s in log.segments)
    assert [r.offset for r in read_all(log)] == list(range(10))


def test_sparse_index_entries(tmp_path) -> None:
    log = open_log(tmp_path, index_interval_bytes=1000, segment_bytes=100_000)
    sizes = []
    for i in range(200):
        info = append(log, 1 + i % 5, ts=1000 + i)
        sizes.append(info.size_bytes)
    seg = log.active_segment
    # Kafka's rule: an entry for a batch when more than index.interval.bytes were appended since the last one.
    expected, since, pos = [], 0, 0
    for s in sizes:
        if since > 1000:
            expected.append(pos)
            since = 0
        pos += s
        since += s
    idx = seg.offset_index
    assert [idx.entry(i)[1] for i in range(idx.entries)] == expected
    headers = {h.position: h for h in seg.batches()}
    for i in range(idx.entries):
        offset, position = idx.entry(i)
        assert headers[position].last_offset == offset  # the entry names the batch ending at `offset`
    tidx = seg.time_index
    stamps = [tidx.entry(i) for i in range(tidx.entries)]
    assert stamps == sorted(stamps) and len({t for t, _ in stamps}) == len(stamps)


def test_every_offset_reads_its_batch_after_rolls(tmp_path) -> None:
    log = open_log(tmp_path, segment_bytes=2000, index_interval_bytes=300)
    rng = random.Random(1)
    for _ in range(150):
        append(log, rng.randint(1, 6), value=os.urandom(rng.randint(1, 60)))
    assert log.num_segments > 5
    for offset in range(log.log_end_offset):
        info = log.read(offset, 1)
        first = headers_in(info.records)
        assert len(first) == 1
        assert first[0].base_offset <= offset <= first[0].last_offset
        assert info.next_offset == first[0].next_offset


def test_read_limits(tmp_path) -> None:
    log = open_log(tmp_path)
    for _ in range(10):
        append(log, 2)  # batches of 2 offsets
    size = batch_headers(log)[0].size
    info = log.read(0, size * 3 + 5)
    assert len(info.records) == size * 3 and info.next_offset == 6  # whole batches only
    info = log.read(3, size * 2)  # offset 3 is inside the second batch: it starts there
    assert read_header(info.records).base_offset == 2 and len(info.records) == 2 * size
    info = log.read(0, 10)
    assert len(info.records) == size  # min_one_batch: one whole batch beyond max_bytes
    info = log.read(0, 10, min_one_batch=False)
    assert len(info.records) == 0
    info = log.read(0, 10**6, max_offset=6)
    assert [h.base_offset for h in headers_in(info.records)] == [0, 2, 4]
    info = log.read(0, 10**6, max_offset=5)  # the batch 4-5 holds offset 5: excluded whole
    assert [h.base_offset for h in headers_in(info.records)] == [0, 2]
    assert len(log.read(4, 10**6, max_offset=5).records) == 0
    assert len(log.read(20, 10**6).records) == 0  # at the LEO: empty
    with pytest.raises(OffsetOutOfRangeError) as e:
        log.read(21, 100)
    assert (e.value.log_start_offset, e.value.log_end_offset, e.value.error) == (0, 20, "OFFSET_OUT_OF_RANGE")


def test_big_batch_and_many_small_batches(tmp_path) -> None:
    log = open_log(tmp_path, index_interval_bytes=4096)
    append(log, 1, value=b"x" * 200_000)
    for _ in range(2000):
        append(log, 1, value=b"y" * 50)
    info = log.read(0, 1000)
    assert len(headers_in(info.records)) == 1 and len(info.records) > 200_000
    # a read of many small batches uses the index to find the byte limit; it must still end on a boundary
    for max_bytes in (5_000, 50_000, 65_537, 100_000):
        info = log.read(1, max_bytes)
        hs = headers_in(info.records)
        assert sum(h.size for h in hs) == len(info.records) <= max_bytes
        assert hs[0].base_offset == 1 and info.next_offset == hs[-1].next_offset
        small = hs[0].size
        assert len(info.records) > max_bytes - small  # filled up to the last batch that fits
    for max_offset in (2, 777, 1500, 2001):
        info = log.read(1, 10**7, max_offset=max_offset)
        hs = headers_in(info.records)
        assert hs[-1].last_offset == max_offset - 1 and info.next_offset == max_offset


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_read_matches_model(tmp_path_factory, data) -> None:
    tmp = tmp_path_factory.mktemp("model")
    log = open_log(tmp, segment_bytes=data.draw(st.integers(300, 3000)),
                   index_interval_bytes=data.draw(st.integers(0, 500)))
    counts = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=60))
    batches = []
    for n in counts:
        info = append(log, n, value=b"z" * data.draw(st.integers(0, 40)))
        batches.append((info.first_offset, info.last_offset, info.size_bytes))
    fetch = data.draw(st.integers(0, log.log_end_offset))
    max_bytes = data.draw(st.integers(0, 3000))
    max_offset = data.draw(st.integers(0, log.log_end_offset + 2))
    info = log.read(fetch, max_bytes, max_offset=max_offset)
    got = [(h.base_offset, h.last_offset) for h in headers_in(info.records)]
    # model: the segment holding the first batch ending at/after fetch, whole batches, limits applied
    seg_of = {}
    for seg in log.segments:
        for h in seg.batches():
            seg_of[h.base_offset] = seg.base_offset
    want = []
    used = 0
    for first, last, size in batches:
        if last < fetch:
            continue
        if want and seg_of[first] != seg_of[want[0][0]]:
            break
        if last >= min(max_offset, log.log_end_offset):
            break
        if want and used + size > max_bytes:
            break
        want.append((first, last))
        used += size
    assert got == want


def test_offset_for_timestamp_against_brute_force(tmp_path) -> None:
    rng = random.Random(7)
    log = open_log(tmp_path, segment_bytes=3000, index_interval_bytes=200)
    for i in range(120):
        n = rng.randint(1, 5)
        stamps = [rng.randint(0, 10_000) for _ in range(n)]
        codec = compression.GZIP if i % 7 == 0 else compression.NONE
        buf = batch(n, timestamps=stamps, codec=codec)
        log.append_as_leader(buf, headers_of(buf), 0, 0)
    records = read_all(log)
    assert log.num_segments > 3
    for target in [0, 1, 50, 5000, 9999, 10_000, 10_001] + [rng.randint(0, 10_001) for _ in range(60)]:
        want = next(((r.offset, r.timestamp) for r in records if r.timestamp >= target), None)
        got = log.offset_for_timestamp(target)
        assert ((got.offset, got.timestamp) if got else None) == want, target
    top = max(r.timestamp for r in records)
    first_top = next(r.offset for r in records if r.timestamp == top)
    m = log.fetch_offset_by_timestamp(MAX_TIMESTAMP)
    assert (m.offset, m.timestamp) == (first_top, top)
    assert log.fetch_offset_by_timestamp(LATEST_TIMESTAMP).offset == log.log_end_offset
    assert log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP).offset == 0
    # after reopening, the time indexes come from disk
    log.close()
    log = Log.open(log.dir, LogConfig(segment_bytes=3000, index_interval_bytes=200), clean_shutdown=True)
    for target in [rng.randint(0, 10_001) for _ in range(30)]:
        want = next(((r.offset, r.timestamp) for r in records if r.timestamp >= target), None)
        got = log.offset_for_timestamp(target)
        assert ((got.offset, got.timestamp) if got else None) == want
    m = log.fetch_offset_by_timestamp(MAX_TIMESTAMP)
    assert (m.offset, m.timestamp) == (first_top, top)


def test_offset_for_timestamp_respects_log_start(tmp_path) -> None:
    log = open_log(tmp_path)
    append(log, 4, ts=100)
    append(log, 4, ts=200)
    log.update_high_watermark(8)
    log.delete_records(2)
    assert log.offset_for_timestamp(0).offset == 2  # inside the first batch, at the log start
    assert log.offset_for_timestamp(150).offset == 4
    assert log.offset_for_timestamp(201) is None


def test_empty_log(tmp_path) -> None:
    log = open_log(tmp_path)
    assert log.offset_for_timestamp(0) is None
    assert log.max_timestamp_offset() is None
    assert log.fetch_offset_by_timestamp(LATEST_TIMESTAMP).offset == 0
    assert len(log.read(0, 100).records) == 0


def test_high_watermark_is_apart_from_leo(tmp_path) -> None:
    log = open_log(tmp_path)
    append(log, 5)
    assert log.high_watermark == 0 and log.log_end_offset == 5
    assert log.update_high_watermark(100) == 5
    assert log.update_high_watermark(-3) == 0
    assert log.maybe_increment_high_watermark(3) and not log.maybe_increment_high_watermark(2)
    assert log.high_watermark == 3
    with pytest.raises(ValueError):
        log.maybe_increment_high_watermark(6)
    info = log.read(0, 10**6, max_offset=log.high_watermark)
    assert info.high_watermark == 3 and info.log_end_offset == 5
    assert len(info.records) == 0  # the only batch (0-4) is not wholly below the HW


def test_follower_append(tmp_path) -> None:
    log = open_log(tmp_path)
    buf = batch(3, base_offset=0, leader_epoch=1) + batch(2, base_offset=3, leader_epoch=2)
    info = log.append_as_follower(buf, headers_of(buf), now_ms=0)
    assert (info.first_offset, info.last_offset) == (0, 4) and log.log_end_offset == 5
    assert log.leader_epoch_cache.entries() == [(1, 0), (2, 3)]
    with pytest.raises(UnexpectedAppendOffsetError):
        b = batch(1, base_offset=4)
        log.append_as_follower(b, headers_of(b))
    b = batch(1, base_offset=9, leader_epoch=2)  # a gap, as compaction leaves: allowed
    log.append_as_follower(b, headers_of(b))
    assert log.log_end_offset == 10
    with pytest.raises(UnexpectedAppendOffsetError):
        b = batch(1, base_offset=12) + batch(1, base_offset=11)
        log.append_as_follower(b, headers_of(b))
    assert [r.offset for r in read_all(log)] == [0, 1, 2, 3, 4, 9]


def test_follower_append_with_huge_gap_rolls(tmp_path) -> None:
    log = open_log(tmp_path)
    b = batch(1, base_offset=0)
    log.append_as_follower(b, headers_of(b))
    b = batch(1, base_offset=2**31 + 10)
    log.append_as_follower(b, headers_of(b))
    assert log.active_segment.base_offset == 2**31 + 10
    assert [r.offset for r in read_all(log)] == [0, 2**31 + 10]


def test_reopen_after_close_keeps_offsets(tmp_path) -> None:
    log = open_log(tmp_path, segment_bytes=1500)
    for i in range(30):
        append(log, 3, ts=1000 + i, epoch=i // 10)
    before = [(r.offset, r.timestamp, r.value) for r in read_all(log)]
    segs = [(s.base_offset, s.size) for s in log.segments]
    log.flush()
    log.close()
    for clean in (True, False):
        log = Log.open(log.dir, LogConfig(segment_bytes=1500), recovery_point=90, clean_shutdown=clean)
        assert log.log_end_offset == 90 and log.recovery_point == 90
        assert [(s.base_offset, s.size) for s in log.segments] == segs
        assert [(r.offset, r.timestamp, r.value) for r in read_all(log)] == before
        assert log.leader_epoch_cache.entries() == [(0, 0), (1, 30), (2, 60)]
        log.close()
    log = Log.open(log.dir, LogConfig(segment_bytes=1500), recovery_point=0)
    assert append(log, 1, ts=5000, epoch=2).first_offset == 90
    assert [r.offset for r in read_all(log)] == list(range(91))


def test_update_config(tmp_path) -> None:
    log = open_log(tmp_path)
    append(log)
    log.update_config(LogConfig(segment_bytes=200))
    for _ in range(5):
        append(log)
    assert log.num_segments > 1


def test_iter_records_sees_values(tmp_path) -> None:
    log = open_log(tmp_path)
    append(log, 2, value=b"hello")
    assert [r.value for r in iter_records(bytes(log.read(0, 1000).records))] == [b"hello", b"hello"]
