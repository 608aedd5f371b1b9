"""Topics of the pipeline: created if missing, and read to their end for the checks (with confluent-kafka)."""

from __future__ import annotations

import time


def create_topics(bootstrap: str, topics: dict[str, int], replication_factor: int = -1) -> None:
    """Create the pipeline's topics; ones that already exist are left as they are. A replication factor
    of -1 takes the cluster's `default.replication.factor`."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, n, replication_factor) for t, n in topics.items()])
    for f in futures.values():
        try:
            f.result(30)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def read_topic(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[bytes]:
    """Every record value in `topic`, from the earliest offset to the end (the ground truth the
    checks use: whatever the streams read, including records of earlier runs)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "gregor-pipeline-check", "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        md = c.list_topics(topic, timeout=timeout_s).topics[topic]
        parts = list(md.partitions)
        c.assign([TopicPartition(topic, p, -2) for p in parts])  # -2: OFFSET_BEGINNING
        out: list[bytes] = []
        pending = set(parts)
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for m in c.consume(10_000, 1.0):
                if m.error() is None:
                    out.append(m.value())
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(m.partition())
        if pending:
            raise RuntimeError(f"could not read {topic} to its end in {timeout_s} s")
        return out
    finally:
        c.close()


__all__ = ["create_topics", "read_topic"]
