"""Fetch: consumers and followers read through the ReplicaManager, parked there for min bytes.

Fetch sessions (KIP-227) are gregor.api.fetch_session's: `resolve` says what to read and
`filter` what an incremental response carries.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gregor.api import fetch_session, throttling
from gregor.api.context import RequestContext
from gregor.protocol.errors import ErrorCode
from gregor.protocol.schema import Struct
from gregor.replication.partition import READ_COMMITTED, ReadResult
from gregor.replication.replica_manager import FetchParams, FetchPartition
from gregor.security.acl import AclOperation, ResourceType


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


def handle_fetch(ctx: RequestContext, req: Struct) -> dict[str, Any] | asyncio.Future[Any]:
    """Consumers (replica_id -1) read below the HW; followers (replica_id >= 0) up to the LEO, which
    records their position. The ReplicaManager reads and parks; this only translates.

    The response carries at most the least of the request's max_bytes, the broker's fetch.max.bytes
    and the room the connection's queued responses leave; the first batch of the first non-empty
    partition comes whole even when larger (KIP-74), unless this connection already has responses
    waiting to be written to it."""
    conn = ctx.connection
    fetch_max = ctx.services.settings.fetch_max_bytes
    req_max = req.max_bytes if ctx.version >= 3 else 2**31 - 1
    quota = ctx.services.quotas.enabled and req.replica_id < 0  # consumer_byte_rate (followers are exempt)
    if quota:  # a response carries at most what the quota window allows (Kafka's getMaxValueInQuotaWindow)
        window = throttling.fetch_window_bytes(ctx)
        if window is None:
            quota = False
        else:
            fetch_max = min(fetch_max, window)

    def limits() -> tuple[int, bool]:
        room, may_exceed = conn.response_room()
        return min(req_max, fetch_max, room), may_exceed

    session = fetch_session.resolve(ctx.services.fetch_sessions, req, ctx.version,
                                    privileged=req.replica_id >= 0)
    if session.error:
        return {"throttle_time_ms": 0, "error_code": session.error, "session_id": 0, "responses": []}
    grouped = session.read if session.read is not None else unique_partitions(req)
    denied: set[str] = set()
    if ctx.services.authorizer is not None:  # a follower needs CLUSTER_ACTION, a consumer READ on each topic
        if req.replica_id >= 0:
            if not ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
                denied = {topic for topic, _ in grouped}
        else:
            denied = {topic for topic, _ in grouped if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic)}
    requests = [FetchPartition(topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                               p.current_leader_epoch, p.last_fetched_epoch)
                for topic, tparts in grouped if topic not in denied for p in tparts]
    client_rack = req.rack_id if ctx.version >= 11 and req.replica_id < 0 else None
    params = FetchParams(req.replica_id, req.max_wait_ms, req.min_bytes, req.isolation_level, limits, client_rack)
    read_committed = req.isolation_level == READ_COMMITTED
    correlation_id = ctx.header.correlation_id
    metrics = ctx.services.metrics if req.replica_id < 0 else None  # BytesOutPerSec: consumers' reads

    def respond(results: list[ReadResult]) -> dict[str, Any]:
        topics = []
        it = iter(results)
        total = 0
        for topic, tparts in grouped:
            parts = []
            if topic in denied:
                topics.append({"topic": topic, "partitions": [
                    {"partition_index": p.partition, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                     "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                     "aborted_transactions": None, "preferred_read_replica": -1, "records": b""}
                    for p in tparts]})
                continue
            before = total
            for p in tparts:
                r = next(it)
                total += len(r.records)
                entry = {
                    "partition_index": p.partition, "error_code": r.error, "high_watermark": r.high_watermark,
                    "last_stable_offset": r.last_stable_offset, "log_start_offset": r.log_start_offset,
                    "aborted_transactions": _aborted(r) if read_committed and r.error == ErrorCode.NONE else None,
                    "preferred_read_replica": r.preferred_read_replica, "records": r.records,
                }
                if r.diverging_epoch is not None:
                    entry["diverging_epoch"] = {"epoch": r.diverging_epoch[0], "end_offset": r.diverging_epoch[1]}
                parts.append(entry)
            topics.append({"topic": topic, "partitions": parts})
            if metrics is not None and total > before:
                metrics.record_fetch(topic, total - before)
        if quota:
            throttle_ms = throttling.record_fetch(ctx, total)
            if throttle_ms:  # over the quota: an empty answer, as Kafka's (the client fetches the same again);
                # a full fetch is answered without a session, as Kafka creates none for a throttled one
                return {"throttle_time_ms": throttle_ms, "error_code": ErrorCode.NONE,
                        "session_id": session.session_id if session.incremental else 0, "responses": []}
        conn.charge_response(correlation_id, total)
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": session.session_id,
                "responses": session.filter(topics)}

    return ctx.services.replica_manager.fetch_messages(params, requests, respond)


def _aborted(r: ReadResult) -> list[dict[str, int]]:
    return [{"producer_id": a.producer_id, "first_offset": a.first_offset} for a in r.aborted or ()]
