"""aiokafka: admin, produce with keys/headers/every codec, consume back."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.broker_process import BrokerProcess
from tests.clients.common import CODECS, Msg, assert_same, make_messages


async def _roundtrip(bootstrap: str, topic: str, codec: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 3, 1)])
    finally:
        await admin.close()
    msgs = make_messages(300, seed=3)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, enable_idempotence=True,
                                compression_type=None if codec == "none" else codec)
    await producer.start()
    try:
        futs = [(await producer.send(topic, value=m.value, key=m.key, headers=m.headers), m) for m in msgs]
        produced = []
        for fut, m in futs:
            md = await fut
            produced.append((md.partition, md.offset, m))
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(3)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        consumed: list[tuple[int, int, Msg]] = []
        async with asyncio.timeout(30):
            while len(consumed) < len(msgs):
                batch = await consumer.getmany(timeout_ms=500)
                for tp, records in batch.items():
                    for r in records:
                        consumed.append((tp.partition, r.offset, Msg(r.key, r.value, list(r.headers))))
    finally:
        await consumer.stop()
    assert_same(produced, consumed)


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec(broker: BrokerProcess, codec: str) -> None:
    asyncio.run(_roundtrip(broker.bootstrap, f"aiokafka-{codec}", codec))
