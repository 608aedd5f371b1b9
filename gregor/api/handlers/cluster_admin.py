"""The controller's APIs: ControlledShutdown (7), ElectLeaders (43), AlterPartitionReassignments (45),
ListPartitionReassignments (46). Each is answered by the active controller only (NOT_CONTROLLER
elsewhere: a stopping broker and the admin client send them to the controller named by Metadata);
the work is gregor.controller.controller's."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from gregor.api.context import RequestContext, ResponseBody
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.schema import Struct
from gregor.security.acl import AclOperation, ResourceType

_WAITING: set[asyncio.Task[dict[str, Any]]] = set()  # the loop holds tasks weakly


def _later(coro: Coroutine[Any, Any, dict[str, Any]]) -> asyncio.Future[dict[str, Any]]:
    """A response answered when `coro` is done (the dispatcher keeps the connection's answers in order)."""
    task = asyncio.ensure_future(coro)
    _WAITING.add(task)
    task.add_done_callback(_WAITING.discard)
    return task


def handle_controlled_shutdown(ctx: RequestContext, req: Struct) -> ResponseBody:
    if not ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "remaining_partitions": []}

    async def run() -> dict[str, Any]:
        code, remaining = await ctx.services.controller.handle_controlled_shutdown(
            req.broker_id, req.get("broker_epoch", -1))
        return {"error_code": code,
                "remaining_partitions": [{"topic_name": t, "partition_index": p} for t, p in remaining]}

    return _later(run())


def handle_elect_leaders(ctx: RequestContext, req: Struct) -> ResponseBody:
    wanted = req.topic_partitions
    partitions = None if wanted is None else [(t.topic, p) for t in wanted for p in t.partitions]

    def answer(results: dict[tuple[str, int], tuple[int, str | None]], top: int) -> dict[str, Any]:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (t, p), (code, msg) in results.items():
            by_topic.setdefault(t, []).append({"partition_id": p, "error_code": code, "error_message": msg})
        return {"throttle_time_ms": 0, "error_code": top,
                "replica_election_results": [{"topic": t, "partition_result": rows} for t, rows in by_topic.items()]}

    def refused(e: KafkaError) -> dict[str, Any]:  # every partition gets the error (v0 has no top-level code)
        return answer({tp: (e.code, e.message) for tp in (partitions or [])}, e.code)

    # What needs no election is answered at once: not the controller, no partition that exists.
    ctl, cache = ctx.services.controller, ctx.services.metadata_cache
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER):
        return refused(KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."))
    if not ctl.active:
        return refused(KafkaError(ErrorCode.NOT_CONTROLLER, f"Broker {ctl.broker_id} is not the controller"))
    if partitions is not None and all(cache.partition_state(*tp) is None for tp in partitions):
        return answer({tp: (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                       for tp in partitions}, ErrorCode.NONE)

    async def run() -> dict[str, Any]:
        try:
            results = await ctl.elect_leaders(req.get("election_type", 0), partitions)
        except KafkaError as e:
            return refused(e)
        return answer(results, ErrorCode.NONE)

    return _later(run())


def handle_alter_partition_reassignments(ctx: RequestContext, req: Struct) -> ResponseBody:
    wanted = {t.name: {p.partition_index: (None if p.replicas is None else list(p.replicas))
                       for p in t.partitions} for t in req.topics}
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": "Cluster authorization failed.", "responses": []}

    async def run() -> dict[str, Any]:
        try:
            results = await ctx.services.controller.alter_reassignments(wanted)
        except KafkaError as e:
            return {"throttle_time_ms": 0, "error_code": e.code, "error_message": e.message, "responses": []}
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "responses": [
            {"name": t, "partitions": [{"partition_index": p, "error_code": code, "error_message": msg}
                                       for p, (code, msg) in parts.items()]}
            for t, parts in results.items()]}

    return _later(run())


def handle_list_partition_reassignments(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    wanted = req.get("topics")
    topics = None if wanted is None else {t.name: list(t.partition_indexes) for t in wanted}
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": "Cluster authorization failed.", "topics": []}
    try:
        found = ctx.services.controller.list_reassignments(topics)
    except KafkaError as e:
        return {"throttle_time_ms": 0, "error_code": e.code, "error_message": e.message, "topics": []}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "topics": [
        {"name": t, "partitions": [{"partition_index": p, "replicas": s.replicas, "adding_replicas": s.adding_replicas,
                                    "removing_replicas": s.removing_replicas} for p, s in sorted(parts.items())]}
        for t, parts in found.items()]}
