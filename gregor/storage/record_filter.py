"""Filtering one stored batch for the log cleaner (Kafka's MemoryRecords.filterTo with the cleaner's
RecordFilter): keep a record only if the offset map says its offset is its key's latest, drop
records without a key, drop tombstones past their delete horizon and set the horizon (KIP-534) on a
batch that keeps its first ones; a batch that loses records is re-encoded (same offsets, producer
fields, leader epoch, attributes and codec), an emptied producer's last batch stays as an empty
batch, an untouched batch is kept byte for byte. Pure bytes in and out: compaction.py reads and
writes the segments.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Protocol

from gregor.protocol import compression
from gregor.protocol.records import (
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    compute_crc,
    read_header,
)
from gregor.protocol.validator import ScannedRecord
from gregor.storage.offset_map import OffsetMap

_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_AT = 17
_U32 = struct.Struct(">I")


class FilterCounters(Protocol):
    """What the filter counts (the clean's CleanerStats)."""

    records_read: int
    records_removed: int  # superseded + tombstones + without key
    tombstones_removed: int
    keyless_removed: int
    batches_rewritten: int


@dataclass(slots=True)
class Output:
    """Batches waiting to be appended to the cleaned segment."""

    data: bytearray = field(default_factory=bytearray)
    headers: list[BatchHeader] = field(default_factory=list)


def emit(out: Output, h: BatchHeader, raw: bytes | memoryview) -> None:
    out.data += raw
    out.headers.append(h)


def filter_batch(
    h: BatchHeader,
    raw: memoryview,
    body: memoryview,
    records: list[ScannedRecord],
    offset_map: OffsetMap,
    producers: dict[int, int],
    now: int,
    delete_retention_ms: int,
    out: Output,
    stats: FilterCounters,
) -> int | None:
    """Filter one data batch into `out`. Returns the delete horizon of its kept tombstones, if any."""
    stats.records_read += len(records)
    horizon = h.base_timestamp if h.attributes & DELETE_HORIZON_BIT else None
    base = h.base_offset
    get = offset_map.get
    kept: list[ScannedRecord] = []
    tombstone_kept = False
    for rec in records:
        key = rec.key
        if key is None:
            stats.keyless_removed += 1
            continue
        latest = get(key)
        if latest is not None and latest > base + rec.offset_delta:
            continue  # superseded
        if rec.is_tombstone:
            if horizon is not None and now >= horizon:
                stats.tombstones_removed += 1
                continue
            tombstone_kept = True
        kept.append(rec)
    stats.records_removed += len(records) - len(kept)
    set_horizon = tombstone_kept and horizon is None
    if len(kept) == len(records) and not set_horizon:
        emit(out, h, raw)
        return horizon if tombstone_kept else None
    stats.batches_rewritten += 1
    if not kept:
        if h.producer_id >= 0 and producers.get(h.producer_id) == h.last_offset:
            empty = _empty_batch(h)  # the producer's last batch: keep its sequence numbers
            emit(out, read_header(empty), empty)
        return None
    if set_horizon:
        horizon = now + delete_retention_ms
    batch = _rebuild_batch(h, body, kept, horizon if set_horizon else None)
    emit(out, read_header(batch), batch)
    return horizon if tombstone_kept else None


def _rebuild_batch(h: BatchHeader, body: memoryview, kept: list[ScannedRecord], new_horizon: int | None) -> bytes:
    """A batch of the `kept` records of `h`, same offsets range, producer fields, leader epoch,
    attributes and codec. With `new_horizon`, the base timestamp becomes the delete horizon and
    each record's timestamp delta is rewritten against it, so record timestamps do not change."""
    old_base_ts = h.base_timestamp
    base_ts = old_base_ts if new_horizon is None else new_horizon
    attributes = h.attributes | (DELETE_HORIZON_BIT if new_horizon is not None else 0)
    parts: list[bytes] = []
    max_ts = -1
    for rec in kept:
        ts = old_base_ts + rec.ts_delta
        if ts > max_ts:
            max_ts = ts
        if new_horizon is None:
            parts.append(body[rec.start : rec.end])
        else:
            inner = bytes(body[rec.ts_start - 1 : rec.ts_start]) + _zigzag(ts - base_ts) + bytes(body[rec.ts_end : rec.end])
            parts.append(_zigzag(len(inner)) + inner)
    if h.log_append_time:
        max_ts = h.max_timestamp
    payload = b"".join(parts)
    if h.compression:
        payload = compression.compress(h.compression, payload)
    return _pack_batch(h, attributes, base_ts, max_ts, len(kept), payload)


def _empty_batch(h: BatchHeader) -> bytes:
    """Kafka's empty batch header: same offsets and producer fields, no records, no codec."""
    attributes = h.attributes & (TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT | CONTROL_BIT)
    return _pack_batch(h, attributes, h.max_timestamp, h.max_timestamp, 0, b"")


def _pack_batch(h: BatchHeader, attributes: int, base_ts: int, max_ts: int, count: int, payload: bytes) -> bytes:
    out = bytearray(_BATCH_HEADER.pack(
        h.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload), h.partition_leader_epoch, MAGIC, 0, attributes,
        h.last_offset_delta, base_ts, max_ts, h.producer_id, h.producer_epoch, h.base_sequence, count,
    ))
    out += payload
    _U32.pack_into(out, _CRC_AT, compute_crc(out, 0, len(out)))
    return bytes(out)


def _zigzag(value: int) -> bytes:
    """A zigzag varint (for rewritten timestamp deltas and record lengths)."""
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)
