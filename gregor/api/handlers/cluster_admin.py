"""The controller's APIs: ControlledShutdown (7), ElectLeaders (43), AlterPartitionReassignments (45),
ListPartitionReassignments (46); the work is gregor.controller.controller's.

A broker authorizes each request; the active controller answers it. In ZooKeeper mode a broker that is
not the controller answers NOT_CONTROLLER (a stopping broker and the admin client send them to the
controller Metadata names). In KRaft mode the active controller may be a controller-only node that
clients cannot reach, so a broker that is not it forwards ElectLeaders and the reassignment requests
whole, in an Envelope (gregor.api.forwarding), and the controller runs the same `elect_leaders`,
`alter_reassignments` and `list_reassignments` below on its Controller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from gregor.api.context import RequestContext, ResponseBody
from gregor.controller.controller import Controller
from gregor.metadata.cache import MetadataCache
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.schema import Struct
from gregor.security.acl import AclOperation, ResourceType

_WAITING: set[asyncio.Task[dict[str, Any]]] = set()  # the loop holds tasks weakly

# One of the controller's APIs, run on an active (or not) Controller: the response body.
ControllerOp = Callable[[Controller, MetadataCache, Struct], Awaitable[dict[str, Any]]]


def _later(coro: Coroutine[Any, Any, dict[str, Any]]) -> asyncio.Future[dict[str, Any]]:
    """A response answered when `coro` is done (the dispatcher keeps the connection's answers in order)."""
    task = asyncio.ensure_future(coro)
    _WAITING.add(task)
    task.add_done_callback(_WAITING.discard)
    return task


def _at_controller(ctx: RequestContext, req: Struct, op: ControllerOp,
                   refused: Callable[[KafkaError], dict[str, Any]]) -> ResponseBody:
    """Run `op` here when this broker's controller is active or the cluster has no forwarding (ZooKeeper
    mode: `op` answers NOT_CONTROLLER); else forward the request to the active controller."""
    services = ctx.services
    forward = services.forward_to_controller
    if forward is None or services.controller.active:
        return _later(op(services.controller, services.metadata_cache, req))

    async def forwarded() -> dict[str, Any]:
        try:
            return await forward(ctx, req)
        except KafkaError as e:
            return refused(e)

    return _later(forwarded())


def handle_controlled_shutdown(ctx: RequestContext, req: Struct) -> ResponseBody:
    if not ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "remaining_partitions": []}

    async def run() -> dict[str, Any]:
        code, remaining = await ctx.services.controller.handle_controlled_shutdown(
            req.broker_id, req.get("broker_epoch", -1))
        return {"error_code": code,
                "remaining_partitions": [{"topic_name": t, "partition_index": p} for t, p in remaining]}

    return _later(run())


# --- ElectLeaders ---------------------------------------------------------------------------------------------
def _wanted_partitions(req: Struct) -> list[tuple[str, int]] | None:
    wanted = req.topic_partitions
    return None if wanted is None else [(t.topic, p) for t in wanted for p in t.partitions]


def _election_answer(results: dict[tuple[str, int], tuple[int, str | None]], top: int) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (t, p), (code, msg) in results.items():
        by_topic.setdefault(t, []).append({"partition_id": p, "error_code": code, "error_message": msg})
    return {"throttle_time_ms": 0, "error_code": top,
            "replica_election_results": [{"topic": t, "partition_result": rows} for t, rows in by_topic.items()]}


def _election_refused(req: Struct, e: KafkaError) -> dict[str, Any]:
    """Every partition gets the error (v0 has no top-level code)."""
    return _election_answer({tp: (e.code, e.message) for tp in (_wanted_partitions(req) or [])}, e.code)


async def elect_leaders(ctl: Controller, cache: MetadataCache, req: Struct) -> dict[str, Any]:
    """ElectLeaders on this controller, once authorized."""
    partitions = _wanted_partitions(req)
    if not ctl.active:
        return _election_refused(req, KafkaError(ErrorCode.NOT_CONTROLLER, f"Broker {ctl.broker_id} is not the "
                                                 "controller"))
    if partitions is not None and all(cache.partition_state(*tp) is None for tp in partitions):
        return _election_answer({tp: (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                                 for tp in partitions}, ErrorCode.NONE)
    try:
        results = await ctl.elect_leaders(req.get("election_type", 0), partitions)
    except KafkaError as e:
        return _election_refused(req, e)
    return _election_answer(results, ErrorCode.NONE)


def handle_elect_leaders(ctx: RequestContext, req: Struct) -> ResponseBody:
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER):
        return _election_refused(req, KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                 "Cluster authorization failed."))
    return _at_controller(ctx, req, elect_leaders, lambda e: _election_refused(req, e))


# --- AlterPartitionReassignments ------------------------------------------------------------------------------
def _reassign_refused(e: KafkaError) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": e.code, "error_message": e.message, "responses": []}


async def alter_reassignments(ctl: Controller, cache: MetadataCache, req: Struct) -> dict[str, Any]:
    """AlterPartitionReassignments on this controller, once authorized."""
    wanted = {t.name: {p.partition_index: (None if p.replicas is None else list(p.replicas))
                       for p in t.partitions} for t in req.topics}
    try:
        results = await ctl.alter_reassignments(wanted)
    except KafkaError as e:
        return _reassign_refused(e)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "responses": [
        {"name": t, "partitions": [{"partition_index": p, "error_code": code, "error_message": msg}
                                   for p, (code, msg) in parts.items()]}
        for t, parts in results.items()]}


def handle_alter_partition_reassignments(ctx: RequestContext, req: Struct) -> ResponseBody:
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER):
        return _reassign_refused(KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."))
    return _at_controller(ctx, req, alter_reassignments, _reassign_refused)


# --- ListPartitionReassignments -------------------------------------------------------------------------------
def _list_refused(e: KafkaError) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": e.code, "error_message": e.message, "topics": []}


async def list_reassignments(ctl: Controller, cache: MetadataCache, req: Struct) -> dict[str, Any]:
    """ListPartitionReassignments on this controller, once authorized."""
    wanted = req.get("topics")
    topics = None if wanted is None else {t.name: list(t.partition_indexes) for t in wanted}
    try:
        found = ctl.list_reassignments(topics)
    except KafkaError as e:
        return _list_refused(e)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "topics": [
        {"name": t, "partitions": [{"partition_index": p, "replicas": s.replicas, "adding_replicas": s.adding_replicas,
                                    "removing_replicas": s.removing_replicas} for p, s in sorted(parts.items())]}
        for t, parts in found.items()]}


def handle_list_partition_reassignments(ctx: RequestContext, req: Struct) -> ResponseBody:
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return _list_refused(KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."))
    return _at_controller(ctx, req, list_reassignments, _list_refused)
