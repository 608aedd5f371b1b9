"""The Arrow reader over TLS (with and without a client certificate) and SASL (PLAIN, SCRAM over TLS), with
librdkafka's option names, against a real broker; and its settings' checks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from gregor.client import AuthenticationError, read_arrow
from gregor.client.reader_config import ReaderConfig
from gregor.configdef import ConfigError
from tests.broker_process import BrokerProcess
from tests.security.certs import Pki, make_pki

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
N = 300


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("secure-broker"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,MTLS://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.location": pki.keystore("broker"),
        "ssl.truststore.location": pki.ca,
        "listener.name.mtls.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.jaas.config": PLAIN_JAAS,
        "num.partitions": "1",
    }).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap_of("PLAINTEXT")})
    up = UserScramCredentialUpsertion("scram", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"scram-secret")
    for fut in admin.alter_user_scram_credentials([up]).values():
        fut.result(30)
    p = Producer({"bootstrap.servers": b.bootstrap_of("PLAINTEXT"), "linger.ms": 5})
    for i in range(N):
        p.produce("secure", value=b"secret-%d" % i)
    assert p.flush(30) == 0
    yield b
    b.kill()


def check(broker: BrokerProcess, listener: str, **conf: Any) -> None:
    t = read_arrow(broker.bootstrap_of(listener), "secure", config=conf)
    assert t.column("value").to_pylist() == [b"secret-%d" % i for i in range(N)]


def test_tls_with_a_client_certificate(broker: BrokerProcess, pki: Pki) -> None:
    check(broker, "MTLS", **{"security.protocol": "SSL", "ssl.ca.location": pki.ca,
                             "ssl.certificate.location": pki.cert("alice"), "ssl.key.location": pki.key("alice")})
    with pytest.raises(Exception, match="cannot connect|failed"):  # the listener requires a certificate
        read_arrow(broker.bootstrap_of("MTLS"), "secure", security_protocol="ssl", ssl_ca_location=pki.ca, retries=0)


def test_tls_refuses_a_broker_it_does_not_trust(broker: BrokerProcess, pki: Pki) -> None:
    with pytest.raises(AuthenticationError, match="certificate verify failed"):
        read_arrow(broker.bootstrap_of("MTLS"), "secure", security_protocol="ssl", retries=0,
                   ssl_certificate_location=pki.cert("alice"), ssl_key_location=pki.key("alice"))


def test_sasl_plain_and_scram_over_tls(broker: BrokerProcess, pki: Pki) -> None:
    check(broker, "SASL_PLAINTEXT", **{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                                       "sasl.username": "alice", "sasl.password": "alice-secret"})
    check(broker, "SASL_SSL", **{"security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512",
                                 "sasl.username": "scram", "sasl.password": "scram-secret", "ssl.ca.location": pki.ca})


def test_wrong_password(broker: BrokerProcess) -> None:
    with pytest.raises(AuthenticationError, match="SASL PLAIN authentication .* failed"):
        read_arrow(broker.bootstrap_of("SASL_PLAINTEXT"), "secure", security_protocol="sasl_plaintext",
                   sasl_username="alice", sasl_password="wrong")


@pytest.mark.parametrize(("settings", "message"), [
    ({"fetch.max.bytes": "lots"}, "Invalid value lots for configuration fetch.max.bytes"),
    ({"max.partition.fetch.bytes": 10}, "max.partition.fetch.bytes: Value must be at least 1024"),
    ({"arrow.batch.max.records": 0}, "arrow.batch.max.records: Value must be at least 1"),
    ({"arrow.batch.max.bytes": 3 << 29}, "arrow.batch.max.bytes: Value must be no more than"),
    ({"isolation.level": "read_dirty"}, "String must be one of: read_uncommitted, read_committed"),
    ({"security.protocol": "ssh"}, "security.protocol"),
    ({"fetch.max.bytes": 200_000_000}, "receive.message.max.bytes .* must be at least fetch.max.bytes"),
    ({"security.protocol": "sasl_ssl"}, "needs sasl.username"),
    ({"ssl.key.location": "k.pem"}, "go together"),
    ({"group.id": "g"}, "Unknown configuration 'group.id'"),
    ({"bootstrap.servers": "nohost"}, "is not host:port"),
    ({"bootstrap.servers": ""}, "bootstrap.servers is empty"),
    ({"arrow.timestamp.timezone": "Mars/Olympus"}, "is not a time zone"),
    ({"arrow.timestamp.unit": "ns"}, "arrow.timestamp.unit"),
])
def test_bad_settings_name_the_setting(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        cfg = ReaderConfig.parse({"bootstrap.servers": "h:1", **settings})
        cfg.bootstrap()


def test_settings_accept_keywords_and_librdkafka_aliases() -> None:
    cfg = ReaderConfig.parse({"bootstrap_servers": "a:1,b:2", "fetch.max.wait.ms": "250", "sasl.mechanisms": "plain",
                              "check_crcs": "false", "security.protocol": "SASL_SSL", "sasl.username": "u"})
    assert cfg.bootstrap() == [("a", 1), ("b", 2)]
    assert (cfg.fetch_wait_max_ms, cfg.sasl_mechanism, cfg.check_crcs, cfg.tls, cfg.sasl) == (250, "PLAIN", False,
                                                                                             True, True)
    for tz in ("", "Europe/Paris", "+02:00"):
        assert ReaderConfig.parse({"bootstrap.servers": "h:1", "arrow.timestamp.timezone": tz}).arrow_timestamp_timezone == tz
