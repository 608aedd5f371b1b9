"""What the metadata log holds: record batches v2, exactly as on the wire, of two kinds.

Data batches carry the layer above's records, each one a record with no key whose value is the
caller's bytes. Control batches (the control bit set, one record, key = version 0 + control type)
carry the quorum's own records: LeaderChangeMessage at the start of every epoch (the leader, the
voters, and who voted for it: KIP-595), and SnapshotHeaderRecord / SnapshotFooterRecord, which open
and close every snapshot file (KIP-630). Their values are our own definitions of Kafka's data
messages, in the codec's schema language (flexible version 0).

`Batch` is what listeners are handed: a batch's offsets, epoch, append time and records, control
batches included (with their records decoded) so a listener sees every offset it passes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from crc32c import crc32c

from gregor.protocol.primitives import DecodeError
from gregor.protocol.records import HEADER_SIZE, BatchHeader, Record, build_batch, decode_records, iter_headers
from gregor.protocol.schema import INT16, INT32, INT64, UUID, Schema, Struct, f

# Kafka's ControlRecordType ids the quorum writes (0 and 1 are transaction markers).
LEADER_CHANGE = 2
SNAPSHOT_HEADER = 3
SNAPSHOT_FOOTER = 4

_CONTROL_KEY = struct.Struct(">hh")


def _voter() -> list:
    return [f("voter_id", INT32), f("voter_directory_id", UUID, "1+")]


LEADER_CHANGE_MESSAGE = Schema("LeaderChangeMessage", [
    f("version", INT16),
    f("leader_id", INT32),
    f("voters", _voter()),
    f("granting_voters", _voter()),
], "0-1", "0+")

SNAPSHOT_HEADER_RECORD = Schema("SnapshotHeaderRecord", [
    f("version", INT16),
    f("last_contained_log_timestamp", INT64),
], "0", "0+")

SNAPSHOT_FOOTER_RECORD = Schema("SnapshotFooterRecord", [f("version", INT16)], "0", "0+")

_SCHEMAS = {LEADER_CHANGE: LEADER_CHANGE_MESSAGE, SNAPSHOT_HEADER: SNAPSHOT_HEADER_RECORD,
            SNAPSHOT_FOOTER: SNAPSHOT_FOOTER_RECORD}


@dataclass(frozen=True, slots=True)
class ControlRecord:
    type: int  # LEADER_CHANGE, SNAPSHOT_HEADER, SNAPSHOT_FOOTER (or a type this code does not know)
    message: Struct | None  # the decoded value, None for an unknown type


@dataclass(frozen=True, slots=True)
class Batch:
    """One batch of the log (or of a snapshot) as a listener gets it."""

    base_offset: int
    last_offset: int
    epoch: int
    append_time_ms: int
    size_bytes: int
    records: list[bytes] = field(default_factory=list)  # data records' values; empty for a control batch
    control: list[ControlRecord] = field(default_factory=list)

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def is_control(self) -> bool:
        return bool(self.control)


_HEADER = struct.Struct(">qiibIhiqqqhii")  # a batch header, as gregor.protocol.records lays it out
_CRC_FROM = 21  # the CRC covers the header from the attributes on, and the records


def _zigzag(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_SMALL = [_zigzag(i) for i in range(4096)]


def _zz(n: int) -> bytes:
    return _SMALL[n] if 0 <= n < 4096 else _zigzag(n)


_NULL_KEY = _zigzag(-1)


def data_batch(values: Sequence[bytes], base_offset: int, epoch: int, now_ms: int) -> bytes:
    """A batch of the caller's records at `base_offset`, written by the leader of `epoch`: records with no
    key, no headers and the batch's timestamp. Built here rather than by the generic record encoder,
    which costs several times as much per record on the leader's hot path."""
    if not values:
        raise ValueError("a batch needs at least one record")
    parts: list[bytes] = []
    for i, v in enumerate(values):
        rec = b"\x00\x00" + _zz(i) + _NULL_KEY + _zz(len(v)) + v + b"\x00"  # attributes, ts delta, offset delta
        parts.append(_zz(len(rec)))
        parts.append(rec)
    body = b"".join(parts)
    n = len(values)
    out = bytearray(_HEADER.pack(base_offset, HEADER_SIZE - 12 + len(body), epoch, 2, 0, 0, n - 1, now_ms, now_ms,
                                 -1, -1, -1, n))
    out += body
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[_CRC_FROM:]))
    return bytes(out)


def _varint(b: bytes, pos: int) -> tuple[int, int]:
    x = b[pos]
    pos += 1
    if x < 0x80:
        return (x >> 1) ^ -(x & 1), pos
    result, shift = x & 0x7F, 7
    while True:
        x = b[pos]
        pos += 1
        result |= (x & 0x7F) << shift
        if x < 0x80:
            break
        shift += 7
        if shift > 63:
            raise DecodeError("varint too long")
    return (result >> 1) ^ -(result & 1), pos


def _plain_values(body: bytes, count: int) -> list[bytes] | None:
    """The values of uncompressed records without keys or headers (what data_batch writes), or None if a
    record is anything else (the generic decoder then reads it)."""
    out: list[bytes] = []
    pos = 0
    try:
        for _ in range(count):
            length, pos = _varint(body, pos)
            end = pos + length
            pos += 1  # attributes
            _, pos = _varint(body, pos)  # timestamp delta
            _, pos = _varint(body, pos)  # offset delta
            klen, pos = _varint(body, pos)
            if klen != -1:
                return None
            vlen, pos = _varint(body, pos)
            if vlen < 0 or pos + vlen > end:
                return None
            out.append(body[pos:pos + vlen])
            pos += vlen
            headers, pos = _varint(body, pos)
            if headers != 0 or pos != end:
                return None
    except IndexError:
        return None
    return out if pos == len(body) else None


def control_batch(ctype: int, message: dict, base_offset: int, epoch: int, now_ms: int) -> bytes:
    value = _SCHEMAS[ctype].to_bytes(message, 0)
    key = _CONTROL_KEY.pack(0, ctype)
    return build_batch([Record(base_offset, now_ms, key, value)], base_offset=base_offset, control=True,
                       leader_epoch=epoch)


def leader_change_batch(base_offset: int, epoch: int, leader_id: int, voters: Sequence[int],
                        granting: Sequence[int], now_ms: int) -> bytes:
    msg = {"version": 0, "leader_id": leader_id, "voters": [{"voter_id": v} for v in sorted(voters)],
           "granting_voters": [{"voter_id": v} for v in sorted(granting)]}
    return control_batch(LEADER_CHANGE, msg, base_offset, epoch, now_ms)


def snapshot_header_batch(epoch: int, last_contained_log_time_ms: int, now_ms: int) -> bytes:
    return control_batch(SNAPSHOT_HEADER, {"version": 0, "last_contained_log_timestamp": last_contained_log_time_ms},
                         0, epoch, now_ms)


def snapshot_footer_batch(base_offset: int, epoch: int, now_ms: int) -> bytes:
    return control_batch(SNAPSHOT_FOOTER, {"version": 0}, base_offset, epoch, now_ms)


def _control_record(rec: Record) -> ControlRecord:
    if rec.key is None or len(rec.key) < _CONTROL_KEY.size:
        return ControlRecord(-1, None)
    _, ctype = _CONTROL_KEY.unpack_from(rec.key, 0)
    schema = _SCHEMAS.get(ctype)
    if schema is None or rec.value is None:
        return ControlRecord(ctype, None)
    return ControlRecord(ctype, schema.from_bytes(rec.value, 0))


def decode_batch(buf: memoryview | bytes, h: BatchHeader) -> Batch:
    """The batch whose header is `h` (at `h.position` in `buf`). Raises DecodeError if it does not decode."""
    append_time = h.max_timestamp
    if not h.is_control and not h.compression:
        values = _plain_values(bytes(buf[h.position + HEADER_SIZE:h.position + h.size]), h.records_count)
        if values is not None:
            return Batch(h.base_offset, h.last_offset, h.partition_leader_epoch, append_time, h.size, records=values)
    recs = decode_records(buf, h)
    if h.is_control:
        return Batch(h.base_offset, h.last_offset, h.partition_leader_epoch, append_time, h.size,
                     control=[_control_record(r) for r in recs])
    return Batch(h.base_offset, h.last_offset, h.partition_leader_epoch, append_time, h.size,
                 records=[r.value if r.value is not None else b"" for r in recs])


def decode_batches(buf: memoryview | bytes) -> Iterator[Batch]:
    """Every whole batch of a record set, in order."""
    view = memoryview(buf)
    for h in iter_headers(view):
        yield decode_batch(view, h)


def headers_of(buf: memoryview | bytes) -> list[BatchHeader]:
    return list(iter_headers(memoryview(buf)))


def batch_overhead() -> int:
    """Bytes a batch costs beyond its records (its header)."""
    return HEADER_SIZE


def record_overhead(value_len: int) -> int:
    """An upper bound of what one record of `value_len` bytes adds to a batch: length, attributes,
    timestamp and offset deltas, null key, value length and header count as varints."""
    return value_len + 1 + 5 + 10 + 5 + 1 + 5 + 1
