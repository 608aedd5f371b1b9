"""A 3-broker cluster secured end to end: clients and brokers over SASL_SSL (clients with SCRAM, brokers
with PLAIN on their own listener), Kafka's ACL authorizer on; in both metadata modes, the KRaft one with its
controller listener over TLS with client certificates required. It replicates and fails over like the
plaintext one: an idempotent acks=all producer keeps every acknowledged record while a partition leader is
SIGKILLed and restarted, and the restarted broker rejoins every ISR over the secured inter-broker listener."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from gregor.tools.local_cluster import LocalCluster
from tests.security.certs import Pki, make_pki

TOPIC = "secure-orders"
JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required"


@pytest.fixture(params=["zookeeper", "kraft"])
def secure_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[LocalCluster, Pki]]:
    kraft = request.param == "kraft"
    pki = make_pki(tmp_path / "pki")
    overrides = {
        # PLAINTEXT only for the harness's readiness checks: ANONYMOUS has no ACL, so it sees no topic.
        "listeners": "PLAINTEXT://127.0.0.1:0,CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:SASL_SSL,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config":
            f'{JAAS} username="broker" password="broker-secret" user_broker="broker-secret";',
        "listener.name.client.sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "listener.name.client.plain.sasl.jaas.config": f'{JAAS} user_admin="admin-secret";',
        "ssl.keystore.location": pki.keystore("broker"),
        "ssl.truststore.location": pki.ca,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:broker;User:admin",
        "replica.lag.time.max.ms": "4000",
        "auto.leader.rebalance.enable": "false",
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": "0",
    }
    if kraft:
        overrides.update({"listener.security.protocol.map": overrides["listener.security.protocol.map"] + ",CONTROLLER:SSL",
                          "listener.name.controller.ssl.client.auth": "required",
                          "broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"})
        c = LocalCluster(3, tmp_path / "cluster", overrides, kraft=True)
    else:
        overrides["zookeeper.session.timeout.ms"] = "3000"
        c = LocalCluster(3, tmp_path / "cluster", overrides,
                         zk_connect=request.getfixturevalue("zk_connect"))
    c.start()
    try:
        yield c, pki
    finally:
        for i in range(c.n):
            print(f"--- broker {i} ---\n" + "\n".join(c.log_text(i).splitlines()[-12:]))
        c.close()


def _client(c: LocalCluster, pki: Pki, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, Any]:
    return {"bootstrap.servers": ",".join(b.bootstrap_of("CLIENT") for b in c.brokers if b.ports),
            "security.protocol": "SASL_SSL", "ssl.ca.location": pki.ca, "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


def _partitions(admin: AdminClient) -> dict[int, tuple[int, list[int]]]:
    md = admin.list_topics(TOPIC, timeout=10).topics[TOPIC]
    assert md.error is None, md.error
    return {p: (pm.leader, sorted(pm.isrs)) for p, pm in md.partitions.items()}


def _wait(what: str, check: Any, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            got = check()
        except Exception:  # a broker restarting, a metadata refresh in flight
            got = None
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_sasl_ssl_cluster_with_acls_replicates_and_fails_over(secure_cluster: tuple[LocalCluster, Pki]) -> None:
    c, pki = secure_cluster
    admin = AdminClient(_client(c, pki, "admin", "admin-secret", "PLAIN"))
    for user in ("alice", "bob"):
        up = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                          f"{user}-secret".encode())
        for f in admin.alter_user_scram_credentials([up], request_timeout=15).values():
            f.result()
    admin.create_topics([NewTopic(TOPIC, 3, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
    acls = [AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:alice", "*", op,
                       AclPermissionType.ALLOW)
            for op in (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)]
    acls.append(AclBinding(ResourceType.GROUP, "orders-app", ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW))
    for f in admin.create_acls(acls, request_timeout=15).values():
        f.result()
    _wait("full ISRs", lambda: all(isr == [0, 1, 2] for _, isr in _partitions(admin).values()))

    # bob authenticates, but no ACL lets him write.
    refused: list[KafkaError] = []
    bob = Producer({**_client(c, pki, "bob", "bob-secret"), "message.timeout.ms": 10000})
    bob.produce(TOPIC, b"x", on_delivery=lambda err, msg: refused.append(err))
    bob.flush(15)
    assert refused and refused[0] is not None and refused[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # alice produces idempotently with acks=all while the leader of partition 0 is killed and restarted.
    acked: dict[int, list[int]] = {0: [], 1: [], 2: []}
    errors: list[str] = []
    stop = threading.Event()
    producer = Producer({**_client(c, pki, "alice", "alice-secret"), "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 60000})

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked[msg.partition()].append(int(msg.value()))

    def produce() -> None:
        seq = 0
        while not stop.is_set():
            producer.produce(TOPIC, str(seq).encode(), partition=seq % 3, on_delivery=on_delivery)
            producer.poll(0)
            seq += 1
            time.sleep(0.001)
        producer.flush(60)

    t = threading.Thread(target=produce)
    t.start()
    try:
        _wait("records acknowledged", lambda: sum(map(len, acked.values())) > 500, 30)
        victim = _partitions(admin)[0][0]
        c.kill(victim)
        _wait("a new leader of partition 0",
              lambda: _partitions(admin)[0][0] not in (victim, -1), 30)
        before = sum(map(len, acked.values()))
        _wait("records acknowledged after the failover", lambda: sum(map(len, acked.values())) > before + 500, 30)
        c.restart(victim)
        _wait("the restarted broker back in every ISR",
              lambda: all(isr == [0, 1, 2] for _, isr in _partitions(admin).values()), 60)
    finally:
        stop.set()
        t.join(90)
    assert not errors, errors[:5]
    total = sum(map(len, acked.values()))
    assert total > 1000

    # Every acknowledged record is there exactly once, in order, read back by alice in her group.
    consumer = Consumer({**_client(c, pki, "alice", "alice-secret"), "group.id": "orders-app",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(3)])
    got: dict[int, list[int]] = {0: [], 1: [], 2: []}
    deadline = time.monotonic() + 60
    while sum(map(len, got.values())) < total and time.monotonic() < deadline:
        for m in consumer.consume(1000, 1.0):
            assert m.error() is None, m.error()
            got[m.partition()].append(int(m.value()))
    consumer.commit(asynchronous=False)
    consumer.close()
    for p in range(3):
        assert got[p] == acked[p], f"partition {p}: {len(got[p])} read, {len(acked[p])} acknowledged"
