"""Fetch: read below the high watermark, honouring size limits; park in purgatory for min bytes.

Fetch sessions (KIP-227) are gregor.server.fetch_session's: `resolve` says what to read and
`filter` what an incremental response carries.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.schema import Struct
from gregor.server import fetch_session
from gregor.server.dispatcher import RequestContext
from gregor.server.purgatory import DelayedOperation
from gregor.storage.errors import OffsetOutOfRangeError, StorageError

READ_COMMITTED = 1


def _partition_error(index: int, code: ErrorCode, hw: int = -1, lso: int = -1, log_start: int = -1) -> dict[str, Any]:
    return {"partition_index": index, "error_code": code, "high_watermark": hw, "last_stable_offset": lso,
            "log_start_offset": log_start, "aborted_transactions": None, "preferred_read_replica": -1,
            "records": b""}


def unique_partitions(req: Struct) -> list[tuple[str, list[Any]]]:
    """The request's partitions with each named once, grouped by topic in request order.

    Kafka reads a full fetch request into an insertion-ordered map keyed by partition, so a
    partition named twice is fetched once, with the last entry's offsets, at the place of the
    first; consecutive partitions of one topic share a topic entry in the response."""
    first: dict[tuple[str, int], Any] = {}
    for t in req.topics:
        for p in t.partitions:
            first[(t.topic, p.partition)] = p
    if len(first) == sum(len(t.partitions) for t in req.topics):
        return [(t.topic, t.partitions) for t in req.topics]  # the usual case: no duplicates
    out: list[tuple[str, list[Any]]] = []
    for (topic, _), p in first.items():
        if out and out[-1][0] == topic:
            out[-1][1].append(p)
        else:
            out.append((topic, [p]))
    return out


def read_partitions(ctx: RequestContext, req: Struct,
                    partitions: list[tuple[str, list[Any]]]) -> tuple[list[dict[str, Any]], int, bool]:
    """Build the response topics. Returns (topics, bytes read, whether any partition errored).

    The response carries at most the least of the request's max_bytes, the broker's
    fetch.max.bytes and the room the connection's queued responses leave; the first batch of
    the first non-empty partition comes whole even when larger (KIP-74), unless this
    connection already has responses waiting to be written to it."""
    rm = ctx.broker.replica_manager
    room, may_exceed = ctx.connection.response_room()
    budget = min(req.max_bytes if ctx.version >= 3 else 2**31 - 1, ctx.broker.config.get("fetch.max.bytes"), room)
    total = 0
    errored = False
    read_committed = req.isolation_level == READ_COMMITTED
    out = []
    for topic, tparts in partitions:
        parts = []
        for p in tparts:
            idx = p.partition
            try:
                part = rm.get_leader_partition(topic, idx)
                part.check_leader_epoch(p.current_leader_epoch)
            except KafkaError as e:
                parts.append(_partition_error(idx, e.code))
                errored = True
                continue
            except (StorageError, OSError) as e:  # its log could not be opened or created
                parts.append(_partition_error(idx, ErrorCode[getattr(e, "error", "KAFKA_STORAGE_ERROR")]))
                errored = True
                continue
            lg = part.log
            hw = lg.high_watermark
            try:
                # The first partition with data may exceed the budget by one batch (KIP-74), so
                # consumers always progress; later ones only fill what is left.
                max_bytes = min(p.partition_max_bytes, max(budget - total, 0))
                data = lg.read(p.fetch_offset, max_bytes, hw, min_one_batch=(total == 0 and may_exceed))
                records = data.records
            except OffsetOutOfRangeError:
                parts.append(_partition_error(idx, ErrorCode.OFFSET_OUT_OF_RANGE, hw, hw, lg.log_start_offset))
                errored = True
                continue
            except StorageError as e:  # e.g. the log closed under a deletion: that partition's error only
                parts.append(_partition_error(idx, ErrorCode[e.error]))
                errored = True
                continue
            total += len(records)
            parts.append({
                "partition_index": idx,
                "error_code": ErrorCode.NONE,
                "high_watermark": hw,
                "last_stable_offset": hw,
                "log_start_offset": lg.log_start_offset,
                "aborted_transactions": [] if read_committed else None,
                "preferred_read_replica": -1,
                "records": records,
            })
        out.append({"topic": topic, "partitions": parts})
    ctx.connection.charge_response(ctx.header.correlation_id, total)
    return out, total, errored


def handle_fetch(ctx: RequestContext, req: Struct) -> dict[str, Any] | asyncio.Future[Any]:
    if req.replica_id >= 0:
        # Follower fetching arrives with replication; a lone broker has no followers.
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER, "session_id": 0, "responses": []}
    session = fetch_session.resolve(fetch_session.cache_for(ctx.broker), req, ctx.version)
    if session.error:
        return {"throttle_time_ms": 0, "error_code": session.error, "session_id": 0, "responses": []}
    partitions = session.read if session.read is not None else unique_partitions(req)
    topics, nbytes, errored = read_partitions(ctx, req, partitions)

    def response(topics_: list[dict[str, Any]]) -> dict[str, Any]:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": session.session_id,
                "responses": session.filter(topics_)}

    if req.max_wait_ms <= 0 or nbytes >= req.min_bytes or errored or not topics:
        return response(topics)
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()
    keys = [(topic, p.partition) for topic, tparts in partitions for p in tparts]
    op = DelayedOperation(fut, keys, req.min_bytes - nbytes,
                          lambda: response(read_partitions(ctx, req, partitions)[0]))
    if not ctx.broker.replica_manager.fetch_purgatory.park(op, req.max_wait_ms):
        return response(topics)
    ctx.connection.uncharge(ctx.header.correlation_id)  # the data read now is dropped; completion reads again
    return fut
