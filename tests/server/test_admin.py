"""Admin APIs through real admin clients: configs, partitions, records deletion, cluster description."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KPConfigResource
from kafka.admin import ConfigResourceType
from kafka.admin import NewTopic as KPNewTopic

from tests.broker_process import BrokerProcess
from tests.wire import WireClient


def _describe(admin: AdminClient, topic: str) -> dict[str, str]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return {k: v.value for k, v in admin.describe_configs([res])[res].result(10).items()}


def test_incremental_and_legacy_alter_configs(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("cfg", 1, 1)])["cfg"].result(10)
    res = ConfigResource(ConfigResource.Type.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("retention.ms", "12345", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ])
    admin.incremental_alter_configs([res])[res].result(10)
    cfg = _describe(admin, "cfg")
    assert cfg["retention.ms"] == "12345"
    assert cfg["cleanup.policy"] == "delete,compact"
    res = ConfigResource(ConfigResource.Type.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([res])[res].result(10)
    assert _describe(admin, "cfg")["retention.ms"] == "604800000"
    # Legacy AlterConfigs replaces the whole set of overrides.
    res = ConfigResource(ConfigResource.Type.TOPIC, "cfg", set_config={"segment.bytes": "100000"})
    admin.alter_configs([res])[res].result(10)
    cfg = _describe(admin, "cfg")
    assert cfg["segment.bytes"] == "100000" and cfg["cleanup.policy"] == "delete"
    # Bad values and names are INVALID_CONFIG with a message naming them.
    for entry in (ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET),
                  ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)):
        res = ConfigResource(ConfigResource.Type.TOPIC, "cfg", incremental_configs=[entry])
        with pytest.raises(Exception) as ei:
            admin.incremental_alter_configs([res])[res].result(10)
        assert entry.name in str(ei.value)


def test_kafka_python_describe_configs_and_cluster(broker: BrokerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([KPNewTopic("kp-cfg", 2, 1, topic_configs={"max.message.bytes": "5000"})])
        resp = admin.describe_configs([KPConfigResource(ConfigResourceType.TOPIC, "kp-cfg")])
        text = str(resp)
        assert "max.message.bytes" in text and "5000" in text
        cluster = admin.describe_cluster()
        assert cluster["controller_id"] == 0
        assert [b["broker_id"] for b in cluster["brokers"]] == [0]
    finally:
        admin.close()


def test_delete_records_moves_log_start(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(100):
        p.produce("delrec", f"{i}".encode())
    assert p.flush(10) == 0
    res = admin.delete_records([TopicPartition("delrec", 0, 40)])
    out = res[TopicPartition("delrec", 0, 40)].result(10)
    assert out.low_watermark == 40
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "delrec", "enable.auto.commit": False})
    assert c.get_watermark_offsets(TopicPartition("delrec", 0), timeout=10) == (40, 100)
    # Beyond the high watermark is OFFSET_OUT_OF_RANGE.
    bad = admin.delete_records([TopicPartition("delrec", 0, 500)])
    with pytest.raises(KafkaException) as ei:
        bad[TopicPartition("delrec", 0, 500)].result(10)
    assert ei.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    c.close()


def test_describe_cluster(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    desc = admin.describe_cluster().result(10)
    assert desc.controller.id == 0
    assert [n.id for n in desc.nodes] == [0]
    assert desc.cluster_id and len(desc.cluster_id) == 22


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_every_version(broker: BrokerProcess, version: int) -> None:
    c = WireClient(broker.bootstrap)
    resp = c.request(18, version, {"client_software_name": "wire", "client_software_version": "1"})
    assert resp.error_code == 0
    keys = {k.api_key for k in resp.api_keys}
    assert keys == {0, 1, 2, 3, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28,
                    29, 30, 31, 32, 33, 34, 35, 36, 37, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 60, 61, 65, 66, 68, 69, 75}
    c.close()


def test_config_change_takes_effect(start_broker: object) -> None:
    b = start_broker({"log.retention.check.interval.ms": "200", "log.segment.delete.delay.ms": "0"})  # type: ignore[operator]
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("shrink", 1, 1, config={"segment.bytes": "1000"})])["shrink"].result(10)
    p = Producer({"bootstrap.servers": b.bootstrap, "batch.num.messages": 1, "linger.ms": 0})
    for _ in range(50):
        p.produce("shrink", b"y" * 100, timestamp=int(time.time() * 1000) - 3_600_000)
        p.flush(5)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "shrink", "enable.auto.commit": False})
    tp = TopicPartition("shrink", 0)
    assert c.get_watermark_offsets(tp, timeout=10) == (0, 50)
    res = ConfigResource(ConfigResource.Type.TOPIC, "shrink", incremental_configs=[
        ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(10)
    deadline = time.monotonic() + 15
    while c.get_watermark_offsets(tp, timeout=10)[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert c.get_watermark_offsets(tp, timeout=10)[0] > 0
    c.close()
