"""KIP-392, fetch from follower, through librdkafka on an in-process 3-broker cluster with racks: with
`replica.selector.class` set to Kafka's RackAwareReplicaSelector, a consumer naming its `client.rack`
is sent (Fetch v11+ `preferred_read_replica`) to the in-sync follower in its rack and reads everything
from it, in order, as librdkafka's own test 0101 checks (by its per-broker rxbytes statistics); without
the selector it reads from the leader."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.admin.cluster import InProcessCluster

RACKS = {1: "r1", 2: "r2", 3: "r3"}
SELECTOR = {"replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"}
COUNT = 2000


def _consume_with_stats(bootstrap: str, topic: str, rack: str) -> tuple[list[int], dict[int, int]]:
    """Every record's sequence number, and rxbytes per broker id from librdkafka's statistics."""
    rx: dict[int, int] = {}

    def stats(text: str) -> None:
        for b in json.loads(text)["brokers"].values():
            if b.get("nodeid", -1) >= 0:
                rx[b["nodeid"]] = b["rxbytes"]

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ffr", "client.rack": rack,
                  "enable.auto.commit": False, "statistics.interval.ms": 200, "stats_cb": stats,
                  "fetch.wait.max.ms": 50})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[int] = []
        deadline = time.monotonic() + 60
        while len(got) < COUNT and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                assert m.error() is None, m.error()
                got.append(int(m.value()[:8]))
        end = time.monotonic() + 1.0
        while time.monotonic() < end:  # one more statistics report after the last record
            c.poll(0.1)
        return got, dict(rx)
    finally:
        c.close()


def _setup(tmp_path: Path, props: dict[str, str]) -> InProcessCluster:
    c = InProcessCluster(tmp_path, [1, 2, 3], RACKS, props)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("ffr", 1, replica_assignment=[[1, 2, 3]])])["ffr"].result(20)
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(COUNT):
        p.produce("ffr", b"%08d" % i + b"x" * 92, partition=0)
    assert p.flush(30) == 0
    return c


@pytest.mark.parametrize("selector", [True, False], ids=["rack-aware selector", "no selector"])
def test_consumer_reads_from_the_follower_in_its_rack(tmp_path: Path, selector: bool) -> None:
    c = _setup(tmp_path, SELECTOR if selector else {})
    try:
        got, rx = _consume_with_stats(c.bootstrap, "ffr", "r2")
        assert got == list(range(COUNT))
        data_bytes = COUNT * 100
        if selector:
            assert rx.get(2, 0) > data_bytes and rx.get(2, 0) > 5 * rx.get(1, 0), rx
        else:
            assert rx.get(1, 0) > data_bytes and rx.get(2, 0) < data_bytes // 10, rx
    finally:
        c.stop()


@pytest.mark.serial  # a median round trip under 0.4 s
def test_follower_serves_new_records_as_its_high_watermark_moves(tmp_path: Path) -> None:
    """A consumer reading from a follower waits there (its parked fetch is answered when the follower's HW
    moves) and gets records produced after it started, promptly."""
    c = _setup(tmp_path, SELECTOR)
    try:
        fetched_from: list[int] = []

        def stats(text: str) -> None:
            part = json.loads(text).get("topics", {}).get("ffr", {}).get("partitions", {}).get("0")
            if part is not None:
                fetched_from.append(part["broker"])

        cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "ffr2", "client.rack": "r3",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 500, "statistics.interval.ms": 200,
                         "stats_cb": stats})
        cons.assign([TopicPartition("ffr", 0, COUNT)])
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 0})
        latencies: list[float] = []
        for i in range(20):
            sent = time.monotonic()
            p.produce("ffr", b"%08d" % (COUNT + i), partition=0)
            p.flush(10)
            msg: Any = None
            while msg is None:
                msg = cons.poll(5)
                assert time.monotonic() - sent < 10, "no record"
            assert msg.error() is None and int(msg.value()[:8]) == COUNT + i
            latencies.append(time.monotonic() - sent)
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            cons.poll(0.1)
        cons.close()
        assert fetched_from and fetched_from[-1] == 3, fetched_from  # librdkafka fetches from broker 3
        # Well under the consumer's 500 ms fetch wait: the follower answered as its HW moved.
        assert sorted(latencies)[len(latencies) // 2] < 0.4, latencies
    finally:
        c.stop()
