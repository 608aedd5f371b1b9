"""The record validator on its own: its rules, its bounded decompression, and C and Python walks agreeing."""

from __future__ import annotations

import random
import struct
import zlib

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gregor.protocol import compression, validator
from gregor.protocol.records import (
    _OFF_CRC,
    HEADER_SIZE,
    Header,
    Record,
    build_batch,
    compute_crc,
    read_header,
)
from gregor.protocol.validator import (
    BatchValidationError,
    InlineBudgetExceeded,
    ValidationRules,
    validate_batches,
)

NOW = 1_700_000_000_000
RULES = ValidationRules.for_topic(max_message_bytes=1 << 20, decompression_ratio=64, decompression_max_bytes=1 << 27,
                                  compacted=False, log_append_time=False, timestamp_before_max_ms=validator.LONG_MAX,
                                  timestamp_after_max_ms=3_600_000)

needs_c = pytest.mark.skipif(validator.walk_c is None, reason="the C record walk is not built")


def _recrc(b: bytearray) -> bytearray:
    struct.pack_into(">I", b, _OFF_CRC, compute_crc(b, 0, len(b)))
    return b


def _set_counts(b: bytearray, count: int, last_delta: int) -> bytearray:
    struct.pack_into(">i", b, 23, last_delta)
    struct.pack_into(">i", b, 57, count)
    return _recrc(b)


def _batch(n: int = 3, codec: int = compression.NONE, ts: int = NOW, key: bytes | None = b"k") -> bytearray:
    return bytearray(build_batch([Record(i, ts + i, key, b"v%d" % i, [Header("h", b"x")]) for i in range(n)],
                                 codec=codec))


def _raw_batch(body: bytes, count: int, codec: int = compression.NONE) -> bytearray:
    """A batch whose records section is `body` as given (built around a real header)."""
    b = bytearray(build_batch([Record(0, NOW, b"k", b"v")]))[:HEADER_SIZE] + body
    struct.pack_into(">i", b, 8, len(b) - 12)
    struct.pack_into(">h", b, 21, codec)
    return _set_counts(b, count, count - 1)


def _check(b: bytes | bytearray, rules: ValidationRules = RULES) -> validator.Validated:
    return validate_batches(memoryview(bytearray(b)), rules, NOW)


def _error(b: bytes | bytearray, rules: ValidationRules = RULES) -> BatchValidationError:
    with pytest.raises(BatchValidationError) as e:
        _check(b, rules)
    return e.value


# --- the rules -----------------------------------------------------------------------------------


def test_good_batches_pass_every_codec() -> None:
    for codec in compression.NAMES:
        (h,) = _check(_batch(50, codec)).headers
        assert h.records_count == 50


def test_header_claiming_more_records_than_it_holds() -> None:
    """Finding 4: one 89-byte batch claimed 2^31 records and moved the log end offset by that much."""
    b = _set_counts(_batch(1), 2**31 - 1, 2**31 - 2)
    e = _error(b)
    assert e.error == "CORRUPT_MESSAGE" and "record 1" in str(e)
    e = _error(_set_counts(_batch(3), 4, 3))
    assert e.error == "CORRUPT_MESSAGE"


def test_header_claiming_fewer_records_than_it_holds() -> None:
    e = _error(_set_counts(_batch(3), 2, 1))
    assert e.error == "CORRUPT_MESSAGE" and "bytes after the last" in str(e)


def test_record_length_past_the_batch() -> None:
    b = _batch(1)
    b[HEADER_SIZE] = 0x7E  # zigzag 63: longer than the record
    assert "length out of range" in str(_error(_recrc(b)))


@pytest.mark.parametrize("body, message", [
    (b"\x80", "truncated"),                                  # truncated length varint
    (b"\xff\xff\xff\xff\xff\x01", "varint too long"),        # six-byte varint
    (b"\x16\x00\x00\x00\x02k\x02v\x02\x01\x02x", "null header key"),    # header key length -1
    (b"\x14\x00\x00\x00\x02k\x02v\x01\x02x", "negative header count"),
    (b"\x0a\x00\x00\x00\x05\x02v\x00", "negative key"),        # key length -3
    (b"\x12\x00\x00\x00\x02k\x02v\x00\x00", "do not fill"),    # one byte too many for its fields
    (b"\x0e\x00\x00\x00\x02k\x02v\x02", "truncated"),          # header count 1, nothing after
])
def test_malformed_records(body: bytes, message: str) -> None:
    e = _error(_raw_batch(body, 1))
    assert e.error == "CORRUPT_MESSAGE" and message in str(e), str(e)


def test_offset_deltas_must_count_from_zero() -> None:
    b = bytearray(build_batch([Record(0, NOW, b"k", b"v"), Record(5, NOW, b"k", b"v")]))
    b = _set_counts(b, 2, 1)
    e = _error(b)
    assert e.error == "INVALID_RECORD" and e.record_errors[0][0] == 1


def test_control_batches_and_unknown_codecs_from_clients() -> None:
    b = _batch(1)
    struct.pack_into(">h", b, 21, 0x20)
    assert _error(_recrc(b)).error == "INVALID_RECORD"
    b = _batch(1)
    struct.pack_into(">h", b, 21, 5)
    assert _error(_recrc(b)).error == "UNSUPPORTED_COMPRESSION_TYPE"
    b = _batch(1)
    b[-1] ^= 1
    assert "CRC" in str(_error(b))


def test_timestamps_against_kip_937_bounds() -> None:
    e = _error(_batch(3, ts=NOW + 2 * 3_600_000))
    assert e.error == "INVALID_TIMESTAMP" and [i for i, _ in e.record_errors] == [0, 1, 2]
    assert "message.timestamp.after.max.ms" in str(e)
    strict = ValidationRules.for_topic(max_message_bytes=1 << 20, decompression_ratio=64,
                                       decompression_max_bytes=1 << 27, compacted=False, log_append_time=False,
                                       timestamp_before_max_ms=1000, timestamp_after_max_ms=1000)
    e = _error(bytearray(build_batch([Record(0, NOW, b"k", b"v"), Record(1, NOW - 5000, b"k", b"v")])), strict)
    assert [i for i, _ in e.record_errors] == [1] and "before.max.ms" in str(e)
    _check(bytearray(build_batch([Record(0, -1, b"k", b"v")])), strict)  # no timestamp: not judged
    lat = ValidationRules(1 << 20, 1 << 24, log_append_time=True, timestamp_after_max_ms=0)
    _check(_batch(3, ts=NOW + 10**9), lat)  # LogAppendTime topics overwrite timestamps


def test_max_timestamp_header_is_corrected() -> None:
    b = _batch(3)
    struct.pack_into(">q", b, 35, NOW + 10)  # a lie: the records' max is NOW + 2
    b = _recrc(b)
    buf = memoryview(b)
    (h,) = validate_batches(buf, RULES, NOW).headers
    assert h.max_timestamp == NOW + 2 and read_header(b).max_timestamp == NOW + 2
    assert compute_crc(b, 0, len(b)) == read_header(b).crc


def test_keys_required_on_compacted_topics() -> None:
    rules = ValidationRules(1 << 20, 1 << 24, compacted=True)
    b = bytearray(build_batch([Record(0, NOW, b"k", b"v"), Record(1, NOW, None, b"v"), Record(2, NOW, None, b"v")],
                              codec=compression.GZIP))
    e = _error(b, rules)
    assert e.error == "INVALID_RECORD" and [i for i, _ in e.record_errors] == [1, 2]


def test_follower_rules_accept_cleaned_batches() -> None:
    """A compacted batch keeps its offset range with fewer records (deltas 0 and 4 of 0..4)."""
    b = bytearray(build_batch([Record(0, NOW, b"a", b"v"), Record(4, NOW, b"b", b"v")]))
    b = _set_counts(b, 2, 4)
    follower = ValidationRules.for_follower(max_message_bytes=1 << 20, decompression_ratio=64,
                                            decompression_max_bytes=1 << 27)
    _check(b, follower)
    assert _error(b).error == "INVALID_RECORD"  # a client may not send that
    empty = _raw_batch(b"", 0)
    _check(_set_counts(empty, 0, 3), follower)
    b = bytearray(build_batch([Record(0, NOW, b"a", b"v"), Record(4, NOW, b"b", b"v")]))
    assert _error(_set_counts(b, 2, 3), follower).error == "INVALID_RECORD"  # delta 4 past the range


# --- bounded decompression -----------------------------------------------------------------------


def _zeros_stream(codec: int, total: int) -> bytes:
    """`total` zero bytes compressed without holding them: the shape of a decompression bomb."""
    chunk = bytes(1 << 20)
    if codec == compression.GZIP:
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        out = [c.compress(chunk) for _ in range(total // len(chunk))]
        return b"".join(out) + c.flush()
    comp = {compression.ZSTD: cramjam.zstd.Compressor(), compression.LZ4: cramjam.lz4.Compressor()}[codec]
    for _ in range(total // len(chunk)):
        comp.compress(chunk)
    return bytes(comp.finish())


@pytest.mark.parametrize("codec", [compression.GZIP, compression.LZ4, compression.ZSTD])
def test_decompression_stops_at_the_limit(codec: int) -> None:
    bomb = _zeros_stream(codec, 128 << 20)
    with pytest.raises(compression.DecompressedTooLargeError):
        compression.decompress(codec, bomb, 1 << 20)
    assert len(compression.decompress(codec, bomb, 128 << 20)) == 128 << 20  # exactly at the limit is fine
    e = _error(_raw_batch(bomb, 1, codec))
    assert e.error == "MESSAGE_TOO_LARGE" and "gregor.batch.decompressed.max" in str(e)
    with pytest.raises(InlineBudgetExceeded):
        validate_batches(memoryview(_raw_batch(bomb, 1, codec)), RULES, NOW, inline_decompress_bytes=1 << 20)


def test_snappy_length_preamble_is_checked_before_allocating() -> None:
    lie = b"\xff\xff\xff\xff\x07" + b"\x00" * 10  # claims 2 GiB
    with pytest.raises(compression.DecompressedTooLargeError):
        compression.decompress(compression.SNAPPY, lie, 1 << 20)
    real = bytes(cramjam.snappy.compress_raw(bytes(4 << 20)))
    with pytest.raises(compression.DecompressedTooLargeError):
        compression.decompress(compression.SNAPPY, real, 1 << 20)
    xerial = b"\x82SNAPPY\x00" + bytes(8) + struct.pack(">i", len(real)) + real + struct.pack(">i", len(real)) + real
    assert len(compression.decompress(compression.SNAPPY, xerial, 8 << 20)) == 8 << 20
    with pytest.raises(compression.DecompressedTooLargeError):
        compression.decompress(compression.SNAPPY, xerial, (8 << 20) - 1)


@pytest.mark.parametrize("codec", [compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD])
def test_corrupt_compressed_data_is_corrupt_message(codec: int) -> None:
    good = _batch(20, codec)
    for cut in (1, 7, (len(good) - HEADER_SIZE) // 2):
        b = _recrc(bytearray(good[:-cut]))
        struct.pack_into(">i", b, 8, len(b) - 12)
        e = _error(_recrc(b))
        assert e.error == "CORRUPT_MESSAGE", (codec, cut, e)
    garbage = _raw_batch(b"\x05garbage, not a compressed frame" * 2, 1, codec)
    assert _error(garbage).error == "CORRUPT_MESSAGE"


# --- C and Python agree ------------------------------------------------------------------------------


records_st = st.lists(
    st.builds(
        lambda k, v, hs, dt: (k, v, hs, dt),
        st.one_of(st.none(), st.binary(max_size=20)),
        st.one_of(st.none(), st.binary(max_size=200)),
        st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=10))), max_size=3),
        st.integers(-(2**40), 2**40),
    ),
    min_size=1, max_size=30,
)


def _body(recs: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]) -> bytes:
    b = build_batch([Record(i, NOW + dt, k, v, [Header(hk, hv) for hk, hv in hs]) for i, (k, v, hs, dt) in enumerate(recs)])
    return b[HEADER_SIZE:]


def _both(body: bytes, count: int, strict: bool, last: int) -> validator.WalkResult:
    c = validator.walk_c(body, count, strict, last)
    p = validator.walk_py(body, count, strict, last)
    assert c == p, (body.hex(), count, strict, last)
    return c


@needs_c
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records_st, st.data())
def test_c_and_python_walks_agree(recs: list, data: st.DataObject) -> None:
    body = _body(recs)
    n = len(recs)
    res = _both(body, n, True, n - 1)
    assert res[0] == validator.OK
    assert res[4] == sum(1 for k, *_ in recs if k is None)
    dts = [dt for *_, dt in recs]
    assert (res[2], res[3]) == (0, max(dts) - min(dts))
    # Mutations: flipped bytes, truncations, insertions, wrong counts, loose rules.
    mutated = bytearray(body)
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if kind == "flip" and mutated:
            i = data.draw(st.integers(0, len(mutated) - 1))
            mutated[i] = data.draw(st.integers(0, 255))
        elif kind == "cut" and mutated:
            del mutated[data.draw(st.integers(0, len(mutated) - 1)):]
        else:
            i = data.draw(st.integers(0, len(mutated)))
            mutated[i:i] = data.draw(st.binary(min_size=1, max_size=4))
    count = data.draw(st.sampled_from([n, n - 1, n + 1, 0, 2**31 - 1]))
    strict = data.draw(st.booleans())
    _both(bytes(mutated), count, strict, data.draw(st.integers(-1, n + 2)))


@needs_c
def test_c_and_python_agree_on_random_bytes() -> None:
    rnd = random.Random(8)
    for _ in range(3000):
        body = bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(0, 40)))
        _both(body, rnd.randrange(0, 4), rnd.random() < 0.5, rnd.randrange(-1, 5))


@needs_c
def test_c_walk_accepts_every_buffer_kind() -> None:
    body = _body([(b"k", b"v", [], 0)] * 3)
    for buf in (body, bytearray(body), memoryview(body), memoryview(bytearray(b"xx" + body))[2:]):
        assert validator.walk_c(buf, 3, True, 2)[0] == validator.OK


def test_scratch_buffer_grows_while_an_old_view_is_held() -> None:
    """copy=False views point into a per-thread scratch mapping; growing it must not fail on them."""
    small = compression.compress(compression.LZ4, b"a" * 1000)
    held = compression.decompress(compression.LZ4, small, 1 << 20, copy=False)
    assert bytes(held) == b"a" * 1000
    big = compression.compress(compression.ZSTD, b"b" * (9 << 20))
    assert len(compression.decompress(compression.ZSTD, big, 1 << 30)) == 9 << 20  # grows past 1 GiB + 1 virtual
    del held
    assert bytes(compression.decompress(compression.LZ4, small, 1 << 20, copy=False)) == b"a" * 1000


def test_the_c_record_walk_is_built() -> None:
    """`pip install -e .` builds the extension; a silent fallback to the Python walk would cost the
    produce path its speed, so an install without it fails here rather than skipping the C tests."""
    assert validator.walk_c is not None
