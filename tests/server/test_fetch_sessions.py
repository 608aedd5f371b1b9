"""Fetch sessions (KIP-227): through kafka-python (which uses them), at the wire, and the cache alone.

librdkafka does not implement KIP-227 (it always sends sessionless fetches, session 0 epoch -1),
so the real-client test uses kafka-python, whose fetcher opens a session and then sends
incremental requests, and checks every incremental response against its session.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from gregor.api.fetch_session import (
    MIN_EVICTION_MS,
    CachedPartition,
    FetchSessionCache,
    next_epoch,
)
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import Record, build_batch, iter_headers
from tests.broker_process import BrokerProcess
from tests.wire import WireClient


def _create(c: WireClient, topic: str, partitions: int) -> None:
    r = c.request(19, 5, {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": 1,
                                       "assignments": [], "configs": []}], "timeout_ms": 5000, "validate_only": False})
    assert r.topics[0].error_code in (0, ErrorCode.TOPIC_ALREADY_EXISTS)


def _produce(c: WireClient, topic: str, partition: int, n: int) -> None:
    batch = build_batch([Record(i, 1000 + i, None, b"v%d" % i) for i in range(n)])
    r = c.request(0, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
                         "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    assert r.responses[0].partition_responses[0].error_code == 0


def _fetch(c: WireClient, session_id: int, epoch: int, parts: list[tuple[str, int, int]],
           forgotten: list[tuple[str, list[int]]] | None = None) -> Any:
    topics: list[dict[str, Any]] = []
    for topic, idx, offset in parts:
        entry = {"partition": idx, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}
        if topics and topics[-1]["topic"] == topic:
            topics[-1]["partitions"].append(entry)
        else:
            topics.append({"topic": topic, "partitions": [entry]})
    return c.request(1, 12, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 24,
                             "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
                             "topics": topics,
                             "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in forgotten or []],
                             "rack_id": ""})


def _seen(resp: Any) -> dict[tuple[str, int], int]:
    """(topic, partition) -> records in the response, for each partition it carries."""
    return {(t.topic, p.partition_index): sum(h.records_count for h in iter_headers(p.records or b""))
            for t in resp.responses for p in t.partitions}


# --- through a real client -----------------------------------------------------------------

class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_kafka_python_consumes_through_an_incremental_session(broker: BrokerProcess) -> None:
    topic, parts, per_wave = "sessions-kp", 12, 300
    c = WireClient(broker.bootstrap)
    _create(c, topic, parts)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, linger_ms=5, enable_idempotence=False)

    def wave(w: int) -> None:
        for i in range(per_wave):
            producer.send(topic, value=b"%d:%d" % (w, i), partition=(i * 7 + w) % parts)
        producer.flush(30)

    capture = _Capture()
    fetch_log = logging.getLogger("kafka.consumer.fetcher")
    old_level = fetch_log.level
    fetch_log.setLevel(logging.DEBUG)
    fetch_log.addHandler(capture)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                             fetch_max_wait_ms=50, max_partition_fetch_bytes=4096)
    try:
        wave(0)
        tps = [TopicPartition(topic, p) for p in range(parts)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got: dict[int, list[bytes]] = {p: [] for p in range(parts)}
        offsets: dict[int, list[int]] = {p: [] for p in range(parts)}

        def drain(total: int) -> None:
            deadline = time.monotonic() + 30
            while sum(len(v) for v in got.values()) < total and time.monotonic() < deadline:
                for tp, msgs in consumer.poll(200).items():
                    got[tp.partition] += [m.value for m in msgs]
                    offsets[tp.partition] += [m.offset for m in msgs]

        drain(per_wave)
        for _ in range(5):  # idle fetches: the session answers with no partitions
            consumer.poll(100)
        wave(1)  # data arrives on partitions the broker had been leaving out
        drain(2 * per_wave)
    finally:
        consumer.close()
        producer.close()
        fetch_log.removeHandler(capture)
        fetch_log.setLevel(old_level)
    for p in range(parts):
        assert offsets[p] == list(range(len(offsets[p]))), f"partition {p}: gaps or repeats"
    assert sorted(v for vs in got.values() for v in vs) == sorted(
        b"%d:%d" % (w, i) for w in range(2) for i in range(per_wave))
    text = "\n".join(capture.lines)
    assert "created a new incremental fetch session" in text
    assert "sent an incremental fetch response for session" in text
    assert "implied" in text  # responses left out partitions with nothing new
    assert "invalid incremental fetch response" not in text
    assert "closing session" not in text


def test_librdkafka_stays_sessionless_and_reads_everything(broker: BrokerProcess) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer

    topic, parts = "sessions-rdk", 6
    c = WireClient(broker.bootstrap)
    _create(c, topic, parts)
    for p in range(parts):
        _produce(c, topic, p, 50 + p)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "rdk", "enable.auto.commit": False})
    from confluent_kafka import TopicPartition as CkTopicPartition

    consumer.assign([CkTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(parts)])
    counts = dict.fromkeys(range(parts), 0)
    deadline = time.monotonic() + 30
    while sum(counts.values()) < sum(50 + p for p in range(parts)) and time.monotonic() < deadline:
        for m in consumer.consume(1000, 0.5):
            if m.error() is None:
                counts[m.partition()] += 1
    consumer.close()
    assert counts == {p: 50 + p for p in range(parts)}


# --- at the wire ---------------------------------------------------------------------------

def test_full_then_incremental_fetch_sends_only_changes(broker: BrokerProcess) -> None:
    c = WireClient(broker.bootstrap)
    _create(c, "sess-inc", 3)
    _produce(c, "sess-inc", 0, 5)
    full = _fetch(c, 0, 0, [("sess-inc", 0, 0), ("sess-inc", 1, 0), ("sess-inc", 2, 0)])
    assert full.error_code == 0 and full.session_id != 0
    assert _seen(full) == {("sess-inc", 0): 5, ("sess-inc", 1): 0, ("sess-inc", 2): 0}
    sid = full.session_id
    # Epoch 1, offsets unchanged in the session: partition 0 is re-read from 0 (records), the others
    # have nothing new and are left out.
    inc = _fetch(c, sid, 1, [])
    assert inc.error_code == 0 and inc.session_id == sid
    assert _seen(inc) == {("sess-inc", 0): 5}
    # The client moves partition 0 on; nothing changed anywhere: an empty response.
    inc = _fetch(c, sid, 2, [("sess-inc", 0, 5)])
    assert _seen(inc) == {}
    # New data on partition 2 (its high watermark moves): only it comes back.
    _produce(c, "sess-inc", 2, 3)
    inc = _fetch(c, sid, 3, [])
    assert _seen(inc) == {("sess-inc", 2): 3}
    assert inc.responses[0].partitions[0].high_watermark == 3
    # Forget partition 2: new data there is no longer answered.
    _produce(c, "sess-inc", 2, 2)
    inc = _fetch(c, sid, 4, [], forgotten=[("sess-inc", [2])])
    assert _seen(inc) == {}
    # Add partition 2 back at its end offset: its high watermark is news (first time sent), no records.
    inc = _fetch(c, sid, 5, [("sess-inc", 2, 5)])
    assert _seen(inc) == {("sess-inc", 2): 0}


def test_session_errors(broker: BrokerProcess) -> None:
    c = WireClient(broker.bootstrap)
    _create(c, "sess-err", 1)
    full = _fetch(c, 0, 0, [("sess-err", 0, 0)])
    sid = full.session_id
    assert sid != 0
    bad_epoch = _fetch(c, sid, 7, [])
    assert bad_epoch.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert bad_epoch.session_id == 0 and bad_epoch.responses == []
    assert _fetch(c, sid, 1, []).error_code == 0  # the session survives a wrong epoch
    unknown = _fetch(c, (sid % (2**31 - 2)) + 1, 1, [])
    assert unknown.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND and unknown.session_id == 0
    # Epoch -1 closes the session and is answered as a sessionless full fetch.
    closing = _fetch(c, sid, -1, [("sess-err", 0, 0)])
    assert closing.error_code == 0 and closing.session_id == 0 and _seen(closing) == {("sess-err", 0): 0}
    assert _fetch(c, sid, 2, []).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # A sessionless client (session 0, epoch -1) never gets a session.
    assert _fetch(c, 0, -1, [("sess-err", 0, 0)]).session_id == 0
    # Fetch v4-v6 have no session fields: always sessionless.
    old = c.request(1, 6, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                           "isolation_level": 0, "topics": [{"topic": "sess-err", "partitions": [
                               {"partition": 0, "fetch_offset": 0, "log_start_offset": -1,
                                "partition_max_bytes": 1 << 20}]}]})
    assert old.responses[0].partitions[0].error_code == 0


def test_cache_slots_bound_and_eviction_by_size(start_broker: Any) -> None:
    b = start_broker({"max.incremental.fetch.session.cache.slots": "1"})
    c = WireClient(b.bootstrap)
    _create(c, "slots", 3)
    two = [("slots", 0, 0), ("slots", 1, 0)]
    a = _fetch(c, 0, 0, two).session_id
    assert a != 0
    # Cache full; a newcomer with fewer partitions is worth less than A: answered sessionless.
    assert _fetch(c, 0, 0, [("slots", 0, 0)]).session_id == 0
    assert _fetch(c, a, 1, []).error_code == 0
    # A newcomer with more partitions evicts A.
    big = _fetch(c, 0, 0, two + [("slots", 2, 0)]).session_id
    assert big not in (0, a)
    assert _fetch(c, a, 2, []).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert _fetch(c, big, 1, []).error_code == 0


def test_zero_slots_means_no_sessions(start_broker: Any) -> None:
    b = start_broker({"max.incremental.fetch.session.cache.slots": "0"})
    c = WireClient(b.bootstrap)
    _create(c, "noslots", 1)
    r = _fetch(c, 0, 0, [("noslots", 0, 0)])
    assert r.error_code == 0 and r.session_id == 0


def test_partition_bound_closes_a_growing_session(start_broker: Any) -> None:
    b = start_broker({"gregor.fetch.session.cache.max.partitions": "3"})
    c = WireClient(b.bootstrap)
    _create(c, "pbound", 5)
    assert _fetch(c, 0, 0, [("pbound", p, 0) for p in range(4)]).session_id == 0  # too big to cache
    sid = _fetch(c, 0, 0, [("pbound", 0, 0), ("pbound", 1, 0)]).session_id
    assert sid != 0
    assert _fetch(c, sid, 1, [("pbound", 2, 0)]).error_code == 0  # 3 partitions: at the bound
    r = _fetch(c, sid, 2, [("pbound", 3, 0)])
    assert r.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND  # the client falls back to a full fetch
    assert _fetch(c, 0, 0, [("pbound", p, 0) for p in range(3)]).session_id != 0  # the room came back


# --- the cache alone -----------------------------------------------------------------------

def _parts(n: int) -> dict[tuple[str, int], CachedPartition]:
    return {("t", i): CachedPartition(i, 0, 1024) for i in range(n)}


def test_epochs_wrap_to_one() -> None:
    assert next_epoch(1) == 2
    assert next_epoch(2**31 - 1) == 1


def test_stale_session_is_evicted_first_and_followers_outrank_consumers() -> None:
    now = [1_000_000]
    cache = FetchSessionCache(2, 1000, clock_ms=lambda: now[0])
    small = cache.maybe_create(False, _parts(1))
    now[0] += 10
    large = cache.maybe_create(False, _parts(50))
    assert small and large
    # Full, nothing stale: a consumer with 1 partition cannot displace anything.
    assert cache.maybe_create(False, _parts(1)) == 0
    # A follower's session outranks any consumer's: the least valuable (small) goes.
    follower = cache.maybe_create(True, _parts(1))
    assert follower and cache.get(small) is None and cache.get(large) is not None
    # Consumers never evict followers; once `large` is stale, anyone may take its slot.
    assert cache.maybe_create(False, _parts(60)) != 0  # evicts `large` (60 > 50 partitions)
    now[0] += MIN_EVICTION_MS + 1
    cache.touch(cache.sessions[follower])
    newest = cache.maybe_create(False, _parts(1))
    assert newest and cache.get(follower) is not None
    assert cache.total_partitions == sum(len(s.partitions) for s in cache.sessions.values())


def test_partition_bound_refuses_oversized_sessions() -> None:
    cache = FetchSessionCache(10, 5)
    assert cache.maybe_create(False, _parts(6)) == 0
    a = cache.maybe_create(False, _parts(3))
    assert a
    b = cache.maybe_create(False, _parts(4))  # over the bound together: evicts the smaller a
    assert b and cache.get(a) is None and cache.total_partitions == 4


@pytest.mark.parametrize("privileged", [False, True])
def test_remove_gives_partitions_back(privileged: bool) -> None:
    cache = FetchSessionCache(3, 100)
    sid = cache.maybe_create(privileged, _parts(7))
    assert cache.total_partitions == 7
    cache.remove(sid)
    assert cache.total_partitions == 0 and cache.get(sid) is None
