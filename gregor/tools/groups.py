"""`gregor groups`: list, describe, delete consumer groups and reset their offsets.

Like kafka-consumer-groups.sh, over the wire with the reference client, so it works
against any Kafka-protocol broker. Resetting is a dry run unless --execute is given,
and only an inactive (Empty) group can be reset, as in Kafka.

One flat parser takes both spellings, `gregor groups describe G` and Kafka's
`gregor groups --describe --group G`, with every option accepted anywhere on the line.
"""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from gregor.tools.common import (
    HelpFormatter,
    ToolError,
    UsageError,
    add_bootstrap,
    add_request_timeout,
    admin_client,
    bootstrap,
    client_config,
    describe_topic,
    is_no_answer,
    kafka_message,
    no_answer,
    timeout_s,
)

ACTIONS = ("list", "describe", "delete", "reset-offsets")
_RESET_OPTIONS = ("to_earliest", "to_latest", "to_offset", "to_datetime", "shift_by")


def _consumer(args: argparse.Namespace) -> Any:
    """A consumer used only for watermarks and offsets by time: it never joins a group."""
    from confluent_kafka import Consumer

    return Consumer(client_config(bootstrap(args), **{"group.id": "gregor-groups-tool", "enable.auto.commit": False}))


def _committed(admin: Any, args: argparse.Namespace) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(args.group)],
                                            request_timeout=timeout_s(args))[args.group]
    return {(tp.topic, tp.partition): tp.offset for tp in fut.result().topic_partitions}


def _describe(admin: Any, args: argparse.Namespace) -> Any:
    return admin.describe_consumer_groups([args.group], request_timeout=timeout_s(args))[args.group].result()


def _state_name(state: Any) -> str:
    name = getattr(state, "name", str(state))
    return {"PREPARING_REBALANCING": "PreparingRebalance", "COMPLETING_REBALANCING": "CompletingRebalance",
            "STABLE": "Stable", "EMPTY": "Empty", "DEAD": "Dead"}.get(name, name.title())


def cmd_list(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    res = admin.list_consumer_groups(request_timeout=timeout_s(args)).result()
    if res.errors:  # e.g. a broker did not answer: a list without its groups would be a lie
        if is_no_answer(res.errors[0]):
            raise no_answer(args, res.errors[0])
        raise ToolError(f"listing groups at {bootstrap(args)} failed: {kafka_message(res.errors[0])}")
    for g in sorted(res.valid, key=lambda g: g.group_id):
        if args.state:
            print(f"{g.group_id}\t{_state_name(g.state)}")
        else:
            print(g.group_id)
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException, TopicPartition

    admin = admin_client(args)
    desc = _describe(admin, args)
    committed = _committed(admin, args)
    if _state_name(desc.state) == "Dead" and not desc.members and not committed:
        # DescribeGroups answers a group it never heard of with state Dead and no error, as Kafka does.
        raise ToolError(f"Consumer group '{args.group}' does not exist.")
    if args.state and args.members:
        raise UsageError("--state and --members exclude each other")
    if args.state:  # kafka-consumer-groups.sh --describe --state
        co = desc.coordinator
        print(f"{'GROUP':<24} {'COORDINATOR (ID)':<28} {'ASSIGNMENT-STRATEGY':<20} {'STATE':<20} #MEMBERS")
        print(f"{args.group:<24} {f'{co.host}:{co.port} ({co.id})' if co else '-':<28} "
              f"{desc.partition_assignor or '-':<20} {_state_name(desc.state):<20} {len(desc.members)}")
        return 0
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
    keys = sorted(set(committed) | set(owner))
    consumer = _consumer(args)
    try:
        print(f"Consumer group '{args.group}' is {_state_name(desc.state)}.")
        print(f"{'GROUP':<20} {'TOPIC':<24} {'PARTITION':>9} {'CURRENT-OFFSET':>14} {'LOG-END-OFFSET':>14} "
              f"{'LAG':>8} {'CONSUMER-ID':<40} {'HOST':<16} CLIENT-ID")
        for topic, p in keys:
            try:
                high: int | str = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s(args))[1]
            except KafkaException:  # e.g. the topic was deleted after the group committed to it
                high = "-"
            cur = committed.get((topic, p), -1)
            lag = high - cur if cur >= 0 and isinstance(high, int) else "-"
            m = owner.get((topic, p))
            print(f"{args.group:<20} {topic:<24} {p:>9} {cur if cur >= 0 else '-':>14} {high:>14} {lag:>8} "
                  f"{m.member_id if m else '-':<40} {m.host if m else '-':<16} {m.client_id if m else '-'}")
    finally:
        consumer.close()
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    admin = admin_client(args)
    try:
        admin.delete_consumer_groups([args.group], request_timeout=timeout_s(args))[args.group].result()
    except KafkaException as e:
        raise ToolError(f"deletion of group '{args.group}' failed: {kafka_message(e)}") from None
    print(f"Deletion of requested consumer groups ('{args.group}') was successful.")
    return 0


def _targets(args: argparse.Namespace, consumer: Any, partitions: list[tuple[str, int]],
             committed: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    from confluent_kafka import TopicPartition

    wait = timeout_s(args)
    out: dict[tuple[str, int], int] = {}
    if args.to_datetime:
        try:
            ts = int(datetime.fromisoformat(args.to_datetime).timestamp() * 1000)
        except ValueError:
            raise UsageError(f"--to-datetime expects ISO 8601 (2026-01-31T12:00:00+00:00), got "
                             f"{args.to_datetime!r}") from None
        found = consumer.offsets_for_times([TopicPartition(t, p, ts) for t, p in partitions], timeout=wait)
        for tp in found:
            out[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else \
                consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=wait)[1]
        return out
    for t, p in partitions:
        low, high = consumer.get_watermark_offsets(TopicPartition(t, p), timeout=wait)
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

    chosen = [o for o in _RESET_OPTIONS if getattr(args, o) not in (None, False)]
    if len(chosen) != 1:
        raise UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by")
    if args.execute and args.dry_run:
        raise UsageError("--execute and --dry-run exclude each other")
    if args.topic and args.all_topics:
        raise UsageError("--topic and --all-topics exclude each other")
    admin = admin_client(args)
    committed = _committed(admin, args)
    if args.topic:
        partitions = [(args.topic, p.id) for p in sorted(describe_topic(admin, args, args.topic).partitions,
                                                          key=lambda p: p.id)]
    else:
        partitions = sorted(committed)
    consumer = _consumer(args)
    try:
        targets = _targets(args, consumer, partitions, committed)
    finally:
        consumer.close()
    print(f"{'GROUP':<20} {'TOPIC':<24} {'PARTITION':>9} NEW-OFFSET")
    for (t, p), off in sorted(targets.items()):
        print(f"{args.group:<20} {t:<24} {p:>9} {off}")
    if not args.execute:
        print("(dry run: add --execute to apply)")
        return 0
    desc = _describe(admin, args)
    if _state_name(desc.state) not in ("Empty", "Dead"):
        raise ToolError(f"Assignments can only be reset if the group '{args.group}' is inactive, but the current "
                        f"state is {_state_name(desc.state)}.")
    req = ConsumerGroupTopicPartitions(args.group, [TopicPartition(t, p, o) for (t, p), o in targets.items()])
    admin.alter_consumer_group_offsets([req], request_timeout=timeout_s(args))[args.group].result()
    return 0


def take_words(args: argparse.Namespace, extra: list[str]) -> list[str]:
    """Give GROUP a word argparse left over. argparse fills optional positionals from the first run
    of words only, so in `describe --members G` the G comes back unparsed; returns what is still left."""
    if args.group_pos is None and extra and not extra[0].startswith("-"):
        args.group_pos = extra[0]
        return extra[1:]
    return extra


_COMMANDS = {"list": cmd_list, "describe": cmd_describe, "delete": cmd_delete, "reset-offsets": cmd_reset}


def cmd_groups(args: argparse.Namespace) -> int:
    """Resolve the two spellings (subcommand word or Kafka's --flag; GROUP or --group) into one
    action and group, refusing options that do not belong to the action."""
    actions = {a for a in ACTIONS if getattr(args, "flag_" + a.replace("-", "_"))}
    if args.action and args.action not in ACTIONS:
        if actions and args.group_pos is None:  # `--describe my-group`: the one word is the group
            args.action, args.group_pos = None, args.action
        else:
            raise UsageError(f"unknown action {args.action!r} (choose from {', '.join(ACTIONS)})")
    if args.action:
        actions.add(args.action)
    if len(actions) != 1:
        raise UsageError("give exactly one of list, describe, delete, reset-offsets "
                         "(or --list, --describe, --delete, --reset-offsets)")
    action = actions.pop()
    if args.group_pos and args.group and args.group_pos != args.group:
        raise UsageError(f"two groups given: {args.group_pos!r} and --group {args.group!r}")
    args.group = args.group or args.group_pos
    if action == "list":
        if args.group:
            raise UsageError("list takes no group")
    elif not args.group:
        raise UsageError(f"{action} needs a group (GROUP or --group GROUP)")
    misplaced = {
        "--state": action not in ("list", "describe") and args.state,
        "--members": action != "describe" and args.members,
        "--topic": action != "reset-offsets" and args.topic is not None,
        "--all-topics": action != "reset-offsets" and args.all_topics,
        "--execute": action != "reset-offsets" and args.execute,
        "--dry-run": action != "reset-offsets" and args.dry_run,
    }
    for o in _RESET_OPTIONS:
        misplaced["--" + o.replace("_", "-")] = action != "reset-offsets" and getattr(args, o) not in (None, False)
    bad = [name for name, wrong in misplaced.items() if wrong]
    if bad:
        raise UsageError(f"{', '.join(bad)} does not apply to {action}")
    return _COMMANDS[action](args)


def add_subcommands(sub: Any) -> None:
    g = sub.add_parser(
        "groups", formatter_class=HelpFormatter,
        help="list, describe, delete consumer groups and reset their offsets",
        description="List, describe, delete consumer groups and reset their offsets. Takes the subcommand words\n"
                    "below or kafka-consumer-groups.sh's options (--describe --group G, ...).",
        epilog="examples:\n"
               "  gregor groups list --state\n"
               "  gregor groups describe my-group        (or: --describe --group my-group)\n"
               "  gregor groups reset-offsets my-group --topic events --to-earliest --execute\n"
               "  gregor groups delete my-group")
    g.add_argument("action", nargs="?", metavar="{" + ",".join(ACTIONS) + "}",
                   help="what to do (or one of the --list, --describe, --delete, --reset-offsets options)")
    g.add_argument("group_pos", nargs="?", metavar="GROUP", help="the consumer group")
    kafka = g.add_argument_group("kafka-consumer-groups.sh spellings")
    for a in ACTIONS:
        kafka.add_argument(f"--{a}", dest="flag_" + a.replace("-", "_"), action="store_true", help=f"same as {a}")
    kafka.add_argument("--group", help="the consumer group (same as GROUP)")
    add_bootstrap(g)
    add_request_timeout(g)
    g.add_argument("--state", action="store_true", help="(list, describe) show the group's state")
    g.add_argument("--members", action="store_true", help="(describe) show members instead of offsets")
    r = g.add_argument_group("reset-offsets (a dry run unless --execute; the group must be inactive)")
    r.add_argument("--topic", help="reset every partition of this topic (default: partitions with commits)")
    r.add_argument("--all-topics", action="store_true", help="reset the partitions with commits (the default)")
    r.add_argument("--to-earliest", action="store_true", help="to each partition's log start offset")
    r.add_argument("--to-latest", action="store_true", help="to each partition's log end offset")
    r.add_argument("--to-offset", type=int, help="to this offset (clamped to the log's range)")
    r.add_argument("--to-datetime", help="to the first offset at or after this ISO 8601 time, "
                                         "e.g. 2026-01-31T12:00:00+00:00")
    r.add_argument("--shift-by", type=int, help="move each committed offset by N (negative: back)")
    r.add_argument("--execute", action="store_true", help="apply the reset (default: print it only)")
    r.add_argument("--dry-run", action="store_true", help="print the reset only (the default)")
    g.set_defaults(func=cmd_groups, take_words=take_words)
