"""Consumer group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, OffsetDelete, and the
KIP-848 ones, ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Translation only: the rules live in gregor.coordinator.group. Delayed answers (join and
sync wait for the rest of the group) come back as futures that resolve to responses.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

from gregor.api.context import RequestContext, ResponseBody
from gregor.api.handlers.transactions import find_txn_coordinator
from gregor.coordinator.group.consumer_protocol import HeartbeatRequest
from gregor.coordinator.group.coordinator import OFFSETS_TOPIC, GroupCoordinator, JoinResult, SyncResult
from gregor.coordinator.group.group_configs import store_name
from gregor.coordinator.group.state import STABLE
from gregor.futures import after, then
from gregor.metadata.store import SetEntityConfigs
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.schema import Struct
from gregor.security.acl import AclOperation, ResourceType

log = logging.getLogger("gregor.groups")

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1

GROUP_DENIED = "Not authorized to access group: {}"


def _group_allowed(ctx: RequestContext, op: AclOperation, group_id: str) -> bool:
    return ctx.authorize(op, ResourceType.GROUP, group_id)


def _after_offsets_topic(handler: Callable[[RequestContext, Struct], Any]) -> Callable[[RequestContext, Struct], Any]:
    """A group handler that runs once __consumer_offsets exists: the topic is created on the first group
    request, as Kafka does, in the background (its metadata write is off the loop), and the request waits
    for that creation rather than failing with COORDINATOR_NOT_AVAILABLE."""

    @functools.wraps(handler)
    def run(ctx: RequestContext, req: Struct) -> ResponseBody | None:
        return after(ctx.services.coordinators.offsets_topic_creation(), lambda: handler(ctx, req))

    return run


def _coordinator(ctx: RequestContext, group_id: str | None = None) -> GroupCoordinator:
    """The group coordinator, creating __consumer_offsets on first use as Kafka does. With a group id:
    NOT_COORDINATOR unless this broker leads the group's partition (clients then find the coordinator
    again: in a cluster it is the leader of that __consumer_offsets partition)."""
    gc = ctx.services.coordinators.group_coordinator_ready()
    if group_id is not None and not gc.is_local(group_id):
        raise KafkaError(ErrorCode.NOT_COORDINATOR, f"broker {ctx.services.settings.broker_id} is not the coordinator "
                         f"of group {group_id!r}")
    return gc


def handle_find_coordinator(ctx: RequestContext, req: Struct) -> ResponseBody:
    """Answered once __consumer_offsets (groups) or __transaction_state (transactions) exists: its first
    creation is waited for, not failed."""
    if req.key_type == KEY_TYPE_TRANSACTION:
        return after(ctx.services.coordinators.txn_topic_creation(), lambda: _find_coordinator(ctx, req))
    if req.key_type != KEY_TYPE_GROUP:
        return _find_coordinator(ctx, req)
    return _after_offsets_topic(_find_coordinator)(ctx, req)


def _find_coordinator(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    keys = list(req.coordinator_keys) if ctx.version >= 4 else [req.key]
    services = ctx.services
    me = services.metadata_cache.broker(services.settings.broker_id)
    entries = []
    for key in keys:
        entry: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1,
                                 "error_code": ErrorCode.NONE, "error_message": None}
        if req.key_type == KEY_TYPE_TRANSACTION and not ctx.authorize(
                AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            entry["error_code"] = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            entry["error_message"] = "Transactional Id authorization failed."
        elif req.key_type == KEY_TYPE_GROUP and not _group_allowed(ctx, AclOperation.DESCRIBE, key):
            entry["error_code"] = ErrorCode.GROUP_AUTHORIZATION_FAILED
            entry["error_message"] = "Group authorization failed."
        elif req.key_type == KEY_TYPE_TRANSACTION:
            try:
                if me is None:
                    raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the broker is starting")
                node, host, port = find_txn_coordinator(ctx, key)
                entry.update({"node_id": node, "host": host, "port": port})
            except KafkaError as e:
                entry["error_code"] = e.code
                entry["error_message"] = e.message
        elif req.key_type != KEY_TYPE_GROUP:
            entry["error_code"] = ErrorCode.INVALID_REQUEST
            entry["error_message"] = f"Unknown coordinator key type {req.key_type}"
        else:
            try:
                if me is None:  # not in the metadata yet (the first moments of start): clients retry
                    raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the broker is starting")
                gc = _coordinator(ctx)
                # The coordinator is the leader of the group's __consumer_offsets partition.
                p = gc.partition_for(key)
                state = services.metadata_cache.partition_state(OFFSETS_TOPIC, p)
                leader = services.metadata_cache.broker(state.leader) if state is not None else None
                ep = leader.endpoint(ctx.listener.name) if leader is not None else None
                if leader is None or ep is None:
                    raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                     f"{OFFSETS_TOPIC}-{p} has no live leader on listener {ctx.listener.name}")
                entry.update({"node_id": leader.broker_id, "host": ep[0], "port": ep[1]})
            except KafkaError as e:
                entry["error_code"] = e.code
                entry["error_message"] = e.message
        entries.append(entry)
    if ctx.version >= 4:
        return {"throttle_time_ms": 0, "coordinators": entries}
    e = entries[0]
    return {"throttle_time_ms": 0, "error_code": e["error_code"], "error_message": e["error_message"],
            "node_id": e["node_id"], "host": e["host"], "port": e["port"]}


def _client_host(ctx: RequestContext) -> str:
    return "/" + ctx.connection.peer.rsplit(":", 1)[0]


@_after_offsets_topic
def handle_join_group(ctx: RequestContext, req: Struct) -> ResponseBody:
    try:
        if not _group_allowed(ctx, AclOperation.READ, req.group_id):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        gc = _coordinator(ctx, req.group_id)
    except KafkaError as e:  # before v7 the protocol name is not nullable: "" stands for none, as below
        return {"error_code": e.code, "generation_id": -1, "protocol_name": None if ctx.version >= 7 else "",
                "leader": "", "member_id": req.member_id, "members": []}
    result = gc.join_group(
        req.group_id, req.member_id, req.group_instance_id, ctx.header.client_id or "", _client_host(ctx),
        req.session_timeout_ms, req.rebalance_timeout_ms, req.protocol_type,
        [(p.name, p.metadata) for p in req.protocols], require_known_member_id=ctx.version >= 4)

    def build(r: JoinResult) -> dict[str, Any]:
        return {
            "throttle_time_ms": 0,
            "error_code": r.error,
            "generation_id": r.generation_id,
            "protocol_type": r.protocol_type,
            # Before v7 the name is not nullable: "" stands for none.
            "protocol_name": r.protocol_name if (r.protocol_name is not None or ctx.version >= 7) else "",
            "leader": r.leader,
            "member_id": r.member_id,
            "members": [{"member_id": m, "group_instance_id": i, "metadata": md} for m, i, md in (r.members or [])],
        }

    return then(result, build)


@_after_offsets_topic
def handle_sync_group(ctx: RequestContext, req: Struct) -> ResponseBody:
    try:
        if not _group_allowed(ctx, AclOperation.READ, req.group_id):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        gc = _coordinator(ctx, req.group_id)
    except KafkaError as e:
        return {"error_code": e.code, "assignment": b""}
    result = gc.sync_group(req.group_id, req.generation_id, req.member_id, req.group_instance_id,
                           req.protocol_type, req.protocol_name,
                           {a.member_id: bytes(a.assignment) for a in req.assignments})

    def build(r: SyncResult | JoinResult) -> dict[str, Any]:
        if isinstance(r, JoinResult):  # the member was removed while its sync waited
            return {"throttle_time_ms": 0, "error_code": r.error, "assignment": b""}
        return {"throttle_time_ms": 0, "error_code": r.error, "protocol_type": r.protocol_type,
                "protocol_name": r.protocol_name, "assignment": r.assignment}

    return then(result, build)


@_after_offsets_topic
def handle_heartbeat(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    try:
        if not _group_allowed(ctx, AclOperation.READ, req.group_id):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        code = _coordinator(ctx, req.group_id).heartbeat(req.group_id, req.generation_id, req.member_id, req.group_instance_id)
    except KafkaError as e:
        code = e.code
    return {"throttle_time_ms": 0, "error_code": code}


@_after_offsets_topic
def handle_leave_group(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    if ctx.version < 3:
        members = [(req.member_id, None)]
    else:
        members = [(m.member_id, m.group_instance_id) for m in req.members]
    try:
        if not _group_allowed(ctx, AclOperation.READ, req.group_id):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        code, per_member = _coordinator(ctx, req.group_id).leave_group(req.group_id, members)
    except KafkaError as e:
        code, per_member = e.code, [e.code] * len(members)
    if ctx.version < 3:
        return {"throttle_time_ms": 0, "error_code": per_member[0] if code == ErrorCode.NONE else code}
    return {"throttle_time_ms": 0, "error_code": code,
            "members": [{"member_id": m, "group_instance_id": i, "error_code": c}
                        for (m, i), c in zip(members, per_member, strict=True)]}


@_after_offsets_topic
def handle_offset_commit(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    topics_meta = ctx.services.metadata_cache.topics()
    unknown: set[tuple[str, int]] = set()
    denied: dict[tuple[str, int], ErrorCode] = {}
    offsets = []
    group_ok = _group_allowed(ctx, AclOperation.READ, req.group_id)
    for t in req.topics:
        meta = topics_meta.get(t.name)
        topic_ok = ctx.authorize(AclOperation.READ, ResourceType.TOPIC, t.name)
        for p in t.partitions:
            if not group_ok:
                denied[(t.name, p.partition_index)] = ErrorCode.GROUP_AUTHORIZATION_FAILED
            elif not topic_ok:
                denied[(t.name, p.partition_index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif meta is None or p.partition_index not in meta.partitions:
                unknown.add((t.name, p.partition_index))  # Kafka refuses commits for partitions it lacks
            else:
                offsets.append((t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
                                p.committed_metadata))
    if not group_ok:
        return _offset_commit_response(req, unknown, ErrorCode.NONE, denied)
    try:
        result = _coordinator(ctx, req.group_id).commit_offsets(
            req.group_id, req.generation_id_or_member_epoch, req.member_id, req.group_instance_id, offsets,
            api_version=ctx.version)
    except KafkaError as e:
        result = e.code
    if isinstance(result, asyncio.Future):  # waiting for offsets.commit.required.acks
        async def answer(pending: asyncio.Future[dict[tuple[str, int], ErrorCode]]) -> dict[str, Any]:
            return _offset_commit_response(req, unknown, await pending, denied)
        return asyncio.ensure_future(answer(result))
    return _offset_commit_response(req, unknown, result, denied)


def _offset_commit_response(req: Struct, unknown: set[tuple[str, int]],
                            result: ErrorCode | dict[tuple[str, int], ErrorCode],
                            denied: dict[tuple[str, int], ErrorCode]) -> dict[str, Any]:
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if (t.name, p.partition_index) in denied:
                code = denied[(t.name, p.partition_index)]
            elif (t.name, p.partition_index) in unknown:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif isinstance(result, ErrorCode):
                code = result
            else:
                code = result.get((t.name, p.partition_index), ErrorCode.NONE)
            parts.append({"partition_index": p.partition_index, "error_code": code})
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


def _fetch_group(ctx: RequestContext, group_id: str, topics: list[Struct] | None, member_id: str | None = None,
                 member_epoch: int = -1, require_stable: bool = False) -> tuple[ErrorCode, list[dict[str, Any]]]:
    if not _group_allowed(ctx, AclOperation.DESCRIBE, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    try:
        gc = _coordinator(ctx, group_id)
    except KafkaError as e:
        return e.code, []
    code = gc.check_offset_fetch(group_id, member_id, member_epoch)
    if code != ErrorCode.NONE:
        return code, []
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    if wanted is None:
        found = gc.fetch_offsets(group_id, None)
        allowed = ctx.authorized_topics(AclOperation.DESCRIBE, {t for t, _ in found})
    else:
        allowed = ctx.authorized_topics(AclOperation.DESCRIBE, {t for t, _ in wanted})
        found = gc.fetch_offsets(group_id, [w for w in wanted if w[0] in allowed])
    by_topic: dict[str, list[dict[str, Any]]] = {}
    # Asked for by name, a topic not describable answers TOPIC_AUTHORIZATION_FAILED; all offsets: it is left out.
    order = wanted if wanted is not None else sorted(k for k in found if k[0] in allowed)
    for topic, partition in order:
        if topic not in allowed:
            by_topic.setdefault(topic, []).append({
                "partition_index": partition, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED})
            continue
        om = found.get((topic, partition))
        # KIP-447: a read_committed consumer must not start from an offset a transaction may still change.
        unstable = require_stable and gc.metadata.has_pending_txn_offset(group_id, (topic, partition))
        by_topic.setdefault(topic, []).append({
            "partition_index": partition,
            "committed_offset": om.offset if om else -1,
            "committed_leader_epoch": om.leader_epoch if om else -1,
            "metadata": om.metadata if om else "",
            "error_code": ErrorCode.UNSTABLE_OFFSET_COMMIT if unstable else ErrorCode.NONE,
        })
    return ErrorCode.NONE, [{"name": t, "partitions": ps} for t, ps in by_topic.items()]


@_after_offsets_topic
def handle_offset_fetch(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    if ctx.version >= 8:
        groups = []
        for g in req.groups:
            code, topics = _fetch_group(ctx, g.group_id, g.topics, g.member_id, g.member_epoch, req.require_stable)
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": code})
        return {"throttle_time_ms": 0, "groups": groups}
    code, topics = _fetch_group(ctx, req.group_id, req.topics, require_stable=req.get("require_stable", False))
    return {"throttle_time_ms": 0, "topics": topics, "error_code": code}


@_after_offsets_topic
def handle_describe_groups(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    out = []
    for group_id in req.groups:
        entry: dict[str, Any] = {"error_code": ErrorCode.NONE, "error_message": None, "group_id": group_id,
                                 "group_state": "Dead", "protocol_type": "", "protocol_data": "", "members": []}
        try:
            if not _group_allowed(ctx, AclOperation.DESCRIBE, group_id):
                raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
            g = _coordinator(ctx, group_id).describe_group(group_id)
        except KafkaError as e:
            entry["error_code"] = e.code
            out.append(entry)
            continue
        if g is None or g.consumer is not None:
            # Kafka 4.0 describes only classic groups here; consumer groups have ConsumerGroupDescribe.
            if ctx.version >= 6:
                entry["error_code"] = ErrorCode.GROUP_ID_NOT_FOUND
                entry["error_message"] = (f"Group {group_id} not found." if g is None
                                          else f"Group {group_id} is not a classic group.")
            out.append(entry)
            continue
        stable = g.state == STABLE
        entry.update({
            "group_state": g.state,
            "protocol_type": g.protocol_type or "",
            "protocol_data": (g.protocol_name or "") if stable else "",
            "members": [{
                "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.metadata_for(g.protocol_name) if stable and g.protocol_name else b"",
                "member_assignment": m.assignment if stable else b"",
            } for m in g.members.values()],
        })
        if ctx.version >= 3 and req.include_authorized_operations:
            entry["authorized_operations"] = ctx.authorized_operations(ResourceType.GROUP, group_id)
        out.append(entry)
    return {"throttle_time_ms": 0, "groups": out}


@_after_offsets_topic
def handle_list_groups(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    states = {s.lower() for s in (req.states_filter or [])}
    types = {t.lower() for t in (req.types_filter or [])}
    try:
        groups = _coordinator(ctx).list_groups()
    except KafkaError as e:
        return {"throttle_time_ms": 0, "error_code": e.code, "groups": []}
    out = []
    all_visible = ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER)
    for g in groups:
        if not all_visible and not _group_allowed(ctx, AclOperation.DESCRIBE, g.group_id):
            continue
        group_type = "consumer" if g.consumer is not None else "classic"
        if states and g.state.lower() not in states:
            continue
        if types and group_type not in types:
            continue
        out.append({"group_id": g.group_id, "protocol_type": g.protocol_type or "", "group_state": g.state,
                    "group_type": group_type})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "groups": out}


@_after_offsets_topic
def handle_delete_groups(ctx: RequestContext, req: Struct) -> dict[str, Any] | asyncio.Future[dict[str, Any]]:
    """Deletes each group here; a deleted group's KIP-848 configs (/config/groups/<group>) go with it, so a
    new group of the same name starts from the broker's defaults. The answer waits for that store write."""
    results = []
    configured = []
    for group_id in req.groups_names:
        try:
            if not _group_allowed(ctx, AclOperation.DELETE, group_id):
                raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
            code = _coordinator(ctx, group_id).delete_group(group_id)
        except KafkaError as e:
            code = e.code
        results.append({"group_id": group_id, "error_code": code})
        if code == ErrorCode.NONE and ctx.services.metadata_cache.entity_configs("groups", store_name(group_id)):
            configured.append(group_id)
    body = {"throttle_time_ms": 0, "results": results}
    if not configured:
        return body

    async def drop_configs() -> dict[str, Any]:
        errors = await ctx.services.topic_admin.write([SetEntityConfigs("groups", store_name(g), {}) for g in configured])
        for group_id, err in zip(configured, errors, strict=True):
            if err is not None:  # the group is gone all the same; its configs stay until deleted by hand
                log.warning("group %s deleted, but not its configs: %s", group_id, err.message)
        return body
    return asyncio.ensure_future(drop_configs())


@_after_offsets_topic
def handle_offset_delete(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    allowed = ctx.authorized_topics(AclOperation.READ, {t.name for t in req.topics})
    wanted = [(t.name, p.partition_index) for t in req.topics if t.name in allowed for p in t.partitions]
    try:
        if not _group_allowed(ctx, AclOperation.DELETE, req.group_id):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        result = _coordinator(ctx, req.group_id).delete_offsets(req.group_id, wanted)
    except KafkaError as e:
        result = e.code
    if isinstance(result, ErrorCode):
        return {"error_code": result, "throttle_time_ms": 0, "topics": []}
    topics = [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index,
         "error_code": result[(t.name, p.partition_index)] if t.name in allowed else ErrorCode.TOPIC_AUTHORIZATION_FAILED}
        for p in t.partitions]} for t in req.topics]
    return {"error_code": ErrorCode.NONE, "throttle_time_ms": 0, "topics": topics}



@_after_offsets_topic
def handle_consumer_group_heartbeat(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    out: dict[str, Any] = {"throttle_time_ms": 0, "member_id": None, "member_epoch": 0, "heartbeat_interval_ms": 0,
                           "assignment": None}
    try:
        if not _group_allowed(ctx, AclOperation.READ, req.group_id):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        if req.subscribed_topic_names and len(ctx.authorized_topics(AclOperation.DESCRIBE, req.subscribed_topic_names)) \
                < len(set(req.subscribed_topic_names)):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Not authorized to describe some subscribed topics")
        gc = _coordinator(ctx, req.group_id)
    except KafkaError as e:
        return {**out, "error_code": e.code, "error_message": e.message}
    owned = None if req.topic_partitions is None else [(tp.topic_id, list(tp.partitions)) for tp in req.topic_partitions]
    r = gc.consumer.heartbeat(HeartbeatRequest(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch, instance_id=req.instance_id,
        rack_id=req.rack_id, rebalance_timeout_ms=req.rebalance_timeout_ms,
        subscribed_topic_names=None if req.subscribed_topic_names is None else list(req.subscribed_topic_names),
        subscribed_topic_regex=req.get("subscribed_topic_regex"), server_assignor=req.server_assignor,
        topic_partitions=owned, client_id=ctx.header.client_id or "", client_host=_client_host(ctx),
    ), ctx.services.metadata_cache.topics(), ctx.version)
    assignment = None
    if r.assignment is not None:
        assignment = {"topic_partitions": [{"topic_id": tid, "partitions": sorted(ps)}
                                           for tid, ps in sorted(r.assignment.items())]}
    return {"throttle_time_ms": 0, "error_code": r.error, "error_message": r.message, "member_id": r.member_id,
            "member_epoch": r.member_epoch, "heartbeat_interval_ms": r.heartbeat_interval_ms, "assignment": assignment}


@_after_offsets_topic
def handle_consumer_group_describe(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    names = {t.topic_id: name for name, t in ctx.services.metadata_cache.topics().items()}

    def assignment(a: dict[Any, frozenset[int]]) -> dict[str, Any]:
        return {"topic_partitions": [{"topic_id": tid, "topic_name": names.get(tid, ""), "partitions": sorted(ps)}
                                     for tid, ps in sorted(a.items())]}

    out = []
    for group_id in req.group_ids:
        entry: dict[str, Any] = {"error_code": ErrorCode.NONE, "error_message": None, "group_id": group_id,
                                 "group_state": "Dead", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "",
                                 "members": []}
        try:
            if not _group_allowed(ctx, AclOperation.DESCRIBE, group_id):
                raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
            g = _coordinator(ctx, group_id).consumer.describe(group_id)
        except KafkaError as e:
            entry["error_code"], entry["error_message"] = e.code, e.message
            out.append(entry)
            continue
        cg = g.consumer
        entry.update({
            "group_state": g.state, "group_epoch": cg.group_epoch, "assignment_epoch": cg.assignment_epoch,
            "assignor_name": cg.assignor or _coordinator(ctx).consumer.assignors[0],
            "members": [{
                "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": assignment(m.assigned), "target_assignment": assignment(cg.target.get(m.member_id, {})),
                "member_type": 1,  # KIP-1099: 1 = a member of the consumer protocol
            } for m in cg.members.values()],
        })
        # As Kafka: a group whose assignments name a topic the principal may not describe is not shown.
        hidden = sorted({names.get(tid, "") for m in cg.members.values()
                         for a in (m.assigned, cg.target.get(m.member_id, {})) for tid in a
                         if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, names.get(tid, ""))})
        if hidden:
            entry.update({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "members": [],
                          "error_message": "The group has described topic(s) that the client is not authorized "
                                           "to describe."})
            out.append(entry)
            continue
        if req.include_authorized_operations:
            entry["authorized_operations"] = ctx.authorized_operations(ResourceType.GROUP, group_id)
        out.append(entry)
    return {"throttle_time_ms": 0, "groups": out}
