"""Three combined (broker,controller) KRaft nodes, no ZooKeeper: a quorum started from nothing, topics with
RF=3 under idempotent acks=all produce, then SIGKILL of the active controller: a new one is elected, metadata
changes are accepted again, the dead node's partition leaderships move once its session ends, and every
acknowledged record is read back. The killed node then rejoins."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.tools.kraft_nodes import kraft_quorum, start_together
from gregor.tools.local_broker import BrokerProcess
from tests.kraft.helpers import quorum, read_values, wait_value

# Short sessions so a dead broker is fenced (and its leaderships moved) in seconds; the quorum keeps Kafka's
# election and fetch timeouts.
OVERRIDES = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
             "offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3"}


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    ns = kraft_quorum(tmp_path, 3, OVERRIDES)
    yield ns
    for i, n in enumerate(ns):
        n.kill()
        (tmp_path / f"node-{i + 1}.out").write_text(n.log_text())  # kept for a failure's post-mortem


def test_three_node_quorum_controller_failover(nodes: list[BrokerProcess]) -> None:
    start_s = start_together(nodes)
    print(f"3-node quorum started in {start_s:.1f} s")
    bs = ",".join(n.bootstrap for n in nodes)
    q = quorum(bs)
    assert sorted(v["replica_id"] for v in q["current_voters"]) == [1, 2, 3]
    assert q["leader_id"] in (1, 2, 3)
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic("r3", 6, 3, config={"min.insync.replicas": "2"})]).values():
        f.result(30)
    md = admin.list_topics(timeout=10)
    assert md.controller_id == q["leader_id"]
    assert all(sorted(p.isrs) == [1, 2, 3] for p in md.topics["r3"].partitions.values())

    acked: list[str] = []
    lock = threading.Lock()

    def on_delivery(err, msg) -> None:  # noqa: ANN001
        if err is None:
            with lock:
                acked.append(msg.value().decode())

    p = Producer({"bootstrap.servers": bs, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 60000})
    for i in range(300):
        p.produce("r3", value=f"a{i}".encode(), on_delivery=on_delivery)
    assert p.flush(30) == 0

    leader = q["leader_id"]
    victim = nodes[leader - 1]
    survivors = [n for n in nodes if n is not victim]
    sbs = ",".join(n.bootstrap for n in survivors)
    led_before = {pid for pid, pp in md.topics["r3"].partitions.items() if pp.leader == leader}
    victim.kill()
    t_kill = time.monotonic()

    new = wait_value("a new quorum leader", lambda: (lambda x: x if x["leader_id"] not in (-1, leader) else None)(
        quorum(sbs)))
    elected_s = time.monotonic() - t_kill
    assert new["leader_epoch"] > q["leader_epoch"]

    sadmin = AdminClient({"bootstrap.servers": sbs})

    def create() -> bool:
        try:
            for f in sadmin.create_topics([NewTopic("after", 3, 2)]).values():
                f.result(10)
            return True
        except KafkaException as e:
            if "already exists" in str(e).lower() or "TOPIC_ALREADY_EXISTS" in str(e):
                return True
            raise

    wait_value("CreateTopics accepted by the new controller", create)
    writable_s = time.monotonic() - t_kill

    def moved() -> bool:
        parts = sadmin.list_topics(timeout=5).topics["r3"].partitions
        return all(parts[pid].leader not in (leader, -1) and leader not in parts[pid].isrs for pid in parts)

    wait_value("the killed node's leaderships moved", moved, 30)
    moved_s = time.monotonic() - t_kill
    print(f"controller failover: new quorum leader {new['leader_id']} in {elected_s:.2f} s, CreateTopics accepted "
          f"after {writable_s:.2f} s, {len(led_before)} partition leaderships moved after {moved_s:.2f} s")
    assert sadmin.list_topics(timeout=5).controller_id == new["leader_id"]

    p2 = Producer({"bootstrap.servers": sbs, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for i in range(300):
        p2.produce("r3", value=f"b{i}".encode(), on_delivery=on_delivery)
    assert p2.flush(30) == 0

    victim.restart()  # it rejoins: a follower of the quorum, a broker again once its old session ended
    wait_value("the restarted node back in the ISRs", lambda: all(
        leader in pp.isrs for pp in AdminClient({"bootstrap.servers": bs}).list_topics(timeout=5)
        .topics["r3"].partitions.values()), 60)
    got = read_values(bs, "r3", len(acked))
    assert len(acked) == 600
    assert sorted(got) == sorted(acked), "every acknowledged record read back exactly once"


def test_losing_and_regaining_the_majority(nodes: list[BrokerProcess]) -> None:
    """Two of three nodes killed: metadata changes are refused with an error naming the lost quorum, while a
    partition led by the survivor still takes acks=1 writes and serves reads; the two restarted, the quorum
    elects again and takes changes."""
    for n in nodes:
        n.overrides["request.timeout.ms"] = "5000"  # how long a metadata write waits for the quorum
    start_together(nodes)
    bs = ",".join(n.bootstrap for n in nodes)
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic("solo", 3, 1), NewTopic("r3", 1, 3)]).values():
        f.result(30)
    parts = admin.list_topics(timeout=10).topics["solo"].partitions
    survivor = nodes[0]
    mine = [pid for pid, p in parts.items() if p.leader == 1]
    assert mine, "node 1 leads one partition of three (round-robin assignment)"
    since = len(survivor.log_lines)
    for n in nodes[1:]:
        n.kill()
    t_kill = time.monotonic()

    sadmin = AdminClient({"bootstrap.servers": survivor.bootstrap})
    survivor.wait_for_log("-> Prospective", 30, since)  # no leader any more: it asks whether it could lead
    no_leader_s = time.monotonic() - t_kill
    assert sadmin.list_topics(timeout=5).controller_id == 1  # a live broker clients can send admin requests to
    t0 = time.monotonic()
    with pytest.raises(KafkaException) as refused:
        for f in sadmin.create_topics([NewTopic("refused", 1, 1)], request_timeout=30).values():
            f.result(40)
    print(f"no quorum leader {no_leader_s:.2f} s after losing the majority; CreateTopics refused after "
          f"{time.monotonic() - t0:.1f} s: {refused.value}")
    assert "quorum" in str(refused.value)

    p = Producer({"bootstrap.servers": survivor.bootstrap, "acks": "1"})
    for i in range(20):
        p.produce("solo", value=f"s{i}".encode(), partition=mine[0])
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": survivor.bootstrap, "group.id": "g-solo", "auto.offset.reset": "earliest"})
    from confluent_kafka import TopicPartition

    c.assign([TopicPartition("solo", mine[0], 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 20 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value().decode())
    c.close()
    assert got == [f"s{i}" for i in range(20)]

    start_together(nodes[1:])  # back: each registers once its old session ended
    wait_value("the quorum to elect again", lambda: quorum(survivor.bootstrap)["leader_id"] in (1, 2, 3), 60)

    def create() -> bool:
        for f in sadmin.create_topics([NewTopic("after", 1, 1)]).values():
            f.result(10)
        return True

    wait_value("CreateTopics accepted again", create, 60)


def test_clean_stop_of_the_active_controller(nodes: list[BrokerProcess]) -> None:
    """SIGTERM of the active controller: its controlled shutdown moves its leaderships before it stops, the
    quorum leader resigns so another is elected at once, and it restarts and registers without waiting out a
    session."""
    start_together(nodes)
    bs = ",".join(n.bootstrap for n in nodes)
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic("r3", 6, 3)]).values():
        f.result(30)
    leader = quorum(bs)["leader_id"]
    victim = nodes[leader - 1]
    survivors = [n for n in nodes if n is not victim]
    sbs = ",".join(n.bootstrap for n in survivors)
    t0 = time.monotonic()
    assert victim.stop() == 0
    stop_s = time.monotonic() - t0
    parts = AdminClient({"bootstrap.servers": sbs}).list_topics(timeout=10).topics["r3"].partitions
    assert all(p.leader not in (leader, -1) for p in parts.values()), "leaderships moved before the stop"
    new = wait_value("a new quorum leader", lambda: (lambda x: x if x["leader_id"] not in (-1, leader) else None)(
        quorum(sbs)), 10)
    elected_s = time.monotonic() - t0
    print(f"clean stop of the active controller: {stop_s:.2f} s; new quorum leader {new['leader_id']} "
          f"{elected_s:.2f} s after the SIGTERM")
    log = victim.log_text()
    assert "Resigned" in log and "fenced by the controller at its stop" in log
    since = len(victim.log_lines)
    victim.restart()
    assert not any("registered by another incarnation" in line for line in victim.log_lines[since:])
    p = Producer({"bootstrap.servers": bs, "acks": "all", "enable.idempotence": True})
    for i in range(50):
        p.produce("r3", value=str(i).encode())
    assert p.flush(30) == 0


def test_frozen_active_controller_is_deposed_and_rejoins(nodes: list[BrokerProcess]) -> None:
    """SIGSTOP of the active controller past the fetch and session timeouts: the others elect a new one, which
    takes changes; thawed, the old one follows (its writes as controller of the old epoch are refused) and its
    broker is unfenced again, the cluster converging on one controller."""
    import os
    import signal

    start_together(nodes)
    bs = ",".join(n.bootstrap for n in nodes)
    admin = AdminClient({"bootstrap.servers": bs})
    # Every broker registered and unfenced before an RF=3 topic (a loaded machine starts them unevenly).
    wait_value("three live brokers", lambda: len(admin.list_topics(timeout=5).brokers) == 3, 60)
    for f in admin.create_topics([NewTopic("r3", 3, 3)]).values():
        f.result(60)
    old = quorum(bs)
    frozen = nodes[old["leader_id"] - 1]
    others = [n for n in nodes if n is not frozen]
    obs = ",".join(n.bootstrap for n in others)
    assert frozen.proc is not None
    os.kill(frozen.proc.pid, signal.SIGSTOP)
    try:
        new = wait_value("a new quorum leader", lambda: (lambda x: x if x["leader_id"] not in (-1, old["leader_id"])
                                                       else None)(quorum(obs)), 30)
        assert new["leader_epoch"] > old["leader_epoch"]
        oadmin = AdminClient({"bootstrap.servers": obs})
        for f in oadmin.create_topics([NewTopic("while-frozen", 1, 2)]).values():
            f.result(30)
        wait_value("the frozen broker's leaderships moved", lambda: all(
            p.leader != old["leader_id"] for p in oadmin.list_topics(timeout=5).topics["r3"].partitions.values()), 30)
    finally:
        os.kill(frozen.proc.pid, signal.SIGCONT)
    wait_value("one controller everywhere, the thawed node a follower", lambda: len(
        {fetch(n.bootstrap) for n in nodes} | {new["leader_id"]}) == 1, 30)
    wait_value("the thawed broker live again", lambda: old["leader_id"] in AdminClient(
        {"bootstrap.servers": obs}).list_topics(timeout=5).brokers, 30)
    q = quorum(bs)
    assert q["leader_id"] == new["leader_id"] and q["leader_epoch"] == new["leader_epoch"]
    fadmin = AdminClient({"bootstrap.servers": frozen.bootstrap})  # kept until the answer
    for f in fadmin.create_topics([NewTopic("after", 1, 3)]).values():
        f.result(30)


def fetch(bootstrap: str) -> int:
    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5).controller_id
