"""Record batches (magic v2): header parsing, validation, offset patching, and record coding.

The broker treats records as opaque bytes: gregor.protocol.validator checks every produced
batch completely (header, CRC32C, record framing, timestamps, keys), and this module rewrites
base offset / leader epoch (and, for LogAppendTime, the timestamps and CRC) in place. Decoding
individual records is only for tools, tests and internal topics. `validate_record_set` checks
batch headers only (framing, magic, CRC, counts, size) for trusted callers.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from crc32c import crc32c

from gregor.protocol import compression
from gregor.protocol.primitives import DecodeError, Reader, Writer

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # base offset + batch length: the bytes before `batchLength` counts from
MAGIC = 2

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFF_BASE_OFFSET = 0
_OFF_LENGTH = 8
_OFF_LEADER_EPOCH = 12
_OFF_MAGIC = 16
_OFF_CRC = 17
_OFF_ATTRIBUTES = 21
_OFF_MAX_TIMESTAMP = 35
_CRC_START = 21

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")

# Attribute bits.
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1


class InvalidRecordError(DecodeError):
    """A record batch failed validation; `error` names the Kafka error to answer with."""

    def __init__(self, message: str, error: str = "CORRUPT_MESSAGE") -> None:
        super().__init__(message)
        self.error = error


@dataclass(slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int = 0  # where the batch starts in the buffer it was read from

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)


def read_header(buf: memoryview | bytes | bytearray, pos: int = 0) -> BatchHeader:
    """Parse the header at `pos`. Raises DecodeError if fewer than 61 bytes remain."""
    if len(buf) - pos < HEADER_SIZE:
        raise DecodeError("truncated record batch header")
    return BatchHeader(*_HEADER.unpack_from(buf, pos), pos)


def batch_size_at(buf: memoryview | bytes | bytearray, pos: int) -> int | None:
    """Size of the batch at `pos` from its length field, or None if the length is not readable."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    return _I32.unpack_from(buf, pos + _OFF_LENGTH)[0] + LOG_OVERHEAD


def compute_crc(buf: memoryview | bytes | bytearray, pos: int, size: int) -> int:
    view = memoryview(buf)[pos + _CRC_START : pos + size]
    return crc32c(view)


def iter_headers(buf: memoryview | bytes | bytearray) -> Iterator[BatchHeader]:
    """Batch headers in a record set, stopping silently at a partial trailing batch."""
    pos = 0
    n = len(buf)
    while n - pos >= HEADER_SIZE:
        h = read_header(buf, pos)
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > n:
            return
        yield h
        pos += h.size


def validate_record_set(buf: memoryview, max_batch_bytes: int) -> list[BatchHeader]:
    """Check the headers of every batch of a record set: framing, magic, CRC, counts, size. Records
    are not walked: Produce uses gregor.protocol.validator.validate_batches instead.

    Raises InvalidRecordError with the Kafka error name. Returns the parsed headers.
    """
    headers: list[BatchHeader] = []
    pos = 0
    n = len(buf)
    if n == 0:
        raise InvalidRecordError("empty record set", "INVALID_RECORD")
    while pos < n:
        if n - pos < HEADER_SIZE:
            raise InvalidRecordError(f"truncated batch at byte {pos}")
        h = read_header(buf, pos)
        if h.magic != MAGIC:
            # Produce v3+ may only carry magic v2 batches; older magics are INVALID_RECORD, as in Kafka.
            raise InvalidRecordError(f"unsupported record batch magic {h.magic}",
                                     "INVALID_RECORD" if h.magic in (0, 1) else "CORRUPT_MESSAGE")
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > n:
            raise InvalidRecordError(f"batch length {h.batch_length} does not fit the record set")
        if h.size > max_batch_bytes:
            raise InvalidRecordError(
                f"batch of {h.size} bytes exceeds max.message.bytes {max_batch_bytes}", "MESSAGE_TOO_LARGE"
            )
        if compute_crc(buf, pos, h.size) != h.crc:
            raise InvalidRecordError(f"CRC mismatch in batch at byte {pos}")
        if h.records_count <= 0 or h.last_offset_delta != h.records_count - 1:
            raise InvalidRecordError(
                f"batch has {h.records_count} records and last offset delta {h.last_offset_delta}", "INVALID_RECORD"
            )
        if h.compression > compression.ZSTD:
            raise InvalidRecordError(f"unknown compression codec {h.compression}", "UNSUPPORTED_COMPRESSION_TYPE")
        headers.append(h)
        pos += h.size
    return headers


def patch_batch(
    buf: bytearray | memoryview,
    pos: int,
    base_offset: int,
    leader_epoch: int,
    log_append_time_ms: int | None = None,
) -> None:
    """Assign offsets (and leader epoch) in place; with LogAppendTime also rewrite timestamps and CRC.

    Base offset and leader epoch lie outside the CRC's range, so no CRC work is needed unless
    the timestamps change.
    """
    _I64.pack_into(buf, pos + _OFF_BASE_OFFSET, base_offset)
    _I32.pack_into(buf, pos + _OFF_LEADER_EPOCH, leader_epoch)
    if log_append_time_ms is not None:
        attrs = struct.unpack_from(">h", buf, pos + _OFF_ATTRIBUTES)[0] | TIMESTAMP_TYPE_BIT
        struct.pack_into(">h", buf, pos + _OFF_ATTRIBUTES, attrs)
        _I64.pack_into(buf, pos + _OFF_MAX_TIMESTAMP, log_append_time_ms)
        size = _I32.unpack_from(buf, pos + _OFF_LENGTH)[0] + LOG_OVERHEAD
        _U32.pack_into(buf, pos + _OFF_CRC, compute_crc(buf, pos, size))


# --- records inside a batch (for tools, tests, compaction, internal topics) -----------

@dataclass(slots=True)
class Header:
    key: str
    value: bytes | None


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


def _read_varbytes(r: Reader) -> bytes | None:
    n = r.varint()
    if n < 0:
        return None
    return bytes(r.raw(n))


def decode_records(buf: memoryview | bytes, header: BatchHeader | None = None,
                   limit: int = compression.DEFAULT_MAX_DECOMPRESSED_BYTES) -> list[Record]:
    """Decode the records of the batch at the start of `buf` (decompressing at most `limit` bytes).
    Raises DecodeError for anything that does not decode."""
    view = memoryview(buf)
    h = header or read_header(view, 0)
    body = view[h.position + HEADER_SIZE : h.position + h.size]
    if h.compression:
        try:
            body = compression.decompress(h.compression, body, limit)
        except ValueError as e:  # corrupt, or past the default decompression limit
            raise DecodeError(f"cannot decompress the batch at offset {h.base_offset}: {e}") from None
    r = Reader(body)
    out: list[Record] = []
    log_append = h.log_append_time
    for _ in range(h.records_count):
        length = r.varint()
        end = r.pos + length
        if length < 0 or end > r.end:
            raise DecodeError("record length out of range")
        r.int8()  # attributes, unused
        ts_delta = r.varint()
        off_delta = r.varint()
        key = _read_varbytes(r)
        value = _read_varbytes(r)
        n_headers = r.varint()
        if n_headers < 0 or n_headers > r.remaining():
            raise DecodeError("bad header count")
        headers = []
        for _ in range(n_headers):
            klen = r.varint()
            if klen < 0:
                raise DecodeError("null header key")
            hk = str(r.raw(klen), "utf-8", "replace")
            headers.append(Header(hk, _read_varbytes(r)))
        if r.pos != end:
            raise DecodeError("record length does not match its fields")
        ts = h.max_timestamp if log_append else h.base_timestamp + ts_delta
        out.append(Record(h.base_offset + off_delta, ts, key, value, headers))
    return out


def _write_varbytes(w: Writer, v: bytes | None) -> None:
    if v is None:
        w.varint(-1)
    else:
        w.varint(len(v))
        w.buf += v


def build_batch(
    records: list[Record],
    *,
    base_offset: int = 0,
    codec: int = compression.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    leader_epoch: int = -1,
) -> bytes:
    """Encode one batch. Record offsets are taken relative to `base_offset`."""
    if not records:
        raise ValueError("a batch needs at least one record")
    base_ts = min(r.timestamp for r in records)
    max_ts = max(r.timestamp for r in records)
    body = Writer()
    for rec in records:
        w = Writer()
        w.int8(0)
        w.varint(rec.timestamp - base_ts)
        w.varint(rec.offset - base_offset)
        _write_varbytes(w, rec.key)
        _write_varbytes(w, rec.value)
        w.varint(len(rec.headers))
        for hd in rec.headers:
            kb = hd.key.encode()
            w.varint(len(kb))
            w.buf += kb
            _write_varbytes(w, hd.value)
        body.varint(len(w.buf))
        body.buf += w.buf
    payload = bytes(body.buf)
    if codec:
        payload = compression.compress(codec, payload)
    attrs = codec | (TRANSACTIONAL_BIT if transactional else 0) | (CONTROL_BIT if control else 0)
    last_delta = records[-1].offset - base_offset
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    out = bytearray(
        _HEADER.pack(
            base_offset, batch_length, leader_epoch, MAGIC, 0, attrs, last_delta, base_ts, max_ts,
            producer_id, producer_epoch, base_sequence, len(records),
        )
    )
    out += payload
    _U32.pack_into(out, _OFF_CRC, compute_crc(out, 0, len(out)))
    return bytes(out)


def iter_records(buf: memoryview | bytes) -> Iterator[Record]:
    """All records of every complete batch in a record set."""
    view = memoryview(buf)
    for h in iter_headers(view):
        yield from decode_records(view, h)


def recompress_batch(buf: memoryview | bytes, header: BatchHeader, codec: int,
                     limit: int = compression.DEFAULT_MAX_DECOMPRESSED_BYTES) -> bytes:
    """The batch at `header.position` re-encoded with `codec` (a topic's compression.type):
    same records, offsets, timestamps, producer id/epoch/sequence and transactional flag.
    Raises DecodeError if the batch does not decode."""
    records = decode_records(buf, header, limit)
    return build_batch(
        records,
        base_offset=header.base_offset,
        codec=codec,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        transactional=header.is_transactional,
        control=header.is_control,
        leader_epoch=header.partition_leader_epoch,
    )


# --- control records: transaction markers ---------------------------------------------------
# A control batch (CONTROL_BIT, and TRANSACTIONAL_BIT for a marker) holds one record whose key is
# (version int16 = 0, type int16) and, for a transaction marker, whose value is (version int16 = 0,
# coordinator epoch int32). Written only by the transaction coordinator (WriteTxnMarkers), never by
# a client (the validator refuses client control batches).
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class ControlRecord:
    type: int  # CONTROL_ABORT, CONTROL_COMMIT, or a type transactions ignore
    coordinator_epoch: int  # -1 unless a transaction marker

    @property
    def is_txn_marker(self) -> bool:
        return self.type in (CONTROL_ABORT, CONTROL_COMMIT)


def build_marker_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                       timestamp: int, leader_epoch: int = -1) -> bytes:
    """A transaction's end marker for one partition, offsets to be assigned by the append."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    return build_batch([Record(0, timestamp, key, value)], producer_id=producer_id, producer_epoch=producer_epoch,
                       transactional=True, control=True, leader_epoch=leader_epoch)


def read_control_record(buf: memoryview | bytes, header: BatchHeader) -> ControlRecord:
    """The control record of the control batch `header` (at `header.position` in `buf`). Raises
    DecodeError if it has none or its key is not a control key."""
    records = decode_records(buf, header)
    if not records or records[0].key is None or len(records[0].key) < _CONTROL_KEY.size:
        raise DecodeError(f"control batch at offset {header.base_offset} has no control record key")
    _, ctype = _CONTROL_KEY.unpack_from(records[0].key, 0)
    epoch = -1
    v = records[0].value
    if ctype in (CONTROL_ABORT, CONTROL_COMMIT) and v is not None and len(v) >= _MARKER_VALUE.size:
        epoch = _MARKER_VALUE.unpack_from(v, 0)[1]
    return ControlRecord(ctype, epoch)
