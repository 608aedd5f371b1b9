"""Metadata and DescribeCluster in a cluster, through real clients (confluent-kafka, kafka-python) on an
in-process cluster of three brokers sharing one metadata store: every live broker with its rack,
per partition leader, epoch, replicas, ISR and offline replicas, LEADER_NOT_AVAILABLE for a partition
without a live leader, and placement across racks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError as CKError
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.admin import KafkaAdminClient

from tests.admin.cluster import InProcessCluster

RACKS = {1: "r1", 2: "r2", 3: "r3"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[InProcessCluster]:
    c = InProcessCluster(tmp_path, [1, 2, 3], RACKS)
    yield c
    c.stop()


def _admin(c: InProcessCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": c.bootstrap})


def test_metadata_in_a_cluster(cluster: InProcessCluster) -> None:
    admin = _admin(cluster)
    admin.create_topics([NewTopic("t", 6, 3)])["t"].result(20)
    md = admin.list_topics("t", timeout=20)
    assert sorted(md.brokers) == [1, 2, 3]
    assert {b: (m.host, m.port) for b, m in md.brokers.items()} == {b: ("127.0.0.1", cluster.port(b)) for b in (1, 2, 3)}
    assert md.controller_id == 1
    parts = md.topics["t"].partitions
    assert sorted(parts) == list(range(6))
    leaders = [parts[p].leader for p in range(6)]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]  # spread evenly
    for p in parts.values():
        assert sorted(p.replicas) == [1, 2, 3] and p.isrs == p.replicas and p.leader == p.replicas[0]
        assert p.error is None

    cluster_desc = admin.describe_cluster(request_timeout=20).result(20)
    assert {n.id: n.rack for n in cluster_desc.nodes} == RACKS
    assert cluster_desc.controller.id == 1

    # A partition without a leader: LEADER_NOT_AVAILABLE, leader -1, the rest still filled in.
    replicas0 = parts[0].replicas
    cluster.set_state("t", 0, -1, [replicas0[1]])
    p0 = admin.list_topics("t", timeout=20).topics["t"].partitions[0]
    assert p0.leader == -1 and p0.error is not None and p0.error.code() == CKError.LEADER_NOT_AVAILABLE
    assert p0.replicas == replicas0 and p0.isrs == [replicas0[1]]

    # Broker 3's session ends: it leaves the broker list and its replicas are offline; the controller moves
    # the leaderships it held and drops it from the ISRs. Partition 0 (leader -1 above) gets its live ISR
    # member as leader, unless that member was broker 3.
    cluster.store.unregister_broker(3)

    def settled() -> bool:
        for b in cluster.brokers.values():
            t = b.metadata_cache.topic("t")
            # With no live ISR member a partition keeps its last ISR (Kafka's rule) and has no leader.
            if len(b.metadata_cache.brokers()) != 2 or t is None or any(
                    (3 in s.isr and s.isr != [3]) or s.leader == 3 for s in t.partitions.values()):
                return False
        return True

    cluster.wait_for(settled)
    kp = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{cluster.port(1)}", request_timeout_ms=20000)
    try:
        desc = kp.describe_cluster()
        assert sorted((b["broker_id"], b["rack"]) for b in desc["brokers"]) == [(1, "r1"), (2, "r2")]
        assert desc["controller_id"] == 1
        (topic,) = kp.describe_topics(["t"])
        assert topic["error_code"] == 0
        by_p = {p["partition_index"]: p for p in topic["partitions"]}
        for p in range(6):
            e = by_p[p]
            before_isr = [replicas0[1]] if p == 0 else parts[p].isrs
            live_isr = [r for r in before_isr if r != 3]
            assert e["replica_nodes"] == parts[p].replicas
            assert e["offline_replicas"] == [3]
            if p == 0 and live_isr:
                # Partition 0's new leader runs a real replica manager: a live follower that has caught up may
                # already have rejoined its ISR (expansion), so the ISR holds at least the survivor.
                assert set(live_isr) <= set(e["isr_nodes"]) <= {1, 2}
            else:
                assert e["isr_nodes"] == (live_isr or before_isr)
            if live_isr:  # the first live ISR member in assignment order leads
                expected = next(r for r in parts[p].replicas if r in live_isr)
                if p != 0 and parts[p].leader != 3:
                    expected = parts[p].leader  # a live leader keeps its leadership
                assert (e["leader_id"], e["error_code"]) == (expected, 0)
            else:
                assert e["leader_id"] == -1 and e["error_code"] == CKError.LEADER_NOT_AVAILABLE
    finally:
        kp.close()


def test_creation_uses_live_brokers_and_racks(cluster: InProcessCluster) -> None:
    admin = _admin(cluster)
    cluster.store.unregister_broker(3)
    cluster.wait_for(lambda: all(len(b.metadata_cache.brokers()) == 2 for b in cluster.brokers.values()))
    fut = admin.create_topics([NewTopic("three", 1, 3)], request_timeout=20)["three"]
    with pytest.raises(Exception) as e:
        fut.result(20)
    assert "larger than available brokers: 2" in str(e.value)
    admin.create_topics([NewTopic("two", 4, 2)])["two"].result(20)
    parts = admin.list_topics("two", timeout=20).topics["two"].partitions
    assert all(sorted(p.replicas) == [1, 2] for p in parts.values())
    assert sorted(p.leader for p in parts.values()) == [1, 1, 2, 2]
    # New partitions get the topic's replication factor over the live brokers.
    admin.create_partitions([NewPartitions("two", 6)])["two"].result(20)
    parts = admin.list_topics("two", timeout=20).topics["two"].partitions
    assert len(parts) == 6 and all(sorted(p.replicas) == [1, 2] for p in parts.values())
    # An explicit assignment naming a broker that is not live is refused.
    bad = admin.create_topics([NewTopic("bad", 1, replica_assignment=[[1, 3]])], request_timeout=20)["bad"]
    with pytest.raises(Exception) as e:
        bad.result(20)
    assert "Unknown broker(s) [3]" in str(e.value)


def test_mixed_racks_refused(tmp_path: Path) -> None:
    c = InProcessCluster(tmp_path, [1, 2], {1: "r1"})
    try:
        admin = _admin(c)  # held: the future fails when its client is destroyed
        fut = admin.create_topics([NewTopic("t", 2, 2)], request_timeout=20)["t"]
        with pytest.raises(Exception) as e:
            fut.result(20)
        assert "Not all brokers have rack information" in str(e.value)
    finally:
        c.stop()


def test_metadata_v0_lists_live_replicas_only(cluster: InProcessCluster) -> None:
    """Kafka's errorUnavailableEndpoints: a v0 client gets only live replicas, and REPLICA_NOT_AVAILABLE
    when one is missing; v1+ gets them all with offline_replicas (v5+)."""
    from tests.wire import WireClient

    admin = _admin(cluster)
    admin.create_topics([NewTopic("v", 1, replica_assignment=[[1, 3]])])["v"].result(20)
    cluster.store.unregister_broker(3)
    # The controller drops the dead replica from the ISR; the assignment keeps it (offline).
    cluster.wait_for(lambda: all(len(b.metadata_cache.brokers()) == 2 and b.metadata_cache.partition_state("v", 0).isr == [1]
                                 for b in cluster.brokers.values()))
    w = WireClient(f"127.0.0.1:{cluster.port(1)}")
    try:
        (t,) = w.request(3, 0, {"topics": [{"name": "v"}]}).topics
        (p,) = t.partitions
        assert (p.error_code, p.leader_id, p.replica_nodes, p.isr_nodes) == (CKError.REPLICA_NOT_AVAILABLE, 1, [1], [1])
        (t,) = w.request(3, 5, {"topics": [{"name": "v"}], "allow_auto_topic_creation": False}).topics
        (p,) = t.partitions
        assert (p.error_code, p.leader_id, p.replica_nodes, p.isr_nodes, p.offline_replicas) == (0, 1, [1, 3], [1], [3])
    finally:
        w.close()
