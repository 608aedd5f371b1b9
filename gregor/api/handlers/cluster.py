"""DescribeCluster: the admin client's view of brokers, controller and cluster id."""

from __future__ import annotations

import asyncio
from typing import Any

from gregor.api.context import RequestContext
from gregor.network.connection import ResponseBody
from gregor.protocol.errors import ErrorCode
from gregor.protocol.schema import Struct
from gregor.security.acl import AUTHORIZED_OPERATIONS_OMITTED, AclOperation, ResourceType

BROKER_ENDPOINT = 1
_WAITING: set[asyncio.Future[dict[str, Any]]] = set()  # DescribeQuorum answers under way


def client_controller_id(ctx: RequestContext) -> int:
    """The controller clients are told of (Metadata, DescribeCluster): the cache's. In KRaft mode, when that
    is no broker a client can reach (a controller-only node, or none while the quorum has no leader), this
    broker instead, as Kafka's KRaft brokers name a live broker: it forwards the controller's APIs to the
    active controller (gregor.api.forwarding), or answers with the error rather than keep a client waiting."""
    cache = ctx.services.metadata_cache
    cid = cache.controller_id
    if ctx.services.describe_quorum is not None and (cid < 0 or cache.broker(cid) is None):
        return ctx.services.settings.broker_id
    return cid


def handle_describe_cluster(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    cache = ctx.services.metadata_cache
    endpoint_type = req.get("endpoint_type", BROKER_ENDPOINT)
    if endpoint_type != BROKER_ENDPOINT:
        return {
            "error_code": ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            "error_message": "Only broker endpoints can be described",
            "endpoint_type": endpoint_type,
            "cluster_id": cache.cluster_id,
            "controller_id": -1,
            "brokers": [],
        }
    ops = AUTHORIZED_OPERATIONS_OMITTED
    if req.include_cluster_authorized_operations:  # KIP-430: 0 without DESCRIBE on the cluster, as Kafka
        ops = ctx.authorized_operations(ResourceType.CLUSTER) \
            if ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER) else 0
    return {
        "throttle_time_ms": 0,
        "cluster_authorized_operations": ops,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "endpoint_type": BROKER_ENDPOINT,
        "cluster_id": cache.cluster_id,
        "controller_id": client_controller_id(ctx),
        "brokers": [
            {"broker_id": b.broker_id, "host": ep[0], "port": ep[1], "rack": b.rack, "is_fenced": False}
            for b in cache.brokers() if (ep := b.endpoint(ctx.listener.name)) is not None
        ],
    }


def handle_describe_quorum(ctx: RequestContext, req: Struct) -> ResponseBody:
    """KRaft mode: the metadata quorum as its leader describes it (the broker asks the leader, as Kafka's brokers
    forward DescribeQuorum to the controllers). Needs DESCRIBE on the cluster."""
    def error(code: int, message: str) -> dict[str, Any]:
        return {"error_code": code, "error_message": message, "topics": [], "nodes": []}

    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "DESCRIBE on the cluster is needed")
    describe = ctx.services.describe_quorum
    if describe is None:  # not advertised outside KRaft mode; a client sending it anyway gets a clear answer
        return error(ErrorCode.UNSUPPORTED_VERSION, "this broker does not run in KRaft mode")

    async def run() -> dict[str, Any]:
        try:
            return await describe(ctx.version, req)
        except Exception as e:  # no leader reachable in time: the quorum may have lost its majority
            return error(ErrorCode.REQUEST_TIMED_OUT, f"the metadata quorum's leader did not answer: {e}")

    task = asyncio.ensure_future(run())
    _WAITING.add(task)
    task.add_done_callback(_WAITING.discard)
    return task
