"""SCRAM credentials on a ZooKeeper cluster: altered through one broker, used at the next login on another
(Kafka's /config/users/<user> with a change notification), and deleted the same way."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from gregor.protocol.errors import ErrorCode
from gregor.security.sasl.client import sasl_client
from tests.broker_process import BrokerProcess
from tests.wire import WireClient


def _login(b: BrokerProcess, mech: str, user: str, password: str) -> int:
    """The SaslAuthenticate error code of a fresh SCRAM login on `b`'s SASL listener."""
    c = WireClient(f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}")
    try:
        assert c.request(17, 1, {"mechanism": mech}).error_code == 0
        client = sasl_client(mech, user, password)
        token: bytes | None = client.first_message()
        while token is not None:
            resp = c.request(36, 2, {"auth_bytes": token})
            if resp.error_code != ErrorCode.NONE:
                return int(resp.error_code)
            token = client.evaluate(bytes(resp.auth_bytes))
        return 0
    finally:
        c.close()


def _eventually(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.1)


def test_credentials_reach_every_broker(start_broker: Callable[..., BrokerProcess], zk_connect: str) -> None:
    brokers = [start_broker({
        "zookeeper.connect": zk_connect, "broker.id": str(i),
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
    }) for i in range(2)]
    admin0 = AdminClient({"bootstrap.servers": f"127.0.0.1:{brokers[0].ports['PLAINTEXT']}"})
    up = UserScramCredentialUpsertion("zoe", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"zoe-secret")
    for fut in admin0.alter_user_scram_credentials([up], request_timeout=15).values():
        fut.result()
    assert _login(brokers[0], "SCRAM-SHA-512", "zoe", "zoe-secret") == 0
    _eventually(lambda: _login(brokers[1], "SCRAM-SHA-512", "zoe", "zoe-secret") == 0)
    assert _login(brokers[1], "SCRAM-SHA-512", "zoe", "wrong") == ErrorCode.SASL_AUTHENTICATION_FAILED
    # Deleted through broker 1: broker 0 refuses the next login.
    admin1 = AdminClient({"bootstrap.servers": f"127.0.0.1:{brokers[1].ports['PLAINTEXT']}"})
    delete = UserScramCredentialDeletion("zoe", ScramMechanism.SCRAM_SHA_512)
    for fut in admin1.alter_user_scram_credentials([delete], request_timeout=15).values():
        fut.result()
    _eventually(lambda: _login(brokers[0], "SCRAM-SHA-512", "zoe", "zoe-secret") == ErrorCode.SASL_AUTHENTICATION_FAILED)


def test_inter_broker_scram(start_broker: Callable[..., BrokerProcess], zk_connect: str) -> None:
    """Replication over a SASL_PLAINTEXT inter-broker listener, the brokers logging in with SCRAM-SHA-512."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    common = {
        "zookeeper.connect": zk_connect,
        "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config":
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="broker-secret";',
    }
    brokers = [start_broker({**common, "broker.id": str(i)}) for i in range(2)]
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{brokers[0].ports['PLAINTEXT']}"})
    up = UserScramCredentialUpsertion("broker", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                      b"broker-secret")
    for fut in admin.alter_user_scram_credentials([up], request_timeout=15).values():
        fut.result()
    admin.create_topics([NewTopic("replicated", 2, 2, config={"min.insync.replicas": "2"})])["replicated"].result(15)
    p = Producer({"bootstrap.servers": f"127.0.0.1:{brokers[0].ports['PLAINTEXT']}", "acks": "all",
                  "message.timeout.ms": 20000})
    delivered: list[Any] = []
    for i in range(10):
        p.produce("replicated", f"m{i}".encode(), partition=i % 2, on_delivery=lambda err, _m: delivered.append(err))
    assert p.flush(30) == 0
    assert delivered == [None] * 10  # acks=all with min.insync.replicas=2: each follower fetched over SASL
    assert "SASL authentication with" not in "\n".join(b.log_text() for b in brokers)
