"""ListOffsets: earliest, latest, max timestamp, or the first offset at or after a timestamp.

A lookup that reads records (max timestamp) goes through the record validator's checks in
Log.max_timestamp_offset; anything else a damaged log raises here is that partition's error,
never a closed connection.
"""

from __future__ import annotations

import logging
from typing import Any

from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.primitives import DecodeError
from gregor.protocol.schema import Struct
from gregor.server.dispatcher import RequestContext
from gregor.storage.errors import StorageError

log = logging.getLogger("gregor.list_offsets")

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4  # KIP-405 tiered storage: with no remote tier, the same as earliest
LATEST_TIERED = -5  # KIP-1005: nothing is tiered, so the earliest local offset


def _lookup(ctx: RequestContext, topic: str, p: Struct) -> dict[str, Any]:
    part = ctx.broker.replica_manager.get_leader_partition(topic, p.partition_index)
    part.check_leader_epoch(p.get("current_leader_epoch", -1))
    lg = part.log
    ts = p.timestamp
    epoch = part.leader_epoch
    if ts == LATEST:
        return {"timestamp": -1, "offset": lg.high_watermark, "leader_epoch": epoch}
    if ts in (EARLIEST, EARLIEST_LOCAL, LATEST_TIERED):
        return {"timestamp": -1, "offset": lg.log_start_offset, "leader_epoch": epoch}
    if ts == MAX_TIMESTAMP:
        found = lg.max_timestamp_offset()
        if found is None or found.offset >= lg.high_watermark:
            return {"timestamp": -1, "offset": -1, "leader_epoch": -1}
        return {"timestamp": found.timestamp, "offset": found.offset, "leader_epoch": _epoch(found.leader_epoch)}
    if ts < 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {ts}")
    hit = lg.offset_for_timestamp(ts)
    if hit is None or hit.offset >= lg.high_watermark:
        return {"timestamp": -1, "offset": -1, "leader_epoch": -1}
    return {"timestamp": hit.timestamp, "offset": hit.offset, "leader_epoch": _epoch(hit.leader_epoch)}


def _epoch(e: int | None) -> int:
    return -1 if e is None else e


def handle_list_offsets(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition_index, "error_code": ErrorCode.NONE}
            try:
                entry.update(_lookup(ctx, t.name, p))
            except KafkaError as e:
                entry.update({"error_code": e.code, "timestamp": -1, "offset": -1, "leader_epoch": -1})
            except (StorageError, DecodeError, OSError) as e:
                log.warning("ListOffsets of %s-%d failed: %s", t.name, p.partition_index, e)
                code = ErrorCode[e.error] if isinstance(e, StorageError) else (
                    ErrorCode.CORRUPT_MESSAGE if isinstance(e, DecodeError) else ErrorCode.KAFKA_STORAGE_ERROR)
                entry.update({"error_code": code, "timestamp": -1, "offset": -1, "leader_epoch": -1})
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
