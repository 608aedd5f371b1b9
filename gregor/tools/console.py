"""Console tools over the reference client (confluent-kafka): topics, produce, consume.

They talk to any broker over the wire, Gregor or Kafka, exactly as a user's program would.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def cmd_topics(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    admin = _admin(args.bootstrap_server)
    try:
        if args.create:
            configs = dict(c.split("=", 1) for c in args.config)
            fut = admin.create_topics([NewTopic(args.topic, args.partitions, args.replication_factor, config=configs)])
            fut[args.topic].result()
            print(f"Created topic {args.topic}.")
        elif args.delete:
            admin.delete_topics([args.topic])[args.topic].result()
            print(f"Deleted topic {args.topic}.")
        elif args.describe:
            md = admin.list_topics(args.topic, timeout=10)
            for name, t in sorted(md.topics.items()):
                if t.error is not None:
                    print(f"Topic: {name}\tError: {t.error}")
                    continue
                print(f"Topic: {name}\tPartitionCount: {len(t.partitions)}")
                for pid, p in sorted(t.partitions.items()):
                    print(f"\tTopic: {name}\tPartition: {pid}\tLeader: {p.leader}\tReplicas: {p.replicas}\tIsr: {p.isrs}")
        else:
            md = admin.list_topics(timeout=10)
            for name in sorted(md.topics):
                print(name)
    except KafkaException as e:
        print(f"Error: {e.args[0].str() if e.args else e}", file=sys.stderr)
        return 1
    return 0


def cmd_produce(args: argparse.Namespace) -> int:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": args.bootstrap_server, "acks": args.acks,
                  "compression.type": args.compression, "linger.ms": 5})
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    count = 0
    for line in sys.stdin:
        line = line.rstrip("\n")
        key = None
        if args.key_separator and args.key_separator in line:
            k, line = line.split(args.key_separator, 1)
            key = k.encode()
        p.produce(args.topic, line.encode(), key, on_delivery=on_delivery)
        count += 1
        p.poll(0)
    p.flush(30)
    if errors:
        print(f"{len(errors)} of {count} messages failed: {errors[0]}", file=sys.stderr)
        return 1
    print(f"Produced {count} messages to {args.topic}.", file=sys.stderr)
    return 0


def cmd_consume(args: argparse.Namespace) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": args.bootstrap_server, "group.id": "gregor-console",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    md = c.list_topics(args.topic, timeout=10)
    t = md.topics.get(args.topic)
    if t is None or t.error is not None:
        print(f"Error: topic {args.topic}: {t.error if t else 'unknown'}", file=sys.stderr)
        return 1
    start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
    c.assign([TopicPartition(args.topic, p, start) for p in t.partitions])
    remaining = set(t.partitions)
    seen = 0
    try:
        while True:
            if args.max_messages is not None and seen >= args.max_messages:
                break
            msg = c.poll(args.timeout_ms / 1000.0)
            if msg is None:
                break
            if msg.error():
                if msg.error().code() == -191:  # partition EOF
                    remaining.discard(msg.partition())
                    if not remaining and not args.follow:
                        break
                    continue
                print(f"Error: {msg.error()}", file=sys.stderr)
                return 1
            seen += 1
            val = msg.value().decode("utf-8", "replace") if msg.value() is not None else "null"
            if args.print_key:
                key = msg.key().decode("utf-8", "replace") if msg.key() is not None else "null"
                print(f"{key}\t{val}")
            else:
                print(val)
    finally:
        c.close()
    print(f"Processed a total of {seen} messages", file=sys.stderr)
    return 0


def add_subcommands(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap-server", default="127.0.0.1:9092")

    t = sub.add_parser("topics", parents=[common], help="create, list, describe or delete topics")
    g = t.add_mutually_exclusive_group()
    g.add_argument("--create", action="store_true")
    g.add_argument("--delete", action="store_true")
    g.add_argument("--describe", action="store_true")
    g.add_argument("--list", action="store_true")
    t.add_argument("--topic")
    t.add_argument("--partitions", type=int, default=-1)
    t.add_argument("--replication-factor", type=int, default=-1)
    t.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    t.set_defaults(func=cmd_topics)

    p = sub.add_parser("produce", parents=[common], help="produce lines from stdin")
    p.add_argument("topic")
    p.add_argument("--acks", default="all")
    p.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    p.add_argument("--key-separator", default=None, help="split each line into key and value at this string")
    p.set_defaults(func=cmd_produce)

    c = sub.add_parser("consume", parents=[common], help="print a topic's messages")
    c.add_argument("topic")
    c.add_argument("--from-beginning", action="store_true")
    c.add_argument("--max-messages", type=int)
    c.add_argument("--follow", action="store_true", help="keep waiting for new messages")
    c.add_argument("--print-key", action="store_true")
    c.add_argument("--timeout-ms", type=int, default=10000)
    c.set_defaults(func=cmd_consume)
