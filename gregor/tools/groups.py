"""`gregor groups`: list, describe, delete consumer groups and reset their offsets.

Like kafka-consumer-groups.sh, over the wire with the reference client, so it works
against any Kafka-protocol broker. Resetting is a dry run unless --execute is given,
and only an inactive (Empty) group can be reset, as in Kafka.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _consumer(bootstrap: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": "gregor-groups-tool", "enable.auto.commit": False})


def _committed(admin: Any, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions}


def _describe(admin: Any, group: str) -> Any:
    return admin.describe_consumer_groups([group])[group].result(10)


def _state_name(state: Any) -> str:
    name = getattr(state, "name", str(state))
    return {"PREPARING_REBALANCING": "PreparingRebalance", "COMPLETING_REBALANCING": "CompletingRebalance",
            "STABLE": "Stable", "EMPTY": "Empty", "DEAD": "Dead"}.get(name, name.title())


def cmd_list(args: argparse.Namespace) -> int:
    admin = _admin(args.bootstrap_server)
    res = admin.list_consumer_groups().result(10)
    for g in sorted(res.valid, key=lambda g: g.group_id):
        if args.state:
            print(f"{g.group_id}\t{_state_name(g.state)}")
        else:
            print(g.group_id)
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    from confluent_kafka import TopicPartition

    admin = _admin(args.bootstrap_server)
    consumer = _consumer(args.bootstrap_server)
    try:
        desc = _describe(admin, args.group)
        if args.members:
            print(f"{'GROUP':<24} {'CONSUMER-ID':<56} {'HOST':<16} {'CLIENT-ID':<24} #PARTITIONS")
            for m in desc.members:
                n = len(m.assignment.topic_partitions) if m.assignment else 0
                print(f"{args.group:<24} {m.member_id:<56} {m.host:<16} {m.client_id:<24} {n}")
            return 0
        owner: dict[tuple[str, int], Any] = {}
        for m in desc.members:
            for tp in (m.assignment.topic_partitions if m.assignment else []):
                owner[(tp.topic, tp.partition)] = m
        committed = _committed(admin, args.group)
        keys = sorted(set(committed) | set(owner))
        print(f"Consumer group '{args.group}' is {_state_name(desc.state)}.")
        print(f"{'GROUP':<20} {'TOPIC':<24} {'PARTITION':>9} {'CURRENT-OFFSET':>14} {'LOG-END-OFFSET':>14} "
              f"{'LAG':>8} {'CONSUMER-ID':<40} {'HOST':<16} CLIENT-ID")
        for topic, p in keys:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            cur = committed.get((topic, p), -1)
            lag = high - cur if cur >= 0 else "-"
            m = owner.get((topic, p))
            print(f"{args.group:<20} {topic:<24} {p:>9} {cur if cur >= 0 else '-':>14} {high:>14} {lag:>8} "
                  f"{m.member_id if m else '-':<40} {m.host if m else '-':<16} {m.client_id if m else '-'}")
    finally:
        consumer.close()
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    admin = _admin(args.bootstrap_server)
    try:
        admin.delete_consumer_groups([args.group])[args.group].result(10)
    except KafkaException as e:
        print(f"Error: deletion of group '{args.group}' failed: {e.args[0].str()}", file=sys.stderr)
        return 1
    print(f"Deletion of requested consumer groups ('{args.group}') was successful.")
    return 0


def _targets(args: argparse.Namespace, consumer: Any, partitions: list[tuple[str, int]],
             committed: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    from confluent_kafka import TopicPartition

    out: dict[tuple[str, int], int] = {}
    if args.to_datetime:
        ts = int(datetime.fromisoformat(args.to_datetime).timestamp() * 1000)
        found = consumer.offsets_for_times([TopicPartition(t, p, ts) for t, p in partitions], timeout=10)
        for tp in found:
            out[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else \
                consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)[1]
        return out
    for t, p in partitions:
        low, high = consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10)
        if args.to_earliest:
            target = low
        elif args.to_latest:
            target = high
        elif args.to_offset is not None:
            target = args.to_offset
        else:
            target = max(committed.get((t, p), low), 0) + args.shift_by
        out[(t, p)] = min(max(target, low), high)  # Kafka clamps to the log's range
    return out


def cmd_reset(args: argparse.Namespace) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    chosen = [x for x in (args.to_earliest, args.to_latest, args.to_offset is not None,
                          args.to_datetime is not None, args.shift_by is not None) if x]
    if len(chosen) != 1:
        print("Error: give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by",
              file=sys.stderr)
        return 2
    admin = _admin(args.bootstrap_server)
    consumer = _consumer(args.bootstrap_server)
    try:
        committed = _committed(admin, args.group)
        if args.topic:
            md = consumer.list_topics(args.topic, timeout=10).topics[args.topic]
            if md.error is not None:
                print(f"Error: topic {args.topic}: {md.error}", file=sys.stderr)
                return 1
            partitions = [(args.topic, p) for p in sorted(md.partitions)]
        else:
            partitions = sorted(committed)
        targets = _targets(args, consumer, partitions, committed)
        print(f"{'GROUP':<20} {'TOPIC':<24} {'PARTITION':>9} NEW-OFFSET")
        for (t, p), off in sorted(targets.items()):
            print(f"{args.group:<20} {t:<24} {p:>9} {off}")
        if not args.execute:
            print("(dry run: add --execute to apply)")
            return 0
        desc = _describe(admin, args.group)
        if _state_name(desc.state) not in ("Empty", "Dead"):
            print(f"Error: Assignments can only be reset if the group '{args.group}' is inactive, but the current "
                  f"state is {_state_name(desc.state)}.", file=sys.stderr)
            return 1
        req = ConsumerGroupTopicPartitions(args.group, [TopicPartition(t, p, o) for (t, p), o in targets.items()])
        admin.alter_consumer_group_offsets([req])[args.group].result(10)
    finally:
        consumer.close()
    return 0


def add_subcommands(sub: Any) -> None:
    g = sub.add_parser("groups", help="list, describe, delete consumer groups and reset their offsets")
    g.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    gs = g.add_subparsers(dest="groups_command", required=True)

    p = gs.add_parser("list", help="list consumer groups")
    p.add_argument("--state", action="store_true", help="show each group's state")
    p.set_defaults(func=cmd_list)

    p = gs.add_parser("describe", help="committed offsets, log end offsets and lag per partition")
    p.add_argument("group")
    p.add_argument("--members", action="store_true", help="show members instead of offsets")
    p.set_defaults(func=cmd_describe)

    p = gs.add_parser("delete", help="delete an inactive group and its offsets")
    p.add_argument("group")
    p.set_defaults(func=cmd_delete)

    p = gs.add_parser("reset-offsets", help="move an inactive group's committed offsets (dry run by default)")
    p.add_argument("group")
    p.add_argument("--topic", help="reset every partition of this topic (default: partitions with commits)")
    p.add_argument("--to-earliest", action="store_true")
    p.add_argument("--to-latest", action="store_true")
    p.add_argument("--to-offset", type=int)
    p.add_argument("--to-datetime", help="ISO 8601, e.g. 2026-01-31T12:00:00+00:00")
    p.add_argument("--shift-by", type=int)
    p.add_argument("--execute", action="store_true", help="apply the reset (default: print it only)")
    p.set_defaults(func=cmd_reset)
