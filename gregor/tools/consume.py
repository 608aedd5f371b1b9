"""`gregor consume`: print a topic's messages (like kafka-console-consumer.sh).

Two modes, so that the tool's end is never a guess:
- without --follow it prints what the topic holds now, from the beginning up to each partition's
  log end offset as read at start, and exits (like `cat`);
- with --follow it starts at the end (or the beginning with --from-beginning) and prints new
  messages until interrupted; Ctrl-C or SIGTERM end it cleanly with exit code 0 (like `tail -f`).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
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
    parse_key_values,
    timeout_s,
)
from gregor.tools.produce import add_topic, topic_arg

_POLL_S = 0.2  # short polls so that Ctrl-C is noticed promptly


def _text(b: bytes | None) -> str:
    return b.decode("utf-8", "replace") if b is not None else "null"


def _on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


_PRINT = ("print.timestamp", "print.partition", "print.offset", "print.key", "print.value")


def formatter(args: argparse.Namespace) -> Any:
    """How a message is printed: its value, or with --print-key (or kafka-console-consumer.sh's
    --property print.key=true, print.timestamp, print.partition, print.offset, print.value,
    key.separator) the chosen fields in Kafka's order, separated by a tab or key.separator."""
    props = parse_key_values(args.property, "--property")
    unknown = set(props) - set(_PRINT) - {"key.separator"}
    if unknown:
        raise UsageError(f"--property {sorted(unknown)[0]} is not supported "
                         f"({', '.join((*_PRINT, 'key.separator'))} are)")
    on: dict[str, bool] = {"print.value": True, "print.key": bool(args.print_key)}
    for name in _PRINT:
        if name in props:
            if props[name].lower() not in ("true", "false"):
                raise UsageError(f"--property {name} expects true or false, got {props[name]!r}")
            on[name] = props[name].lower() == "true"
    sep = props.get("key.separator", "\t")

    def fmt(msg: Any) -> str:
        fields = []
        if on.get("print.timestamp"):
            kind, ts = msg.timestamp()
            fields.append(f"{'LogAppendTime' if kind == 2 else 'CreateTime'}:{ts}")
        if on.get("print.partition"):
            fields.append(f"Partition:{msg.partition()}")
        if on.get("print.offset"):
            fields.append(f"Offset:{msg.offset()}")
        if on["print.key"]:
            fields.append(_text(msg.key()))
        if on["print.value"]:
            fields.append(_text(msg.value()))
        return sep.join(fields)

    return fmt


def cmd_consume(args: argparse.Namespace) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, TopicPartition

    topic = topic_arg(args)
    fmt = formatter(args)
    props = parse_key_values(args.consumer_property, "--consumer-property")
    admin = admin_client(args)
    partitions = sorted(p.id for p in describe_topic(admin, args, topic).partitions)
    broker_errors: list[str] = []

    def on_error(err: Any) -> None:
        if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT) or err.fatal():
            broker_errors.append(err.str())

    conf = client_config(bootstrap(args), **{"group.id": args.group, "enable.auto.commit": False,
                                            "enable.partition.eof": True, "error_cb": on_error})
    conf.update(props)
    c = Consumer(conf)
    from_start = args.from_beginning or not args.follow
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING if from_start else OFFSET_END) for p in partitions])
    # Without --follow, each partition is done at the log end offset it had when we started.
    pending: dict[int, int] = {}
    if not args.follow:
        for p in partitions:
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s(args))
            if high > low:
                pending[p] = high
    seen = 0
    lost = False
    idle_since = time.monotonic()
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        while args.follow or pending:
            if args.max_messages is not None and seen >= args.max_messages:
                break
            if args.timeout_ms is not None and time.monotonic() - idle_since > args.timeout_ms / 1000.0:
                break
            if broker_errors:
                if not args.follow:
                    raise ToolError(f"lost the broker at {bootstrap(args)} after {seen} messages "
                                    f"({broker_errors[-1]})")
                if not lost:  # one line per outage, not one per reconnection attempt
                    print(f"Warning: lost the broker at {bootstrap(args)} ({broker_errors[-1]}); "
                          f"waiting for it to come back", file=sys.stderr)
                    lost = True
                broker_errors.clear()
            msg = c.poll(_POLL_S)
            if msg is None:
                continue
            lost = False
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    pending.pop(msg.partition(), None)
                    continue
                if msg.error().fatal() or not msg.error().retriable():
                    raise ToolError(f"consuming {topic} failed: {msg.error().str()}")
                continue
            idle_since = time.monotonic()
            if msg.partition() in pending and msg.offset() + 1 >= pending[msg.partition()]:
                del pending[msg.partition()]
            seen += 1
            print(fmt(msg), flush=args.follow)
    except KeyboardInterrupt:
        pass  # the way a --follow run ends: not an error
    finally:
        signal.signal(signal.SIGTERM, previous)
        c.close()
    print(f"Processed a total of {seen} messages", file=sys.stderr)
    return 0


def add_subcommands(sub: Any) -> None:
    c = sub.add_parser("consume", formatter_class=HelpFormatter, help="print a topic's messages",
                       description="Print a topic's messages (like kafka-console-consumer.sh), in one of two modes:\n"
                                   "- without --follow: what the topic holds now, from the beginning up to each\n"
                                   "  partition's end as read at start; then exit (like `cat`);\n"
                                   "- with --follow: new messages (all of them with --from-beginning) until\n"
                                   "  interrupted; Ctrl-C or SIGTERM end it with exit code 0 (like `tail -f`).")
    add_topic(c)
    add_bootstrap(c)
    c.add_argument("--follow", action="store_true",
                   help="keep printing new messages until interrupted (Ctrl-C exits 0); without it, "
                        "print the messages there are now, from the beginning, and exit")
    c.add_argument("--from-beginning", action="store_true",
                   help="with --follow, start at the beginning instead of the end")
    c.add_argument("--max-messages", type=int, help="exit after this many messages")
    c.add_argument("--timeout-ms", type=int, help="exit when no message arrives for this long")
    c.add_argument("--print-key", action="store_true", help="print KEY<tab>VALUE")
    c.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="kafka-console-consumer.sh's print.key, print.value, print.timestamp, print.partition, "
                        "print.offset (true/false) and key.separator (default: a tab); repeatable")
    c.add_argument("--group", default="gregor-console",
                   help="consumer group id (offsets are never committed: the group is only a name)")
    c.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE",
                   help="any librdkafka consumer property; repeatable")
    add_request_timeout(c)
    c.set_defaults(func=cmd_consume)
