"""MetadataCache: events applied in version order on the loop, stale ones ignored, listeners and waiters
on the loop, and a store written from another thread reaching the cache on the loop's thread only."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path

from gregor.metadata.cache import MetadataCache
from gregor.metadata.embedded import EmbeddedMetadataStore
from gregor.metadata.store import (
    BROKERS,
    CONFIGS,
    CREATED,
    DELETED,
    STATE,
    BrokerInfo,
    MetadataEvent,
    MetadataImage,
    PartitionState,
    TopicMetadata,
)


def _topic(name: str, n: int = 2, configs: dict[str, str] | None = None) -> TopicMetadata:
    return TopicMetadata(name, uuid.uuid4(), {p: PartitionState([0], 0, isr=[0]) for p in range(n)}, configs or {})


def _cache() -> MetadataCache:
    c = MetadataCache()
    c.load(MetadataImage(0, "cid", (BrokerInfo(0, "h", 1),), 0, {}))
    return c


def test_events_apply_in_order_and_stale_ones_are_ignored() -> None:
    c = _cache()
    seen: list[tuple[str, str]] = []
    c.add_listener(lambda kind, topic: seen.append((kind, topic)))
    a = _topic("a")
    c.apply(MetadataEvent(1, CREATED, "a", a))
    c.apply(MetadataEvent(2, CONFIGS, "a", _topic("a", configs={"retention.ms": "1"})))
    # A repeat of an old version (a duplicate delivery, or one already in the loaded image) changes nothing.
    c.apply(MetadataEvent(1, CREATED, "a", a))
    c.apply(MetadataEvent(2, DELETED, "a", None))
    t = c.topic("a")
    assert t is not None and t.configs == {"retention.ms": "1"}
    assert c.version == 2
    assert seen == [(CREATED, "a"), (CONFIGS, "a")]
    c.apply(MetadataEvent(3, DELETED, "a", None))
    assert c.topic("a") is None and c.version == 3
    assert seen[-1] == (DELETED, "a")


def test_derived_tables_follow_the_events() -> None:
    c = _cache()
    a, b = _topic("a.b", 3), _topic("x", 2)
    c.apply(MetadataEvent(1, CREATED, "a.b", a))
    c.apply(MetadataEvent(2, CREATED, "x", b))
    assert c.topic_by_id(a.topic_id) is c.topic("a.b")
    assert c.colliding_topic("a_b") == "a.b"
    assert c.hosted_partitions() == {0: 5}
    c.apply(MetadataEvent(3, DELETED, "a.b", None))
    assert c.topic_by_id(a.topic_id) is None and c.colliding_topic("a_b") is None
    assert c.hosted_partitions() == {0: 2}
    assert list(c.topics()) == ["x"]
    c.apply(MetadataEvent(4, BROKERS, brokers=(BrokerInfo(0, "h", 1), BrokerInfo(1, "g", 2)), controller_id=1))
    assert [b.broker_id for b in c.brokers()] == [0, 1] and c.controller_id == 1


def test_waiters_wake_when_their_version_is_applied() -> None:
    async def run() -> None:
        c = _cache()
        w2, w1, w0 = c.wait_for(2), c.wait_for(1), c.wait_for(0)
        assert w0.done() and not w1.done()
        c.apply(MetadataEvent(1, CREATED, "a", _topic("a")))
        assert w1.done() and not w2.done()
        c.apply(MetadataEvent(2, CREATED, "b", _topic("b")))
        assert w2.done()

    asyncio.run(run())


def test_a_write_on_another_thread_arrives_on_the_loop_thread(tmp_path: Path) -> None:
    """The store is written on a worker thread; the cache and its listeners run on the loop's thread only,
    and the cache never shares the store's objects."""
    async def run() -> None:
        loop = asyncio.get_running_loop()
        store = EmbeddedMetadataStore(str(tmp_path), 0)
        c = MetadataCache()
        c.load(store.snapshot())
        c.attach(store, loop)
        threads: list[int] = []
        c.add_listener(lambda kind, topic: threads.append(threading.get_ident()))
        writer_thread: list[int] = []

        def write() -> int:
            writer_thread.append(threading.get_ident())
            return store.create_topic(_topic("t", 4))

        v = await loop.run_in_executor(None, write)
        assert c.topic("t") is None or c.version >= v  # nothing applied behind the loop's back
        await asyncio.wait_for(c.wait_for(v), 5)
        t = c.topic("t")
        assert t is not None and len(t.partitions) == 4
        assert threads == [threading.get_ident()] and writer_thread[0] != threading.get_ident()
        t.partitions[0].leader = 7  # the cache's copy is its own
        assert store.snapshot().topics["t"].partitions[0].leader == 0
        store.close()

    asyncio.run(run())


def test_apply_off_the_loop_thread_is_refused(tmp_path: Path) -> None:
    async def run() -> None:
        store = EmbeddedMetadataStore(str(tmp_path), 0)
        c = MetadataCache()
        c.attach(store, asyncio.get_running_loop())
        errors: list[BaseException] = []

        def foreign() -> None:
            try:
                c.apply(MetadataEvent(c.version + 1, CREATED, "a", _topic("a")))
            except RuntimeError as e:
                errors.append(e)

        th = threading.Thread(target=foreign)
        th.start()
        th.join()
        assert errors and c.topic("a") is None
        store.close()

    asyncio.run(run())


def test_a_partition_state_event_changes_that_partition_only() -> None:
    c = _cache()
    seen: list[tuple[str, str]] = []
    c.add_listener(lambda kind, topic: seen.append((kind, topic)))
    c.apply(MetadataEvent(1, CREATED, "a", _topic("a", 3)))
    before = c.topic("a")
    assert before is not None
    untouched = before.partitions[1]
    c.apply(MetadataEvent(2, STATE, "a", partitions={0: PartitionState([0, 1], 1, leader_epoch=4, isr=[1])}))
    t = c.topic("a")
    assert t is before and t.partitions[0].leader == 1 and t.partitions[0].leader_epoch == 4
    assert t.partitions[1] is untouched
    assert c.hosted_partitions() == {0: 3, 1: 1}
    assert seen[-1] == (STATE, "a")
    c.apply(MetadataEvent(3, STATE, "gone", partitions={0: PartitionState([0], 0)}))  # unknown topic: ignored
    assert c.version == 3 and c.topic("gone") is None
