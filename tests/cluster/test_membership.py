"""Broker processes joining one cluster through a real ZooKeeper: registration, Metadata from any broker,
topic creation seen by every broker, duplicate ids refused, a SIGKILLed broker leaving after its session."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gregor.tools.local_broker import BrokerProcess
from tests.server.admin_wire import CREATE_TOPICS, metadata
from tests.wire import WireClient

SESSION_MS = "2000"


def _cluster(start_broker: Callable[..., BrokerProcess], zk_connect: str, n: int = 3) -> list[BrokerProcess]:
    return [start_broker({"zookeeper.connect": zk_connect, "broker.id": str(i),
                          "zookeeper.session.timeout.ms": SESSION_MS}) for i in range(n)]


def _metadata(b: BrokerProcess, *topics: str):  # type: ignore[no-untyped-def]
    c = WireClient(b.bootstrap)
    try:
        return metadata(c, *topics)
    finally:
        c.close()


def _wait(cond: Callable[[], bool], timeout_s: float) -> float:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"condition not met in {timeout_s} s")
        time.sleep(0.05)
    return time.monotonic() - t0


def test_three_brokers_join_and_a_topic_created_through_one_is_seen_by_all(
        start_broker: Callable[..., BrokerProcess], zk_connect: str) -> None:
    brokers = _cluster(start_broker, zk_connect)
    for b in brokers:
        md = _metadata(b)
        assert sorted((x.node_id, x.port) for x in md.brokers) == sorted((i, x.port) for i, x in enumerate(brokers))
        assert md.cluster_id == _metadata(brokers[0]).cluster_id
    # Over the wire to broker 0: librdkafka's AdminClient sends CreateTopics only to the controller, which
    # the controller slice elects (until it is merged, Metadata reports none).
    c = WireClient(brokers[0].bootstrap)
    resp = c.request(CREATE_TOPICS, 5, {
        "topics": [{"name": "rf3", "num_partitions": 4, "replication_factor": 3, "assignments": [], "configs": []}],
        "timeout_ms": 15000, "validate_only": False})
    c.close()
    assert resp.topics[0].error_code == 0, resp.topics[0]
    assert {tuple(sorted(p.replica_nodes)) for p in _metadata(brokers[0], "rf3").topics[0].partitions} == {(0, 1, 2)}

    def seen_by_all() -> bool:
        for b in brokers[1:]:
            (t,) = _metadata(b, "rf3").topics
            if t.error_code != 0 or len(t.partitions) != 4:
                return False
        return True

    took = _wait(seen_by_all, 5)
    assert took < 1.0  # the others learn through their watches, within moments
    for b in brokers:
        (t,) = _metadata(b, "rf3").topics
        for p in t.partitions:
            assert sorted(p.replica_nodes) == [0, 1, 2] and sorted(p.isr_nodes) == [0, 1, 2]
            assert p.leader_id == p.replica_nodes[0]


def test_a_duplicate_broker_id_refuses_to_start(start_broker: Callable[..., BrokerProcess], zk_connect: str,
                                                tmp_path: Path) -> None:
    _cluster(start_broker, zk_connect, 1)
    cmd = [sys.executable, "-m", "gregor", "serve", "--override", f"log.dirs={tmp_path / 'dup'}",
           "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"zookeeper.connect={zk_connect}",
           "--override", "broker.id=0"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "broker id 0 is already registered" in out.stderr
    # and a cluster member without an explicit broker.id is refused too
    cmd[-1] = "log.retention.check.interval.ms=300000"
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "broker.id must be set explicitly" in out.stderr


def test_a_sigkilled_broker_leaves_metadata_after_its_session_timeout(
        start_broker: Callable[..., BrokerProcess], zk_connect: str) -> None:
    brokers = _cluster(start_broker, zk_connect)
    brokers[2].kill()
    took = _wait(lambda: sorted(x.node_id for x in _metadata(brokers[0]).brokers) == [0, 1], 15)
    assert took > 0.5  # the session outlived the process a while: nothing told ZooKeeper but the timeout
    assert sorted(x.node_id for x in _metadata(brokers[1]).brokers) == [0, 1]
    # a clean stop unregisters at once
    assert brokers[1].stop() == 0
    _wait(lambda: sorted(x.node_id for x in _metadata(brokers[0]).brokers) == [0], 2)
