"""TLS or SASL on the controller listener: three KRaft nodes whose quorum and controller traffic (votes, metadata
fetches, registrations, heartbeats, writes) runs over TLS with client certificates required, or over SASL
PLAIN; a plaintext peer, a certificate-less peer, one with another CA's certificate, one that does not log in
and one with a wrong password get nothing from it."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.tools.kraft_nodes import kraft_quorum, start_together
from gregor.tools.local_broker import BrokerProcess
from tests.security.certs import Pki, make_pki
from tests.waiting import wait_for
from tests.wire import WireClient


def _tls_props(pki: Pki) -> dict[str, str]:
    return {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
            "listener.name.controller.ssl.keystore.location": pki.keystore("broker"),
            "listener.name.controller.ssl.truststore.location": pki.ca,
            "listener.name.controller.ssl.client.auth": "required",
            "broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}


def _controller_port(node: BrokerProcess) -> int:
    return int(node.overrides["listeners"].rsplit(":", 1)[1])


def _api_versions(sock: socket.socket) -> list[int]:
    """The API keys a listener answers ApiVersions with, on a connected (maybe TLS) socket."""
    return [k.api_key for k in WireClient.over(sock).request(18, 0, {}).api_keys]


def _tls_probe(port: int, ca: str, cert: str | None) -> list[int]:
    ctx = ssl.create_default_context(cafile=ca)
    if cert is not None:
        ctx.load_cert_chain(cert)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        return _api_versions(s)


def _start_and_write(nodes: list[BrokerProcess], topic: str) -> str:
    """Start the quorum, wait for its three brokers, and write 0..29 with an idempotent acks=all producer to a
    new topic of 3 partitions and 3 replicas: every kind of controller traffic has then flowed (votes,
    metadata fetches, registrations, heartbeats, writes, ISR changes). The bootstrap list."""
    start_together(nodes)
    bs = ",".join(n.bootstrap for n in nodes)
    admin = AdminClient({"bootstrap.servers": bs})
    wait_for(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 60, "three live brokers")
    for f in admin.create_topics([NewTopic(topic, 3, 3)]).values():
        f.result(60)
    p = Producer({"bootstrap.servers": bs, "acks": "all", "enable.idempotence": True})
    for i in range(30):
        p.produce(topic, value=str(i).encode(), partition=i % 3)
    assert p.flush(30) == 0
    return bs


def test_a_quorum_over_tls_with_client_certificates(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    nodes = kraft_quorum(tmp_path, 3, _tls_props(pki))
    try:
        bs = _start_and_write(nodes, "secure")
        c = Consumer({"bootstrap.servers": bs, "group.id": "g", "enable.auto.commit": False})
        c.assign([TopicPartition("secure", part, 0) for part in range(3)])
        got = []
        while len(got) < 30:
            m = c.poll(10)
            assert m is not None, f"read {len(got)} of 30"
            if m.error() is None:
                got.append(int(m.value()))
        c.close()
        assert sorted(got) == list(range(30))

        port = _controller_port(nodes[0])
        assert 52 in _tls_probe(port, pki.ca, pki.keystore("broker"))  # Vote: a peer with the cluster's certificate
        for who in (None, pki.keystore("mallory")):  # no certificate; one of another CA
            with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
                _tls_probe(port, pki.ca, who)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as plain:
            with pytest.raises((ConnectionError, OSError, ValueError)):
                _api_versions(plain)  # a plaintext request is not TLS: no answer, the connection ends
        for n in nodes:
            assert "Traceback" not in n.log_text()
    finally:
        for n in nodes:
            n.kill()


JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret";')
DESCRIBE = {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}


def _sasl_props() -> dict[str, str]:
    return {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": JAAS,
            "sasl.mechanism.controller.protocol": "PLAIN",
            "broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}


def test_a_quorum_over_sasl(tmp_path: Path) -> None:
    """SASL PLAIN on the controller listener: the voters log in to each other (votes, metadata fetches) and the
    brokers to the controller (registration, heartbeats, writes); a peer that does not log in, or logs in
    with a wrong password, gets nothing from the quorum."""
    nodes = kraft_quorum(tmp_path, 3, _sasl_props())
    try:
        _start_and_write(nodes, "sasl")

        address = f"127.0.0.1:{_controller_port(nodes[0])}"
        anonymous = WireClient(address)
        assert 17 in [k.api_key for k in anonymous.request(18, 0, {}).api_keys]  # SaslHandshake is advertised
        anonymous.send(55, 0, DESCRIBE)  # DescribeQuorum before logging in: the connection is closed, unanswered
        with pytest.raises((ConnectionError, OSError)):
            anonymous.recv_frame()

        guesser = WireClient(address)
        assert guesser.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        refused = guesser.request(36, 2, {"auth_bytes": b"\0admin\0wrong"})
        assert refused.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert guesser.closed_by_peer()

        peer = WireClient(address)
        assert peer.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        assert peer.request(36, 2, {"auth_bytes": b"\0admin\0admin-secret"}).error_code == 0
        described = peer.request(55, 0, DESCRIBE).topics[0].partitions[0]
        assert described.error_code in (0, 6)  # answered (by the leader, or NOT_LEADER_OR_FOLLOWER by a follower)
        for n in nodes:
            assert "Traceback" not in n.log_text()
        assert "SASL authentication of" in nodes[0].log_text()  # the wrong password, logged
    finally:
        for n in nodes:
            n.kill()
