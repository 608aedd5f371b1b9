"""`gregor topics`: create, list, describe, alter and delete topics, with kafka-topics.sh's options
and output, over the wire with the reference client (so it works against any Kafka broker)."""

from __future__ import annotations

import argparse
from typing import Any

from gregor.tools.common import (
    HelpFormatter,
    ToolError,
    UsageError,
    add_bootstrap,
    add_request_timeout,
    admin_client,
    describe_topic,
    error_code,
    kafka_message,
    list_topic_names,
    parse_key_values,
    timeout_s,
)

ACTIONS = ("create", "list", "describe", "alter", "delete")
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")
_DEFAULT_CONFIG_SOURCE = 5  # DescribeConfigs: a value nobody set (Kafka's ConfigSource.DEFAULT_CONFIG)


def _action(args: argparse.Namespace) -> str:
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        raise UsageError("give exactly one of --create, --list, --describe, --alter, --delete")
    action = chosen[0]
    if action in ("create", "alter", "delete") and not args.topic:
        raise UsageError(f"--{action} needs --topic NAME")
    if args.config and action not in ("create", "alter"):
        raise UsageError("--config applies to --create and --alter only")
    if args.delete_config and action != "alter":
        raise UsageError("--delete-config applies to --alter only")
    if action == "alter" and args.partitions is None and not args.config and not args.delete_config:
        raise UsageError("--alter needs --partitions N, --config KEY=VALUE or --delete-config KEY")
    if args.exclude_internal and action not in ("list", "describe"):
        raise UsageError("--exclude-internal applies to --list and --describe only")
    if action not in ("create", "alter") and (args.partitions is not None):
        raise UsageError("--partitions applies to --create and --alter only")
    if action != "create" and args.replication_factor is not None:
        raise UsageError("--replication-factor applies to --create only")
    if args.replica_assignment is not None:
        if action not in ("create", "alter"):
            raise UsageError("--replica-assignment applies to --create and --alter only")
        if action == "create" and (args.partitions is not None or args.replication_factor is not None):
            raise UsageError("--replica-assignment cannot be used with --partitions or --replication-factor")
        if action == "alter" and args.partitions is None:
            raise UsageError("--alter --replica-assignment needs --partitions N")
    filters = [f for f in _FILTERS if getattr(args, f)]
    if filters and action != "describe":
        raise UsageError(f"--{filters[0].replace('_', '-')} applies to --describe only")
    if len(filters) > 1:
        raise UsageError("give at most one of " + ", ".join("--" + f.replace("_", "-") for f in _FILTERS))
    return action


_FILTERS = ("under_replicated_partitions", "under_min_isr_partitions", "at_min_isr_partitions",
            "unavailable_partitions")


def parse_replica_assignment(text: str) -> list[list[int]]:
    """kafka-topics.sh's --replica-assignment: partitions separated by commas, each partition's broker
    ids by colons ("1:2,2:3" is partition 0 on 1 and 2, partition 1 on 2 and 3)."""
    out: list[list[int]] = []
    for i, part in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in part.split(":")]
        except ValueError:
            raise UsageError(f"--replica-assignment: partition {i} is {part!r}, not broker ids separated by ':'") from None
        if len(set(brokers)) != len(brokers):
            raise UsageError(f"--replica-assignment: partition {i} has a duplicate broker id: {part}")
        if out and len(brokers) != len(out[0]):
            raise UsageError(f"--replica-assignment: partition {i} has {len(brokers)} replicas, partition 0 "
                             f"{len(out[0])}; every partition needs the same number")
        out.append(brokers)
    return out


def _result(fut: Any, args: argparse.Namespace, what: str, ignore: int | None = None) -> bool:
    """Wait for one admin future; False if it failed with the `ignore` error code (--if-exists and
    --if-not-exists), a ToolError with the broker's message for any other failure."""
    from confluent_kafka import KafkaException

    try:
        fut.result(timeout_s(args) + 5)  # the request's own timeout settles it first
    except KafkaException as e:
        if ignore is not None and error_code(e) == ignore:
            return False
        raise ToolError(f"{what} failed: {kafka_message(e)}") from None
    return True


def _non_default_configs(admin: Any, args: argparse.Namespace, names: list[str]) -> dict[str, list[str]]:
    """Each topic's configs whose value was set by someone (the topic or the broker's properties),
    as kafka-topics.sh lists them under Configs: the ones DescribeConfigs does not mark as defaults."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource

    if not names:
        return {}
    futures = admin.describe_configs([ConfigResource("TOPIC", n) for n in names],
                                     request_timeout=timeout_s(args))
    out: dict[str, list[str]] = {}
    for res, fut in futures.items():
        try:
            entries = fut.result()
        except KafkaException:
            out[res.name] = []
            continue
        shown = []
        for name, e in sorted(entries.items()):
            source = int(getattr(e.source, "value", e.source))
            if source == _DEFAULT_CONFIG_SOURCE or e.is_default:
                continue
            shown.append(f"{name}={'<sensitive>' if e.is_sensitive else e.value}")
        out[res.name] = shown
    return out


def _names(admin: Any, args: argparse.Namespace) -> list[str]:
    names = list_topic_names(admin, args)
    if args.exclude_internal:  # the broker's own topics (__consumer_offsets, __transaction_state)
        names = [n for n in names if n not in INTERNAL_TOPICS]
    return names


def _ids(nodes: list[Any]) -> str:
    return ",".join(str(n.id) for n in nodes)


def _min_isr(admin: Any, args: argparse.Namespace, names: list[str]) -> dict[str, int]:
    """Each topic's min.insync.replicas (its override or the broker's default)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource

    out: dict[str, int] = {}
    if not names:
        return out
    for res, fut in admin.describe_configs([ConfigResource("TOPIC", n) for n in names],
                                           request_timeout=timeout_s(args)).items():
        try:
            entry = fut.result().get("min.insync.replicas")
        except KafkaException:
            continue
        if entry is not None and entry.value is not None:
            out[res.name] = int(entry.value)
    return out


def _describe(admin: Any, args: argparse.Namespace) -> None:
    """kafka-topics.sh --describe: a line per topic (left out under a partition filter, as Kafka does)
    and a line per partition, with Offline: the replicas on brokers not live."""
    names = [args.topic] if args.topic else _names(admin, args)
    descriptions = [describe_topic(admin, args, n) for n in names]
    filtered = next((f for f in _FILTERS if getattr(args, f)), None)
    configs = _non_default_configs(admin, args, names) if filtered is None else {}
    min_isr = _min_isr(admin, args, names) if filtered in ("under_min_isr_partitions", "at_min_isr_partitions") else {}
    live = {n.id for n in admin.describe_cluster(request_timeout=timeout_s(args)).result(timeout_s(args) + 5).nodes}
    for d in descriptions:
        rf = len(d.partitions[0].replicas) if d.partitions else 0
        if filtered is None:
            # Kafka writes topic ids in URL-safe base64 (Uuid.toString); librdkafka in the standard alphabet.
            topic_id = str(d.topic_id).replace("+", "-").replace("/", "_")
            print(f"Topic: {d.name}\tTopicId: {topic_id}\tPartitionCount: {len(d.partitions)}\t"
                  f"ReplicationFactor: {rf}\tConfigs: {','.join(configs.get(d.name, []))}")
        for p in sorted(d.partitions, key=lambda p: p.id):
            has_leader = p.leader is not None and p.leader.id >= 0
            if not _shown(filtered, p, has_leader, live, min_isr.get(d.name)):
                continue
            leader = p.leader.id if has_leader else "none"
            offline = [r.id for r in p.replicas if r.id not in live]
            line = (f"\tTopic: {d.name}\tPartition: {p.id}\tLeader: {leader}\tReplicas: {_ids(p.replicas)}\t"
                    f"Isr: {_ids(p.isr)}")
            if offline:
                line += f"\tOffline: {','.join(map(str, offline))}"
            print(line)


def _shown(filtered: str | None, p: Any, has_leader: bool, live: set[int], min_isr: int | None) -> bool:
    """kafka-topics.sh's partition filters."""
    if filtered is None:
        return True
    if filtered == "under_replicated_partitions":
        return has_leader and len(p.isr) < len(p.replicas)
    if filtered == "unavailable_partitions":
        return not has_leader or p.leader.id not in live
    if filtered == "under_min_isr_partitions":
        return not has_leader or (min_isr is not None and len(p.isr) < min_isr)
    return min_isr is not None and len(p.isr) == min_isr  # at_min_isr_partitions


def _alter(admin: Any, args: argparse.Namespace, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions

    describe_topic(admin, args, args.topic)  # a missing topic is said so, in those words
    if args.partitions is not None:
        new = NewPartitions(args.topic, args.partitions)
        if args.replica_assignment is not None:
            # As kafka-topics.sh: the assignment lists every partition; the existing ones are left as they are.
            current = len(describe_topic(admin, args, args.topic).partitions)
            assignment = parse_replica_assignment(args.replica_assignment)
            if len(assignment) != args.partitions:
                raise UsageError(f"--replica-assignment names {len(assignment)} partitions, --partitions is "
                                 f"{args.partitions}")
            new = NewPartitions(args.topic, args.partitions, replica_assignment=assignment[current:])
        fut = admin.create_partitions([new], request_timeout=timeout_s(args))[args.topic]
        _result(fut, args, f"altering the partitions of topic '{args.topic}'")
        print(f"Topic '{args.topic}' now has {args.partitions} partitions.")
    if configs or args.delete_config:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in args.delete_config]
        res = ConfigResource("TOPIC", args.topic, incremental_configs=entries)
        for fut in admin.incremental_alter_configs([res], request_timeout=timeout_s(args)).values():
            _result(fut, args, f"altering the configs of topic '{args.topic}'")
        print(f"Updated configs of topic '{args.topic}'.")


def cmd_topics(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewTopic

    action = _action(args)
    configs = parse_key_values(args.config, "--config")
    admin = admin_client(args)
    if action == "list":
        for name in _names(admin, args):
            print(name)
    elif action == "describe":
        _describe(admin, args)
    elif action == "create":
        if args.replica_assignment is not None:
            assignment = parse_replica_assignment(args.replica_assignment)
            topic = NewTopic(args.topic, len(assignment), replica_assignment=assignment, config=configs)
        else:
            topic = NewTopic(args.topic, args.partitions if args.partitions is not None else -1,
                             args.replication_factor if args.replication_factor is not None else -1, config=configs)
        fut = admin.create_topics([topic], request_timeout=timeout_s(args))[args.topic]
        ignore = KafkaError.TOPIC_ALREADY_EXISTS if args.if_not_exists else None
        if _result(fut, args, f"creating topic '{args.topic}'", ignore):
            print(f"Created topic {args.topic}.")
    elif action == "alter":
        _alter(admin, args, configs)
    else:
        fut = admin.delete_topics([args.topic], request_timeout=timeout_s(args))[args.topic]
        ignore = KafkaError.UNKNOWN_TOPIC_OR_PART if args.if_exists else None
        if _result(fut, args, f"deleting topic '{args.topic}'", ignore):
            print(f"Deleted topic {args.topic}.")
    return 0


def add_subcommands(sub: Any) -> None:
    t = sub.add_parser("topics", formatter_class=HelpFormatter, help="create, list, describe, alter or delete topics",
                       description="Create, list, describe, alter or delete topics (the options of kafka-topics.sh).",
                       epilog="examples:\n"
                              "  gregor topics --create --topic events --partitions 8 --config retention.ms=86400000\n"
                              "  gregor topics --describe --topic events\n"
                              "  gregor topics --alter --topic events --partitions 12")
    actions = t.add_argument_group("actions (exactly one)")
    for a, text in [("create", "create --topic"), ("list", "list topic names"),
                    ("describe", "partitions, leaders, replicas and non-default configs of --topic (or all)"),
                    ("alter", "add partitions to --topic, or set/delete its configs"), ("delete", "delete --topic")]:
        actions.add_argument(f"--{a}", action="store_true", help=text)
    add_bootstrap(t)
    t.add_argument("--topic", help="the topic to act on")
    t.add_argument("--partitions", type=int, help="partition count (--create: default the broker's num.partitions; "
                                                  "--alter: the new, larger count)")
    t.add_argument("--replication-factor", type=int,
                   help="(--create) replicas per partition (default: the broker's default.replication.factor)")
    t.add_argument("--replica-assignment", metavar="ASSIGNMENT",
                   help="(--create, --alter) broker ids per partition: partitions separated by ',', replicas by "
                        "':' (\"1:2,2:3\"); the first replica is the preferred leader")
    t.add_argument("--under-replicated-partitions", action="store_true",
                   help="(--describe) only partitions whose ISR is smaller than their replicas")
    t.add_argument("--under-min-isr-partitions", action="store_true",
                   help="(--describe) only partitions whose ISR is below min.insync.replicas")
    t.add_argument("--at-min-isr-partitions", action="store_true",
                   help="(--describe) only partitions whose ISR is exactly min.insync.replicas")
    t.add_argument("--unavailable-partitions", action="store_true",
                   help="(--describe) only partitions without a live leader")
    t.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="(--create, --alter) set a topic config; repeatable")
    t.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                   help="(--alter) return a topic config to its default; repeatable")
    t.add_argument("--exclude-internal", action="store_true",
                   help="(--list, --describe) leave out internal topics such as __consumer_offsets")
    t.add_argument("--if-not-exists", action="store_true", help="(--create) succeed if the topic exists")
    t.add_argument("--if-exists", action="store_true", help="(--delete) succeed if the topic does not exist")
    add_request_timeout(t)
    t.set_defaults(func=cmd_topics)
