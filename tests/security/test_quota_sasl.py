"""User quotas for SASL principals: PLAIN users (a JAAS config) and a SCRAM user (credentials set
with AlterUserScramCredentials) get their /config/users/<user> quotas; `gregor quotas` itself
authenticates with --command-config (SASL_PLAINTEXT, PLAIN and SCRAM-SHA-256), and a user's quota
entity keeps its SCRAM credentials (and the other way round)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from gregor.cli import main as gregor_main
from tests.broker_process import BrokerProcess
from tests.security.quota_client import alter, as_dict, describe, entity

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_carol="carol-secret" user_dave="dave-secret";')


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("quota-sasl"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "quota.window.num": "2",
    }).start()
    yield b
    b.kill()


def _props(tmp_path: Path, mechanism: str, user: str, password: str) -> str:
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN"
              else "org.apache.kafka.common.security.scram.ScramLoginModule")
    p = tmp_path / f"{user}.properties"
    p.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\n"
                 f'sasl.jaas.config={module} required username="{user}" password="{password}";\n')
    return str(p)


def _throttle_s(b: BrokerProcess, mechanism: str, user: str, password: str, topic: str) -> float:
    throttles: list[float] = [0.0]
    p = Producer({"bootstrap.servers": b.bootstrap_of("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
                  "client.id": "same-app", "linger.ms": 5,
                  "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
    for _ in range(40):
        p.produce(topic, b"s" * 10_000)
    assert p.flush(30) == 0
    p.poll(0.3)
    return max(throttles)


def test_sasl_users_get_their_own_quotas_and_the_cli_authenticates(
        sasl_broker: BrokerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sasl = sasl_broker.bootstrap_of("SASL_PLAINTEXT")
    admin = ["quotas", "--bootstrap-server", sasl, "--command-config",
             _props(tmp_path, "PLAIN", "admin", "admin-secret")]
    assert gregor_main(admin + ["--alter", "--add-config", "producer_byte_rate=50000",
                                "--entity-type", "users", "--entity-name", "carol"]) == 0
    # A SCRAM user: credentials through `gregor users`, then a quota on the same entity; both stay.
    assert gregor_main(["users", "--bootstrap-server", sasl, "--command-config",
                        _props(tmp_path, "PLAIN", "admin", "admin-secret"), "--alter",
                        "--add-config", "SCRAM-SHA-256=[iterations=4096,password=erin-secret]",
                        "--entity-type", "users", "--entity-name", "erin"]) == 0
    assert gregor_main(admin + ["--alter", "--add-config", "producer_byte_rate=60000",
                                "--entity-type", "users", "--entity-name", "erin"]) == 0
    erin = ["quotas", "--bootstrap-server", sasl, "--command-config",
            _props(tmp_path, "SCRAM-SHA-256", "erin", "erin-secret")]
    assert gregor_main(erin + ["--describe", "--entity-type", "users"]) == 0
    out = capsys.readouterr().out
    assert "Quota configs for user-principal 'carol' are producer_byte_rate=50000.0" in out
    assert "Quota configs for user-principal 'erin' are producer_byte_rate=60000.0" in out

    # Same client-id, different users: only the limited users are throttled.
    assert _throttle_s(sasl_broker, "PLAIN", "carol", "carol-secret", "qs-carol") > 1.0
    assert _throttle_s(sasl_broker, "PLAIN", "dave", "dave-secret", "qs-dave") == 0
    assert _throttle_s(sasl_broker, "SCRAM-SHA-256", "erin", "erin-secret", "qs-erin") > 1.0

    # Removing erin's quota leaves her SCRAM credential: she still logs in.
    assert gregor_main(admin + ["--alter", "--delete-config", "producer_byte_rate",
                                "--entity-type", "users", "--entity-name", "erin"]) == 0
    assert gregor_main(erin + ["--describe"]) == 0
    assert as_dict(describe(sasl_broker.bootstrap_of("PLAINTEXT"), [("user", 0, "erin")])) == {}
    bad = ["quotas", "--bootstrap-server", sasl, "--command-config",
           _props(tmp_path, "PLAIN", "carol", "wrong")]
    assert gregor_main(bad + ["--describe"]) == 1
    assert "authentication failed" in capsys.readouterr().err
    alter(sasl_broker.bootstrap_of("PLAINTEXT"), [(entity(user="carol"), {"producer_byte_rate": None})])
