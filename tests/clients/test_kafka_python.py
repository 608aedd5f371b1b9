"""kafka-python: admin, produce with keys/headers/every codec, consume back."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.broker_process import BrokerProcess
from tests.clients.common import CODECS, Msg, assert_same, make_messages


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec(broker: BrokerProcess, codec: str) -> None:
    topic = f"kafka-python-{codec}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, 3, 1)])
    admin.close()
    msgs = make_messages(300, seed=2)
    # kafka-python 3 turns idempotence on by default: InitProducerId, then batches with sequences.
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5,
                             compression_type=None if codec == "none" else codec)
    futures = [(producer.send(topic, value=m.value, key=m.key, headers=m.headers), m) for m in msgs]
    producer.flush(30)
    produced = []
    for fut, m in futures:
        md = fut.get(10)
        produced.append((md.partition, md.offset, m))
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    tps = [TopicPartition(topic, p) for p in range(3)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    consumed: list[tuple[int, int, Msg]] = []
    deadline = time.monotonic() + 30
    while len(consumed) < len(msgs) and time.monotonic() < deadline:
        for tp, records in consumer.poll(500).items():
            for r in records:
                consumed.append((tp.partition, r.offset, Msg(r.key, r.value, list(r.headers))))
    consumer.close()
    assert_same(produced, consumed)
