"""confluent-kafka (librdkafka): admin, produce with keys/headers/every codec, consume back."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from tests.broker_process import BrokerProcess
from tests.clients.common import CODECS, Msg, assert_same, make_messages


def produce(bootstrap: str, topic: str, msgs: list[Msg], **conf: str) -> list[tuple[int, int, Msg]]:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    out: list[tuple[int, int, Msg]] = []
    errors = []

    def cb(err: KafkaError | None, m: object, msg: Msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            out.append((m.partition(), m.offset(), msg))  # type: ignore[attr-defined]

    for msg in msgs:
        p.produce(topic, msg.value, msg.key, headers=msg.headers or None,
                  on_delivery=lambda err, m, msg=msg: cb(err, m, msg))
        p.poll(0)
    assert p.flush(30) == 0
    assert not errors, errors
    return out


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, **conf: str) -> list[tuple[int, int, Msg]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-assign", "enable.auto.commit": False,
                  "enable.partition.eof": False, **conf})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[tuple[int, int, Msg]] = []
    deadline = time.monotonic() + 30
    while len(out) < expected and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        headers = [(k, v) for k, v in (m.headers() or [])]
        out.append((m.partition(), m.offset(), Msg(m.key(), m.value(), headers)))
    c.close()
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec(broker: BrokerProcess, codec: str) -> None:
    topic = f"confluent-{codec}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(10)
    msgs = make_messages(300, seed=1)
    produced = produce(broker.bootstrap, topic, msgs,
                       **{"compression.type": codec, "acks": "all", "enable.idempotence": True})
    assert len(produced) == len(msgs)
    consumed = consume_all(broker.bootstrap, topic, 3, len(msgs))
    assert_same(produced, consumed)


def test_admin_topics_and_configs(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    fs = admin.create_topics([NewTopic("cfk-admin", 2, 1, config={"retention.ms": "3600000"})])
    fs["cfk-admin"].result(10)
    # Creating it again is TOPIC_ALREADY_EXISTS; an illegal name is INVALID_TOPIC_EXCEPTION.
    with pytest.raises(Exception) as ei:
        admin.create_topics([NewTopic("cfk-admin", 2, 1)])["cfk-admin"].result(10)
    assert ei.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    with pytest.raises(Exception) as ei:
        admin.create_topics([NewTopic("bad/name", 1, 1)])["bad/name"].result(10)
    assert ei.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    res = ConfigResource(ConfigResource.Type.TOPIC, "cfk-admin")
    cfg = admin.describe_configs([res])[res].result(10)
    assert cfg["retention.ms"].value == "3600000"
    assert cfg["segment.bytes"].value == "1073741824"
    assert cfg["cleanup.policy"].value == "delete"
    admin.create_partitions([NewPartitions("cfk-admin", 4)])["cfk-admin"].result(10)
    md = admin.list_topics("cfk-admin", timeout=10)
    assert len(md.topics["cfk-admin"].partitions) == 4
    admin.delete_topics(["cfk-admin"])["cfk-admin"].result(10)
    assert "cfk-admin" not in admin.list_topics(timeout=10).topics
