"""Log compaction through the real filesystem: what survives a clean, tombstones and their delete
horizon, what is never cleaned, codecs, crashes mid-swap, and cleaning under concurrent traffic."""

from __future__ import annotations

import itertools
import os
import random
import struct
import threading
import time

import pytest

from gregor.config import BrokerConfig
from gregor.protocol import compression
from gregor.protocol.records import (
    DELETE_HORIZON_BIT,
    BatchHeader,
    Record,
    build_batch,
    build_marker_batch,
    compute_crc,
    decode_records,
    iter_headers,
    validate_record_set,
)
from gregor.protocol.validator import BatchValidationError, ValidationRules, validate_batches
from gregor.storage import (
    CleanerConfig,
    InvalidConfigError,
    Log,
    LogCleaner,
    LogConfig,
    LogManager,
)
from gregor.storage import compaction as compaction_module
from gregor.storage.checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from gregor.storage.cleaner import MAP_ENTRY_BYTES

Key = bytes
Latest = dict[Key, tuple[int, bytes | None]]  # key -> (offset, value) of its last write


def open_compacted(tmp_path, name: str = "compacted-0", **config: object) -> Log:
    settings: dict[str, object] = {"cleanup_policy": "compact", "segment_bytes": 32 * 1024,
                                   "index_interval_bytes": 1024, "file_delete_delay_ms": 0}
    settings.update(config)
    return Log.open(os.path.join(tmp_path, name), LogConfig(**settings), now_ms=0)  # type: ignore[arg-type]


def cleaner_for(*logs: Log, **config: object) -> LogCleaner:
    dirs = sorted({os.path.dirname(log.dir) for log in logs})
    return LogCleaner(dirs, lambda: {(log.topic, log.partition): log for log in logs},
                      CleanerConfig(**config))  # type: ignore[arg-type]


def append_kv(log: Log, pairs: list[tuple[Key | None, bytes | None]], ts: int = 1000, codec: int = 0,
              producer_id: int = -1, latest: Latest | None = None) -> int:
    """One batch of key/value records at the LEO; the HW follows (as on a lone broker)."""
    first = log.log_end_offset
    recs = [Record(first + i, ts + i, k, v) for i, (k, v) in enumerate(pairs)]
    buf = bytearray(build_batch(recs, base_offset=first, codec=codec, producer_id=producer_id,
                                producer_epoch=0 if producer_id >= 0 else -1,
                                base_sequence=first if producer_id >= 0 else -1))
    log.append_as_leader(buf, validate_record_set(memoryview(buf), 1 << 30), 0, ts)
    log.update_high_watermark(log.log_end_offset)
    if latest is not None:
        for r in recs:
            if r.key is not None:
                latest[r.key] = (r.offset, r.value)
    return first


def read_batches(log: Log) -> list[tuple[BatchHeader, list[Record]]]:
    """Every batch from the log start to the LEO by repeated reads, CRCs checked. (The shared
    read_all helper validates batches as produced ones, which compacted batches are not.)"""
    out: list[tuple[BatchHeader, list[Record]]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        info = log.read(offset, 1 << 20)
        data = bytes(info.records)
        if not data:  # the rest below the LEO was cleaned away (the active segment is empty)
            assert all(seg.next_offset <= offset or seg.size == 0 for seg in log.segments), offset
            break
        for h in iter_headers(data):
            assert compute_crc(data, h.position, h.size) == h.crc
            out.append((h, [r for r in decode_records(data, h) if r.offset >= offset]))
        offset = info.next_offset
    return out


def read_records(log: Log) -> list[Record]:
    records = [r for _, recs in read_batches(log) for r in recs]
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets)), "offsets must strictly increase"
    return records


def assert_latest_only(log: Log, latest: Latest) -> None:
    """Exactly the last write of every key (tombstones included), at its original offset."""
    records = read_records(log)
    assert [(r.offset, r.key, r.value) for r in records] == sorted((o, k, v) for k, (o, v) in latest.items())


def files_size(log: Log, suffix: str = ".log") -> int:
    return sum(os.path.getsize(os.path.join(log.dir, n)) for n in os.listdir(log.dir) if n.endswith(suffix))


# --- what a clean keeps ----------------------------------------------------------------------------


def test_100k_updates_over_1000_keys_shrink_and_keep_each_latest_value(tmp_path) -> None:
    log = open_compacted(tmp_path)
    rng = random.Random(7)
    latest: Latest = {}
    for i in range(10_000):
        pairs = [(b"key-%d" % rng.randrange(1000), b"value-%d-%d" % (i, j)) for j in range(10)]
        append_kv(log, pairs, ts=1000 + i, latest=latest)
    log.roll(now_ms=0)  # the cleaner never touches the active segment: make it empty
    assert log.log_end_offset == 100_000 and len(latest) == 1000
    segments_before, size_before = log.num_segments, files_size(log)
    assert segments_before > 50

    cleaner = cleaner_for(log)
    stats = cleaner.clean_now(log, now_ms=10**6)
    assert not stats.aborted and stats.end_offset == 100_000
    assert stats.records_read == 100_000 and stats.records_removed == 99_000
    log.delete_old_segments(now_ms=10**6)  # unlinks the replaced segments (file.delete.delay.ms=0)
    assert files_size(log) < size_before / 20
    assert_latest_only(log, latest)
    assert cleaner.checkpoints() == {("compacted", 0): 100_000}
    assert OffsetCheckpointFile(os.path.join(tmp_path, CLEANER_OFFSET_CHECKPOINT)).read() == {("compacted", 0): 100_000}

    # A second clean has nothing to remove but merges the now small segments.
    cleaner.clean_now(log, now_ms=10**6)
    assert log.num_segments <= 3
    assert_latest_only(log, latest)
    assert not [n for n in os.listdir(log.dir) if n.endswith((".cleaned", ".swap"))]

    # It survives a restart, and appends continue at the LEO.
    log.close()
    log = Log.open(log.dir, log.config, now_ms=0)
    assert_latest_only(log, latest)
    assert append_kv(log, [(b"key-1", b"after")]) == 100_000


def test_tombstones_stay_until_delete_retention_ms_after_their_first_clean(tmp_path) -> None:
    log = open_compacted(tmp_path, delete_retention_ms=1000)
    latest: Latest = {}
    for i in range(0, 100, 10):
        append_kv(log, [(b"k%d" % j, b"v%d" % j) for j in range(i, i + 10)], ts=1000 + i, latest=latest)
    append_kv(log, [(b"k%d" % j, None) for j in range(0, 50, 2)], ts=2000, latest=latest)  # delete the even ones < 50
    log.roll(now_ms=0)
    cleaner = cleaner_for(log)

    cleaner.clean_now(log, now_ms=5000)  # the first clean sets the horizon: 5000 + 1000
    assert_latest_only(log, latest)  # the tombstones are there, the values they delete are not
    [(h, records)] = [(h, r) for h, r in read_batches(log) if any(x.value is None for x in r)]
    assert h.attributes & DELETE_HORIZON_BIT and h.base_timestamp == 6000
    assert [r.timestamp for r in records] == [2000 + i for i in range(25)]  # record timestamps kept
    assert cleaner.clean_once(now_ms=5999) is None  # not dirty, no horizon passed yet

    cleaner.clean_now(log, now_ms=5999)
    assert_latest_only(log, latest)
    stats = cleaner.clean_once(now_ms=6000)  # the horizon passed: cleaned although not dirty
    assert stats is not None and "tombstones" in stats.reason and stats.tombstones_removed == 25
    gone = {k for k, (_, v) in latest.items() if v is None}
    assert_latest_only(log, {k: ov for k, ov in latest.items() if k not in gone})
    assert cleaner.clean_once(now_ms=10**9) is None  # no tombstone left to wait for


def test_records_without_key_are_dropped_and_a_producers_last_batch_kept_empty(tmp_path) -> None:
    log = open_compacted(tmp_path)
    latest: Latest = {}
    append_kv(log, [(b"a", b"1"), (None, b"no key"), (b"b", b"1")], latest=latest)
    append_kv(log, [(b"a", b"2")], producer_id=7, latest=latest)  # emptied: not producer 7's last batch
    append_kv(log, [(b"a", b"3")], producer_id=7, latest=latest)  # emptied: producer 7's last batch
    append_kv(log, [(b"a", b"4"), (b"b", b"2")], producer_id=8, latest=latest)
    log.roll(now_ms=0)
    stats = cleaner_for(log).clean_now(log, now_ms=10**6)
    assert stats.keyless_removed == 1
    assert_latest_only(log, latest)
    batches = read_batches(log)
    empty = [h for h, recs in batches if h.records_count == 0]
    assert len(empty) == 1
    h = empty[0]
    assert (h.base_offset, h.last_offset, h.producer_id, h.producer_epoch, h.base_sequence) == (4, 4, 7, 0, 4)
    assert [(h.base_offset, h.last_offset, h.records_count) for h, _ in batches] == [(4, 4, 0), (5, 6, 2)]


# --- what is never cleaned --------------------------------------------------------------------------


def test_the_active_segment_is_never_touched(tmp_path) -> None:
    log = open_compacted(tmp_path, segment_bytes=10**6)
    latest: Latest = {}
    for i in range(20):
        append_kv(log, [(b"k%d" % (i % 3), b"v%d" % i)], latest=latest)
    log.roll(now_ms=0)
    for i in range(20):
        append_kv(log, [(b"k%d" % (i % 3), b"w%d" % i)], latest=latest)  # duplicates in the active segment
    active_path = log.active_segment.log_path
    with open(active_path, "rb") as f:
        before = f.read()
    stats = cleaner_for(log).clean_now(log, now_ms=10**6)
    assert stats.end_offset == 20  # the active segment's base offset
    with open(active_path, "rb") as f:
        assert f.read() == before
    records = read_records(log)
    assert [r.offset for r in records if r.offset >= 20] == list(range(20, 40))
    assert [r.offset for r in records if r.offset < 20] == [17, 18, 19]


def test_min_compaction_lag_ms_holds_back_recent_segments(tmp_path) -> None:
    log = open_compacted(tmp_path, segment_bytes=10**6, min_compaction_lag_ms=1000)
    for i in range(10):
        append_kv(log, [(b"k%d" % (i % 2), b"old%d" % i)], ts=1000)
    log.roll(now_ms=0)
    for i in range(10):
        append_kv(log, [(b"k%d" % (i % 2), b"new%d" % i)], ts=5000)
    log.roll(now_ms=0)
    cleaner = cleaner_for(log)

    stats = cleaner.clean_now(log, now_ms=5500)  # the second segment is younger than the lag
    assert stats.end_offset == 10
    assert [r.offset for r in read_records(log)] == [8, 9] + list(range(10, 20))
    stats = cleaner.clean_now(log, now_ms=5999)  # 5000 > 5999 - 1000: still too recent
    assert stats.end_offset == 10
    stats = cleaner.clean_now(log, now_ms=6000)
    assert stats.end_offset == 20
    assert [r.offset for r in read_records(log)] == [18, 19]


def test_a_barely_dirty_log_is_not_cleaned_until_min_cleanable_dirty_ratio(tmp_path) -> None:
    log = open_compacted(tmp_path, segment_bytes=4096)
    latest: Latest = {}
    for i in range(0, 500, 10):
        append_kv(log, [(b"key-%03d" % j, b"x" * 40) for j in range(i, i + 10)], latest=latest)
    log.roll(now_ms=0)
    cleaner = cleaner_for(log)
    assert cleaner.clean_once(now_ms=10**6) is not None  # all dirty: ratio 1.0
    append_kv(log, [(b"key-001", b"y" * 40)], latest=latest)
    log.roll(now_ms=0)
    assert cleaner.clean_once(now_ms=10**6) is None  # a few dirty bytes against a clean head
    for i in range(0, 500, 10):
        append_kv(log, [(b"key-%03d" % j, b"z" * 80) for j in range(i, i + 10)], latest=latest)
    log.roll(now_ms=0)
    stats = cleaner.clean_once(now_ms=10**6)
    assert stats is not None and "dirty ratio" in stats.reason
    assert_latest_only(log, latest)


def test_max_compaction_lag_ms_forces_a_clean_of_a_barely_dirty_log(tmp_path) -> None:
    log = open_compacted(tmp_path, segment_bytes=4096, max_compaction_lag_ms=10_000)
    for i in range(0, 500, 10):
        append_kv(log, [(b"key-%03d" % j, b"x" * 40) for j in range(i, i + 10)], ts=1000)
    log.roll(now_ms=0)
    cleaner = cleaner_for(log)
    cleaner.clean_now(log, now_ms=2000)
    append_kv(log, [(b"key-001", b"y" * 40)], ts=3000)
    log.roll(now_ms=0)
    assert cleaner.clean_once(now_ms=13_000) is None  # 3000 is not older than 13000 - 10000
    stats = cleaner.clean_once(now_ms=13_001)
    assert stats is not None and "max.compaction.lag.ms" in stats.reason


def test_max_compaction_lag_ms_rolls_the_active_segment(tmp_path) -> None:
    log = open_compacted(tmp_path, segment_bytes=10**6, max_compaction_lag_ms=10_000)
    append_kv(log, [(b"a", b"1")], ts=1000)
    append_kv(log, [(b"a", b"2")], ts=11_001)  # 10001 ms after the segment's first record: roll
    assert [s.base_offset for s in log.segments] == [0, 1]


def test_records_above_the_high_watermark_are_not_cleaned(tmp_path) -> None:
    log = open_compacted(tmp_path, segment_bytes=10**6)
    for i in range(10):
        append_kv(log, [(b"k", b"v%d" % i)])
    log.roll(now_ms=0)
    log.update_high_watermark(5)  # as if the followers had only offsets 0-4
    stats = cleaner_for(log).clean_now(log, now_ms=10**6)
    assert stats.end_offset == 5
    assert [r.offset for r in read_records(log)] == [4, 5, 6, 7, 8, 9]


# --- codecs ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", sorted(compression.NAMES))
def test_compressed_batches_stay_compressed_with_their_codec(tmp_path, codec: int) -> None:
    log = open_compacted(tmp_path)
    latest: Latest = {}
    for i in range(30):
        pairs = [(b"key-%d" % ((i * 7 + j) % 40), b"value %d %d " % (i, j) * 5) for j in range(20)]
        append_kv(log, pairs, ts=1000 + i, codec=codec, latest=latest)
    append_kv(log, [(b"only-%d" % j, b"untouched") for j in range(5)], codec=codec, latest=latest)
    log.roll(now_ms=0)
    stats = cleaner_for(log).clean_now(log, now_ms=10**6)
    assert stats.batches_rewritten > 0
    batches = read_batches(log)
    assert batches and all(h.compression == codec for h, _ in batches)
    assert_latest_only(log, latest)


# --- bounded memory ------------------------------------------------------------------------------------


def test_a_small_offset_map_cleans_in_several_passes(tmp_path) -> None:
    log = open_compacted(tmp_path, segment_bytes=8192)
    rng = random.Random(3)
    latest: Latest = {}
    for i in range(400):
        append_kv(log, [(b"key-%d" % rng.randrange(1000), b"v%d-%d" % (i, j)) for j in range(10)], latest=latest)
    log.roll(now_ms=0)
    cleaner = cleaner_for(log, dedupe_buffer_size=300 * MAP_ENTRY_BYTES)
    assert cleaner.map_capacity == 300
    passes = []
    while not passes or passes[-1].end_offset < log.active_segment.base_offset:
        stats = cleaner.clean_now(log, now_ms=10**6)
        assert stats.map_keys <= 300
        passes.append(stats)
    assert len(passes) >= 4
    assert_latest_only(log, latest)


# --- crash safety ---------------------------------------------------------------------------------------


class Crash(Exception):
    pass


def build_for_crash(tmp_path) -> tuple[Log, Latest]:
    """Three closed segments that the cleaner merges into one group, with values and tombstones."""
    log = open_compacted(tmp_path, segment_bytes=10**6, delete_retention_ms=0)
    latest: Latest = {}
    rng = random.Random(5)
    for seg in range(3):
        for i in range(15):
            k = b"k%d" % rng.randrange(12)
            append_kv(log, [(k, None if rng.random() < 0.2 else b"s%d-%d" % (seg, i))], latest=latest)
        log.roll(now_ms=0)
    return log, latest


def abandon(log: Log) -> None:
    """Drop a log as a crash would: close its descriptors without writing anything."""
    for seg in log.segments:  # a crash does not run close()
        if not seg.closed:
            seg.closed = True
            os.close(seg._fd)  # noqa: SLF001


def check_consistent(log: Log, latest: Latest) -> None:
    """Offsets increase, and the last record of each key is its latest write (a key whose latest
    write is a tombstone may be gone); nothing else may have been lost."""
    last: dict[Key, tuple[int, bytes | None]] = {}
    for r in read_records(log):
        assert r.key is not None
        last[r.key] = (r.offset, r.value)
    for k, (offset, value) in latest.items():
        if value is None and k not in last:
            continue
        assert last[k] == (offset, value), k


@pytest.mark.parametrize("second_clean", [False, True], ids=["first-clean", "tombstone-expiry"])
def test_a_crash_at_any_step_of_the_swap_leaves_a_consistent_log(tmp_path, monkeypatch, second_clean: bool) -> None:
    # Crash before the 1st, 2nd, ... rename of the clean (os.replace raises and nothing else runs,
    # as in a kill -9): .cleaned -> .swap (3 files), each old segment -> .deleted (3 each),
    # .swap -> final names (3), the checkpoint's .tmp -> final; until a run gets through.
    for step in itertools.count():
        d = tmp_path / f"step{step}"
        log, latest = build_for_crash(d)
        cleaner = cleaner_for(log)
        if second_clean:  # the first clean sets the tombstones' horizon; the crash hits the one removing them
            cleaner.clean_now(log, now_ms=1000)
            for i in range(5):
                append_kv(log, [(b"k%d" % i, b"late%d" % i)], latest=latest)
            log.roll(now_ms=0)
        calls = 0
        real_replace = os.replace

        def crashing_replace(src: str, dst: str, step: int = step, real_replace=real_replace) -> None:
            nonlocal calls
            calls += 1
            if calls > step:
                raise Crash(f"crash before renaming {os.path.basename(src)}")
            real_replace(src, dst)

        monkeypatch.setattr(os, "replace", crashing_replace)
        try:
            cleaner.clean_now(log, now_ms=2000)
            crashed = False
        except Crash:
            crashed = True
        finally:
            monkeypatch.setattr(os, "replace", real_replace)
        abandon(log)

        log = Log.open(log.dir, log.config, now_ms=0)  # unclean: recovery point 0
        names = os.listdir(log.dir)
        assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))], names
        check_consistent(log, latest)
        cleaner_for(log).clean_now(log, now_ms=3000)  # and the next clean finishes the job
        check_consistent(log, latest)
        if second_clean:
            assert all(r.value is not None for r in read_records(log))
        log.close()
        if not crashed:
            break
    assert step >= (12 if second_clean else 15)


def test_a_truncation_during_a_clean_abandons_it(tmp_path, monkeypatch) -> None:
    log = open_compacted(tmp_path, segment_bytes=10**6)
    for i in range(30):
        append_kv(log, [(b"k%d" % (i % 3), b"v%d" % i)])
    log.roll(now_ms=0)
    for i in range(5):
        append_kv(log, [(b"k0", b"active%d" % i)])
    real_flush = compaction_module._flush_output

    def truncating_flush(*args: object) -> None:
        log.truncate_to(32)  # a follower diverged: the log's generation changes under the cleaner
        real_flush(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(compaction_module, "_flush_output", truncating_flush)
    cleaner = cleaner_for(log)
    stats = cleaner.clean_now(log, now_ms=10**6)
    assert stats.aborted
    monkeypatch.setattr(compaction_module, "_flush_output", real_flush)
    assert [r.offset for r in read_records(log)] == list(range(32))
    assert not [n for n in os.listdir(log.dir) if n.endswith((".cleaned", ".swap"))]
    assert cleaner.checkpoints() == {}
    assert cleaner.clean_now(log, now_ms=10**6).end_offset == 30


# --- concurrency -----------------------------------------------------------------------------------------


def test_cleaning_while_appending_and_reading_loses_nothing(tmp_path) -> None:
    log = open_compacted(tmp_path, segment_bytes=8 * 1024, min_cleanable_dirty_ratio=0.0)
    cleaner = cleaner_for(log, backoff_ms=1)
    latest: Latest = {}
    errors: list[BaseException] = []
    done = threading.Event()
    n_batches = 3000

    def appender() -> None:
        try:
            rng = random.Random(1)
            for i in range(n_batches):
                append_kv(log, [(b"key-%d" % rng.randrange(300), b"v%d-%d" % (i, j)) for j in range(5)],
                          ts=int(time.time() * 1000), latest=latest)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
        finally:
            done.set()

    def reader() -> None:
        try:
            while not done.is_set():
                offset = log.log_start_offset
                hw = log.high_watermark
                while offset < hw:
                    info = log.read(offset, 64 * 1024, max_offset=hw)
                    data = bytes(info.records)
                    if not data:
                        break
                    previous = offset - 1
                    for h in iter_headers(data):
                        assert compute_crc(data, h.position, h.size) == h.crc
                        for r in decode_records(data, h):
                            assert r.offset > previous
                            previous = r.offset
                    assert info.next_offset > offset
                    offset = info.next_offset
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=appender), threading.Thread(target=reader)]
    cleaner.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    cleaner.shutdown()
    assert not errors, errors
    assert log.log_end_offset == 5 * n_batches
    log.roll(now_ms=0)
    stats = cleaner.clean_now(log)
    assert not stats.aborted
    assert_latest_only(log, latest)
    log.close()
    assert_latest_only(Log.open(log.dir, log.config, now_ms=0), latest)


def test_the_log_manager_runs_the_cleaner_and_keeps_its_checkpoint(tmp_path) -> None:
    d = str(tmp_path / "data")
    compacted = LogConfig(cleanup_policy="compact", segment_bytes=4096, file_delete_delay_ms=0)
    manager = LogManager([d], LogConfig(), {"t": compacted}, cleaner_config=CleanerConfig(backoff_ms=10))
    assert manager.cleaner is not None and manager.cleaner.running
    log = manager.get_or_create_log("t", 0)
    plain = manager.get_or_create_log("plain", 0)
    latest: Latest = {}
    for i in range(100):
        append_kv(log, [(b"k%d" % (i % 10), b"v%d" % i)], latest=latest)
        append_kv(plain, [(b"k", b"v%d" % i)])
    log.roll()
    plain.roll()
    deadline = time.monotonic() + 30
    while manager.cleaner.checkpoints().get(("t", 0)) != 100:
        assert time.monotonic() < deadline, "the cleaner thread did not clean the log"
        time.sleep(0.01)
    assert_latest_only(log, latest)
    assert len(read_records(plain)) == 100  # cleanup.policy=delete: never compacted
    manager.shutdown()
    assert not manager.cleaner.running
    assert OffsetCheckpointFile(os.path.join(d, CLEANER_OFFSET_CHECKPOINT)).read() == {("t", 0): 100}

    again = LogManager([d], LogConfig(), {"t": compacted}, cleaner_config=CleanerConfig(enable=False))
    assert again.cleaner is None
    cleaner = LogCleaner([d], again.logs)
    assert cleaner.checkpoints() == {("t", 0): 100}
    again.shutdown()


# --- produce-time validation and configuration ------------------------------------------------------------


def test_validator_rejects_records_without_key_on_compacted_topics() -> None:
    rules = ValidationRules(1 << 20, 1 << 24, compacted=True)
    good = build_batch([Record(0, 1, b"k", b"v"), Record(1, 1, b"k2", None)])
    bad = build_batch([Record(0, 1, b"k", b"v"), Record(1, 1, None, b"v")], codec=compression.LZ4)
    validate_batches(memoryview(bytearray(good)), rules, 0)
    buf = bytearray(good + bad)
    with pytest.raises(BatchValidationError) as e:
        validate_batches(memoryview(buf), rules, 0)
    assert e.value.error == "INVALID_RECORD"
    assert (e.value.batch_index, [i for i, _ in e.value.record_errors]) == (1, [1])


@pytest.mark.parametrize("codec", [compression.NONE, compression.ZSTD])
def test_a_bad_stored_batch_is_kept_and_cleaning_goes_on(tmp_path, caplog, codec: int) -> None:
    """Finding 10: one batch whose records do not frame (here: it claims two records and holds one,
    with a valid CRC) used to stop the cleaning of its partition until a restart."""
    log = open_compacted(tmp_path)
    latest: Latest = {}
    append_kv(log, [(b"a", b"1"), (b"b", b"1")], latest=latest)
    first = log.log_end_offset
    bad = bytearray(build_batch([Record(first, 1000, b"a", b"bad")], base_offset=first, codec=codec))
    struct.pack_into(">i", bad, 23, 1)  # last offset delta
    struct.pack_into(">i", bad, 57, 2)  # records count
    struct.pack_into(">I", bad, 17, compute_crc(bad, 0, len(bad)))
    log.append_as_leader(bad, validate_record_set(memoryview(bad), 1 << 30), 0, 1000)  # header checks pass
    log.update_high_watermark(log.log_end_offset)
    for i in range(200):
        append_kv(log, [(b"k%d" % (i % 10), b"%d" % i)], latest=latest)
    log.roll(now_ms=0)
    cleaner = cleaner_for(log)
    with caplog.at_level("WARNING"):
        stats = cleaner.clean_now(log)
    assert not stats.aborted and stats.records_removed >= 190
    assert (log.topic, log.partition) not in cleaner.uncleanable_partitions
    assert f"compacted-0: the stored batch at offset {first}" in caplog.text
    kept = [h for h, _ in read_batches_raw(log) if h.base_offset == first]
    assert kept and kept[0].records_count == 2  # left as it was, for recovery or an operator to judge
    assert cleaner.clean_now(log).records_removed == 0  # a second clean goes through it again, quietly kept


def read_batches_raw(log: Log) -> list[tuple[BatchHeader, bytes]]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        info = log.read(offset, 1 << 20)
        data = bytes(info.records)
        if not data:
            break
        out += [(h, data[h.position : h.position + h.size]) for h in iter_headers(data)]
        offset = info.next_offset
    return out


def test_cleaner_config_from_broker_properties() -> None:
    props = {"log.cleaner.enable": "false", "log.cleaner.threads": "2", "log.cleaner.backoff.ms": "100",
             "log.cleaner.dedupe.buffer.size": "1048576", "log.retention.hours": "1"}
    c = CleanerConfig.from_broker(BrokerConfig(props).get)
    assert (c.enable, c.threads, c.backoff_ms, c.dedupe_buffer_size) == (False, 2, 100, 1048576)
    with pytest.raises(InvalidConfigError, match="log.cleaner.threads"):
        CleanerConfig(threads=0)
    assert CleanerConfig() == CleanerConfig(enable=True, threads=1, backoff_ms=15000, dedupe_buffer_size=134217728)
    assert LogCleaner([], dict, CleanerConfig(threads=2, dedupe_buffer_size=MAP_ENTRY_BYTES * 100)).map_capacity == 50


def test_clean_now_refuses_a_log_that_is_not_compacted(tmp_path) -> None:
    log = open_compacted(tmp_path, cleanup_policy="delete")
    with pytest.raises(ValueError):
        cleaner_for(log).clean_now(log)


def test_compact_delete_still_applies_retention(tmp_path) -> None:
    log = open_compacted(tmp_path, cleanup_policy="compact,delete", segment_bytes=100, retention_ms=1000)
    for i in range(3):
        append_kv(log, [(b"k%d" % i, b"v")], ts=1000 * (i + 1))
    log.roll(now_ms=0)
    cleaner_for(log).clean_now(log, now_ms=2500)
    assert log.num_segments == 4  # each batch fills a segment: none merged
    assert log.delete_old_segments(now_ms=3500) == 2  # the segments with timestamps 1000 and 2000
    assert [r.key for r in read_records(log)] == [b"k2"]


# --- transactions ---------------------------------------------------------------------------------------


def _append_txn(log: Log, pid: int, seq: int, pairs: list[tuple[Key, bytes]]) -> None:
    first = log.log_end_offset
    recs = [Record(first + i, 1000, k, v) for i, (k, v) in enumerate(pairs)]
    buf = bytearray(build_batch(recs, base_offset=first, producer_id=pid, producer_epoch=0, base_sequence=seq,
                                transactional=True))
    log.append_as_leader(buf, validate_record_set(memoryview(buf), 1 << 30), 0, 1000)
    log.update_high_watermark(log.log_end_offset)


def _marker(log: Log, pid: int, commit: bool) -> None:
    buf = bytearray(build_marker_batch(pid, 0, commit, 0, 1000))
    log.append_as_leader(buf, validate_record_set(memoryview(buf), 1 << 30), 0, 1000)
    log.update_high_watermark(log.log_end_offset)


def test_an_aborted_write_never_shadows_a_committed_one_and_open_transactions_are_not_cleaned(tmp_path) -> None:
    log = open_compacted(tmp_path, segment_bytes=10**6)
    _append_txn(log, 7, 0, [(b"k", b"committed")])  # 0
    _marker(log, 7, commit=True)  # 1
    _append_txn(log, 8, 0, [(b"k", b"aborted")])  # 2: newer, but aborted
    _marker(log, 8, commit=False)  # 3
    _append_txn(log, 9, 0, [(b"j", b"old"), (b"j", b"open")])  # 4-5: still open
    append_kv(log, [(b"x", b"plain")])  # 6
    log.roll(now_ms=0)
    assert log.last_stable_offset == 4
    stats = cleaner_for(log).clean_now(log, now_ms=10**6)
    assert stats.end_offset == 4  # the open transaction and what follows wait
    left = {(r.offset, r.key, r.value) for r in read_records(log)}
    assert (0, b"k", b"committed") in left and not any(v == b"aborted" for _, _, v in left)
    assert {(4, b"j", b"old"), (5, b"j", b"open")} <= left  # not deduplicated while open
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in log.aborted_transactions(0, 7)] == [(8, 2, 3)]
    # The producer state rebuilt from the cleaned log keeps the open transaction open.
    log.close()
    reopened = Log.open(log.dir, log.config, recovery_point=0, now_ms=0)
    reopened.update_high_watermark(reopened.log_end_offset)
    assert reopened.last_stable_offset == 4
    reopened.close()
