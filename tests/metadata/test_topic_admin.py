"""TopicAdmin: checks against the cache plus the writes in flight, so racing requests cannot both pass; the
write completes once the cache has it; concurrent CreateTopics of one name through a real broker: one wins."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from gregor.admin.topic_admin import TopicAdmin, TopicAdminSettings
from gregor.config import BrokerConfig
from gregor.metadata.cache import MetadataCache
from gregor.metadata.embedded import EmbeddedMetadataStore
from gregor.metadata.store import BrokerInfo, CreateTopic
from gregor.protocol import apis
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.frames import decode_response
from tests.broker_process import BrokerProcess
from tests.server.admin_wire import CREATE_TOPICS
from tests.wire import WireClient


def _admin(tmp_path: Path, props: dict[str, str] | None = None) -> tuple[TopicAdmin, EmbeddedMetadataStore]:
    store = EmbeddedMetadataStore(str(tmp_path), 0)
    store.register_broker(BrokerInfo(0, "127.0.0.1", 9092))
    cache = MetadataCache()
    cache.load(store.snapshot())
    cache.attach(store, asyncio.get_running_loop())
    config = BrokerConfig({"log.dirs": str(tmp_path), **(props or {})})
    return TopicAdmin(store, cache, TopicAdminSettings.from_config(config), lambda: config.log_config), store


def test_writes_in_flight_hold_their_names_and_partitions(tmp_path: Path) -> None:
    async def run() -> None:
        admin, store = _admin(tmp_path, {"max.broker.partitions": "10"})
        first = admin.prepare_topic("a.b", 6, 1)
        for name, code in (("a.b", ErrorCode.TOPIC_ALREADY_EXISTS), ("a_b", ErrorCode.INVALID_TOPIC_EXCEPTION)):
            with pytest.raises(KafkaError) as ei:
                admin.prepare_topic(name, 1, 1)
            assert ei.value.code == code
        with pytest.raises(KafkaError) as ei:  # 6 reserved + 6 asked > 10
            admin.prepare_topic("other", 6, 1)
        assert ei.value.code == ErrorCode.POLICY_VIOLATION
        assert await admin.write([CreateTopic(first)]) == [None]
        assert admin.cache.topic("a.b") is not None  # in the cache when the write completes
        assert admin.hosted_partitions() == {0: 6}  # reservation released, counted once
        assert admin.prepare_topic("other", 4, 1, reserve=False).name == "other"
        admin.close()
        store.close()

    asyncio.run(run())


def test_a_write_the_store_refuses_is_reported_per_topic(tmp_path: Path) -> None:
    async def run() -> None:
        admin, store = _admin(tmp_path)
        t = admin.prepare_topic("dup", 1, 1, reserve=False)
        # Written behind TopicAdmin's back (as another broker would in a cluster): the store has the last word.
        store.create_topic(admin.prepare_topic("dup", 1, 1, reserve=False))
        (err,) = await admin.write([CreateTopic(t)])
        assert err is not None and err.code == ErrorCode.TOPIC_ALREADY_EXISTS
        admin.close()
        store.close()

    asyncio.run(run())


def test_concurrent_create_topics_of_one_name_one_wins(start_broker: Callable[..., BrokerProcess]) -> None:
    b = start_broker({"auto.create.topics.enable": "false"})
    clients = [WireClient(b.bootstrap) for _ in range(4)]
    try:
        for round_ in range(5):
            names = [f"race-{round_}", f"race-{round_}", f"race.{round_}x", f"race_{round_}x"]
            sent = []
            for c, name in zip(clients, names, strict=True):  # all sent before any answer is read
                body = {"topics": [{"name": name, "num_partitions": 2, "replication_factor": 1, "assignments": [],
                                    "configs": []}], "timeout_ms": 0, "validate_only": False}
                sent.append(c.send(CREATE_TOPICS, 5, body))
            codes = []
            for c, cid in zip(clients, sent, strict=True):
                got, resp = decode_response(c.recv_frame(), apis.BY_KEY[CREATE_TOPICS], 5)
                assert got == cid
                codes.append(resp.topics[0].error_code)
            assert sorted(codes[:2]) == [ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS]
            assert sorted(codes[2:]) == [ErrorCode.NONE, ErrorCode.INVALID_TOPIC_EXCEPTION]  # '.' and '_' collide
    finally:
        for c in clients:
            c.close()
