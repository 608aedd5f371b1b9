"""`gregor acls`: add, remove and list ACLs, with kafka-acls.sh's options and output.

  gregor acls --bootstrap-server H:P --add --allow-principal User:alice --operation Read --topic orders
  gregor acls --add --allow-principal User:bob --consumer --topic logs- --resource-pattern-type prefixed --group app
  gregor acls --list --topic orders
  gregor acls --remove --force --deny-principal User:eve --operation All --cluster

--command-config reads a client properties file (security.protocol, sasl.mechanism, ... ; Kafka's
sasl.jaas.config with username="..." password="..." becomes librdkafka's sasl.username/sasl.password).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from typing import Any

from gregor.tools.common import (
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
    kafka_message,
    read_command_config,
    timeout_s,
)

CLUSTER_NAME = "kafka-cluster"
OPERATIONS = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "DescribeConfigs",
              "AlterConfigs", "IdempotentWrite")


def add_subcommands(sub: Any) -> None:
    p = sub.add_parser(
        "acls", formatter_class=HelpFormatter, help="add, remove and list ACLs (like kafka-acls.sh)",
        description="Add, remove and list ACLs with kafka-acls.sh's options.",
        epilog="examples:\n"
               "  gregor acls --add --allow-principal User:alice --operation Read --topic orders\n"
               "  gregor acls --add --allow-principal User:bob --consumer --topic logs- "
               "--resource-pattern-type prefixed --group app\n"
               "  gregor acls --list --topic orders\n"
               "  gregor acls --remove --force --topic orders")
    add_bootstrap(p)
    add_request_timeout(p)
    add_command_config(p, "client properties (security, SASL) for the admin client")
    act = p.add_mutually_exclusive_group()
    act.add_argument("--add", action="store_true", help="add the ACLs")
    act.add_argument("--remove", action="store_true", help="remove the matching ACLs")
    act.add_argument("--list", action="store_true", help="list the ACLs of the resources (all without one)")
    p.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME", help="principal to allow")
    p.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME", help="principal to deny")
    p.add_argument("--principal", help="(list) only the ACLs of this principal")
    p.add_argument("--allow-host", action="append", default=[], help="host the allowed principals connect from "
                                                                     "(default: *)")
    p.add_argument("--deny-host", action="append", default=[], help="host the denied principals connect from "
                                                                   "(default: *)")
    p.add_argument("--operation", action="append", default=[], type=_operation_arg, metavar="OP",
                   help=f"operation ({', '.join(OPERATIONS)}; repeatable; default All)")
    p.add_argument("--topic", action="append", default=[], help="topic resource (repeatable; '*' for all)")
    p.add_argument("--group", action="append", default=[], help="consumer group resource (repeatable; '*' for all)")
    p.add_argument("--transactional-id", action="append", default=[], help="transactional id resource (repeatable)")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", default="literal", type=str.lower,
                   choices=("literal", "prefixed", "any", "match"),
                   help="how resource names match: add takes literal or prefixed; list and remove also any and match")
    p.add_argument("--producer", action="store_true",
                   help="convenience: WRITE, DESCRIBE, CREATE on the topics (+ WRITE, DESCRIBE on --transactional-id; "
                        "+ IDEMPOTENT_WRITE on the cluster with --idempotent)")
    p.add_argument("--idempotent", action="store_true", help="(with --producer) allow idempotent producing")
    p.add_argument("--consumer", action="store_true", help="convenience: READ, DESCRIBE on the topics, READ on the groups")
    p.add_argument("--force", action="store_true", help="(remove) do not ask for confirmation")
    p.set_defaults(func=cmd_acls)


def _operation_arg(text: str) -> str:
    key = text.replace("_", "").replace("-", "").lower()
    for op in OPERATIONS:
        if op.lower() == key:
            return op
    raise argparse.ArgumentTypeError(f"unknown operation {text!r} (choose from {', '.join(OPERATIONS)})")


def _resources(args: argparse.Namespace) -> list[tuple[Any, str]]:
    from confluent_kafka.admin import ResourceType

    out = [(ResourceType.TOPIC, t) for t in args.topic] + [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.BROKER, CLUSTER_NAME))
    return out


def _bindings_to_add(args: argparse.Namespace) -> list[Any]:
    """The (resource, operations) pairs the options ask for, crossed with the principals and hosts."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    pattern = {"literal": ResourcePatternType.LITERAL, "prefixed": ResourcePatternType.PREFIXED}.get(
        args.resource_pattern_type)
    if pattern is None:
        raise UsageError("--add takes --resource-pattern-type literal or prefixed")
    ops = [getattr(AclOperation, _const(o)) for o in (args.operation or ["All"])]
    wanted: list[tuple[Any, str, list[Any]]] = []
    if args.producer or args.consumer:
        if args.operation:
            raise UsageError("--operation does not go with --producer or --consumer")
        if not args.topic:
            raise UsageError("--producer and --consumer need --topic")
        for t in args.topic:
            t_ops = []
            if args.producer:
                t_ops += [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE]
            if args.consumer:
                t_ops += [AclOperation.READ, AclOperation.DESCRIBE]
            wanted.append((ResourceType.TOPIC, t, list(dict.fromkeys(t_ops))))
        if args.consumer:
            if not args.group:
                raise UsageError("--consumer needs --group")
            wanted += [(ResourceType.GROUP, g, [AclOperation.READ]) for g in args.group]
        if args.producer:
            wanted += [(ResourceType.TRANSACTIONAL_ID, t, [AclOperation.WRITE, AclOperation.DESCRIBE])
                       for t in args.transactional_id]
            if args.idempotent:
                wanted.append((ResourceType.BROKER, CLUSTER_NAME, [AclOperation.IDEMPOTENT_WRITE]))
    else:
        resources = _resources(args)
        if not resources:
            raise UsageError("give a resource: --topic, --group, --transactional-id or --cluster")
        wanted = [(rt, name, ops) for rt, name in resources]
    entries = [(p, h, AclPermissionType.ALLOW) for p in args.allow_principal for h in (args.allow_host or ["*"])]
    entries += [(p, h, AclPermissionType.DENY) for p in args.deny_principal for h in (args.deny_host or ["*"])]
    if not entries:
        raise UsageError("--add needs --allow-principal or --deny-principal")
    return [AclBinding(rt, name, ResourcePatternType.LITERAL if rt == ResourceType.BROKER else pattern, principal,
                       host, op, perm)
            for rt, name, r_ops in wanted for op in r_ops for principal, host, perm in entries]


def _const(op: str) -> str:
    """'DescribeConfigs' -> 'DESCRIBE_CONFIGS' (confluent-kafka's enum names)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", op).upper()


def _filters(args: argparse.Namespace) -> list[Any]:
    """Filters for list and remove: one per resource (or any resource), principal, host and operation."""
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    pattern = getattr(ResourcePatternType, args.resource_pattern_type.upper())
    resources: list[tuple[Any, str | None]] = list(_resources(args)) or [(ResourceType.ANY, None)]
    principals: list[tuple[str | None, str | None, Any]] = \
        [(p, h, AclPermissionType.ALLOW) for p in args.allow_principal for h in (args.allow_host or [None])]
    principals += [(p, h, AclPermissionType.DENY) for p in args.deny_principal for h in (args.deny_host or [None])]
    if args.principal:
        principals.append((args.principal, None, AclPermissionType.ANY))
    if not principals:
        principals = [(None, None, AclPermissionType.ANY)]
    ops = [getattr(AclOperation, _const(o)) for o in args.operation] or [AclOperation.ANY]
    return [AclBindingFilter(rt, name, ResourcePatternType.ANY if rt == ResourceType.ANY else pattern, principal,
                             host, op, perm)
            for rt, name in resources for principal, host, perm in principals for op in ops]


def _pattern_text(b: Any) -> str:
    rt = "CLUSTER" if b.restype.name == "BROKER" else b.restype.name
    return f"ResourcePattern(resourceType={rt}, name={b.name}, patternType={b.resource_pattern_type.name})"


def _entry_text(b: Any) -> str:
    return (f"(principal={b.principal}, host={b.host}, operation={b.operation.name}, "
            f"permissionType={b.permission_type.name})")


def _print_grouped(bindings: list[Any], header: str) -> None:
    by_pattern: dict[str, list[str]] = defaultdict(list)
    for b in bindings:
        by_pattern[_pattern_text(b)].append(_entry_text(b))
    for pattern, entries in sorted(by_pattern.items()):
        print(f"{header} `{pattern}`: ")
        for e in sorted(set(entries)):
            print(f" \t{e} ")
        print()


def cmd_acls(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    if not (args.add or args.remove or args.list):
        raise UsageError("give one of --add, --remove, --list")
    servers = bootstrap(args)
    extra = client_security_config(read_command_config(args.command_config))
    if extra.get("security.protocol", "PLAINTEXT").upper() == "PLAINTEXT":
        check_reachable(servers, timeout_s(args))
    admin = AdminClient(client_config(servers, **{"socket.timeout.ms": int(timeout_s(args) * 1000), **extra}))
    t = timeout_s(args)
    try:
        if args.add:
            bindings = _bindings_to_add(args)
            _print_grouped(bindings, "Adding ACLs for resource")
            for f in admin.create_acls(bindings, request_timeout=t).values():
                f.result(t)
            found = []
            for b in bindings:
                from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType

                flt = AclBindingFilter(b.restype, b.name, b.resource_pattern_type, None, None, AclOperation.ANY,
                                       AclPermissionType.ANY)
                found += admin.describe_acls(flt, request_timeout=t).result(t)
            _print_grouped(found, "Current ACLs for resource")
            return 0
        filters = _filters(args)
        if args.list:
            found = []
            for flt in filters:
                found += admin.describe_acls(flt, request_timeout=t).result(t)
            _print_grouped(found, "Current ACLs for resource")
            return 0
        if not args.force:
            print("Are you sure you want to remove the ACLs matching the options? (y/n)", file=sys.stderr)
            if sys.stdin.readline().strip().lower() not in ("y", "yes"):
                return 1
        removed = [b for f in admin.delete_acls(filters, request_timeout=t).values() for b in f.result(t)]
        _print_grouped(removed, "Removed ACLs for resource")
        return 0
    except KafkaException as e:
        raise ToolError(kafka_message(e)) from None
