"""Kafka's broker configs Gregor knows but does not apply (gregor.known_configs) and the deprecated
message.format.version: accepted as Kafka accepts them, stored, described with their sources and a
documentation that says they have no effect; refused where Kafka refuses them. The cases librdkafka's
0081 (AlterConfigs of sasl.kerberos.min.time.before.relogin, IncrementalAlterConfigs of
background.threads) and 0092 (message.format.version=0.10.0.0) need, through confluent-kafka and
kafka-python."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic

from tests.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker with a Kafka-only config and the deprecated format version in its server.properties."""
    b = BrokerProcess(tmp_path_factory.mktemp("known"), {
        "num.io.threads": "16", "sasl.kerberos.service.name": "kafka", "log.message.format.version": "2.8"}).start()
    yield b
    b.kill()


def _describe(admin: AdminClient, kind: ConfigResource.Type, name: str) -> dict[str, Any]:
    res = ConfigResource(kind, name)
    return admin.describe_configs([res])[res].result(30)


def _incremental(admin: AdminClient, kind: ConfigResource.Type, name: str, entries: list[ConfigEntry],
                 validate: bool = False) -> None:
    res = ConfigResource(kind, name, incremental_configs=entries)
    admin.incremental_alter_configs([res], validate_only=validate)[res].result(30)


def test_static_known_configs_are_described(kb: BrokerProcess) -> None:
    """server.properties may carry Kafka's configs: they are STATIC_BROKER_CONFIG, the others their
    Kafka defaults, and the documentation says they do nothing here."""
    got = _describe(AdminClient({"bootstrap.servers": kb.bootstrap}), ConfigResource.Type.BROKER, "0")
    assert (got["num.io.threads"].value, got["num.io.threads"].source) == ("16", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert got["sasl.kerberos.service.name"].value == "kafka"
    e = got["background.threads"]
    assert (e.value, e.source, e.is_read_only) == ("10", ConfigSource.DEFAULT_CONFIG.value, False)
    assert got["log.message.format.version"].value == "2.8"


def test_alter_configs_sets_a_kerberos_config(kb: BrokerProcess) -> None:
    """librdkafka 0081's AlterConfigs: a topic, the broker's sasl.kerberos.min.time.before.relogin, a
    missing topic, in one request; only the missing topic fails."""
    admin = AdminClient({"bootstrap.servers": kb.bootstrap})
    admin.create_topics([NewTopic("kc-topic", 1, 1)])["kc-topic"].result(30)
    resources = [ConfigResource(ConfigResource.Type.TOPIC, "kc-topic", {"compression.type": "gzip", "flush.ms": "12345678"}),
                 ConfigResource(ConfigResource.Type.BROKER, "0", {"sasl.kerberos.min.time.before.relogin": "58000"}),
                 ConfigResource(ConfigResource.Type.TOPIC, "kc-missing", {"compression.type": "lz4"})]
    fs = admin.alter_configs(resources)  # AlterConfigs (33), as librdkafka's 0081 sends it
    fs[resources[0]].result(30)
    fs[resources[1]].result(30)
    with pytest.raises(KafkaException) as err:
        fs[resources[2]].result(30)
    assert err.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    e = _describe(admin, ConfigResource.Type.BROKER, "0")["sasl.kerberos.min.time.before.relogin"]
    assert (e.value, e.source) == ("58000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)


def test_incremental_alter_of_a_thread_pool_config(kb: BrokerProcess) -> None:
    """background.threads (cluster-wide in Kafka): validate_only stores nothing; SET then DELETE; a value
    out of Kafka's bounds is INVALID_CONFIG; the cluster default takes it too."""
    admin = AdminClient({"bootstrap.servers": kb.bootstrap})
    broker = ConfigResource.Type.BROKER
    _incremental(admin, broker, "0", [ConfigEntry("background.threads", "9",
                                                   incremental_operation=AlterConfigOpType.SET)], validate=True)
    assert _describe(admin, broker, "0")["background.threads"].value == "10"
    _incremental(admin, broker, "0", [ConfigEntry("background.threads", "9", incremental_operation=AlterConfigOpType.SET),
                                      ConfigEntry("log.cleanup.policy", "compact",
                                                  incremental_operation=AlterConfigOpType.APPEND)])
    got = _describe(admin, broker, "0")
    assert (got["background.threads"].value, got["background.threads"].source) == \
        ("9", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert got["log.cleanup.policy"].value == "delete,compact"
    _incremental(admin, broker, "0", [ConfigEntry("background.threads", "", incremental_operation=AlterConfigOpType.DELETE),
                                      ConfigEntry("log.cleanup.policy", "compact",
                                                  incremental_operation=AlterConfigOpType.SUBTRACT)])
    got = _describe(admin, broker, "0")
    assert got["background.threads"].source == ConfigSource.DEFAULT_CONFIG.value
    assert got["log.cleanup.policy"].value == "delete"
    with pytest.raises(KafkaException) as err:
        _incremental(admin, broker, "0", [ConfigEntry("num.network.threads", "0",
                                                       incremental_operation=AlterConfigOpType.SET)])
    assert err.value.args[0].code() == KafkaError.INVALID_CONFIG and "num.network.threads" in err.value.args[0].str()
    with pytest.raises(KafkaException) as err:
        _incremental(admin, broker, "0", [ConfigEntry("no.such.broker.config", "1",
                                                       incremental_operation=AlterConfigOpType.SET)])
    assert err.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_kafka_python_sets_known_configs_and_reads_the_documentation(kb: BrokerProcess) -> None:
    """kafka-python's admin (AlterConfigs v0): a cluster default for a per-broker Kerberos config is
    refused as Kafka refuses it; per broker it is stored. DescribeConfigs v3 documents the missing effect."""
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType

    from tests.wire import WireClient

    admin = KafkaAdminClient(bootstrap_servers=kb.bootstrap, request_timeout_ms=10000)
    try:
        r = admin.alter_configs([KpResource(ConfigResourceType.BROKER, "0",
                                            {"sasl.kerberos.ticket.renew.jitter": "0.1"})], incremental=False)
        (result,) = (v for by_name in r.values() for v in by_name.values())
        assert getattr(result, "errno", 0) == 0, r
    finally:
        admin.close()
    c = WireClient(kb.bootstrap)
    try:
        r = c.request(44, 1, {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
            {"name": "sasl.kerberos.ticket.renew.jitter", "config_operation": 0, "value": "0.2"}]}],
            "validate_only": False})
        assert r.responses[0].error_code == KafkaError.INVALID_REQUEST
        assert "broker id must be specified" in r.responses[0].error_message
        d = c.request(32, 4, {"resources": [{"resource_type": 4, "resource_name": "0",
                                             "configuration_keys": ["sasl.kerberos.ticket.renew.jitter"]}],
                              "include_synonyms": True, "include_documentation": True})
    finally:
        c.close()
    e = d.results[0].configs[0]
    assert (e.value, e.config_source) == ("0.1", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert "no effect in Gregor" in e.documentation and "per-broker" in e.documentation


def test_message_format_version_is_accepted_and_ignored(kb: BrokerProcess) -> None:
    """librdkafka 0092: message.format.version=0.10.0.0 altered on a topic mid-stream is accepted (Kafka 3.x
    behaviour), described as the topic's value; the records stay format v2 and are all read back; a value
    that is no Kafka version is refused."""
    admin = AdminClient({"bootstrap.servers": kb.bootstrap})
    admin.create_topics([NewTopic("mfv", 1, 1)])["mfv"].result(30)
    topic = ConfigResource.Type.TOPIC
    e = _describe(admin, topic, "mfv")["message.format.version"]
    assert (e.value, e.source) == ("2.8", ConfigSource.STATIC_BROKER_CONFIG.value)
    p = Producer({"bootstrap.servers": kb.bootstrap, "linger.ms": 0})
    for i in range(4):
        p.produce("mfv", str(i).encode())
        p.flush(10)
        if i == 1:
            res = ConfigResource(topic, "mfv", {"message.format.version": "0.10.0.0"})
            admin.alter_configs([res])[res].result(30)
    e = _describe(admin, topic, "mfv")["message.format.version"]
    assert (e.value, e.source) == ("0.10.0.0", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    c = Consumer({"bootstrap.servers": kb.bootstrap, "group.id": "mfv", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["mfv"])
        got: list[bytes] = []
        for _ in range(60):
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
            if len(got) == 4:
                break
        assert got == [b"0", b"1", b"2", b"3"]
    finally:
        c.close()
    res = ConfigResource(topic, "mfv", {"message.format.version": "4.0"})
    with pytest.raises(KafkaException) as err:
        admin.alter_configs([res])[res].result(30)
    assert err.value.args[0].code() == KafkaError.INVALID_CONFIG and "not a valid version" in err.value.args[0].str()


def test_known_configs_table() -> None:
    """Every known config keeps Kafka's update mode and says it has no effect; none is a config Gregor
    implements (the two tables never overlap)."""
    from gregor.config import BROKER_PROPS
    from gregor.config.dynamic import APPLIED, applied
    from gregor.known_configs import KNOWN_PROPS, NO_EFFECT

    assert len(NO_EFFECT) == len(KNOWN_PROPS)
    for p in KNOWN_PROPS:
        assert BROKER_PROPS[p.name] is p and p.doc.startswith("Accepted, no effect in Gregor")
        assert p.name in APPLIED
    assert applied("listener.name.sasl_ssl.sasl.kerberos.service.name")
