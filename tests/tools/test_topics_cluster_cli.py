"""`gregor topics` against an in-process three-broker cluster: --replica-assignment, --describe with
Offline, and the partition filters, in kafka-topics.sh's shape."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.admin.cluster import InProcessCluster
from tests.tools.cli import gregor


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[InProcessCluster]:
    c = InProcessCluster(tmp_path, [1, 2, 3])
    yield c
    c.stop()


def _topics(c: InProcessCluster, *args: str) -> tuple[int, str, str]:
    r = gregor("topics", "--bootstrap-server", c.bootstrap, *args)
    assert "Traceback" not in r.stderr
    return r.returncode, r.stdout, r.stderr


def _partition_lines(out: str) -> list[list[str]]:
    return [ln.strip().split("\t") for ln in out.splitlines() if ln.startswith("\tTopic:")]


def test_replica_assignment_describe_offline_and_filters(cluster: InProcessCluster) -> None:
    rc, out, err = _topics(cluster, "--create", "--topic", "t", "--replica-assignment", "1:2,2:3,3:1",
                           "--config", "min.insync.replicas=2")
    assert rc == 0, err
    assert out.strip() == "Created topic t."
    rc, out, err = _topics(cluster, "--describe", "--topic", "t")
    assert rc == 0, err
    head = out.splitlines()[0].split("\t")
    assert head[0] == "Topic: t" and head[2:] == ["PartitionCount: 3", "ReplicationFactor: 2",
                                                  "Configs: min.insync.replicas=2"]
    assert _partition_lines(out) == [
        ["Topic: t", "Partition: 0", "Leader: 1", "Replicas: 1,2", "Isr: 1,2"],
        ["Topic: t", "Partition: 1", "Leader: 2", "Replicas: 2,3", "Isr: 2,3"],
        ["Topic: t", "Partition: 2", "Leader: 3", "Replicas: 3,1", "Isr: 3,1"],
    ]
    for f in ("--under-replicated-partitions", "--unavailable-partitions", "--under-min-isr-partitions"):
        rc, out, err = _topics(cluster, "--describe", f)
        assert (rc, out) == (0, ""), (f, out, err)

    # Broker 3's session ends: the controller moves partition 2's leadership to 1 and drops 3 from the ISRs;
    # "u" (one replica, on 3) is left without a leader.
    assert _topics(cluster, "--create", "--topic", "u", "--replica-assignment", "3")[0] == 0
    cluster.store.unregister_broker(3)

    def settled() -> bool:
        for b in cluster.brokers.values():
            t, u = b.metadata_cache.topic("t"), b.metadata_cache.topic("u")
            if len(b.metadata_cache.brokers()) != 2 or t is None or u is None or u.partitions[0].leader != -1 \
                    or any(3 in st.isr for st in t.partitions.values()):
                return False
        return True

    cluster.wait_for(settled)
    rc, out, err = _topics(cluster, "--describe", "--topic", "t")
    assert rc == 0, err
    assert _partition_lines(out) == [
        ["Topic: t", "Partition: 0", "Leader: 1", "Replicas: 1,2", "Isr: 1,2"],
        ["Topic: t", "Partition: 1", "Leader: 2", "Replicas: 2,3", "Isr: 2", "Offline: 3"],
        ["Topic: t", "Partition: 2", "Leader: 1", "Replicas: 3,1", "Isr: 1", "Offline: 3"],
    ]
    rc, out, _ = _topics(cluster, "--describe", "--under-replicated-partitions")
    assert [ln[:2] for ln in _partition_lines(out)] == [["Topic: t", "Partition: 1"], ["Topic: t", "Partition: 2"]]
    assert not out.startswith("Topic:")  # no topic lines under a filter, as kafka-topics.sh
    rc, out, _ = _topics(cluster, "--describe", "--unavailable-partitions")
    assert [ln[:3] for ln in _partition_lines(out)] == [["Topic: u", "Partition: 0", "Leader: none"]]
    rc, out, _ = _topics(cluster, "--describe", "--under-min-isr-partitions")  # a leaderless one too, as Kafka
    assert [ln[:2] for ln in _partition_lines(out)] == [["Topic: t", "Partition: 1"], ["Topic: t", "Partition: 2"],
                                                       ["Topic: u", "Partition: 0"]]
    rc, out, _ = _topics(cluster, "--describe", "--at-min-isr-partitions")  # ISR size only, as Kafka
    assert [ln[:2] for ln in _partition_lines(out)] == [["Topic: t", "Partition: 0"], ["Topic: u", "Partition: 0"]]


def test_alter_with_assignment_and_usage_errors(cluster: InProcessCluster) -> None:
    assert _topics(cluster, "--create", "--topic", "a", "--partitions", "1", "--replication-factor", "3")[0] == 0
    rc, out, err = _topics(cluster, "--alter", "--topic", "a", "--partitions", "3",
                           "--replica-assignment", "1:2:3,2:3:1,3:1:2")
    assert rc == 0, err
    rc, out, _ = _topics(cluster, "--describe", "--topic", "a")
    lines = _partition_lines(out)
    assert [ln[3] for ln in lines[1:]] == ["Replicas: 2,3,1", "Replicas: 3,1,2"]
    rc, _, err = _topics(cluster, "--create", "--topic", "b", "--replica-assignment", "1:2,3")
    assert rc == 2 and "every partition needs the same number" in err
    rc, _, err = _topics(cluster, "--create", "--topic", "b", "--replica-assignment", "1:1")
    assert rc == 2 and "duplicate broker id" in err
    rc, _, err = _topics(cluster, "--create", "--topic", "b", "--replica-assignment", "1:2", "--partitions", "1")
    assert rc == 2 and "cannot be used with --partitions" in err
    rc, _, err = _topics(cluster, "--list", "--under-replicated-partitions")
    assert rc == 2 and "applies to --describe only" in err
    rc, _, err = _topics(cluster, "--create", "--topic", "b", "--replica-assignment", "1:9")
    assert rc == 1 and "Unknown broker(s) [9]" in err
