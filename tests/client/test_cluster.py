"""The Arrow reader on a real 3-broker cluster (in process): reading from the follower in its rack (KIP-392),
and a leadership that moves while a read is under way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.client.arrow import ArrowReader
from tests.admin.cluster import InProcessCluster
from tests.client.reference import consume, rows

RACKS = {1: "r1", 2: "r2", 3: "r3"}
SELECTOR = {"replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"}
COUNT = 3000
SMALL = {"max.partition.fetch.bytes": 8000, "arrow.batch.max.records": 200, "retry.backoff.ms": 20}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[InProcessCluster]:
    c = InProcessCluster(tmp_path, [1, 2, 3], RACKS, SELECTOR)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("t", 1, replica_assignment=[[1, 2, 3]])])["t"].result(20)
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 4000})
    for i in range(COUNT):
        p.produce("t", b"%08d" % i + b"x" * 92, key=b"k%d" % (i % 7), partition=0)
    assert p.flush(30) == 0
    yield c
    c.stop()


def test_reads_from_the_follower_in_its_rack(cluster: InProcessCluster) -> None:
    expected = consume(cluster.bootstrap, "t")
    reader = ArrowReader(cluster.bootstrap, "t", client_rack="r2", **SMALL)
    assert rows(reader.read_all()) == expected
    by_node = reader.stats.bytes_by_node
    assert by_node.get(2, 0) > COUNT * 100 and by_node.get(1, 0) == 0, by_node
    reader = ArrowReader(cluster.bootstrap, "t", **SMALL)  # no rack: the leader
    assert rows(reader.read_all()) == expected
    assert set(reader.stats.bytes_by_node) == {1}


def test_leader_moves_mid_read(cluster: InProcessCluster) -> None:
    expected = consume(cluster.bootstrap, "t")
    reader = ArrowReader(cluster.bootstrap, "t", **SMALL)
    got = []
    for i, batch in enumerate(reader):
        got.append(batch)
        if i == 2:
            cluster.set_state("t", 0, leader=3, isr=[1, 2, 3])
    import pyarrow as pa

    assert rows(pa.Table.from_batches(got)) == expected
    by_node = reader.stats.bytes_by_node
    assert by_node.get(1, 0) > 0 and by_node.get(3, 0) > 0, by_node
    assert reader.stats.retries >= 1
