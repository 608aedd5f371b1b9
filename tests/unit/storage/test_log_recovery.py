"""Crash recovery: torn and corrupt tails, lost or damaged indexes, stray files."""

from __future__ import annotations

import os
import random

import pytest

from gregor.storage import Log, LogConfig
from tests.storage.util import append, batch_headers, open_log, read_all

CONFIG = LogConfig(segment_bytes=2000, index_interval_bytes=200)


def build(tmp_path, n_appends: int = 60, **config: object) -> Log:
    log = open_log(tmp_path, segment_bytes=2000, index_interval_bytes=200, **config)
    rng = random.Random(3)
    for i in range(n_appends):
        append(log, rng.randint(1, 4), ts=1000 + i, value=bytes([i % 256]) * rng.randint(1, 30), epoch=i // 20)
    return log


def reopen(log: Log, recovery_point: int = 0, clean: bool = False) -> Log:
    return Log.open(log.dir, log.config, recovery_point=recovery_point, clean_shutdown=clean)


def snapshot(log: Log) -> list[tuple[int, int, bytes | None]]:
    return [(r.offset, r.timestamp, r.value) for r in read_all(log)]


@pytest.mark.parametrize("seed", range(6))
def test_torn_tail_is_truncated(tmp_path, seed: int) -> None:
    log = build(tmp_path)
    records = snapshot(log)
    last = batch_headers(log)[-1]
    path = log.active_segment.log_path
    log.close()  # no flush: as after a crash, the recovery point stays 0
    cut = last.position + random.Random(seed).randint(1, last.size - 1)
    os.truncate(path, cut)
    log = reopen(log)
    assert log.log_end_offset == last.base_offset
    assert snapshot(log) == [r for r in records if r[0] < last.base_offset]
    assert os.path.getsize(path) == last.position
    assert append(log, 1, ts=10**6).first_offset == last.base_offset
    assert read_all(log)[-1].timestamp == 10**6


@pytest.mark.parametrize("where", ["header_crc_field", "payload", "magic", "length"])
def test_corrupt_last_batch_is_truncated(tmp_path, where: str) -> None:
    log = build(tmp_path)
    records = snapshot(log)
    last = batch_headers(log)[-1]
    path = log.active_segment.log_path
    log.close()
    offset = {"header_crc_field": 17, "payload": last.size - 3, "magic": 16, "length": 8}[where]
    with open(path, "r+b") as f:
        f.seek(last.position + offset)
        byte = f.read(1)
        f.seek(last.position + offset)
        f.write(bytes([byte[0] ^ 0x5A]))
    log = reopen(log)
    assert log.log_end_offset == last.base_offset
    assert snapshot(log) == [r for r in records if r[0] < last.base_offset]


def test_corruption_in_an_unflushed_middle_segment_drops_what_follows(tmp_path) -> None:
    log = build(tmp_path)
    segs = log.segments
    assert len(segs) >= 4
    victim = segs[1]
    bad = list(victim.batches())[2]
    log.close()
    with open(victim.log_path, "r+b") as f:
        f.seek(bad.position + bad.size - 1)
        byte = f.read(1)
        f.seek(bad.position + bad.size - 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    log = reopen(log, recovery_point=0)
    assert log.log_end_offset == bad.base_offset
    assert log.num_segments == 2


def test_flushed_segments_are_not_revalidated(tmp_path, monkeypatch) -> None:
    log = build(tmp_path)
    log.flush()
    rp = log.recovery_point
    log.close()
    recovered: list[int] = []
    from gregor.storage.segment import LogSegment

    original = LogSegment.recover

    def spy(self, cache=None):  # type: ignore[no-untyped-def]
        recovered.append(self.base_offset)
        return original(self, cache)

    monkeypatch.setattr(LogSegment, "recover", spy)
    again = reopen(log, recovery_point=rp)
    assert recovered == [again.active_segment.base_offset]  # only the segment holding the recovery point
    recovered.clear()
    again.close()
    reopen(again, recovery_point=rp, clean=True).close()
    assert recovered == []


@pytest.mark.parametrize("damage", ["delete", "garbage", "truncate_partial", "non_monotonic", "past_end"])
@pytest.mark.parametrize("which", ["index", "timeindex"])
def test_damaged_indexes_are_rebuilt(tmp_path, damage: str, which: str) -> None:
    log = build(tmp_path)
    records = snapshot(log)
    rng = random.Random(5)
    targets = [rng.randrange(log.log_end_offset) for _ in range(40)]
    expected_ts = {t: log.offset_for_timestamp(t) for t in (1000, 1010, 1030, 1059)}
    expected_max = log.max_timestamp_offset()
    expected_largest = [s.largest_timestamp for s in log.segments]
    first = log.segments[0]
    entries_before = first.offset_index.entries
    log.flush()
    log.close()
    path = first.offset_index.path if which == "index" else first.time_index.path
    size = os.path.getsize(path)
    assert size > 0
    if damage == "delete":
        os.unlink(path)
    elif damage == "garbage":
        with open(path, "wb") as f:
            f.write(os.urandom(size + 3))
    elif damage == "truncate_partial":
        os.truncate(path, size - 1)
    elif damage == "non_monotonic":
        data = open(path, "rb").read()
        entry = 8 if which == "index" else 12
        with open(path, "wb") as f:
            f.write(data[entry : 2 * entry] + data[:entry] + data[2 * entry :])
    elif damage == "past_end":
        with open(path, "ab") as f:
            f.write(b"\x00\x00\x7f\xff\x7f\xff\xff\xff" if which == "index" else b"\x7f" * 8 + b"\x7f\xff\xff\xff")
    for clean in (True, False):
        log = reopen(log, recovery_point=log.log_end_offset, clean=clean)
        assert snapshot(log) == records
        for t in targets:
            info = log.read(t, 1)
            assert info.next_offset > t
        assert {t: log.offset_for_timestamp(t) for t in expected_ts} == expected_ts
        assert log.max_timestamp_offset() == expected_max
        assert [s.largest_timestamp for s in log.segments] == expected_largest
        assert log.segments[0].offset_index.entries == entries_before
        log.close()


def test_stray_files_are_handled(tmp_path) -> None:
    log = build(tmp_path)
    records = snapshot(log)
    log.flush()
    log.close()
    for name in ("00000000000000000000.log.deleted", "00000000000000000003.log.cleaned",
                 "00000000000000000099.index", "00000000000000000099.timeindex",
                 "00000000000000000000.index.swap", "leader-epoch-checkpoint.tmp"):
        with open(os.path.join(log.dir, name), "wb") as f:
            f.write(b"junk")
    log = reopen(log, recovery_point=log.log_end_offset, clean=True)
    names = os.listdir(log.dir)
    assert not [n for n in names if n.endswith((".deleted", ".cleaned", ".swap", ".tmp"))]
    assert "00000000000000000099.index" not in names
    assert snapshot(log) == records


def test_swap_file_replaces_the_segments_it_covers(tmp_path) -> None:
    log = build(tmp_path)
    segs = log.segments
    records = snapshot(log)
    # a "cleaned" replacement for the first two segments: their batches, copied into one .swap file
    data = b""
    for seg in segs[:2]:
        data += open(seg.log_path, "rb").read()
    log.flush()
    log.close()
    with open(os.path.join(log.dir, f"{segs[0].base_offset:020d}.log.swap"), "wb") as f:
        f.write(data)
    log = reopen(log, recovery_point=log.log_end_offset, clean=True)
    assert [s.base_offset for s in log.segments] == [segs[0].base_offset] + [s.base_offset for s in segs[2:]]
    assert snapshot(log) == records
    assert not [n for n in os.listdir(log.dir) if n.endswith(".swap")]


def test_preallocated_segments(tmp_path) -> None:
    log = build(tmp_path, preallocate=True)
    records = snapshot(log)
    active = log.active_segment
    assert os.path.getsize(active.log_path) == 2000  # preallocated to segment.bytes
    assert all(os.path.getsize(s.log_path) == s.size for s in log.segments[:-1])  # trimmed at roll
    log.close()
    assert os.path.getsize(active.log_path) == active.size  # trimmed at close
    log = reopen(log, clean=True)
    assert snapshot(log) == records
    append(log, 1)
    log.close()
    with open(log.active_segment.log_path, "ab") as f:  # a crash leaves the preallocated zeros
        f.write(b"\x00" * 1000)
    log = reopen(log)
    assert [r[0] for r in snapshot(log)] == [r[0] for r in records] + [records[-1][0] + 1]


def test_checkpoint_beyond_the_data_starts_over(tmp_path) -> None:
    log = build(tmp_path)
    log.close()
    log = Log.open(log.dir, log.config, log_start_offset=10_000)
    assert log.log_start_offset == log.log_end_offset == 10_000 and log.num_segments == 1
