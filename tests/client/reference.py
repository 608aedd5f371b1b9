"""What confluent-kafka's consumer reads, as rows shaped like the Arrow reader's, and those rows from a Table."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

_EOF = -191  # KafkaError._PARTITION_EOF


def create_topic(bootstrap: str, topic: str, partitions: int = 1, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(30)


def consume(bootstrap: str, topic: str, partition: int = 0, start: int = 0, end: int | None = None,
            isolation: str = "read_uncommitted") -> list[dict[str, Any]]:
    """Every record of one partition from `start` until `end` (or the end of the partition)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "arrow-reference", "enable.auto.commit": False,
                  "enable.partition.eof": True, "isolation.level": isolation, "fetch.queue.backoff.ms": 1})
    c.assign([TopicPartition(topic, partition, start)])
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            msgs = c.consume(10_000, 0.5)
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == _EOF:
                        return out
                    raise AssertionError(err)
                if end is not None and m.offset() >= end:
                    return out
                ts_type, ts = m.timestamp()
                headers = m.headers()
                out.append({"partition": partition, "offset": m.offset(), "timestamp": ts, "timestampType": ts_type - 1,
                            "key": m.key(), "value": m.value(),
                            "headers": [{"key": k, "value": v} for k, v in headers] if headers else None})
    finally:
        c.close()
    raise AssertionError(f"{topic}-{partition} did not reach its end in time")


def rows(table: pa.Table) -> list[dict[str, Any]]:
    """A Table's rows, timestamps as epoch ms (as confluent-kafka gives them)."""
    if "timestamp" in table.column_names:
        i = table.column_names.index("timestamp")
        unit = table.schema.field(i).type.unit
        ms = table.column(i).cast(pa.int64())
        if unit == "us":
            ms = pc.divide(ms, 1000)
        table = table.set_column(i, "timestamp", ms)
    return table.to_pylist()
