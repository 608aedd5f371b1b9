"""Separate roles: three controller-only nodes (process.roles=controller, ids 1-3) and two broker-only nodes
(process.roles=broker, ids 4-5), no combined node and no ZooKeeper.

The controller-only active controller elects partition leaders (a SIGKILLed broker's leaderships move once
its session ends) and answers the controller's APIs the brokers forward to it in Envelopes (KIP-590):
AlterPartitionReassignments, ListPartitionReassignments and ElectLeaders sent by kafka-python and
confluent-kafka to the broker Metadata names as controller. The active controller is then SIGKILLed: a
new one is elected among the other two, and does the same. Every acknowledged record is read back. A raw
Envelope the controller cannot run is refused with an error, not run."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition as KafkaTopicPartition

from gregor.client.broker_client import BrokerClient
from gregor.protocol import apis
from gregor.protocol.errors import ErrorCode
from gregor.protocol.frames import encode_request
from gregor.protocol.messages.kraft_controller import ENVELOPE
from gregor.tools.kraft_nodes import kraft_split, start_together
from gregor.tools.local_broker import BrokerProcess
from tests.kraft.helpers import quorum, read_values, wait_value

OVERRIDES = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
             "offsets.topic.replication.factor": "2", "transaction.state.log.replication.factor": "2"}


@pytest.fixture
def split(tmp_path: Path) -> Iterator[tuple[list[BrokerProcess], list[BrokerProcess]]]:
    controllers, brokers = kraft_split(tmp_path, 3, 2, OVERRIDES)
    yield controllers, brokers
    for n in controllers + brokers:
        n.kill()
        (tmp_path / f"node-{n.overrides['node.id']}.out").write_text(n.log_text())  # for a failure's post-mortem


def leaders(admin: AdminClient, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    parts = admin.list_topics(topic, timeout=5).topics[topic].partitions
    return {p: (x.leader, list(x.replicas), sorted(x.isrs)) for p, x in parts.items()}


def envelope(controller: BrokerProcess, request_data: bytes) -> Any:
    """One raw Envelope to a controller's listener; its response."""
    async def send() -> Any:
        c = BrokerClient("127.0.0.1", controller.ports["CONTROLLER"], "test-envelope")
        try:
            return await c.request(ENVELOPE, 0, {"request_data": request_data, "request_principal": None,
                                                 "client_host_address": b"\x7f\x00\x00\x01"}, 10)
        finally:
            c.close()

    return asyncio.run(send())


def test_controller_only_quorum_with_broker_only_nodes(
        split: tuple[list[BrokerProcess], list[BrokerProcess]]) -> None:
    controllers, brokers = split
    start_together(controllers + brokers)
    bs = ",".join(b.bootstrap for b in brokers)
    q = wait_value("both brokers fetching the metadata log as observers", lambda: (lambda x: x if {
        o["replica_id"] for o in x["observers"]} >= {4, 5} else None)(quorum(bs)))
    assert sorted(v["replica_id"] for v in q["current_voters"]) == [1, 2, 3]
    active = q["leader_id"]
    assert active in (1, 2, 3)

    admin = AdminClient({"bootstrap.servers": bs})
    # Metadata names a broker as controller (the active one has no broker listener): the admin requests
    # the clients send it are forwarded
    assert admin.list_topics(timeout=10).controller_id in (4, 5)
    admin.create_topics([NewTopic("t", 2, replica_assignment=[[4, 5], [4, 5]])])["t"].result(30)
    wait_value("both partitions led by broker 4 with both in the ISR",
             lambda: all(v == (4, [4, 5], [4, 5]) for v in leaders(admin, "t").values()))

    acked: list[str] = []
    lock = threading.Lock()

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            with lock:
                acked.append(msg.value().decode())

    p = Producer({"bootstrap.servers": bs, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 60000})
    for i in range(200):
        p.produce("t", value=f"a{i}".encode(), partition=i % 2, on_delivery=on_delivery)
    assert p.flush(30) == 0

    # AlterPartitionReassignments and ListPartitionReassignments (kafka-python), forwarded in Envelopes
    kadmin = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=10000)
    try:
        assert kadmin.list_partition_reassignments() == {}
        result = kadmin.alter_partition_reassignments({KafkaTopicPartition("t", 0): [5, 4]})
        assert result == {KafkaTopicPartition("t", 0): None}
        wait_value("the reassignment done", lambda: kadmin.list_partition_reassignments() == {}
                 and leaders(admin, "t")[0][1] == [5, 4])
    finally:
        kadmin.close()
    # ElectLeaders (confluent-kafka): the preferred leader of partition 0 is now broker 5
    elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("t", 0)]).result(30)
    assert [e for e in elected.values() if e is not None] == []
    wait_value("broker 5 leads partition 0", lambda: leaders(admin, "t")[0][0] == 5)

    # a broker SIGKILLed: the controller-only active controller fences it and moves its leadership
    brokers[0].kill()
    admin5 = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
    wait_value("broker 4's leadership moved to broker 5", lambda: all(
        v[0] == 5 and v[2] == [5] for v in leaders(admin5, "t").values()))
    for i in range(200, 300):
        p.produce("t", value=f"a{i}".encode(), partition=i % 2, on_delivery=on_delivery)
    assert p.flush(30) == 0

    # the active controller SIGKILLed: another controller-only node takes over, elections and forwarding
    controllers[active - 1].kill()
    new = wait_value("a new quorum leader", lambda: (lambda x: x if x["leader_id"] not in (-1, active) else None)(
        quorum(brokers[1].bootstrap)))
    assert new["leader_id"] in (1, 2, 3) and new["leader_epoch"] > q["leader_epoch"]
    survivor = controllers[new["leader_id"] - 1]
    brokers[0].restart()
    wait_value("broker 4 back in both ISRs", lambda: all(v[2] == [4, 5] for v in leaders(admin, "t").values()), 60)
    elected = admin.elect_leaders(ElectionType.PREFERRED, None).result(30)
    assert all(e is None for e in elected.values())
    wait_value("broker 4 leads partition 1 again (preferred)", lambda: leaders(admin, "t")[1][0] == 4)

    # Envelopes a controller cannot run are refused, not run: garbage, and an API that is not forwarded
    assert envelope(survivor, b"\x00\x2b").error_code == ErrorCode.INVALID_REQUEST
    metadata_request = encode_request(apis.BY_KEY[3], 7, 1, "x", {"topics": None,
                                                                  "allow_auto_topic_creation": False})[4:]
    refused = envelope(survivor, metadata_request)
    assert refused.error_code == ErrorCode.INVALID_REQUEST and refused.response_data is None
    follower = next(c for c in controllers if c is not survivor and c.proc is not None and c.proc.poll() is None)
    list_request = encode_request(apis.BY_KEY[46], 0, 1, "x", {"timeout_ms": 1000, "topics": None})[4:]
    assert envelope(follower, list_request).error_code == ErrorCode.NOT_CONTROLLER

    got = read_values(bs, "t", len(acked))
    assert len(acked) == 300
    assert sorted(got) == sorted(acked), "every acknowledged record read back exactly once"

    # a clean stop of a broker-only node: its controlled shutdown (through the heartbeat) has the
    # controller-only active controller move its leadership before it stops
    assert leaders(admin, "t")[0][0] == 5
    assert brokers[1].stop(60) == 0
    assert "controlled shutdown succeeded" in brokers[1].log_text()
    admin4 = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
    assert all(v[0] == 4 for v in leaders(admin4, "t").values())
