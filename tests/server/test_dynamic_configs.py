"""Dynamic broker configs applied without a restart (issue 13): the topic configs' broker defaults
(log.retention.ms, message.max.bytes, ...) reach every log without an override at once; the connection
limits reach new connections; kafka-python's and confluent-kafka's admin clients see Kafka's sources;
on ZooKeeper a cluster default set through one broker applies on the other."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic

from tests.broker_process import BrokerProcess
from tests.wire import WireClient

StartBroker = Callable[..., BrokerProcess]


def _alter_default(bootstrap: str, configs: dict[str, str | None], validate: bool = False) -> tuple[int, str | None]:
    """IncrementalAlterConfigs on the cluster default (empty BROKER name: confluent-kafka refuses an empty
    name, so on the wire). A None value deletes."""
    c = WireClient(bootstrap)
    try:
        r = c.request(44, 1, {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
            {"name": k, "config_operation": 1 if v is None else 0, "value": v} for k, v in configs.items()]}],
            "validate_only": validate})
    finally:
        c.close()
    return r.responses[0].error_code, r.responses[0].error_message


def _low_watermark(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0]
    finally:
        c.close()


def _produce(bootstrap: str, topic: str, n: int, size: int) -> list[Any]:
    """n records of `size` bytes, one batch each; the delivery errors (None for a delivered record)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1, "retries": 0})
    errors: list[Any] = []
    for i in range(n):
        p.produce(topic, b"x" * size, key=str(i).encode(), on_delivery=lambda err, _m: errors.append(err))
        p.flush(10)
    assert len(errors) == n
    return errors


def test_retention_and_message_size_defaults_apply_without_restart(start_broker: StartBroker) -> None:
    """A dynamic cluster-default log.retention.ms deletes the old segments of a topic without an override
    (its low watermark moves) while a topic with its own retention.ms keeps its data; a per-broker
    message.max.bytes lowered at runtime refuses a larger batch; validate_only changes nothing; the
    admin clients see DYNAMIC_DEFAULT_BROKER_CONFIG / DYNAMIC_BROKER_CONFIG and the topic's synonyms."""
    b = start_broker({"log.retention.check.interval.ms": "100", "log.segment.bytes": "2000"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    fs = admin.create_topics([NewTopic("plain", 1, 1), NewTopic("kept", 1, 1, config={"retention.ms": "3600000"})])
    for f in fs.values():
        f.result(30)
    for t in ("plain", "kept"):
        assert _produce(b.bootstrap, t, 6, 700) == [None] * 6
    time.sleep(0.3)
    assert _alter_default(b.bootstrap, {"log.retention.ms": "50"}, validate=True) == (0, None)
    time.sleep(0.5)
    assert _low_watermark(b.bootstrap, "plain") == 0  # validate_only stored nothing
    assert _alter_default(b.bootstrap, {"log.retention.ms": "50"}) == (0, None)
    deadline = time.monotonic() + 10
    while _low_watermark(b.bootstrap, "plain") == 0:
        assert time.monotonic() < deadline, "the dynamic retention default did not delete old segments"
        time.sleep(0.1)
    assert _low_watermark(b.bootstrap, "kept") == 0

    res = ConfigResource(ConfigResource.Type.TOPIC, "plain")
    e = admin.describe_configs([res])[res].result(30)["retention.ms"]
    assert (e.value, e.source) == ("50", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)  # as Kafka shows it
    bres = ConfigResource(ConfigResource.Type.BROKER, "0")
    e = admin.describe_configs([bres])[bres].result(30)["log.retention.ms"]
    assert (e.value, e.source, e.is_read_only) == ("50", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, False)

    # message.max.bytes for this broker only: a larger batch is refused at once, a smaller one taken.
    admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("message.max.bytes", "1000", incremental_operation=AlterConfigOpType.SET)])])[bres].result(30)
    e = admin.describe_configs([bres])[bres].result(30)["message.max.bytes"]
    assert (e.value, e.source) == ("1000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    err, = _produce(b.bootstrap, "plain", 1, 1500)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert _produce(b.bootstrap, "plain", 1, 100) == [None]

    # kafka-python's admin client sees the same sources.
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    kp = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        got = kp.describe_configs([KpResource(ConfigResourceType.BROKER, "0")], include_synonyms=True, config_filter="all")
        entries = got["broker"]["0"]
        assert entries["message.max.bytes"]["value"] == "1000"
        assert entries["log.retention.ms"]["value"] == "50"
        assert {k: str(entries[k]["config_source"]) for k in ("message.max.bytes", "log.retention.ms")} == {
            "message.max.bytes": "DYNAMIC_BROKER_CONFIG", "log.retention.ms": "DYNAMIC_DEFAULT_BROKER_CONFIG"}
        assert [s["source"] for s in entries["log.retention.ms"]["synonyms"]][0] == "DYNAMIC_DEFAULT_BROKER_CONFIG"
    finally:
        kp.close()

    # Restored: a record larger than 1000 bytes is taken again.
    admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("message.max.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])])[bres].result(30)
    assert _produce(b.bootstrap, "plain", 1, 1500) == [None]


def test_alter_refusals(start_broker: StartBroker) -> None:
    """Read-only properties, ones Gregor does not apply at runtime and defaults that do not validate
    together are refused; nothing is stored."""
    b = start_broker()
    for configs, code, text in [
            ({"log.retention.hours": "1"}, KafkaError.INVALID_REQUEST, "Cannot update these configs dynamically"),
            ({"advertised.listeners": "PLAINTEXT://h:1"}, KafkaError.INVALID_REQUEST, "does not apply them at runtime"),
            ({"log.cleaner.min.compaction.lag.ms": "10", "log.cleaner.max.compaction.lag.ms": "5"},
             KafkaError.INVALID_CONFIG, "Invalid topic config defaults"),
            ({"max.connections.per.ip.overrides": "nocount"}, KafkaError.INVALID_CONFIG, "host:count"),
            ({"log.cleaner.threads": "3"}, KafkaError.INVALID_CONFIG, "more than double")]:
        code_got, msg = _alter_default(b.bootstrap, configs)
        assert code_got == code and text in (msg or ""), (configs, code_got, msg)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    bres = ConfigResource(ConfigResource.Type.BROKER, "0")
    got = admin.describe_configs([bres])[bres].result(30)
    assert got["log.cleaner.max.compaction.lag.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert got["log.cleaner.threads"].value == "1"


def test_log_cleaner_threads_restart_with_new_settings(start_broker: StartBroker) -> None:
    """log.cleaner.threads and log.cleaner.io.buffer.size as the cluster default: the cleaner threads
    restart with them (Kafka's LogCleaner.reconfigure)."""
    b = start_broker()
    assert _alter_default(b.bootstrap, {"log.cleaner.threads": "2", "log.cleaner.io.buffer.size": "65536"}) == (0, None)
    b.wait_for_log("log cleaner started (2 threads")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    bres = ConfigResource(ConfigResource.Type.BROKER, "0")
    e = admin.describe_configs([bres])[bres].result(30)["log.cleaner.threads"]
    assert (e.value, e.source) == ("2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)


def test_max_connections_lowered_refuses_new_connections(start_broker: StartBroker) -> None:
    """max.connections lowered as the cluster default: open connections stay, a new one is closed; raised
    again, new connections are served; a per-IP override set for the broker limits its address."""
    b = start_broker()
    c1 = WireClient(b.bootstrap)
    try:
        r = c1.request(44, 1, {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
            {"name": "max.connections", "config_operation": 0, "value": "1"}]}], "validate_only": False})
        assert r.responses[0].error_code == 0
        time.sleep(0.3)  # applied through the metadata store's event
        c2 = WireClient(b.bootstrap)
        try:
            c2.send(18, 0, {})
            assert c2.closed_by_peer()
        finally:
            c2.close()
        r = c1.request(44, 1, {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
            {"name": "max.connections", "config_operation": 1, "value": None}]}], "validate_only": False})
        assert r.responses[0].error_code == 0
        time.sleep(0.3)
        c3 = WireClient(b.bootstrap)
        try:
            assert c3.request(18, 0, {}).error_code == 0
        finally:
            c3.close()
        # max.connections.per.ip.overrides for this broker: 127.0.0.1 may hold one connection (c1's).
        r = c1.request(44, 1, {"resources": [{"resource_type": 4, "resource_name": "0", "configs": [
            {"name": "max.connections.per.ip.overrides", "config_operation": 0, "value": "127.0.0.1:1"}]}],
            "validate_only": False})
        assert r.responses[0].error_code == 0, r.responses[0].error_message
        time.sleep(0.3)
        c4 = WireClient(b.bootstrap)
        try:
            c4.send(18, 0, {})
            assert c4.closed_by_peer()
        finally:
            c4.close()
    finally:
        c1.close()


def test_cluster_default_reaches_the_other_broker_on_zookeeper(start_broker: StartBroker, zk_connect: str) -> None:
    """Set through broker 0, the cluster default is described by broker 1 as its own value and applied
    to broker 1's topic defaults."""
    b0, b1 = (start_broker({"zookeeper.connect": zk_connect, "broker.id": str(i)}) for i in range(2))
    assert _alter_default(b0.bootstrap, {"log.retention.ms": "123456"}) == (0, None)
    admin = AdminClient({"bootstrap.servers": b1.bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, "1")
    deadline = time.monotonic() + 10
    while True:
        e = admin.describe_configs([res])[res].result(30)["log.retention.ms"]
        if e.value == "123456":
            break
        assert time.monotonic() < deadline, "the cluster default did not reach broker 1"
        time.sleep(0.1)
    assert e.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    admin.create_topics([NewTopic("zk-plain", 1, 1)])["zk-plain"].result(30)
    tres = ConfigResource(ConfigResource.Type.TOPIC, "zk-plain")
    got = admin.describe_configs([tres])[tres].result(30)["retention.ms"]
    assert got.value == "123456"
    syn = [(s.name, s.source) for s in got.synonyms.values()]
    assert syn[0] == ("log.retention.ms", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value), syn

    # A group config (/config/groups/<group>) set through broker 0 is read by broker 1.
    r = _group_request(b0.bootstrap, 44, 1, {"resources": [{"resource_type": 32, "resource_name": "zk/group", "configs": [
        {"name": "consumer.heartbeat.interval.ms", "config_operation": 0, "value": "6000"}]}], "validate_only": False})
    assert r.responses[0].error_code == 0, r.responses[0].error_message
    deadline = time.monotonic() + 10
    while True:
        d = _group_request(b1.bootstrap, 32, 4, {"resources": [{"resource_type": 32, "resource_name": "zk/group",
                                                                "configuration_keys": ["consumer.heartbeat.interval.ms"]}],
                                                 "include_synonyms": False, "include_documentation": False})
        if d.results[0].configs[0].value == "6000":
            break
        assert time.monotonic() < deadline, "the group config did not reach broker 1"
        time.sleep(0.1)

    # DeleteGroups removes the group's /config/groups znode: an empty group (offsets committed by a consumer
    # that never joined) with a config, deleted through the admin client.
    from confluent_kafka import Consumer, TopicPartition
    from kazoo.client import KazooClient

    r = _group_request(b0.bootstrap, 44, 1, {"resources": [{"resource_type": 32, "resource_name": "zk-gone", "configs": [
        {"name": "consumer.session.timeout.ms", "config_operation": 0, "value": "50000"}]}], "validate_only": False})
    assert r.responses[0].error_code == 0, r.responses[0].error_message
    c = Consumer({"bootstrap.servers": b0.bootstrap, "group.id": "zk-gone"})
    try:
        c.commit(offsets=[TopicPartition("zk-plain", 0, 0)], asynchronous=False)
    finally:
        c.close()
    zk = KazooClient(hosts=zk_connect)
    zk.start(10)
    try:
        assert zk.exists("/config/groups/zk-gone") is not None
        admin.delete_consumer_groups(["zk-gone"])["zk-gone"].result(30)
        assert zk.exists("/config/groups/zk-gone") is None
    finally:
        zk.stop()


@pytest.mark.parametrize("name", ["log.retention.ms", "log.segment.bytes", "message.max.bytes", "log.cleanup.policy",
                                  "max.connections", "max.connections.per.ip"])
def test_applied_modes(name: str) -> None:
    """What is applied at runtime is what Kafka could update (never a read-only property)."""
    from gregor.config import BROKER_PROPS
    from gregor.config.dynamic import APPLIED
    from gregor.configdef import READ_ONLY

    assert name in APPLIED and BROKER_PROPS[name].mode != READ_ONLY
    assert not any(BROKER_PROPS[n].mode == READ_ONLY for n in APPLIED)


def _served_issuer(bootstrap: str, cafile: str) -> str | None:
    """The issuer CN of the certificate a new TLS connection is served, verified against `cafile`;
    None when it does not verify."""
    import socket
    import ssl

    ctx = ssl.create_default_context(cafile=cafile)
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                cert = s.getpeercert()
        except ssl.SSLError:
            return None
    return dict(x[0] for x in cert["issuer"])["commonName"]


def test_listener_keystore_rotated_by_alter_configs(start_broker: StartBroker, tmp_path: Any) -> None:
    """listener.name.ssl.ssl.keystore.location altered for this broker: new connections get the new
    certificate (of another CA, same subject and SANs); a key store of another subject is refused as
    Kafka refuses it; the cluster default cannot take it (per-broker); described as DYNAMIC_BROKER_CONFIG."""
    from tests.security.certs import _signed, make_pki

    pki = make_pki(tmp_path / "pki")
    _signed(pki.dir, "broker-rotated", "/CN=broker/O=gregor", "evil-ca", san="IP:127.0.0.1,DNS:localhost")
    b = start_broker({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                      "ssl.keystore.location": pki.keystore("broker"), "password.encoder.secret": "rotate-me"})
    ssl_bootstrap = b.bootstrap_of("SSL")
    assert _served_issuer(ssl_bootstrap, pki.ca) == "gregor-test-ca"
    key = "listener.name.ssl.ssl.keystore.location"
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    bres = ConfigResource(ConfigResource.Type.BROKER, "0")

    def alter(value: str) -> None:
        res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(30)

    with pytest.raises(KafkaException) as err:
        alter(pki.keystore("broker-evil"))  # O=evil: another subject
    assert err.value.args[0].code() == KafkaError.INVALID_CONFIG and "DistinguishedName" in err.value.args[0].str()
    with pytest.raises(KafkaException) as err:
        alter(str(tmp_path / "missing.pem"))
    assert err.value.args[0].code() == KafkaError.INVALID_CONFIG
    code, msg = _alter_default(b.bootstrap, {key: pki.keystore("broker-rotated")})
    assert code == KafkaError.INVALID_REQUEST and "broker id must be specified" in (msg or "")
    assert _served_issuer(ssl_bootstrap, pki.ca) == "gregor-test-ca"

    alter(pki.keystore("broker-rotated"))
    deadline = time.monotonic() + 10
    while _served_issuer(ssl_bootstrap, pki.path("evil-ca.crt")) != "evil-ca":
        assert time.monotonic() < deadline, "new connections did not get the new key store"
        time.sleep(0.1)
    assert _served_issuer(ssl_bootstrap, pki.ca) is None
    e = admin.describe_configs([bres])[bres].result(30)[key]
    assert (e.value, e.source, e.is_read_only) == (pki.keystore("broker-rotated"),
                                                   ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)

    # An encrypted key with its password: the password is never described nor logged.
    res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry(key, pki.keystore("broker-enc"), incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("listener.name.ssl.ssl.key.password", "keypass", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    deadline = time.monotonic() + 10
    while _served_issuer(ssl_bootstrap, pki.ca) != "gregor-test-ca":
        assert time.monotonic() < deadline, "the encrypted key store was not taken"
        time.sleep(0.1)
    e = admin.describe_configs([bres])[bres].result(30)["listener.name.ssl.ssl.key.password"]
    assert (e.value, e.is_sensitive, e.source) == (None, True, ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert "keypass" not in b.log_text()


def _group_request(bootstrap: str, api: int, version: int, body: dict[str, Any]) -> Any:
    c = WireClient(bootstrap)
    try:
        return c.request(api, version, body)
    finally:
        c.close()


def _join(bootstrap: str, group: str, topic: str) -> Any:
    """A KIP-848 member joins (ConsumerGroupHeartbeat v1, epoch 0), retried while the coordinator loads."""
    import uuid

    body = {"group_id": group, "member_id": str(uuid.uuid4()), "member_epoch": 0, "instance_id": None,
            "rebalance_timeout_ms": 30000, "server_assignor": None, "subscribed_topic_names": [topic],
            "topic_partitions": []}
    deadline = time.monotonic() + 15
    while True:
        r = _group_request(bootstrap, 68, 1, body)
        if r.error_code == 0:
            return body, r
        assert time.monotonic() < deadline, r
        time.sleep(0.1)


def test_group_configs(start_broker: StartBroker) -> None:
    """GROUP resources (KIP-848): consumer.session.timeout.ms and consumer.heartbeat.interval.ms described
    with their sources, altered within the broker's group.consumer.min/max bounds (validate_only honoured),
    and applied by the coordinator: the heartbeat interval a member is given, the session that fences it;
    a confluent-kafka consumer (group.protocol=consumer) consumes under them."""
    b = start_broker({"group.consumer.min.heartbeat.interval.ms": "100", "group.consumer.min.session.timeout.ms": "1000"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("gt", 1, 1)])["gt"].result(30)

    def describe(group: str) -> dict[str, Any]:
        r = _group_request(b.bootstrap, 32, 4, {"resources": [{"resource_type": 32, "resource_name": group,
                                                               "configuration_keys": None}],
                                                "include_synonyms": True, "include_documentation": True})
        assert r.results[0].error_code == 0, r.results[0].error_message
        return {e.name: e for e in r.results[0].configs}

    def alter(group: str, configs: dict[str, str | None], validate: bool = False) -> tuple[int, str | None]:
        r = _group_request(b.bootstrap, 44, 1, {"resources": [{"resource_type": 32, "resource_name": group, "configs": [
            {"name": k, "config_operation": 1 if v is None else 0, "value": v} for k, v in configs.items()]}],
            "validate_only": validate})
        return r.responses[0].error_code, r.responses[0].error_message

    got = describe("g1")
    assert set(got) == {"consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"}
    e = got["consumer.heartbeat.interval.ms"]
    assert (e.value, e.config_source, e.read_only) == ("5000", 5, False) and e.documentation
    assert [(s.name, s.source) for s in e.synonyms] == [("group.consumer.heartbeat.interval.ms", 5)]

    for configs, text in [({"consumer.heartbeat.interval.ms": "50"}, "group.consumer.min.heartbeat.interval.ms"),
                          ({"consumer.session.timeout.ms": "70000"}, "group.consumer.max.session.timeout.ms"),
                          ({"consumer.heartbeat.interval.ms": "1500", "consumer.session.timeout.ms": "1000"},
                           "must be less than"),
                          ({"consumer.nope": "1"}, "Unknown group config")]:
        code, msg = alter("g1", configs)
        assert code == KafkaError.INVALID_CONFIG and text in (msg or ""), (configs, code, msg)
    assert alter("g1", {"consumer.heartbeat.interval.ms": "200"}, validate=True) == (0, None)
    assert describe("g1")["consumer.heartbeat.interval.ms"].config_source == 5
    assert alter("g1", {"consumer.heartbeat.interval.ms": "200", "consumer.session.timeout.ms": "1000"}) == (0, None)
    e = describe("g1")["consumer.heartbeat.interval.ms"]
    assert (e.value, e.config_source) == ("200", 8)  # GROUP_CONFIG
    assert [(s.name, s.source) for s in e.synonyms][0] == ("consumer.heartbeat.interval.ms", 8)

    # The coordinator gives the group's interval and fences on the group's session timeout.
    _, r = _join(b.bootstrap, "g1", "gt")
    assert r.heartbeat_interval_ms == 200
    _, other = _join(b.bootstrap, "g-other", "gt")
    assert other.heartbeat_interval_ms == 5000
    body, r = _join(b.bootstrap, "g1", "gt")
    time.sleep(1.6)  # past the group's 1000 ms session without a heartbeat
    again = _group_request(b.bootstrap, 68, 1, {**body, "member_epoch": r.member_epoch, "rebalance_timeout_ms": -1,
                                                "subscribed_topic_names": None, "topic_partitions": None})
    assert again.error_code == 25, again  # UNKNOWN_MEMBER_ID: fenced by the group's session timeout

    # A real KIP-848 consumer under the group's configs.
    from confluent_kafka import Consumer

    assert _produce(b.bootstrap, "gt", 1, 10) == [None]
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g1", "group.protocol": "consumer",
                  "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["gt"])
        deadline = time.monotonic() + 20
        msg = None
        while msg is None or msg.error():
            assert time.monotonic() < deadline, "the consumer got nothing"
            msg = c.poll(0.5)
        assert msg.value() == b"x" * 10
    finally:
        c.close()
    assert alter("g1", {"consumer.heartbeat.interval.ms": None, "consumer.session.timeout.ms": None}) == (0, None)
    assert describe("g1")["consumer.heartbeat.interval.ms"].config_source == 5

    # A group's configs are deleted with the group (DeleteGroups): a new group of that name gets the defaults.
    assert alter("g1", {"consumer.session.timeout.ms": "50000"}) == (0, None)
    assert alter("g-other", {"consumer.session.timeout.ms": "50000"}) == (0, None)
    admin.delete_consumer_groups(["g1"])["g1"].result(30)
    e = describe("g1")["consumer.session.timeout.ms"]
    assert (e.value, e.config_source) == ("45000", 5)
    assert describe("g-other")["consumer.session.timeout.ms"].config_source == 8  # other groups keep theirs
