"""Broker processes joining one cluster through a real ZooKeeper: registration, Metadata from any broker,
topic creation seen by every broker, duplicate ids refused, a SIGKILLed broker leaving after its session."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from gregor.broker.broker import Broker
from gregor.metadata.store import SESSION
from gregor.metadata.zookeeper import ZooKeeperMetadataStore, parse_connect
from gregor.tools.local_broker import BrokerProcess
from tests.in_process import InProcessBroker
from tests.server.admin_wire import CREATE_TOPICS, metadata
from tests.waiting import wait_for
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


@pytest.mark.serial  # seen by all within 1 s
def test_three_brokers_join_and_a_topic_created_through_one_is_seen_by_all(
        start_broker: Callable[..., BrokerProcess], zk_connect: str) -> None:
    brokers = _cluster(start_broker, zk_connect)
    expected = [(i, x.port) for i, x in enumerate(brokers)]
    for b in brokers:  # the last one's registration reaches the first ones through their watches
        wait_for(lambda b=b: sorted((x.node_id, x.port) for x in _metadata(b).brokers) == expected, 2)
        assert _metadata(b).cluster_id == _metadata(brokers[0]).cluster_id
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

    took = wait_for(seen_by_all, 5)
    assert took < 1.0  # the others learn through their watches, within moments
    for b in brokers:
        (t,) = _metadata(b, "rf3").topics
        for p in t.partitions:
            assert sorted(p.replica_nodes) == [0, 1, 2] and sorted(p.isr_nodes) == [0, 1, 2]
            assert p.leader_id == p.replica_nodes[0]


def test_a_duplicate_broker_id_refuses_to_start(start_broker: Callable[..., BrokerProcess], zk_connect: str,
                                                tmp_path: Path) -> None:
    _cluster(start_broker, zk_connect, 1)
    # The newcomer waits 1.5 of its own sessions (+ 2 s) for the registration to expire, as if it were
    # its own previous incarnation's; broker 0 is alive and heartbeating, so it never does. 2 s
    # sessions, as broker 0's: that wait is 5 s instead of 29 s with the default 18 s.
    cmd = [sys.executable, "-m", "gregor", "serve", "--override", f"log.dirs={tmp_path / 'dup'}",
           "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"zookeeper.session.timeout.ms={SESSION_MS}",
           "--override", f"zookeeper.connect={zk_connect}", "--override", "broker.id=0"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "broker id 0 is already registered" in out.stderr
    # and a cluster member without an explicit broker.id is refused too
    cmd[-1] = "log.retention.check.interval.ms=300000"
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "broker.id must be set explicitly" in out.stderr
    # and an unreachable ZooKeeper is named
    cmd[-1], cmd[-3] = "zookeeper.connection.timeout.ms=500", "zookeeper.connect=127.0.0.1:1/nowhere"
    out = subprocess.run(cmd + ["--override", "broker.id=3"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "cannot connect to ZooKeeper at 127.0.0.1:1" in out.stderr, out.stderr[-2000:]


def test_a_sigkilled_broker_leaves_metadata_after_its_session_timeout(
        start_broker: Callable[..., BrokerProcess], zk_connect: str) -> None:
    brokers = _cluster(start_broker, zk_connect)
    brokers[2].kill()
    took = wait_for(lambda: sorted(x.node_id for x in _metadata(brokers[0]).brokers) == [0, 1], 15)
    assert took > 0.5  # the session outlived the process a while: nothing told ZooKeeper but the timeout
    # Each broker learns it through its own ZooKeeper watch: broker 1's may fire a moment after broker 0's.
    wait_for(lambda: sorted(x.node_id for x in _metadata(brokers[1]).brokers) == [0, 1], 5)
    # a clean stop unregisters at once
    assert brokers[1].stop() == 0
    wait_for(lambda: sorted(x.node_id for x in _metadata(brokers[0]).brokers) == [0], 2)


def test_an_expired_session_is_reported_and_the_broker_registers_again(
        start_broker: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:
    other = _cluster(start_broker, zk_connect, 1)[0]
    session_events: list[str] = []

    def follow_session(broker: Broker) -> None:
        broker.metadata_cache.add_listener(lambda kind, what: session_events.append(what) if kind == SESSION else None)

    b = InProcessBroker({"log.dirs": str(tmp_path / "inproc"), "listeners": "PLAINTEXT://127.0.0.1:0",
                         "zookeeper.connect": zk_connect, "broker.id": "7", "broker.rack": "rack-a",
                         "zookeeper.session.timeout.ms": SESSION_MS}, on_start=follow_session)
    try:
        old_epoch = b.broker.broker_epoch
        assert old_epoch > 0
        wait_for(lambda: sorted(x.node_id for x in _metadata(other).brokers) == [0, 7], 5)
        assert next(x for x in _metadata(other).brokers if x.node_id == 7).rack == "rack-a"
        store = b.broker.store
        assert isinstance(store, ZooKeeperMetadataStore)
        thief = KazooClient(hosts=parse_connect(zk_connect)[0], client_id=store.client_id)
        thief.start(timeout=10)
        thief.stop()  # closes broker 7's session: ZooKeeper expires it and deletes its registration
        thief.close()
        wait_for(lambda: session_events[-2:] == ["lost", "restored"], 20)
        assert b.call(lambda: b.broker.broker_epoch) > old_epoch  # a new registration, a new broker epoch
        assert b.call(lambda: b.broker.metadata_cache.session) == "restored"
        wait_for(lambda: sorted(x.node_id for x in _metadata(other).brokers) == [0, 7], 5)
        assert sorted(x.node_id for x in _metadata(b).brokers) == [0, 7]
    finally:
        b.stop()
    # its clean shutdown unregistered it
    wait_for(lambda: sorted(x.node_id for x in _metadata(other).brokers) == [0], 3)
