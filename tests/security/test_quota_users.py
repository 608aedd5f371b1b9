"""User-entity quotas end to end: principals from TLS client certificates (ssl.client.auth=required,
ssl.principal.mapping.rules taking the CN), so /config/users/<user> and
/config/users/<user>/clients/<client-id> apply to real authenticated clients, with KIP-546's precedence:
- alice's own quota (users/alice) throttles her;
- users/alice/clients/fast-app beats users/alice for alice's fast-app;
- users/<default> beats clients/<client-id> (bob with client-id bob-app is not held by the latter).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from gregor.cli import main as gregor_main
from gregor.protocol import apis
from tests.broker_process import BrokerProcess
from tests.security.certs import Pki, make_pki
from tests.security.quota_client import alter, connect, entity

SLOW = 50_000.0
FAST = 1e9


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("quota-users"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.location": pki.keystore("broker"),
        "ssl.truststore.location": pki.ca,
        "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^.*CN=([a-z]+).*$/$1/,DEFAULT",
        "quota.window.num": "2",
    }).start()
    alter(b.bootstrap_of("PLAINTEXT"), [
        (entity(user="alice"), {"producer_byte_rate": SLOW}),
        (entity(user="alice", client="fast-app"), {"producer_byte_rate": FAST}),
        (entity(user=None), {"producer_byte_rate": FAST}),
        (entity(client="bob-app"), {"producer_byte_rate": SLOW}),
    ])
    yield b
    b.kill()


def _throttle_s(b: BrokerProcess, pki: Pki, who: str, client_id: str, topic: str) -> float:
    """Produce 400 kB as `who` (its certificate) with `client_id`; the largest throttle reported."""
    throttles: list[float] = [0.0]
    p = Producer({"bootstrap.servers": b.bootstrap_of("SSL"), "security.protocol": "SSL",
                  "ssl.ca.location": pki.ca, "ssl.certificate.location": pki.cert(who),
                  "ssl.key.location": pki.key(who), "client.id": client_id, "linger.ms": 5,
                  "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
    for _ in range(40):
        p.produce(topic, b"u" * 10_000)
    assert p.flush(30) == 0
    p.poll(0.3)
    return max(throttles)


def test_user_quota_throttles_the_authenticated_user(tls_broker: BrokerProcess, pki: Pki) -> None:
    assert _throttle_s(tls_broker, pki, "alice", "alice-app", "qu-alice") > 1.0


def test_user_and_client_quota_beats_the_user_quota(tls_broker: BrokerProcess, pki: Pki) -> None:
    assert _throttle_s(tls_broker, pki, "alice", "fast-app", "qu-alice-fast") == 0


def test_default_user_quota_beats_a_client_id_quota(tls_broker: BrokerProcess, pki: Pki) -> None:
    assert _throttle_s(tls_broker, pki, "bob", "bob-app", "qu-bob") == 0


def test_cli_over_tls_and_muting_on_a_tls_connection(tls_broker: BrokerProcess, pki: Pki, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`gregor quotas --command-config` with security.protocol=SSL (with bob's certificate, so as user
    bob); then bob's request_percentage quota mutes his TLS connection as it would a plaintext one."""
    props = tmp_path / "client.properties"
    props.write_text(f"security.protocol=SSL\nssl.truststore.location={pki.ca}\n"
                     f"ssl.keystore.location={pki.keystore('bob')}\n")
    base = ["quotas", "--bootstrap-server", tls_broker.bootstrap_of("SSL"), "--command-config", str(props)]
    assert gregor_main(base + ["--alter", "--add-config", "request_percentage=0.01",
                               "--entity-type", "users", "--entity-name", "bob",
                               "--entity-type", "clients", "--entity-name", "gregor-admin"]) == 0
    assert gregor_main(base + ["--describe", "--entity-type", "users", "--entity-name", "bob",
                               "--entity-type", "clients", "--entity-name", "gregor-admin"]) == 0
    assert ("Quota configs for user-principal 'bob', client-id 'gregor-admin' are request_percentage=0.01"
            in capsys.readouterr().out)
    ctx = ssl.create_default_context(cafile=pki.ca)
    ctx.load_cert_chain(pki.keystore("bob"))
    conn = connect(tls_broker.bootstrap_of("SSL"))
    conn.sock = ctx.wrap_socket(conn.sock, server_hostname="127.0.0.1")
    try:
        throttle_ms = 0
        for _ in range(5000):
            throttle_ms = conn.request(apis.BY_KEY[3], 8, {"topics": [], "allow_auto_topic_creation": False}
                                       ).throttle_time_ms
            if throttle_ms >= 100:  # long enough to time against the round trip
                break
        assert throttle_ms >= 100
        t0 = time.monotonic()
        conn.request(apis.BY_KEY[3], 8, {"topics": [], "allow_auto_topic_creation": False})
        assert time.monotonic() - t0 >= throttle_ms / 1000 * 0.8
    finally:
        conn.close()
        alter(tls_broker.bootstrap_of("PLAINTEXT"), [(entity(user="bob", client="gregor-admin"),
                                                      {"request_percentage": None})])
