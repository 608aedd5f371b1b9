"""The source on a 3-broker cluster with racks (in process, real sockets): with kafka.client.rack the executors
read from the replica in their rack (KIP-392), without it from the leader; and minPartitions splits each
partition's range into tasks that together read every record once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.admin.cluster import InProcessCluster
from tests.spark.util import consume_all, df_records, load

RACKS = {1: "r1", 2: "r2", 3: "r3"}
PROPS = {"replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
         "metrics.port": "0"}  # metrics on: each broker counts the bytes consumers fetched from it
TOPIC = "racks"
COUNT = 6000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    c = InProcessCluster(tmp_path_factory.mktemp("racks"), [1, 2, 3], RACKS, PROPS)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, replica_assignment=[[1, 2, 3], [1, 3, 2]])])[TOPIC].result(20)
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 20_000})
    for i in range(COUNT):
        p.produce(TOPIC, b"%08d" % i + b"x" * 92, key=b"k%d" % (i % 7), partition=i % 2)
    assert p.flush(30) == 0
    # Followers serve what is below their high watermark: wait until both have everything.
    c.wait_for(lambda: all(b.replica_manager.get_partition(TOPIC, p).log.high_watermark == COUNT // 2
                           for b in c.brokers.values() for p in (0, 1)), 30)
    yield c
    c.stop()


def bytes_out(c: InProcessCluster) -> dict[int, int]:
    """Record bytes consumers (not followers) fetched from each broker so far."""
    return c.call(lambda: {i: b.metrics.bytes_out.get(TOPIC, 0) for i, b in c.brokers.items()})


def test_client_rack_reads_from_the_replica_in_the_rack(spark: Any, cluster: InProcessCluster) -> None:
    truth = consume_all(cluster.bootstrap, TOPIC)
    assert len(truth) == COUNT
    before = bytes_out(cluster)
    assert df_records(load(spark, cluster.bootstrap, subscribe=TOPIC, **{"kafka.client.rack": "r2"})) == truth
    after = bytes_out(cluster)
    moved = {i: after[i] - before[i] for i in after}
    # Broker 1 leads both partitions; broker 2, in rack r2, holds a replica of each.
    assert moved[2] >= COUNT * 100 and moved[1] == 0 and moved[3] == 0, moved

    before = after
    assert df_records(load(spark, cluster.bootstrap, subscribe=TOPIC)) == truth
    after = bytes_out(cluster)
    moved = {i: after[i] - before[i] for i in after}
    assert moved[1] >= COUNT * 100 and moved[2] == 0 and moved[3] == 0, moved


def test_min_partitions_splits_ranges_into_tasks(spark: Any, cluster: InProcessCluster) -> None:
    truth = consume_all(cluster.bootstrap, TOPIC)
    df = load(spark, cluster.bootstrap, subscribe=TOPIC, minPartitions="7")
    assert df.rdd.getNumPartitions() >= 7
    per_task = df.rdd.glom().map(len).collect()
    assert sum(per_task) == COUNT and max(per_task) <= COUNT // 2 // 3 + 1, per_task
    assert df_records(df) == truth
