"""Helpers for the Spark tests: topics, producing ground truth, and reading it back through confluent-kafka."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic


@dataclass(frozen=True)
class Rec:
    """A record as both sides see it: what was produced and what a reader returns."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    timestamp_type: int  # Kafka's: 0 create time, 1 log append time
    headers: tuple[tuple[str, bytes | None], ...] | None


def recent_minute_ms(minutes_ago: int = 60) -> int:
    """A minute boundary shortly before now: record timestamps tests can choose exactly without being
    old enough for the broker's time retention (7 days by default) to delete them."""
    return (int(time.time() * 1000) // 60_000 - minutes_ago) * 60_000


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def add_partitions(bootstrap: str, name: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(name, total)])[name].result(30)
    time.sleep(0.5)  # let metadata settle for the clients that cache it


def delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.delete_records([TopicPartition(topic, partition, before)])
    for f in fut.values():
        f.result(30)


def produce(bootstrap: str, topic: str, items: list[dict[str, Any]]) -> None:
    """Each item: value and optionally key, partition, headers, timestamp (ms)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    errors: list[Any] = []
    for it in items:
        kwargs: dict[str, Any] = {"value": it.get("value"), "key": it.get("key"),
                                  "on_delivery": lambda e, m: errors.append(e) if e else None}
        if "partition" in it:
            kwargs["partition"] = it["partition"]
        if it.get("headers"):
            kwargs["headers"] = list(it["headers"])
        if "timestamp" in it:
            kwargs["timestamp"] = it["timestamp"]
        while True:
            try:
                p.produce(topic, **kwargs)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    assert not errors, errors


def consume_all(bootstrap: str, topic: str, *, timeout_s: float = 30.0,
                isolation: str = "read_uncommitted") -> list[Rec]:
    """Every record of `topic` from each partition's start, sorted by (partition, offset)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("truth"), "enable.auto.commit": False,
                  "enable.partition.eof": True, "isolation.level": isolation})
    try:
        parts = list(c.list_topics(topic, timeout=10).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, -2) for p in parts])
        out: list[Rec] = []
        pending = set(parts)
        deadline = time.monotonic() + timeout_s
        while pending:
            assert time.monotonic() < deadline, f"timed out reading {topic}"
            for m in c.consume(10_000, 0.5):
                err = m.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    pending.discard(m.partition())
                    continue
                ts_type, ts = m.timestamp()
                hdrs = m.headers()
                out.append(Rec(m.partition(), m.offset(), m.key(), m.value(), ts, ts_type - 1,
                               tuple(hdrs) if hdrs else None))
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        c.close()


def read_options(bootstrap: str, **options: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, **options}


def load(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("gregor")
    for k, v in read_options(bootstrap, **options).items():
        reader = reader.option(k, v)
    return reader.load()


def df_records(df: Any) -> list[Rec]:
    """A source DataFrame's rows as Recs (through Arrow: fast for 100k rows), sorted."""
    import pyarrow as pa

    table = df.toArrow()
    cols = {name: table.column(name).to_pylist() for name in table.column_names if name != "timestamp"}
    cols["timestamp"] = table.column("timestamp").cast(pa.int64()).to_pylist()  # microseconds, exact
    n = table.num_rows
    headers = cols.get("headers", [None] * n)
    out = []
    for i in range(n):
        ts = cols["timestamp"][i]
        h = headers[i]
        out.append(Rec(cols["partition"][i], cols["offset"][i], cols["key"][i], cols["value"][i], ts // 1000,
                       cols["timestampType"][i],
                       tuple((kv["key"], kv["value"]) for kv in h) if h else None))
    return sorted(out, key=lambda r: (r.partition, r.offset))


def checkpoint_commits(checkpoint: Path) -> int:
    """Micro-batches a streaming query's checkpoint records as committed."""
    d = checkpoint / "commits"
    return len([p for p in d.iterdir() if p.name.isdigit()]) if d.exists() else 0
