"""Compacted topics through real clients: latest value per key, tombstones expire, disk shrinks."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess


def _read_all(b: BrokerProcess, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "compaction-reader", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error() is not None:
            if m.error().code() == -191:  # end of partition
                break
            raise AssertionError(m.error())
        out.append((m.offset(), m.key(), m.value()))
    c.close()
    return out


def _disk_bytes(b: BrokerProcess, topic: str) -> int:
    return sum(f.stat().st_size for f in (b.data_dir / f"{topic}-0").glob("*.log"))


def test_compacted_topic_keeps_latest_per_key(start_broker: Callable[..., BrokerProcess]) -> None:
    b = start_broker({"log.cleaner.backoff.ms": "100"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("profiles", 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "50000", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "2000"})])["profiles"].result(10)
    # The same records into a delete-policy topic: what the compacted topic would take uncleaned.
    admin.create_topics([NewTopic("profiles-raw", 1, 1, config={"segment.bytes": "50000"})])["profiles-raw"].result(10)
    # Batches must fit a 50 KB segment (a larger one is RECORD_LIST_TOO_LARGE, as in Kafka).
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.size": 16384,
                  "queue.buffering.max.messages": 500_000})
    failed: list[object] = []
    latest: dict[bytes, bytes | None] = {}
    for i in range(100_000):
        key, value = f"user-{i % 1000}".encode(), f"v{i}".encode()
        p.produce("profiles", value, key, on_delivery=lambda err, m: err and failed.append(err))
        p.produce("profiles-raw", value, key)
        latest[key] = value
        if i % 5000 == 0:
            p.poll(0)
    for k in range(100):  # tombstones for the first 100 keys
        p.produce("profiles", None, f"user-{k}".encode())
        latest[f"user-{k}".encode()] = None
    for i in range(10_000):  # more updates, so the tombstones land in closed segments
        key, value = f"user-{100 + i % 900}".encode(), f"w{i}".encode()
        p.produce("profiles", value, key)
        latest[key] = value
    assert p.flush(30) == 0
    assert not failed, failed[:3]
    before = _disk_bytes(b, "profiles-raw")
    deadline = time.monotonic() + 60
    while _disk_bytes(b, "profiles") > before // 4 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _disk_bytes(b, "profiles") <= before // 4, (before, _disk_bytes(b, "profiles"))

    def check() -> list[tuple[int, bytes, bytes | None]]:
        records = _read_all(b, "profiles")
        offsets = [o for o, _, _ in records]
        assert offsets == sorted(offsets), "offset order kept"
        seen: dict[bytes, bytes | None] = {}
        for _, k, v in records:
            seen[k] = v
        assert {k: v for k, v in seen.items() if v is not None} == {k: v for k, v in latest.items() if v is not None}
        return records

    check()
    # After delete.retention.ms the tombstones themselves are cleaned away.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        records = check()
        if not any(v is None for _, _, v in records):
            break
        time.sleep(0.5)
    assert not any(v is None for _, _, v in records), "tombstones removed after delete.retention.ms"
    assert not {k for _, k, _ in records} & {f"user-{k}".encode() for k in range(100)}
    # The offsets the cleaner left in place still serve consumers and survive a restart.
    assert b.stop() == 0
    b.restart()
    check()


def test_compacted_topic_rejects_records_without_key(start_broker: Callable[..., BrokerProcess]) -> None:
    b = start_broker()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("keyed", 1, 1, config={"cleanup.policy": "compact"})])["keyed"].result(10)
    p = Producer({"bootstrap.servers": b.bootstrap, "retries": 0})
    errors = []
    p.produce("keyed", b"no key", on_delivery=lambda err, m: errors.append(err))
    p.flush(10)
    assert errors and errors[0] is not None and errors[0].name() == "INVALID_RECORD"
