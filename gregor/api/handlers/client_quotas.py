"""DescribeClientQuotas (48) and AlterClientQuotas (49), KIP-546, with Kafka's semantics.

Quotas are entity configs in the metadata store (Kafka's /config/users/<user>,
/config/users/<user>/clients/<client-id>, /config/clients/<client-id>, `<default>` for a type's
default entity), so they persist and reach every broker through ENTITY_CONFIGS events; each
broker's ClientQuotaManager (gregor.security.quotas) follows them and answers Describe.

Describe filters by components: EXACT (that name), DEFAULT (the default entity), SPECIFIED (any
entity of the type, the default included); `strict` excludes entities naming other types. A bad
filter fails the whole request. Alter answers per entity: an unknown quota key or a bad value is
INVALID_REQUEST and leaves that entity unchanged; `validate_only` checks without writing.
Entity configs that are not quotas (SCRAM credentials on a user) are kept as they are.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gregor.api.context import RequestContext
from gregor.metadata.store import SetEntityConfigs
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.messages.client_quotas import MATCH_DEFAULT, MATCH_EXACT, MATCH_SPECIFIED
from gregor.protocol.schema import Struct
from gregor.security.quotas import (
    CLIENT_ID,
    DEFAULT,
    IP,
    QUOTA_TYPES,
    USER,
    Entity,
    desanitize,
    format_quota_value,
    sanitize,
    store_key,
    validate_quota_value,
)

log = logging.getLogger("gregor.quotas")
_WAITING: set[asyncio.Task[Any]] = set()  # alter responses waiting for the store


def _fail(message: str, code: ErrorCode = ErrorCode.INVALID_REQUEST) -> KafkaError:
    return KafkaError(code, message)


def handle_describe_client_quotas(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    try:
        exact, any_of = _filter(req.components)
    except KafkaError as e:
        return {"throttle_time_ms": 0, "error_code": e.code, "error_message": e.message, "entries": None}
    if IP in exact or IP in any_of:
        matches: list[tuple[Entity, dict[str, float]]] = []  # no IP quotas are kept here
    else:
        exact_s = {t: None if n is None else sanitize(n) for t, n in exact.items()}
        matches = ctx.services.quotas.describe(exact_s, any_of, req.strict)
    entries = [{"entity": _entity_out(entity), "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
               for entity, values in sorted(matches, key=lambda m: (m[0][0] or "", m[0][1] or ""))]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "entries": entries}


def _filter(components: list[Any]) -> tuple[dict[str, str | None], set[str]]:
    """The filter's exact matches (None: the default entity) and its any-name types."""
    exact: dict[str, str | None] = {}
    any_of: set[str] = set()
    for c in components:
        if not c.entity_type:
            raise _fail("Invalid empty entity type.")
        if c.entity_type in exact or c.entity_type in any_of:
            raise _fail(f"Entity type {c.entity_type} cannot appear more than once in the filter.")
        if c.entity_type not in (USER, CLIENT_ID, IP):
            raise _fail(f"Custom entity type '{c.entity_type}' not supported.", ErrorCode.UNSUPPORTED_VERSION)
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise _fail("Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[c.entity_type] = c.match
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                raise _fail("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[c.entity_type] = None
        elif c.match_type == MATCH_SPECIFIED:
            if c.match is not None:
                raise _fail("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            any_of.add(c.entity_type)
        else:
            raise _fail(f"Unknown match type {c.match_type}", ErrorCode.UNSUPPORTED_VERSION)
    types = set(exact) | any_of
    if IP in types and len(types) > 1:
        raise _fail("Invalid entity filter component combination: an IP filter component cannot be combined "
                    "with user or client-id filter components.")
    return exact, any_of


def _entity_out(entity: Entity) -> list[dict[str, Any]]:
    out = []
    for entity_type, name in ((USER, entity[0]), (CLIENT_ID, entity[1])):
        if name is not None:
            out.append({"entity_type": entity_type, "entity_name": None if name == DEFAULT else desanitize(name)})
    return out


def _entity_in(parts: list[Any]) -> Entity:
    """A request's entity as (sanitized user, sanitized client-id); raises INVALID_REQUEST."""
    names: dict[str, str | None] = {}
    for p in parts:
        if not p.entity_type:
            raise _fail("Invalid empty entity type.")
        if p.entity_type in names:
            raise _fail(f"Duplicate {p.entity_type} entity type.")
        names[p.entity_type] = p.entity_name
    if not names:
        raise _fail("Invalid empty client quota entity")
    if IP in names:
        raise _fail("IP quotas (connection_creation_rate) are not supported"
                    if len(names) == 1 else "Invalid quota entity combination: ip with user or client-id")
    unknown = set(names) - {USER, CLIENT_ID}
    if unknown:
        raise _fail(f"Unhandled client quota entity type: {sorted(unknown)[0]}")

    def side(t: str) -> str | None:
        if t not in names:
            return None
        name = names[t]
        if name is not None and not name:  # not storable as an entity (Kafka's paths have no empty names)
            raise _fail(f"Invalid empty {t} name")
        return DEFAULT if name is None else sanitize(name)

    return side(USER), side(CLIENT_ID)


def handle_alter_client_quotas(ctx: RequestContext, req: Struct) -> dict[str, Any] | asyncio.Future[dict[str, Any]]:
    cache = ctx.services.metadata_cache
    results: list[dict[str, Any]] = []
    pending: dict[tuple[str, str], dict[str, str]] = {}  # store key -> its configs after this request
    owners: dict[tuple[str, str], list[dict[str, Any]]] = {}  # store key -> the result entries writing it
    for e in req.entries:
        result: dict[str, Any] = {"error_code": ErrorCode.NONE, "error_message": None,
                                  "entity": [{"entity_type": p.entity_type, "entity_name": p.entity_name}
                                             for p in e.entity]}
        results.append(result)
        try:
            key = store_key(_entity_in(e.entity))
            changes: dict[str, str | None] = {}
            for op in e.ops:
                if op.key in changes:
                    raise _fail(f"Duplicate quota key {op.key} not updated")
                if op.key not in QUOTA_TYPES:
                    raise _fail(f"Invalid configuration key {op.key}")
                if op.remove:
                    changes[op.key] = None
                    continue
                why = validate_quota_value(op.key, op.value)
                if why is not None:
                    raise _fail(why)
                changes[op.key] = format_quota_value(op.key, op.value)
        except KafkaError as err:
            result["error_code"], result["error_message"] = err.code, err.message
            continue
        if req.validate_only:
            continue
        configs = pending.get(key)
        if configs is None:
            configs = dict(cache.entity_configs(*key))
        for k, v in changes.items():
            if v is None:
                configs.pop(k, None)
            else:
                configs[k] = v
        pending[key] = configs
        owners.setdefault(key, []).append(result)
    body = {"throttle_time_ms": 0, "entries": results}
    if not pending:
        return body
    keys = list(pending)

    async def write() -> dict[str, Any]:
        try:
            errors: list[KafkaError | None] = await ctx.services.topic_admin.write(
                [SetEntityConfigs(t, n, pending[(t, n)]) for t, n in keys])
        except Exception as e:  # the store refused what validation let through: each entity's answer
            log.exception("AlterClientQuotas could not write the entity configs")
            errors = [KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Cannot store the quotas: {e}")] * len(keys)
        for key, err in zip(keys, errors, strict=True):
            if err is not None:
                for result in owners[key]:
                    result["error_code"], result["error_message"] = err.code, err.message
        return body

    task = asyncio.ensure_future(write())
    _WAITING.add(task)
    task.add_done_callback(_WAITING.discard)
    return task
