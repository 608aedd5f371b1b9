"""`gregor configs`: describe and alter configs, as kafka-configs.sh does.

    gregor configs --describe --entity-type topics --entity-name t [--all]
    gregor configs --alter --entity-type topics --entity-name t --add-config 'retention.ms=1000,cleanup.policy=[compact,delete]'
    gregor configs --alter --entity-type brokers --entity-default --add-config log.retention.ms=3600000
    gregor configs --alter --entity-type brokers --entity-name 0 --delete-config message.max.bytes
    gregor configs --alter --entity-type groups --entity-name g --add-config consumer.heartbeat.interval.ms=3000
    gregor configs --alter --entity-type users --entity-name alice --add-config 'SCRAM-SHA-256=[password=s]'
    gregor configs --alter --entity-type clients --entity-default --add-config producer_byte_rate=1048576

Topics, brokers and groups are altered through confluent-kafka's AdminClient (IncrementalAlterConfigs);
the cluster-wide broker default (`--entity-type brokers --entity-default`, the empty broker name the
reference client refuses) and every describe (the reference client keeps synonyms by name, losing a
broker property's dynamic and default values) go on Gregor's own codec. Users and clients are
`gregor quotas` (quotas) and `gregor users` (SCRAM credentials) under the same options. Values of
sensitive configs are never shown. `--command-config FILE` takes Kafka client properties.
"""

from __future__ import annotations

import argparse
from typing import Any

from gregor.protocol import apis
from gregor.tools.common import (
    EntityNameAction,
    HelpFormatter,
    ToolError,
    UsageError,
    add_bootstrap,
    add_command_config,
    add_request_timeout,
    bootstrap,
    check_reachable,
    client_config,
    client_security_config,
    delete_config_keys,
    is_no_answer,
    kafka_message,
    no_answer,
    read_command_config,
    timeout_s,
)
from gregor.tools.controller_client import error_name

ENTITY_TYPES = ("topics", "brokers", "groups", "users", "clients")
# Kafka's ConfigSource ids (DescribeConfigs v1+) and the names kafka-configs.sh prints.
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
           7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
# What --describe without --all lists: the configs set dynamically on the entity itself.
_DYNAMIC = {"topics": {1}, "brokers": {2, 3}, "groups": {8}}
_RESOURCE = {"topics": 2, "brokers": 4, "groups": 32}
_NOUN = {"topics": "topic", "brokers": "broker", "groups": "group"}
SET, DELETE = 0, 1


def add_subcommands(sub: Any) -> None:
    p = sub.add_parser("configs", help="describe and alter topic, broker, group, user and client configs "
                                       "(like kafka-configs.sh)", description=__doc__, formatter_class=HelpFormatter)
    add_bootstrap(p)
    add_request_timeout(p)
    add_command_config(p)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--describe", action="store_true", help="show configs")
    mode.add_argument("--alter", action="store_true", help="add or delete configs")
    p.add_argument("--all", action="store_true", help="with --describe: every config, not only the dynamic ones")
    p.add_argument("--entity-type", action="append", default=[], choices=ENTITY_TYPES,
                   help="what to configure (users and clients may be given together for a user's client quota)")
    p.add_argument("--entity-name", action=EntityNameAction, dest="entity_names", metavar="NAME",
                   help="the topic, broker id, group, user or client-id")
    p.add_argument("--entity-default", action=EntityNameAction, dest="entity_names", nargs=0,
                   help="the default entity: the cluster-wide broker default, the default user or client-id")
    p.add_argument("--add-config", metavar="K=V,K=[V1,V2]", help="configs to set (a list value in brackets)")
    p.add_argument("--delete-config", metavar="K,K", help="configs to remove")
    p.set_defaults(func=run_configs, entity_names=None)


def parse_add_config(text: str) -> dict[str, str]:
    """'a=1,b=[x,y]' -> {'a': '1', 'b': 'x,y'}: kafka-configs.sh's syntax, a list in brackets."""
    from gregor.tools.users import _split_top_level

    out: dict[str, str] = {}
    for item in _split_top_level(text):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise UsageError(f"--add-config expects KEY=VALUE[,KEY=VALUE], got {item!r}")
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key] = value
    return out


def run_configs(args: argparse.Namespace) -> int:
    types: list[str] = args.entity_type
    names: list[str | None] = args.entity_names or []
    if not types:
        raise UsageError("--entity-type is required (topics, brokers, groups, users or clients)")
    if len(names) > len(types):
        raise UsageError("--entity-name/--entity-default given without an --entity-type before it")
    if args.alter and not args.add_config and not args.delete_config:
        raise UsageError("--alter needs --add-config and/or --delete-config")
    if args.describe and (args.add_config or args.delete_config):
        raise UsageError("--add-config and --delete-config go with --alter")
    if set(types) & {"users", "clients"}:
        if set(types) - {"users", "clients"}:
            raise UsageError("users and clients cannot be combined with other entity types")
        return _users_clients(args)
    if len(types) != 1:
        raise UsageError(f"give one --entity-type ({types[0]} and {types[1]} do not combine)")
    kind = types[0]
    name = names[0] if names else "*all*"
    if name is None and kind != "brokers":
        raise UsageError(f"--entity-default is for brokers, users and clients, not {kind}")
    if args.alter and name == "*all*":
        raise UsageError(f"--alter needs --entity-name{' or --entity-default' if kind == 'brokers' else ''}")
    if kind == "brokers" and name not in (None, "*all*") and not str(name).isdigit():
        raise UsageError(f"--entity-name for brokers is a broker id, got {name!r}")
    if kind == "groups" and name == "*all*":
        raise UsageError("--describe --entity-type groups needs --entity-name")
    if args.alter:
        return _alter(args, kind, name)
    return _describe(args, kind, name)


# --- users and clients: the quota and SCRAM tools ----------------------------------------------------

def _users_clients(args: argparse.Namespace) -> int:
    """Quotas (gregor quotas) and SCRAM credentials (gregor users) under kafka-configs.sh's options."""
    from gregor.security.quotas import QUOTA_TYPES
    from gregor.tools import quotas, users

    user_only = args.entity_type == ["users"]
    if args.describe:
        quotas.run_quotas(args)
        names = args.entity_names or []
        if user_only and names and names[0] is not None:
            args.entity_name = names[0]
            users.cmd_describe(args)
        return 0
    keys = {i.partition("=")[0].strip() for i in users._split_top_level(args.add_config or "")}
    keys |= set(delete_config_keys(args))
    scram = keys & set(users.SCRAM_NAMES)
    if scram:
        if keys - scram:
            raise UsageError("give SCRAM credentials and quotas in separate commands")
        if not user_only or not args.entity_names or args.entity_names[0] is None:
            raise UsageError("SCRAM credentials need --entity-type users --entity-name USER")
        args.entity_name = args.entity_names[0]
        return users.cmd_alter(args)
    unknown = keys - set(QUOTA_TYPES)
    if unknown:
        raise UsageError(f"unknown {'/'.join(args.entity_type)} config(s): {', '.join(sorted(unknown))} "
                         f"(quotas: {', '.join(QUOTA_TYPES)}; SCRAM: {', '.join(users.SCRAM_NAMES)})")
    return quotas.run_quotas(args)


# --- topics, brokers, groups ------------------------------------------------------------------------

def _admin(args: argparse.Namespace) -> Any:
    from confluent_kafka.admin import AdminClient

    extra: dict[str, Any] = {"socket.timeout.ms": int(timeout_s(args) * 1000)}
    if args.command_config:
        extra.update(client_security_config(read_command_config(args.command_config)))
    servers = bootstrap(args)
    check_reachable(servers, timeout_s(args))
    try:
        return AdminClient(client_config(servers, **extra))
    except Exception as e:  # librdkafka refuses an unknown or invalid property
        raise UsageError(f"--command-config: {kafka_message(e)}") from None


def _failure(args: argparse.Namespace, what: str, e: Exception) -> ToolError:
    if is_no_answer(e):
        return no_answer(args, e)
    return ToolError(f"{what}: {kafka_message(e)}")


def _wire(args: argparse.Namespace, api_key: int, version: int, body: dict[str, Any]) -> Any:
    """A request on Gregor's codec to the first bootstrap server that answers, secured as
    --command-config says (the broker default: the reference client refuses an empty broker name)."""
    from gregor.tools.quotas import _connect

    conn = _connect(args)
    try:
        return conn.request(apis.BY_KEY[api_key], version, body)
    finally:
        conn.close()


Entry = tuple[str, str | None, int, bool, list[tuple[int, str, str | None]]]  # name, value, source, sensitive, synonyms


def _describe_entries(args: argparse.Namespace, kind: str, name: str | None) -> list[Entry]:
    """DescribeConfigs v4 on Gregor's codec: confluent-kafka keeps synonyms in a dict by name, which loses
    a broker property's dynamic and default values (both named like it), so describing goes on the wire."""
    r = _wire(args, 32, 4, {"resources": [{"resource_type": _RESOURCE[kind], "resource_name": name or "",
                                           "configuration_keys": None}],
                            "include_synonyms": True, "include_documentation": False})
    res = r.results[0]
    if res.error_code:
        what = "the broker default" if name is None else f"{_NOUN[kind]} {name}"
        raise ToolError(f"{what}: {error_name(res.error_code)}: {res.error_message}")
    return [(c.name, c.value, c.config_source, c.is_sensitive,
             [(s.source, s.name, s.value) for s in c.synonyms or []]) for c in res.configs]


def _entity_names(args: argparse.Namespace, kind: str) -> list[str | None]:
    """Every topic, or every broker and the broker default, for --describe without --entity-name."""
    admin = _admin(args)
    try:
        md = admin.list_topics(timeout=timeout_s(args))
    except Exception as e:
        raise _failure(args, "listing the cluster", e) from None
    if kind == "topics":
        return sorted(t for t in md.topics if not t.startswith("__"))
    return [str(b) for b in sorted(md.brokers)] + [None]


def _describe(args: argparse.Namespace, kind: str, name: str | None) -> int:
    for n in _entity_names(args, kind) if name == "*all*" else [name]:
        entries = _describe_entries(args, kind, n)
        if n is None:
            title = "Default configs for brokers in the cluster are:"
        else:
            title = f"{'All' if args.all else 'Dynamic'} configs for {_NOUN[kind]} {n} are:"
        print(title)
        for ename, value, source, sensitive, synonyms in sorted(entries):
            if n is not None and not args.all and source not in _DYNAMIC[kind]:
                continue
            shown = "null" if sensitive or value is None else value
            syn = ", ".join(f"{SOURCES.get(src, src)}:{sname}={'null' if sensitive or sval is None else sval}"
                            for src, sname, sval in synonyms)
            print(f"  {ename}={shown} sensitive={str(sensitive).lower()} synonyms={{{syn}}}")
    return 0


def _alter(args: argparse.Namespace, kind: str, name: str | None) -> int:
    adds = parse_add_config(args.add_config or "")
    deletes = delete_config_keys(args)
    if set(adds) & set(deletes):
        raise UsageError("a config cannot be both added and deleted")
    if name is None:
        configs = [{"name": k, "config_operation": SET, "value": v} for k, v in adds.items()]
        configs += [{"name": k, "config_operation": DELETE, "value": None} for k in deletes]
        r = _wire(args, 44, 1, {"resources": [{"resource_type": 4, "resource_name": "", "configs": configs}],
                                "validate_only": False})
        res = r.responses[0]
        if res.error_code:
            raise ToolError(f"the broker default: {error_name(res.error_code)}: {res.error_message}")
        print("Completed updating default config for brokers in the cluster.")
        return 0
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    types = {"topics": ConfigResource.Type.TOPIC, "brokers": ConfigResource.Type.BROKER,
             "groups": ConfigResource.Type.GROUP}
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in adds.items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in deletes]
    res = ConfigResource(types[kind], name, incremental_configs=entries)
    admin = _admin(args)
    try:
        admin.incremental_alter_configs([res], request_timeout=timeout_s(args))[res].result()
    except KafkaException as e:
        raise _failure(args, f"{_NOUN[kind]} {name}", e) from None
    print(f"Completed updating config for {_NOUN[kind]} {name}.")
    return 0
