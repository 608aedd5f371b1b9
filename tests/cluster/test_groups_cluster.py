"""Consumer groups in a cluster: the coordinator of a group is the leader of its __consumer_offsets
partition (FindCoordinator names it, the other brokers answer NOT_COORDINATOR), and when that broker
dies the new leader of the partition takes the group over with its committed offsets (replicated)."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Consumer, TopicPartition

from gregor.coordinator.group.metadata_manager import OFFSETS_TOPIC, partition_for
from gregor.tools.local_cluster import LocalCluster, create_topic
from gregor.tools.numbered_load import NumberedLoad
from tests.wire import WireClient

GROUP = "cluster-group"
COUNT = 3000


def _consume(bootstrap: str, topic: str, n: int) -> list[tuple[int, int]]:
    """Read `n` records in the group (committing each one synchronously); (partition, offset) read."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000})
    c.subscribe([topic])
    seen: list[tuple[int, int]] = []
    try:
        while len(seen) < n:
            m = c.poll(1.0)
            if m is None or m.error():
                continue
            seen.append((m.partition(), m.offset()))
            c.commit(m, asynchronous=False)
    finally:
        c.close()
    return seen


def test_coordinator_is_the_offsets_partition_leader_and_moves_with_it(make_any_cluster: Callable[..., LocalCluster]) -> None:
    c = make_any_cluster(3)
    topic = "grouped"
    create_topic(c.bootstrap, topic, 2, 3, {"min.insync.replicas": "2"})
    load = NumberedLoad(c.bootstrap, topic, 2, COUNT).start()
    load.join(60)
    assert load.acked_count() == COUNT
    first = _consume(c.bootstrap, topic, COUNT // 2)

    p = partition_for(GROUP, 50)
    coordinator = c.leader_of(OFFSETS_TOPIC, p)
    # FindCoordinator from any broker names the leader; the others refuse the group's requests.
    for via in range(3):
        w = WireClient(c.brokers[via].bootstrap)
        try:
            r = w.request(10, 3, {"key": GROUP, "key_type": 0})
            assert (r.error_code, r.node_id) == (0, coordinator)
            if via != coordinator:
                fetched = w.request(9, 7, {"group_id": GROUP, "topics": None, "require_stable": False})
                assert fetched.error_code == 16  # NOT_COORDINATOR
        finally:
            w.close()
    c.wait_until(lambda: len(c.isr_of(OFFSETS_TOPIC, p)) == 3, 30, "the offsets partition fully replicated")

    c.kill(coordinator)
    c.wait_leader(OFFSETS_TOPIC, p, not_in=(coordinator,), timeout_s=30)
    # The new coordinator has the committed offsets: the group resumes where it stopped.
    rest = _consume(c.bootstrap, topic, COUNT - len(first))
    assert not set(first) & set(rest), "records read again after the coordinator moved"
    assert len(set(first) | set(rest)) == COUNT
    probe = Consumer({"bootstrap.servers": c.bootstrap, "group.id": GROUP})
    try:
        committed = probe.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=20)
        assert sum(tp.offset for tp in committed) == COUNT
    finally:
        probe.close()
