"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs for topics and brokers.

Topic overrides live in the metadata store (read from the broker's metadata cache); a topic config shows where its value comes
from (topic override, the broker's server.properties, or the default) the way Kafka
reports config sources and synonyms. Everything here reads the one table of each kind
(gregor.storage.config's TOPIC_CONFIGS, gregor.config's BROKER_PROPS), which also validates
what is stored and what the logs load. Broker configs are read with their dynamic values
(gregor.config.dynamic); altering one writes the broker's, or the cluster default's,
dynamic configs to the metadata store, for the properties this broker applies at runtime.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from gregor.api.context import RequestContext
from gregor.config import BROKER_PROPS, READ_ONLY, TOPIC_CONFIGS, Prop, format_value
from gregor.config.dynamic import APPLIED, DynamicBrokerConfig, listener_key, prop_of, validate_alter
from gregor.configdef import ConfigError
from gregor.coordinator.group.group_configs import GROUP_CONFIGS, effective, store_name, validate_group_configs
from gregor.known_configs import NO_EFFECT
from gregor.metadata.store import DEFAULT_ENTITY, Change, SetBrokerConfigs, SetEntityConfigs
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.schema import Struct
from gregor.security.acl import AclOperation, ResourceType
from gregor.storage.config import TopicConfigDef

TOPIC = 2
BROKER = 4
GROUP = 32  # KIP-848 group configs (group_configs.py)

# ConfigSource
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
GROUP_CONFIG = 8

_TYPES = {"bool": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7}

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_WAITING: set[asyncio.Task[dict[str, Any]]] = set()  # alter responses waiting for their store write

# Broker property -> the topic config it is a synonym of (for the synonyms of broker configs).
_TOPIC_OF_SYNONYM: dict[str, TopicConfigDef] = {s.name: t for t in TOPIC_CONFIGS.values() for s in t.synonyms}


def _text(value: Any) -> str | None:
    return None if value is None else format_value(value)


def _documentation(prop: Prop, update_mode: str | None) -> str:
    """The documentation DescribeConfigs v3+ returns: the table's text, its valid values and, for
    broker properties, Kafka's update mode."""
    parts = [prop.doc.rstrip(".") + "." if prop.doc else ""]
    bounds = prop.describe_bounds()
    if bounds:
        parts.append(f"Valid values: {bounds}.")
    if update_mode is not None:
        parts.append(f"Update mode: {update_mode}" + (" (Gregor does not apply it at runtime yet: it is read at "
                                                        "start only)." if update_mode != READ_ONLY
                                                        and prop.name not in APPLIED
                                                        and prop.name not in NO_EFFECT else "."))
    return " ".join(p for p in parts if p)


def _broker_synonyms(dynamic: DynamicBrokerConfig, names: list[str]) -> list[dict[str, Any]]:
    """Kafka's order: every synonym set in server.properties (STATIC_BROKER_CONFIG), finest first,
    then every synonym with a default (DEFAULT_CONFIG); values in each synonym's own unit."""
    out = [{"name": n, "value": _text(dynamic.static_value(n)), "source": STATIC_BROKER_CONFIG}
           for n in names if dynamic.set_statically(n)]
    out += [{"name": n, "value": _text(BROKER_PROPS[n].default), "source": DEFAULT_CONFIG}
            for n in names if BROKER_PROPS[n].default is not None]
    return out


def _entry(name: str, value: Any, synonyms: list[dict[str, Any]], prop: Prop, read_only: bool, req: Struct,
           update_mode: str | None = None) -> dict[str, Any]:
    source = synonyms[0]["source"] if synonyms else DEFAULT_CONFIG
    if prop.sensitive:  # Kafka never returns a password's value, nor its synonyms' values
        value = None
        synonyms = [{**s, "value": None} for s in synonyms]
    return {
        "name": name,
        "value": _text(value),
        "read_only": read_only,
        "is_default": source == DEFAULT_CONFIG,
        "config_source": source,
        "is_sensitive": prop.sensitive,
        "synonyms": synonyms if req.include_synonyms else [],
        "config_type": _TYPES.get(prop.type, 0),
        "documentation": _documentation(prop, update_mode) if req.include_documentation else None,
    }


def _describe_topic(ctx: RequestContext, name: str, keys: list[str] | None, req: Struct) -> list[dict[str, Any]]:
    """Every topic config (read_only false: all are dynamic), with its source and synonyms: the
    topic's own override, then its broker synonyms. A stored override that no longer validates is
    not in effect, so it is shown as absent (the broker warned about it at load)."""
    services = ctx.services
    meta = services.metadata_cache.topic(name)
    if meta is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist.")
    overrides = services.topic_configs.valid_overrides(meta.configs)
    values = services.topic_configs.effective(overrides)
    out = []
    for k in sorted(TOPIC_CONFIGS):
        if keys is not None and k not in keys:
            continue
        t = TOPIC_CONFIGS[k]
        syn = []
        if k in overrides:
            syn.append({"name": k, "value": _text(values[k]), "source": DYNAMIC_TOPIC_CONFIG})
        # Kafka's order: every synonym's per-broker value, then every synonym's cluster default, then static.
        layers = [(src, s.name, v) for s in t.synonyms for src, v in services.dynamic_config.layers(s.name)]
        syn += [{"name": n, "value": _text(v), "source": src} for src, n, v in sorted(layers, key=lambda x: x[0])]
        syn += _broker_synonyms(services.dynamic_config, [s.name for s in t.synonyms])
        out.append(_entry(k, values[k], syn, t.prop, not t.dynamic, req))
    return out


def _describe_broker(ctx: RequestContext, name: str, keys: list[str] | None, req: Struct) -> list[dict[str, Any]]:
    """Every broker property with its value here, dynamic ones first among its synonyms; the empty name
    (the cluster default entity) lists only what is set there, as Kafka does. Only the properties this
    broker applies at runtime are writable; the documentation names the update mode Kafka gives each."""
    services = ctx.services
    dynamic = services.dynamic_config
    if name == "":  # listener-prefixed cluster-level ones too (listener.name.<l>.max.connections)
        return [_entry(k, v, [{"name": k, "value": _text(v), "source": 3}], p, False, req, p.mode)
                for k, v in sorted(services.metadata_cache.broker_configs(DEFAULT_ENTITY).items())
                if (p := prop_of(k)) is not None and (keys is None or k in keys)]
    broker_id = services.settings.broker_id
    if name != str(broker_id):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {broker_id}, got {name}")
    out = []
    for k, prop in sorted(BROKER_PROPS.items()):
        if keys is not None and k not in keys:
            continue
        t = _TOPIC_OF_SYNONYM.get(k)
        names = [s.name for s in t.synonyms] if t is not None else [k]
        syn = _broker_synonyms(dynamic, names[names.index(k):])
        while syn and syn[0]["name"] != k:  # Kafka's rule: a property's synonyms start with itself
            syn.pop(0)
        syn = [{"name": k, "value": _text(v), "source": src} for src, v in dynamic.layers(k)] + syn
        out.append(_entry(k, dynamic.get(k), syn, prop, k not in APPLIED, req, prop.mode))
    for k in sorted(n for n in dynamic.dynamic_names() if listener_key(n) is not None):  # listener.name.<l>.<key>
        if keys is not None and k not in keys:
            continue
        lprop = prop_of(k)
        assert lprop is not None
        syn = [{"name": k, "value": _text(v), "source": src} for src, v in dynamic.layers(k)]
        out.append(_entry(k, dynamic.get(k), syn, lprop, False, req, lprop.mode))
    return out


def _describe_group(ctx: RequestContext, name: str, keys: list[str] | None, req: Struct) -> list[dict[str, Any]]:
    """A group's KIP-848 configs: its own (GROUP_CONFIG), else the broker's default (DEFAULT_CONFIG, with
    the broker property as a synonym). Described whether or not the group exists, as in Kafka."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
    stored = ctx.services.metadata_cache.entity_configs("groups", store_name(name))
    dynamic = ctx.services.dynamic_config
    values = effective(stored, dynamic.get)
    out = []
    for k, d in sorted(GROUP_CONFIGS.items()):
        if keys is not None and k not in keys:
            continue
        syn = [{"name": k, "value": stored[k], "source": GROUP_CONFIG}] if k in stored else []
        syn.append({"name": d.broker_default, "value": _text(dynamic.get(d.broker_default)),
                    "source": STATIC_BROKER_CONFIG if dynamic.set_statically(d.broker_default) else DEFAULT_CONFIG})
        out.append(_entry(k, values[k], syn, d.prop, False, req))
    return out


def _alter_group(ctx: RequestContext, r: Struct, incremental: bool) -> SetEntityConfigs:
    """A GROUP resource's alter: the group's configs after it, checked against the broker's bounds."""
    if not r.resource_name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
    entity = store_name(r.resource_name)
    current = ctx.services.metadata_cache.entity_configs("groups", entity)
    if incremental:
        new = _apply_incremental(ctx, current, r.configs, GROUP_CONFIGS)
    else:
        new = {c.name: c.value for c in r.configs}
    try:
        validate_group_configs(new, ctx.services.dynamic_config.get)
    except ConfigError as e:
        raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
    return SetEntityConfigs("groups", entity, new)


def _check_configs_access(ctx: RequestContext, resource_type: int, name: str, op: AclOperation) -> None:
    """A topic's configs need the operation on the topic, a broker's on the cluster (Kafka's KafkaApis)."""
    if resource_type == TOPIC and not ctx.authorize(op, ResourceType.TOPIC, name):
        raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
    if resource_type == GROUP:
        if not ctx.authorize(op, ResourceType.GROUP, name):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
        return
    if resource_type != TOPIC and not ctx.authorize(op, ResourceType.CLUSTER):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")


def handle_describe_configs(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    results = []
    for r in req.resources:
        keys = None if r.configuration_keys is None else list(r.configuration_keys)
        entry: dict[str, Any] = {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": r.resource_type,
                                 "resource_name": r.resource_name, "configs": []}
        try:
            _check_configs_access(ctx, r.resource_type, r.resource_name, AclOperation.DESCRIBE_CONFIGS)
            if r.resource_type == TOPIC:
                entry["configs"] = _describe_topic(ctx, r.resource_name, keys, req)
            elif r.resource_type == BROKER:
                entry["configs"] = _describe_broker(ctx, r.resource_name, keys, req)
            elif r.resource_type == GROUP:
                entry["configs"] = _describe_group(ctx, r.resource_name, keys, req)
            else:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {r.resource_type}")
        except KafkaError as e:
            entry["error_code"] = e.code
            entry["error_message"] = e.message
        results.append(entry)
    return {"throttle_time_ms": 0, "results": results}


def _alter(ctx: RequestContext, req: Struct, incremental: bool) -> dict[str, Any] | asyncio.Future[dict[str, Any]]:
    """Checks on the loop, then one store write for the request's topics, answered once the cache has it."""
    admin = ctx.services.topic_admin
    writes: list[tuple[dict[str, Any], Change]] = []
    responses = []
    for r in req.resources:
        entry: dict[str, Any] = {"error_code": ErrorCode.NONE, "error_message": None,
                                 "resource_type": r.resource_type, "resource_name": r.resource_name}
        try:
            _check_configs_access(ctx, r.resource_type, r.resource_name, AclOperation.ALTER_CONFIGS)
            if r.resource_type in (BROKER, GROUP):
                broker_change = (_alter_broker if r.resource_type == BROKER else _alter_group)(ctx, r, incremental)
                if not req.validate_only:
                    writes.append((entry, broker_change))
                responses.append(entry)
                continue
            if r.resource_type != TOPIC:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {r.resource_type}")
            meta = ctx.services.metadata_cache.topic(r.resource_name)
            if meta is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {r.resource_name} does not exist.")
            if incremental:
                new = _apply_incremental(ctx, meta.configs, r.configs)
            else:
                new = {c.name: c.value for c in r.configs}
            change = admin.prepare_configs(r.resource_name, new)
            if not req.validate_only:
                writes.append((entry, change))
        except KafkaError as e:
            entry["error_code"] = e.code
            entry["error_message"] = e.message
        responses.append(entry)
    body = {"throttle_time_ms": 0, "responses": responses}
    if not writes:
        return body

    async def write() -> dict[str, Any]:
        errors = await admin.write([change for _, change in writes])
        for (entry, _), err in zip(writes, errors, strict=True):
            if err is not None:
                entry["error_code"] = err.code
                entry["error_message"] = err.message
        return body

    task = asyncio.ensure_future(write())
    _WAITING.add(task)  # the loop holds tasks weakly
    task.add_done_callback(_WAITING.discard)
    return task


def _alter_broker(ctx: RequestContext, r: Struct, incremental: bool) -> SetBrokerConfigs:
    """A BROKER resource's alter: the entity's dynamic configs after it, checked (see dynamic_config)."""
    name = r.resource_name
    if name == "":
        entity = DEFAULT_ENTITY
    elif name.isdigit():
        entity = str(int(name))
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid broker id {name!r}: an id, or empty for the cluster default")
    dynamic = ctx.services.dynamic_config
    # Passwords are stored encrypted (Kafka's PasswordEncoder): checked in clear, encrypted for the store. One
    # this broker cannot decode (another secret) is kept as stored unless the alter replaces or deletes it.
    current, opaque = dynamic.decode_stored(ctx.services.metadata_cache.broker_configs(entity))
    if incremental:
        new = _apply_incremental(ctx, current, r.configs, BROKER_PROPS)
    else:
        new = {c.name: c.value for c in r.configs}
        opaque = {}  # AlterConfigs replaces the entity's configs wholesale
    mine = entity == str(ctx.services.settings.broker_id)
    validate_alter(new, dynamic if mine or entity == DEFAULT_ENTITY else None, default=entity == DEFAULT_ENTITY)
    touched = {c.name for c in r.configs}
    return SetBrokerConfigs(entity, {**dynamic.encode_for_store(new),
                                     **{k: v for k, v in opaque.items() if k not in touched}})


def _apply_incremental(ctx: RequestContext, current: dict[str, str], ops: list[Struct],
                       table: Any = TOPIC_CONFIGS) -> dict[str, str]:
    new = dict(current)
    names = [c.name for c in ops]
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    kind = "topic" if table is TOPIC_CONFIGS else "broker" if table is BROKER_PROPS else "group"
    for c in ops:
        t = prop_of(c.name) if table is BROKER_PROPS else table.get(c.name)
        op = c.config_operation
        if t is None and not (op == DELETE and c.name in new):  # a stored unknown key may be deleted
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown {kind} config name: {c.name}")
        if op == SET:
            if c.value is None:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Null value not supported for : {c.name}")
            new[c.name] = c.value
        elif op == DELETE:
            new.pop(c.name, None)
        elif op in (APPEND, SUBTRACT):
            assert t is not None
            if (t if kind == "broker" else t.prop).type != "list":
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Config value append is not allowed for config key: {c.name}")
            base = new.get(c.name)
            if base is not None:
                items = [x.strip() for x in base.split(",") if x.strip()]
            elif kind == "topic":  # a list-typed config: its default is a list
                items = list(cast("list[str]", ctx.services.topic_configs.default(c.name)))
            else:
                items = list(ctx.services.dynamic_config.static_value(c.name) or [])
            given = [x.strip() for x in (c.value or "").split(",") if x.strip()]
            if op == APPEND:
                items += [x for x in given if x not in items]
            else:
                items = [x for x in items if x not in given]
            new[c.name] = ",".join(items)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op}")
    return new


def handle_alter_configs(ctx: RequestContext, req: Struct) -> dict[str, Any] | asyncio.Future[dict[str, Any]]:
    return _alter(ctx, req, incremental=False)


def handle_incremental_alter_configs(ctx: RequestContext, req: Struct) -> dict[str, Any] | asyncio.Future[dict[str, Any]]:
    return _alter(ctx, req, incremental=True)
