"""Record batches (magic v2): our builder and reader against kafka-python's, every codec.

The broker only reads batch headers, checks CRCs and patches offsets; whole-record
decoding is for tools and internal topics. Both halves are checked against kafka-python's
independent implementation, including the xerial-framed snappy that kafka-python and the
Java client produce (librdkafka sends raw snappy).
"""

from __future__ import annotations

import struct

import pytest
from kafka.codec import snappy_encode
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from gregor.protocol import compression
from gregor.protocol.records import (
    CONTROL_BIT,
    HEADER_SIZE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    Header,
    InvalidRecordError,
    Record,
    batch_size_at,
    build_batch,
    compute_crc,
    decode_records,
    iter_headers,
    iter_records,
    patch_batch,
    read_header,
    validate_record_set,
)

CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]
CODEC_IDS = [compression.NAMES[c] for c in CODECS]
BASE_TS = 1_732_000_000_000


def _records(base_offset: int = 0, n: int = 50) -> list[Record]:
    return [
        Record(
            base_offset + i,
            BASE_TS + (i * 7919) % 5000,
            None if i % 5 == 0 else f"key-{i}".encode(),
            None if i % 11 == 3 else (b"value-%d " % i) * (i % 13),
            [Header("trace", b"%d" % i), Header("empty", None)] if i % 3 == 0 else [],
        )
        for i in range(n)
    ]


def _as_tuples(recs: list[Record]) -> list[tuple[object, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers]) for r in recs]


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_build_and_decode_round_trip(codec: int) -> None:
    recs = _records(base_offset=1000)
    batch = build_batch(recs, base_offset=1000, codec=codec, producer_id=42, producer_epoch=3, base_sequence=17)
    (h,) = validate_record_set(memoryview(batch), 1 << 20)
    assert (h.base_offset, h.records_count, h.last_offset_delta, h.compression) == (1000, 50, 49, codec)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.magic) == (42, 3, 17, 2)
    assert h.base_timestamp == min(r.timestamp for r in recs) and h.max_timestamp == max(r.timestamp for r in recs)
    assert h.size == len(batch) == batch_size_at(batch, 0)
    assert _as_tuples(decode_records(batch)) == _as_tuples(recs)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_kafka_python_reads_our_batches(codec: int) -> None:
    recs = _records(base_offset=7)
    batch = build_batch(recs, base_offset=7, codec=codec, transactional=True, producer_id=9, producer_epoch=1,
                        base_sequence=0)
    theirs = DefaultRecordBatch(bytearray(batch))
    assert theirs.validate_crc()
    assert theirs.is_transactional and theirs.compression_type == codec
    got = [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]) for r in theirs]
    assert got == _as_tuples(recs)


def _kp_batch(codec: int, recs: list[Record], base_offset: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                       producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for r in recs:
        builder.append(r.offset - base_offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers])
    return bytes(builder.build())


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_we_read_kafka_python_batches(codec: int) -> None:
    """kafka-python frames snappy the xerial way, so this also covers xerial decoding."""
    recs = _records()
    batch = _kp_batch(codec, recs)
    (h,) = validate_record_set(memoryview(batch), 1 << 20)
    assert h.compression == codec
    assert _as_tuples(decode_records(batch)) == _as_tuples(recs)


@pytest.mark.parametrize("block", [16, 1024, 32768])
def test_xerial_snappy_blocks(block: int) -> None:
    payload = bytes(range(256)) * 300 + b"tail"
    framed = snappy_encode(payload, xerial_compatible=True, xerial_blocksize=block)
    assert framed[:8] == b"\x82SNAPPY\x00"
    assert compression.decompress(compression.SNAPPY, framed) == payload
    assert compression.decompress(compression.SNAPPY, memoryview(framed)) == payload
    raw = snappy_encode(payload, xerial_compatible=False)
    assert compression.decompress(compression.SNAPPY, raw) == payload


def test_record_set_of_several_batches() -> None:
    b1 = build_batch(_records(0, 3), base_offset=0)
    b2 = build_batch(_records(3, 4), base_offset=3, codec=compression.GZIP)
    headers = validate_record_set(memoryview(b1 + b2), 1 << 20)
    assert [h.position for h in headers] == [0, len(b1)]
    assert [r.offset for r in iter_records(b1 + b2)] == list(range(7))
    # A partial trailing batch (as a fetch may return) is ignored by the iterators.
    assert [h.base_offset for h in iter_headers(b1 + b2[:-1])] == [0]


def test_patch_batch_assigns_offsets_without_touching_the_crc() -> None:
    batch = bytearray(build_batch(_records(0, 5), base_offset=0, codec=compression.LZ4))
    crc = read_header(batch).crc
    patch_batch(batch, 0, base_offset=123_456, leader_epoch=9)
    h = read_header(batch)
    assert (h.base_offset, h.partition_leader_epoch, h.crc) == (123_456, 9, crc)
    assert compute_crc(batch, 0, h.size) == h.crc  # offsets and epoch lie outside the CRC
    assert [r.offset for r in decode_records(batch)] == list(range(123_456, 123_461))
    theirs = DefaultRecordBatch(bytearray(batch))
    assert theirs.validate_crc() and theirs.base_offset == 123_456 and theirs.leader_epoch == 9


def test_patch_batch_log_append_time_rewrites_timestamps_and_crc() -> None:
    batch = bytearray(build_batch(_records(0, 5), base_offset=0))
    patch_batch(batch, 0, base_offset=10, leader_epoch=1, log_append_time_ms=BASE_TS + 99_999)
    (h,) = validate_record_set(memoryview(batch), 1 << 20)
    assert h.log_append_time and h.attributes & TIMESTAMP_TYPE_BIT
    assert h.max_timestamp == BASE_TS + 99_999
    assert {r.timestamp for r in decode_records(batch)} == {BASE_TS + 99_999}
    theirs = DefaultRecordBatch(bytearray(batch))
    assert theirs.validate_crc() and theirs.timestamp_type == 1
    assert {r.timestamp for r in theirs} == {BASE_TS + 99_999}


def test_patch_batch_in_the_middle_of_a_record_set() -> None:
    b1 = build_batch(_records(0, 2), base_offset=0)
    buf = bytearray(b1 + build_batch(_records(0, 3), base_offset=0))
    patch_batch(buf, len(b1), base_offset=2, leader_epoch=0, log_append_time_ms=1)
    headers = validate_record_set(memoryview(buf), 1 << 20)
    assert [h.base_offset for h in headers] == [0, 2] and not headers[0].log_append_time


def test_flags() -> None:
    batch = build_batch(_records(0, 1), transactional=True, control=True)
    h = read_header(batch)
    assert h.is_transactional and h.is_control
    assert h.attributes & (TRANSACTIONAL_BIT | CONTROL_BIT) == TRANSACTIONAL_BIT | CONTROL_BIT


# --- validation errors --------------------------------------------------------------------

def _error(buf: bytes | bytearray, max_bytes: int = 1 << 20) -> str:
    with pytest.raises(InvalidRecordError) as info:
        validate_record_set(memoryview(buf), max_bytes)
    return info.value.error


def test_bad_crc_is_corrupt_message() -> None:
    batch = bytearray(build_batch(_records(0, 3)))
    batch[-1] ^= 0xFF
    assert _error(batch) == "CORRUPT_MESSAGE"
    batch = bytearray(build_batch(_records(0, 3)))
    batch[HEADER_SIZE - 1] ^= 0x01  # records count: inside the CRC's range too
    assert _error(batch) == "CORRUPT_MESSAGE"


def test_oversized_batch_is_message_too_large() -> None:
    batch = build_batch(_records(0, 20))
    assert _error(batch, max_bytes=len(batch) - 1) == "MESSAGE_TOO_LARGE"
    assert validate_record_set(memoryview(batch), len(batch))  # exactly at the limit is fine


def test_truncated_or_inconsistent_framing_is_corrupt_message() -> None:
    batch = build_batch(_records(0, 3))
    assert _error(batch[:-1]) == "CORRUPT_MESSAGE"
    assert _error(batch[:30]) == "CORRUPT_MESSAGE"
    bad_len = bytearray(batch)
    struct.pack_into(">i", bad_len, 8, 10)  # shorter than a batch header
    assert _error(bad_len) == "CORRUPT_MESSAGE"


def test_empty_record_set_is_invalid_record() -> None:
    assert _error(b"") == "INVALID_RECORD"


def test_unknown_magic_is_corrupt_message() -> None:
    batch = bytearray(build_batch(_records(0, 2)))
    batch[16] = 7
    assert _error(batch) == "CORRUPT_MESSAGE"


def test_old_magic_is_invalid_record_as_in_kafka() -> None:
    batch = bytearray(build_batch(_records(0, 2)))
    batch[16] = 1
    assert _error(batch) == "INVALID_RECORD"


def test_old_magic_is_rejected() -> None:
    for magic in (0, 1):
        batch = bytearray(build_batch(_records(0, 2)))
        batch[16] = magic
        with pytest.raises(InvalidRecordError):
            validate_record_set(memoryview(batch), 1 << 20)


def test_count_and_offset_delta_disagreeing_is_rejected() -> None:
    batch = bytearray(build_batch(_records(0, 3)))
    struct.pack_into(">i", batch, 23, 0)  # last offset delta 0 for 3 records
    struct.pack_into(">I", batch, 17, compute_crc(batch, 0, len(batch)))
    assert _error(batch) == "INVALID_RECORD"


def test_unknown_codec_is_unsupported_compression_type() -> None:
    batch = bytearray(build_batch(_records(0, 2)))
    struct.pack_into(">h", batch, 21, 6)
    struct.pack_into(">I", batch, 17, compute_crc(batch, 0, len(batch)))
    assert _error(batch) == "UNSUPPORTED_COMPRESSION_TYPE"


def test_lz4_frames_use_independent_blocks() -> None:
    """Kafka's Lz4BlockInputStream only reads frames whose FLG byte has the block-independence bit set."""
    frame = compression.compress(compression.LZ4, b"payload " * 20_000)
    assert frame[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic, little endian
    flg = frame[4]
    assert flg >> 6 == 1  # frame format version 01
    assert flg & 0x20, "block independence flag not set"
