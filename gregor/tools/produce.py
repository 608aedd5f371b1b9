"""`gregor produce`: one message per line of stdin (like kafka-console-producer.sh).

It says how many messages the broker did not take: every delivery report is counted, and the
tool waits for all of them (bounded by --delivery-timeout-ms) before it exits, non-zero if any
message failed or was never confirmed.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from gregor.tools.common import (
    HelpFormatter,
    ToolError,
    UsageError,
    add_bootstrap,
    add_request_timeout,
    bootstrap,
    check_reachable,
    client_config,
    parse_key_values,
    timeout_s,
)


def topic_arg(args: argparse.Namespace) -> str:
    """The topic given positionally or with --topic (Kafka's spelling); one of them, once."""
    if args.topic_pos and args.topic and args.topic_pos != args.topic:
        raise UsageError(f"two topics given: {args.topic_pos!r} and --topic {args.topic!r}")
    topic = args.topic or args.topic_pos
    if not topic:
        raise UsageError("the topic is required (TOPIC or --topic TOPIC)")
    return str(topic)


def add_topic(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic_pos", nargs="?", metavar="TOPIC", help="the topic")
    parser.add_argument("--topic", help="the topic (kafka-console-*.sh spelling of TOPIC)")


def _true(value: str, name: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise UsageError(f"--property {name} expects true or false, got {value!r}")
    return value.lower() == "true"


def key_separator(args: argparse.Namespace) -> str | None:
    """--key-separator, or kafka-console-producer.sh's --property parse.key=true [key.separator=S]
    (whose separator defaults to a tab, as in Kafka)."""
    props = parse_key_values(args.property, "--property")
    unknown = set(props) - {"parse.key", "key.separator"}
    if unknown:
        raise UsageError(f"--property {sorted(unknown)[0]} is not supported (parse.key, key.separator are)")
    if args.key_separator is not None:
        return str(args.key_separator)
    if _true(props.get("parse.key", "false"), "parse.key"):
        return props.get("key.separator", "\t")
    return None


def cmd_produce(args: argparse.Namespace) -> int:
    from confluent_kafka import Producer

    topic = topic_arg(args)
    separator = key_separator(args)
    props = parse_key_values(args.producer_property, "--producer-property")
    servers = bootstrap(args)
    check_reachable(servers, timeout_s(args))
    conf = client_config(servers, **{"acks": args.acks, "compression.type": args.compression, "linger.ms": 5,
                                     "message.timeout.ms": args.delivery_timeout_ms,
                                     # a topic the broker says does not exist fails its messages after
                                     # this long instead of librdkafka's 30 s
                                     "topic.metadata.propagation.max.ms": min(5000, args.delivery_timeout_ms)})
    conf.update(props)
    p = Producer(conf)
    errors: list[str] = []
    delivered = 0

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            errors.append(err.str())

    count = 0
    try:
        for line in sys.stdin:
            line = line.rstrip("\n")
            key = None
            if separator and separator in line:
                k, line = line.split(separator, 1)
                key = k.encode()
            while True:
                try:
                    p.produce(topic, line.encode(), key, on_delivery=on_delivery)
                    break
                except BufferError:  # local queue full: wait for deliveries to make room
                    p.poll(0.1)
            count += 1
            p.poll(0)
    except KeyboardInterrupt:
        pass  # Ctrl-C ends the input, as Ctrl-D does: what was read is still delivered and counted
    try:
        # flush(timeout) returns how many messages are still waiting for a delivery report; each
        # one gets a report (success or failure) within message.timeout.ms, so wait for them all.
        deadline = time.monotonic() + args.delivery_timeout_ms / 1000.0 + 5
        remaining = p.flush(0.5)
        while remaining and time.monotonic() < deadline:
            remaining = p.flush(0.5)
    except KeyboardInterrupt:  # a second Ctrl-C: stop waiting, say what is known
        raise ToolError(f"interrupted: {delivered} of {count} messages delivered to {topic}, "
                        f"{len(errors)} failed, {len(p)} unconfirmed", 130) from None
    failed = count - delivered
    if failed:
        reason = f": {errors[0]}" if errors else " (no delivery report)"
        raise ToolError(f"{failed} of {count} messages failed to reach {topic}{reason}")
    print(f"Produced {count} messages to {topic}.", file=sys.stderr)
    return 0


def add_subcommands(sub: Any) -> None:
    p = sub.add_parser("produce", formatter_class=HelpFormatter, help="produce lines from stdin",
                       description="Produce each line of stdin as one message (like kafka-console-producer.sh).\n"
                                   "Exits non-zero, saying how many, if any message was not delivered.")
    add_topic(p)
    add_bootstrap(p)
    p.add_argument("--acks", "--request-required-acks", default="all", choices=["0", "1", "all", "-1"],
                   help="acknowledgement the broker gives before a message counts as delivered")
    p.add_argument("--compression", "--compression-codec", default="none",
                   choices=["none", "gzip", "snappy", "lz4", "zstd"], help="batch compression codec")
    p.add_argument("--key-separator", default=None, help="split each line into key and value at this string")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="kafka-console-producer.sh's parse.key=true and key.separator=S (default: a tab)")
    p.add_argument("--delivery-timeout-ms", type=int, default=30_000,
                   help="a message not acknowledged within this time counts as failed")
    p.add_argument("--producer-property", action="append", default=[], metavar="KEY=VALUE",
                   help="any librdkafka producer property; repeatable")
    add_request_timeout(p)
    p.set_defaults(func=cmd_produce)
