"""Metadata: brokers, controller and topic layout, with auto topic creation when allowed."""

from __future__ import annotations

import asyncio
from typing import Any

from gregor.api.context import BrokerServices, RequestContext
from gregor.api.handlers.cluster import client_controller_id
from gregor.metadata.store import TopicMetadata
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.schema import Struct
from gregor.security.acl import AclOperation, ResourceType

_WAITING: set[asyncio.Task[dict[str, Any]]] = set()  # responses waiting for auto-created topics


def topic_entry(t: TopicMetadata, live: frozenset[int] | set[int] | None = None, version: int = 1) -> dict[str, Any]:
    """A topic as Kafka's MetadataCache answers it: every replica and the ISR as stored, the ones on
    brokers not live as offline_replicas; a partition without a live leader LEADER_NOT_AVAILABLE
    (leader -1) with the rest filled in. v0 clients get only live replicas (REPLICA_NOT_AVAILABLE when
    some are missing), as Kafka's errorUnavailableEndpoints. `live` None: every replica counts as live."""
    partitions = []
    for p, s in sorted(t.partitions.items()):
        replicas, isr, offline = s.replicas, s.isr, []
        error, leader = ErrorCode.NONE, s.leader
        if live is not None:
            offline = [b for b in replicas if b not in live]
            if leader not in live:
                error, leader = ErrorCode.LEADER_NOT_AVAILABLE, -1
            if version == 0 and offline:
                replicas = [b for b in replicas if b in live]
                isr = [b for b in isr if b in live]
                if error == ErrorCode.NONE:
                    error = ErrorCode.REPLICA_NOT_AVAILABLE
        partitions.append({
            "error_code": error,
            "partition_index": p,
            "leader_id": leader,
            "leader_epoch": s.leader_epoch,
            "replica_nodes": replicas,
            "isr_nodes": isr,
            "offline_replicas": offline,
        })
    return {
        "error_code": ErrorCode.NONE,
        "name": t.name,
        "topic_id": t.topic_id,
        "is_internal": t.internal,
        "partitions": partitions,
    }


def mark_local_partitions(services: BrokerServices, topics: list[dict[str, Any]]) -> None:
    """This broker's partitions not served yet (logs loading: LEADER_NOT_AVAILABLE) or at all (offline
    logs, a failed log dir: KAFKA_STORAGE_ERROR, this broker among the offline replicas), as Kafka's
    metadata shows a replica in an offline log dir."""
    rm = services.replica_manager
    if not (rm.loading or rm.offline):
        return
    me = services.settings.broker_id
    for entry in topics:
        for part in entry.get("partitions", ()):
            key = (entry["name"], part["partition_index"])
            if key in rm.loading:
                part["error_code"], part["leader_id"] = ErrorCode.LEADER_NOT_AVAILABLE, -1
            elif key in rm.offline:
                part["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                if me not in part["offline_replicas"]:
                    part["offline_replicas"] = [*part["offline_replicas"], me]


def handle_metadata(ctx: RequestContext, req: Struct) -> dict[str, Any] | asyncio.Future[dict[str, Any]]:
    """Answered from the metadata cache at once, or, when topics are to be auto-created, once their
    creation is written and in the cache (one store write for all of them)."""
    services = ctx.services
    cache = services.metadata_cache
    if req.topics is not None and req.allow_auto_topic_creation and services.settings.auto_create_topics_enable:
        missing = list(dict.fromkeys(rt.name for rt in req.topics if rt.name is not None and cache.topic(rt.name) is None))
        if missing and services.authorizer is not None:  # creating needs DESCRIBE and CREATE (cluster or topic)
            may_create_all = ctx.authorize(AclOperation.CREATE, ResourceType.CLUSTER)
            missing = [n for n in missing if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, n)
                       and (may_create_all or ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, n))]
        if missing:
            async def create() -> dict[str, Any]:
                return _answer(ctx, req, await services.auto_create_topics(missing))

            task = asyncio.ensure_future(create())
            _WAITING.add(task)  # the loop holds tasks weakly
            task.add_done_callback(_WAITING.discard)
            return task
    return _answer(ctx, req, {})


def _answer(ctx: RequestContext, req: Struct, created: dict[str, TopicMetadata | KafkaError]) -> dict[str, Any]:
    services = ctx.services
    cache = services.metadata_cache
    topics = cache.topics()
    brokers = cache.brokers()
    live = frozenset(b.broker_id for b in brokers)

    z = services.authorizer
    with_ops = ctx.version >= 8 and req.include_topic_authorized_operations

    def entry(t: TopicMetadata) -> dict[str, Any]:
        e = topic_entry(t, live, ctx.version)
        if with_ops:
            e["topic_authorized_operations"] = ctx.authorized_operations(ResourceType.TOPIC, t.name)
        return e

    def describable(name: str) -> bool:
        return z is None or ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name)

    # v0: an empty list means all topics; v1+: null means all, empty means none.
    if req.topics is None or (ctx.version == 0 and not req.topics):
        out = [entry(t) for t in topics.values() if describable(t.name)]  # the others are not mentioned
    else:
        out = []
        for rt in req.topics:
            name = rt.name
            if name is not None and not describable(name):  # whether or not it exists (Kafka hides existence)
                out.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name, "partitions": []})
                continue
            if name is None and ctx.version >= 12 and rt.topic_id.int:
                # By topic id (v12+, as Kafka): KIP-848 consumers resolve the ids of their assignment this way.
                found = cache.topic_by_id(rt.topic_id)
                if found is not None and not describable(found.name):
                    out.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": None,
                                "topic_id": rt.topic_id, "partitions": []})
                elif found is None:
                    out.append({"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None, "topic_id": rt.topic_id,
                                "partitions": []})
                else:
                    out.append(entry(found))
                continue
            t = topics.get(name) if name is not None else None
            if t is None and name is not None and name in created:
                made = created[name]
                if isinstance(made, KafkaError):
                    out.append({"error_code": made.code, "name": name, "partitions": []})
                    continue
                t = made
            if t is None and z is not None and name is not None and req.allow_auto_topic_creation and \
                    services.settings.auto_create_topics_enable and name not in created:
                out.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name, "partitions": []})
            elif t is None:
                out.append({"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": []})
            else:
                out.append(entry(t))
    mark_local_partitions(services, out)
    body: dict[str, Any] = {
        "throttle_time_ms": 0,
        # Each broker as the client's listener reaches it; brokers without that listener are left out.
        "brokers": [{"node_id": b.broker_id, "host": ep[0], "port": ep[1], "rack": b.rack} for b in brokers
                    if (ep := b.endpoint(ctx.listener.name)) is not None],
        "cluster_id": cache.cluster_id,
        "controller_id": client_controller_id(ctx),
        "topics": out,
    }
    if 8 <= ctx.version <= 10 and req.include_cluster_authorized_operations:
        body["cluster_authorized_operations"] = ctx.authorized_operations(ResourceType.CLUSTER)
    return body
