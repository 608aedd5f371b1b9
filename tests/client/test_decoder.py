"""The record-batch-to-Arrow decoder, C and pure Python, against the records the batches were built from."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gregor.client import pydecoder
from gregor.client.arrow_columns import ArrowLayout
from gregor.client.decoder import C_DECODER, CorruptRecordError, Decoder, scan
from gregor.client.decompress import Decompressor
from gregor.protocol import compression
from gregor.protocol.compression import DecompressedTooLargeError
from gregor.protocol.records import Header, Record, compute_crc
from tests.client.batches import LAYOUT, batch, decode_rows, marker, row

IMPLS = [pytest.param(False, id="c"), pytest.param(True, id="python")]
CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]


def recs(offsets: list[int], ts0: int = 1_700_000_000_000) -> list[Record]:
    return [Record(o, ts0 + o, b"k%d" % o if o % 3 else None, b"v%d" % o if o % 5 else None,
                   [Header("h", b"%d" % o)] if o % 2 else []) for o in offsets]


def test_the_c_decoder_is_built() -> None:
    assert C_DECODER, "gregor/client/_arrowbatch.c did not build: pip install -e . (a C compiler is needed)"


@pytest.mark.parametrize("python", IMPLS)
def test_exact_range_across_batches(python: bool) -> None:
    a, b = recs(list(range(0, 10))), recs(list(range(10, 20)))
    data = batch(a, 0) + batch(b, 10) + batch(recs([20]), 20)
    rows, nxt, _ = decode_rows(data, 5, 15, python=python)
    assert rows == [row(r) for r in (a + b)[5:15]]
    assert nxt == 20  # the batch holding offset 14 was read whole; the next fetch starts after it


@pytest.mark.parametrize("python", IMPLS)
def test_compaction_gaps_are_kept(python: bool) -> None:
    r = recs([0, 3, 7, 8])
    rows, nxt, _ = decode_rows(batch(r, 0), 1, 8, python=python)
    assert [x["offset"] for x in rows] == [3, 7]
    assert nxt == 9


@pytest.mark.parametrize("python", IMPLS)
def test_whole_batches_before_start_are_skipped_and_a_partial_batch_waits(python: bool) -> None:
    data = batch(recs([0, 1]), 0) + batch(recs([2, 3]), 2)
    rows, nxt, _ = decode_rows(data + batch(recs([4]), 4)[:30], 3, 10, python=python)
    assert [x["offset"] for x in rows] == [3]
    assert nxt == 4
    assert scan(data + b"\x00" * 20) == pydecoder.scan(data + b"\x00" * 20) == (4, len(data))
    assert scan(b"") == (-1, 0)


@pytest.mark.parametrize("python", IMPLS)
@pytest.mark.parametrize("codec", CODECS, ids=[compression.NAMES[c] for c in CODECS])
def test_every_codec(python: bool, codec: int) -> None:
    r = recs(list(range(100, 400)))
    rows, _, _ = decode_rows(batch(r[:150], 100, codec=codec) + batch(r[150:], 250, codec=codec), 100, 400,
                             python=python)
    assert rows == [row(x) for x in r]


@pytest.mark.parametrize("python", IMPLS)
def test_snappy_in_xerial_framing(python: bool) -> None:
    import cramjam

    r = recs(list(range(50)))
    plain = batch(r, 0)
    body = plain[61:]
    chunks = [bytes(cramjam.snappy.compress_raw(body[i : i + 100])) for i in range(0, len(body), 100)]
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + b"".join(struct.pack(">i", len(c)) + c for c in chunks)
    framed = bytearray(plain[:61] + xerial)
    struct.pack_into(">i", framed, 8, len(framed) - 12)
    struct.pack_into(">h", framed, 21, compression.SNAPPY)
    struct.pack_into(">I", framed, 17, compute_crc(framed, 0, len(framed)))
    rows, _, _ = decode_rows(bytes(framed), 0, 50, python=python)
    assert rows == [row(x) for x in r]


@pytest.mark.parametrize("python", IMPLS)
def test_control_batches_are_skipped_and_aborted_transactions_dropped_under_read_committed(python: bool) -> None:
    aborted, committed, later = recs([0, 1, 2]), recs([4, 5]), recs([8])
    data = (batch(aborted, 0, pid=7, txn=True) + marker(3, 7, commit=False)
            + batch(committed, 4, pid=8, txn=True) + marker(6, 8, commit=True)
            + batch(recs([7]), 7)  # not transactional
            + batch(later, 8, pid=7, txn=True) + marker(9, 7, commit=True))  # producer 7 again, committed
    everything = [row(x) for x in aborted + committed + recs([7]) + later]
    rows, nxt, _ = decode_rows(data, 0, 10, python=python)
    assert rows == everything and nxt == 10
    rows, nxt, _ = decode_rows(data, 0, 10, python=python, read_committed=True, aborted=[(7, 0)])
    assert rows == [row(x) for x in committed + recs([7]) + later] and nxt == 10
    # Markers read under read_uncommitted never show either.
    rows, _, _ = decode_rows(marker(0, 7, commit=True), 0, 1, python=python)
    assert rows == []


@pytest.mark.parametrize("python", IMPLS)
def test_crc_mismatch_and_corrupt_records_fail(python: bool) -> None:
    good = batch(recs(list(range(5))), 0)
    bad_crc = bytearray(good)
    bad_crc[good.index(b"v1")] = ord("w")  # a flipped value byte: the records still parse
    with pytest.raises(CorruptRecordError, match="CRC32C"):
        decode_rows(bytes(bad_crc), 0, 5, python=python)
    impl = pydecoder.Decoder if python else Decoder
    d = impl(check_crcs=False)
    d.feed(bytes(bad_crc), 0, Decompressor(1 << 20), 100, 1 << 20)  # check.crcs=false reads it
    assert d.rows == 5
    truncated = bytearray(good)
    truncated[61] = 0x7E  # first record's length: far past the batch
    struct.pack_into(">I", truncated, 17, compute_crc(truncated, 0, len(truncated)))
    with pytest.raises(CorruptRecordError, match="record 0"):
        decode_rows(bytes(truncated), 0, 5, python=python)
    old = bytearray(good)
    old[16] = 1
    with pytest.raises(CorruptRecordError, match="message format v1"):
        decode_rows(bytes(old), 0, 5, python=python)


@pytest.mark.parametrize("python", IMPLS)
def test_log_append_time_and_microseconds(python: bool) -> None:
    r = recs([0, 1])
    rows, _, _ = decode_rows(batch(r, 0, log_append_ms=1_800_000_000_123), 0, 2, python=python)
    assert rows == [row(x, 1_800_000_000_123) for x in r]
    us = ArrowLayout(timestamp_unit="us", timezone="UTC")
    rows, _, _ = decode_rows(batch(r, 0), 0, 2, python=python, layout=us)
    assert [x["timestamp"] for x in rows] == [(x.timestamp) * 1000 for x in r]


@pytest.mark.parametrize("python", IMPLS)
def test_full_builders_split_between_kafka_batches(python: bool) -> None:
    data = b"".join(batch(recs(list(range(i, i + 4))), i) for i in range(0, 20, 4))
    rows, _, sizes = decode_rows(data, 0, 20, python=python, max_rows=6)
    assert [x["offset"] for x in rows] == list(range(20))
    assert sizes == [8, 8, 4]  # checked between Kafka batches: 4 + 4 passes 6


@pytest.mark.parametrize("python", IMPLS)
def test_only_the_columns_asked_for(python: bool) -> None:
    lay = ArrowLayout(columns=("offset", "value"))
    rows, _, _ = decode_rows(batch(recs([0, 1, 2]), 0), 0, 3, python=python, layout=lay)
    assert rows == [{"offset": o, "value": v} for o, v in [(0, None), (1, b"v1"), (2, b"v2")]]


@pytest.mark.parametrize("python", IMPLS)
def test_header_keys_that_are_not_utf8_read_as_java_reads_them(python: bool) -> None:
    b = bytearray(batch([Record(0, 5, None, b"v", [Header("KK", b"x"), Header("ok", None)])], 0))
    i = b.index(b"KK")
    b[i : i + 2] = b"\xff\xfe"
    struct.pack_into(">I", b, 17, compute_crc(b, 0, len(b)))
    rows, _, _ = decode_rows(bytes(b), 0, 1, python=python)
    assert rows[0]["headers"] == [{"key": "\ufffd\ufffd", "value": b"x"}, {"key": "ok", "value": None}]


def test_decompression_is_bounded_and_grows_its_buffer() -> None:
    data = b"a" * (5 << 20)  # compresses some thousand times: more than the first buffer guess
    for codec in (compression.GZIP, compression.LZ4, compression.ZSTD, compression.SNAPPY):
        packed = compression.compress(codec, data)
        assert bytes(Decompressor(6 << 20)(codec, memoryview(packed))) == data
        with pytest.raises(DecompressedTooLargeError):
            Decompressor(1 << 20)(codec, memoryview(packed))


# --- random batches: both decoders against the records ------------------------------------------

record_st = st.builds(
    lambda ts, key, value, headers: (ts, key, value, headers),
    st.integers(0, 2**41),
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=200),
    st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=16)), max_size=4),
)
batch_st = st.tuples(
    st.lists(record_st, min_size=1, max_size=30),
    st.sampled_from(CODECS),
    st.integers(0, 3),  # offset gap before the batch (compaction)
    st.booleans(),  # LogAppendTime
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(batch_st, min_size=1, max_size=6), st.data())
def test_random_batches_match_their_records(batches: list[tuple], data: st.DataObject) -> None:
    record_set = b""
    expected = []
    offset = 0
    for items, codec, gap, log_append in batches:
        offset += gap
        base = offset
        rs = []
        for ts, key, value, headers in items:
            rs.append(Record(offset, ts, key, value, [Header(k, v) for k, v in headers]))
            offset += data.draw(st.integers(1, 2), label="offset step")
        append_ms = 1_750_000_000_000 if log_append else None
        record_set += batch(rs, base, codec=codec, log_append_ms=append_ms)
        expected += [row(r, append_ms) for r in rs]
    start = data.draw(st.integers(0, offset), label="start")
    end = data.draw(st.integers(start, offset + 1), label="end")
    max_rows = data.draw(st.integers(1, 50), label="max_rows")
    want = [r for r in expected if start <= r["offset"] < end]
    for python in (False, True):
        rows, _, sizes = decode_rows(record_set, start, end, python=python, max_rows=max_rows)
        assert rows == want
        assert sum(sizes) == len(want)


def test_layout_is_checked() -> None:
    with pytest.raises(ValueError, match="columns"):
        ArrowLayout(columns=("offset", "nope"))
    with pytest.raises(ValueError, match="timestamp unit"):
        ArrowLayout(timestamp_unit="ns")
    assert LAYOUT.arrow_schema().names == ["partition", "offset", "timestamp", "timestampType", "key", "value",
                                           "headers"]


def test_reused_buffer_memory_holds_no_stale_bytes() -> None:
    """Large buffers come back from the pool of freed mappings with the last read's bytes in them: what is
    built on them must still equal a fresh decode (validity bits, offsets, data)."""
    from gregor.client.decoder import buffer_pool_bytes

    full = [Record(o, 1000 + o, b"K" * 20, b"V" * 60, [Header("hh", b"x" * 10)]) for o in range(30_000)]
    sparse = [Record(o, 2000 + o, None if o % 2 else b"k", None if o % 3 else b"v",
                     [] if o % 5 else [Header("h", None)]) for o in range(30_000)]
    limit, held = buffer_pool_bytes()
    assert limit > 0
    for records in (full, sparse, full, sparse):
        data = b"".join(batch(records[i : i + 5000], i) for i in range(0, 30_000, 5000))
        rows, _, sizes = decode_rows(data, 0, 30_000, max_rows=25_000)
        assert sizes == [25_000, 5_000]
        assert rows == [row(r) for r in records]
    assert buffer_pool_bytes()[1] > 0, "freed column buffers went to the pool"
    buffer_pool_bytes(0)
    assert buffer_pool_bytes() == (0, 0)
    buffer_pool_bytes(limit)


def test_constant_columns_are_built_without_pyarrow_compute() -> None:
    """partition and topic are built from buffers (pa.repeat costs ~0.5 s of CPU on first use in a process):
    every length, the longest-built offsets sliced for shorter batches, non-ASCII topics, other types."""
    import pyarrow as pa

    from gregor.client import arrow_columns as ac

    for n in (70_000, 0, 1, 3, 65_536):
        for topic in ("t", "tôpic-ü", "x" * 249):
            arr = ac._constant_string(pa, pa.string(), topic, n)
            arr.validate(full=True)
            assert arr.type == pa.string() and arr.null_count == 0 and arr.to_pylist() == [topic] * n
        part = ac._constant_int32(pa, pa.int32(), 2**31 - 1, n)
        part.validate(full=True)
        assert part.to_pylist() == [2**31 - 1] * n
    assert ac._constant_string(pa, pa.large_string(), "t", 3).to_pylist() == ["t"] * 3
    assert ac._constant_int32(pa, pa.int64(), 5, 2).to_pylist() == [5, 5]
