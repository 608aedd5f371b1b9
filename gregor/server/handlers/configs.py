"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs for topics (and reading broker configs).

Topic overrides live in the metadata store; a topic config shows where its value comes
from (topic override, the broker's server.properties, or the default) the way Kafka
reports config sources and synonyms. Broker configs are static here: they can be read,
and an attempt to alter them gets a clear error.
"""

from __future__ import annotations

from typing import Any

from gregor.config import BROKER_PROPS, TOPIC_PROPS, format_value
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.schema import Struct
from gregor.server.dispatcher import RequestContext
from gregor.server.replica_manager import effective_topic_configs

TOPIC = 2
BROKER = 4

DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

_TYPES = {"bool": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7}

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _entry(name: str, value: Any, source: int, type_: str, synonyms: list[dict[str, Any]], ctx: RequestContext,
           read_only: bool, doc: str = "") -> dict[str, Any]:
    text = None if value is None else format_value(value)
    return {
        "name": name,
        "value": text,
        "read_only": read_only,
        "is_default": source == DEFAULT_CONFIG,
        "config_source": source,
        "is_sensitive": False,
        "synonyms": synonyms,
        "config_type": _TYPES.get(type_, 0),
        "documentation": doc or None,
    }


def _describe_topic(ctx: RequestContext, name: str, keys: list[str] | None, synonyms: bool) -> list[dict[str, Any]]:
    broker = ctx.broker
    meta = broker.store.topic(name)
    if meta is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist.")
    values = effective_topic_configs(broker.config, meta.configs)
    out = []
    for k in sorted(TOPIC_PROPS):
        if keys is not None and k not in keys:
            continue
        tp = TOPIC_PROPS[k]
        broker_key = tp.broker_name
        syn = []
        if k in meta.configs:
            source = DYNAMIC_TOPIC_CONFIG
            syn.append({"name": k, "value": meta.configs[k], "source": DYNAMIC_TOPIC_CONFIG})
        elif broker_key in broker.config.explicit:
            source = STATIC_BROKER_CONFIG
        else:
            source = DEFAULT_CONFIG
        if broker_key in broker.config.explicit:
            syn.append({"name": broker_key, "value": format_value(broker.config.get(broker_key)),
                        "source": STATIC_BROKER_CONFIG})
        syn.append({"name": broker_key, "value": format_value(tp.broker_default(broker.config)), "source": DEFAULT_CONFIG})
        out.append(_entry(k, values[k], source, tp.prop.type, syn if synonyms else [], ctx, False, tp.prop.doc))
    return out


def _describe_broker(ctx: RequestContext, name: str, keys: list[str] | None, synonyms: bool) -> list[dict[str, Any]]:
    broker = ctx.broker
    if name not in ("", str(broker.config.broker_id)):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {broker.config.broker_id}, got {name}")
    out = []
    for k, prop in sorted(BROKER_PROPS.items()):
        if keys is not None and k not in keys:
            continue
        v = broker.config.get(k)
        source = STATIC_BROKER_CONFIG if k in broker.config.explicit else DEFAULT_CONFIG
        syn = [{"name": k, "value": None if v is None else format_value(v), "source": source}] if synonyms else []
        out.append(_entry(k, v, source, prop.type, syn, ctx, True, prop.doc))
    return out


def handle_describe_configs(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    results = []
    for r in req.resources:
        keys = None if r.configuration_keys is None else list(r.configuration_keys)
        entry: dict[str, Any] = {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": r.resource_type,
                                 "resource_name": r.resource_name, "configs": []}
        try:
            if r.resource_type == TOPIC:
                entry["configs"] = _describe_topic(ctx, r.resource_name, keys, req.include_synonyms)
            elif r.resource_type == BROKER:
                entry["configs"] = _describe_broker(ctx, r.resource_name, keys, req.include_synonyms)
            else:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {r.resource_type}")
        except KafkaError as e:
            entry["error_code"] = e.code
            entry["error_message"] = e.message
        results.append(entry)
    return {"throttle_time_ms": 0, "results": results}


def _alter(ctx: RequestContext, req: Struct, incremental: bool) -> dict[str, Any]:
    responses = []
    for r in req.resources:
        entry: dict[str, Any] = {"error_code": ErrorCode.NONE, "error_message": None,
                                 "resource_type": r.resource_type, "resource_name": r.resource_name}
        try:
            if r.resource_type == BROKER:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Broker configs are static: edit server.properties and restart")
            if r.resource_type != TOPIC:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {r.resource_type}")
            meta = ctx.broker.store.topic(r.resource_name)
            if meta is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {r.resource_name} does not exist.")
            if incremental:
                new = _apply_incremental(ctx, meta.configs, r.configs)
            else:
                new = {c.name: c.value for c in r.configs}
            ctx.broker.controller.set_topic_configs(r.resource_name, new, req.validate_only)
        except KafkaError as e:
            entry["error_code"] = e.code
            entry["error_message"] = e.message
        responses.append(entry)
    return {"throttle_time_ms": 0, "responses": responses}


def _apply_incremental(ctx: RequestContext, current: dict[str, str], ops: list[Struct]) -> dict[str, str]:
    new = dict(current)
    names = [c.name for c in ops]
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    for c in ops:
        tp = TOPIC_PROPS.get(c.name)
        if tp is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {c.name}")
        op = c.config_operation
        if op == SET:
            if c.value is None:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Null value not supported for : {c.name}")
            new[c.name] = c.value
        elif op == DELETE:
            new.pop(c.name, None)
        elif op in (APPEND, SUBTRACT):
            if tp.prop.type != "list":
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Config value append is not allowed for config key: {c.name}")
            base = new.get(c.name)
            items = base.split(",") if base is not None else [
                format_value(x) for x in effective_topic_configs(ctx.broker.config, {})[c.name]  # type: ignore[union-attr]
            ]
            given = [x.strip() for x in (c.value or "").split(",") if x.strip()]
            if op == APPEND:
                items += [x for x in given if x not in items]
            else:
                items = [x for x in items if x not in given]
            new[c.name] = ",".join(items)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op}")
    return new


def handle_alter_configs(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    return _alter(ctx, req, incremental=False)


def handle_incremental_alter_configs(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    return _alter(ctx, req, incremental=True)
