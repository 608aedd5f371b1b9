"""The source over TLS and SASL: kafka.* options in librdkafka's names and in the Java names Spark's Kafka
source takes (sasl.jaas.config, a PEM truststore), against a real broker; a wrong password fails the query
at once, saying why."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from tests.broker_process import BrokerProcess
from tests.security.certs import Pki, make_pki
from tests.spark.util import load

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
TOPIC = "secure"
N = 500


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("secure-broker"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,MTLS://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL,SASL_SSL:SASL_SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.location": pki.keystore("broker"),
        "ssl.truststore.location": pki.ca,
        "listener.name.mtls.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.jaas.config": PLAIN_JAAS,
        "num.partitions": "2",
    }).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap_of("PLAINTEXT")})
    up = UserScramCredentialUpsertion("scram", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"scram-secret")
    for fut in admin.alter_user_scram_credentials([up]).values():
        fut.result(30)
    p = Producer({"bootstrap.servers": b.bootstrap_of("PLAINTEXT"), "linger.ms": 5})
    for i in range(N):
        p.produce(TOPIC, value=b"secret-%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    yield b
    b.kill()


def values(spark: Any, bootstrap: str, **options: str) -> list[bytes]:
    rows = load(spark, bootstrap, subscribe=TOPIC, **options).select("value").collect()
    return sorted(bytes(r["value"]) for r in rows)


EXPECTED = sorted(b"secret-%d" % i for i in range(N))


def test_sasl_scram_over_tls_with_javas_option_names(spark: Any, secure_broker: BrokerProcess, pki: Pki) -> None:
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="scram" password="scram-secret";'
    assert values(spark, secure_broker.bootstrap_of("SASL_SSL"), **{
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.jaas.config": jaas,
        "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": pki.ca}) == EXPECTED


def test_tls_client_certificate_with_librdkafkas_option_names(spark: Any, secure_broker: BrokerProcess,
                                                              pki: Pki) -> None:
    assert values(spark, secure_broker.bootstrap_of("MTLS"), **{
        "kafka.security.protocol": "ssl", "kafka.ssl.ca.location": pki.ca,
        "kafka.ssl.certificate.location": pki.cert("alice"), "kafka.ssl.key.location": pki.key("alice")}) == EXPECTED


def test_a_wrong_password_fails_at_once(spark: Any, secure_broker: BrokerProcess, pki: Pki) -> None:
    t0 = time.monotonic()
    with pytest.raises(Exception, match="authentication"):
        values(spark, secure_broker.bootstrap_of("SASL_SSL"), **{
            "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.username": "scram", "kafka.sasl.password": "wrong", "kafka.ssl.ca.location": pki.ca})
    assert time.monotonic() - t0 < 30  # not retried as if the broker were away
