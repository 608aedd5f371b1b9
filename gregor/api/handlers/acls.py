"""DescribeAcls, CreateAcls, DeleteAcls: the ACLs in the metadata store, as Kafka's KafkaApis serves them.

Without an authorizer each answers SECURITY_DISABLED. Creating and deleting need ALTER on the cluster,
describing DESCRIBE on it (CLUSTER_AUTHORIZATION_FAILED otherwise). A binding or filter with UNKNOWN
fields (or, for creation, a matching-only pattern) fails alone with INVALID_REQUEST, as in Kafka. Writes
go through the topic admin's writer thread, one AlterAcls per resource pattern (ZooKeeper rewrites each
pattern's znode conditionally on its version), and answer once the cache holds them, so a client reads
its own ACLs at once.
"""

from __future__ import annotations

import asyncio
import functools
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from gregor.api.context import Handler, RequestContext, ResponseBody
from gregor.metadata.store import AlterAcls
from gregor.protocol.errors import ErrorCode
from gregor.protocol.schema import Struct
from gregor.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    validate_binding,
)

SECURITY_DISABLED_MESSAGE = "No Authorizer is configured."


def _enum(cls: Any, code: int) -> Any:
    try:
        return cls(code)
    except ValueError:
        return cls(0) if 0 in cls._value2member_map_ else cls(1)


def _filter(r: Struct) -> AclBindingFilter:
    return AclBindingFilter(
        ResourcePatternFilter(_enum(ResourceType, r.resource_type_filter), r.resource_name_filter,
                              _enum(PatternType, r.pattern_type_filter)),
        AccessControlEntryFilter(r.principal_filter, r.host_filter, _enum(AclOperation, r.operation),
                                 _enum(AclPermissionType, r.permission_type)))


def handle_describe_acls(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    def fail(code: int, message: str) -> dict[str, Any]:
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "resources": []}

    if ctx.services.authorizer is None:
        return fail(ErrorCode.SECURITY_DISABLED, SECURITY_DISABLED_MESSAGE)
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return fail(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    flt = _filter(req)
    bad = flt.indefinite_field()
    if bad is not None:
        return fail(ErrorCode.INVALID_REQUEST, bad)
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = defaultdict(list)
    for b in ctx.services.metadata_cache.acls.bindings(flt):
        by_pattern[b.pattern].append(b.entry)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "resources": [
        {"resource_type": p.resource_type, "resource_name": p.name, "pattern_type": p.pattern_type,
         "acls": [{"principal": e.principal, "host": e.host, "operation": e.operation,
                   "permission_type": e.permission_type} for e in entries]}
        for p, entries in by_pattern.items()]}


def handle_create_acls(ctx: RequestContext, req: Struct) -> dict[str, Any] | asyncio.Future[Any]:
    def all_fail(code: int, message: str) -> dict[str, Any]:
        return {"throttle_time_ms": 0, "results": [{"error_code": code, "error_message": message}
                                                   for _ in req.creations]}

    if ctx.services.authorizer is None:
        return all_fail(ErrorCode.SECURITY_DISABLED, SECURITY_DISABLED_MESSAGE)
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER):
        return all_fail(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    results: list[dict[str, Any]] = []
    adds: dict[ResourcePattern, set[AccessControlEntry]] = defaultdict(set)
    where: list[ResourcePattern | None] = []
    for c in req.creations:
        b = AclBinding(ResourcePattern(_enum(ResourceType, c.resource_type), c.resource_name,
                                       _enum(PatternType, c.resource_pattern_type)),
                       AccessControlEntry(c.principal, c.host, _enum(AclOperation, c.operation),
                                          _enum(AclPermissionType, c.permission_type)))
        bad = validate_binding(b)
        results.append({"error_code": ErrorCode.INVALID_REQUEST if bad else ErrorCode.NONE, "error_message": bad})
        where.append(None if bad else b.pattern)
        if not bad:
            adds[b.pattern].add(b.entry)
    if not adds:
        return {"throttle_time_ms": 0, "results": results}
    patterns = list(adds)

    async def write() -> dict[str, Any]:
        errors = await ctx.services.topic_admin.write([AlterAcls(p, frozenset(adds[p])) for p in patterns])
        failed = {p: e for p, e in zip(patterns, errors, strict=True) if e is not None}
        for r, p in zip(results, where, strict=True):
            if p is not None and p in failed:
                r["error_code"], r["error_message"] = failed[p].code, failed[p].message
        return {"throttle_time_ms": 0, "results": results}

    return asyncio.ensure_future(write())


def _binding_row(b: AclBinding) -> dict[str, Any]:
    p, e = b.pattern, b.entry
    return {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": p.resource_type,
            "resource_name": p.name, "pattern_type": p.pattern_type, "principal": e.principal, "host": e.host,
            "operation": e.operation, "permission_type": e.permission_type}


def handle_delete_acls(ctx: RequestContext, req: Struct) -> dict[str, Any] | asyncio.Future[Any]:
    def all_fail(code: int, message: str) -> dict[str, Any]:
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": code, "error_message": message, "matching_acls": []} for _ in req.filters]}

    if ctx.services.authorizer is None:
        return all_fail(ErrorCode.SECURITY_DISABLED, SECURITY_DISABLED_MESSAGE)
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER):
        return all_fail(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    index = ctx.services.metadata_cache.acls
    out: list[dict[str, Any]] = []
    removes: dict[ResourcePattern, set[AccessControlEntry]] = defaultdict(set)
    matched: list[list[AclBinding]] = []
    for r in req.filters:
        flt = _filter(r)
        bad = flt.indefinite_field()
        if bad is not None:
            out.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": bad, "matching_acls": []})
            matched.append([])
            continue
        found = index.bindings(flt)
        for b in found:
            removes[b.pattern].add(b.entry)
        matched.append(found)
        out.append({"error_code": ErrorCode.NONE, "error_message": None, "matching_acls": []})
    patterns = list(removes)

    async def write() -> dict[str, Any]:
        errors = await ctx.services.topic_admin.write([AlterAcls(p, remove=frozenset(removes[p])) for p in patterns])
        failed = {p: e for p, e in zip(patterns, errors, strict=True) if e is not None}
        for row, found in zip(out, matched, strict=True):
            for b in found:
                item = _binding_row(b)
                err = failed.get(b.pattern)
                if err is not None:
                    item["error_code"], item["error_message"] = err.code, err.message
                row["matching_acls"].append(item)
        return {"throttle_time_ms": 0, "filter_results": out}

    return asyncio.ensure_future(write())


# --- cluster-level gates for other owners' handlers (applied where the HANDLERS table registers them) ---------
def requires_cluster(operation: AclOperation, handler: Handler,
                     refuse: Callable[[Struct], dict[str, Any]]) -> Handler:
    """`handler`, answered by `refuse(request)` instead (CLUSTER_AUTHORIZATION_FAILED in the API's own shape)
    when the principal may not do `operation` on the cluster, as Kafka's KafkaApis gates these APIs."""

    @functools.wraps(handler)
    def gated(ctx: RequestContext, req: Struct) -> ResponseBody | None:
        if not ctx.authorize(operation, ResourceType.CLUSTER):
            return refuse(req)
        return handler(ctx, req)

    return gated


_CLUSTER_DENIED = "Cluster authorization failed."


def refuse_describe_user_scram_credentials(req: Struct) -> dict[str, Any]:
    """DescribeUserScramCredentials without DESCRIBE on the cluster: the error at the top and for each user
    asked about (Kafka's error response)."""
    return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": _CLUSTER_DENIED, "results": [
                {"user": u.name, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": _CLUSTER_DENIED,
                 "credential_infos": []} for u in req.users or ()]}


def refuse_alter_user_scram_credentials(req: Struct) -> dict[str, Any]:
    """AlterUserScramCredentials without ALTER on the cluster: every user named fails."""
    users = dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions])
    return {"throttle_time_ms": 0, "results": [
        {"user": u, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": _CLUSTER_DENIED}
        for u in users]}


def refuse_describe_client_quotas(req: Struct) -> dict[str, Any]:
    """DescribeClientQuotas without DESCRIBE_CONFIGS on the cluster."""
    return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": _CLUSTER_DENIED, "entries": None}


def refuse_alter_client_quotas(req: Struct) -> dict[str, Any]:
    """AlterClientQuotas without ALTER_CONFIGS on the cluster: every entry fails."""
    return {"throttle_time_ms": 0, "entries": [
        {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": _CLUSTER_DENIED,
         "entity": [{"entity_type": p.entity_type, "entity_name": p.entity_name} for p in e.entity]}
        for e in req.entries]}
