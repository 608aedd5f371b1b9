"""Fetch semantics at the wire: min bytes / max wait purgatory, size limits, out of range."""

from __future__ import annotations

import threading
import time
from typing import Any

from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import Record, build_batch, iter_headers
from tests.broker_process import BrokerProcess
from tests.wire import WireClient


def _fetch_body(topic: str, offset: int, *, min_bytes: int = 1, max_wait_ms: int = 0, max_bytes: int = 1 << 20,
                partition_max_bytes: int = 1 << 20) -> dict[str, Any]:
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "log_start_offset": -1,
                 "partition_max_bytes": partition_max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def _produce(c: WireClient, topic: str, n: int, value_size: int = 100) -> int:
    batch = build_batch([Record(i, 1000 + i, None, b"v" * value_size) for i in range(n)])
    r = c.request(0, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
                         "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    p = r.responses[0].partition_responses[0]
    assert p.error_code == 0
    return p.base_offset


def _create(c: WireClient, topic: str) -> None:
    c.request(3, 12, {"topics": [{"topic_id": None, "name": topic}], "allow_auto_topic_creation": True})


def test_fetch_waits_for_min_bytes_then_answers_on_produce(broker: BrokerProcess) -> None:
    c, producer = WireClient(broker.bootstrap), WireClient(broker.bootstrap)
    _create(c, "parked")
    timer = threading.Timer(0.3, lambda: _produce(producer, "parked", 50))
    t0 = time.monotonic()
    timer.start()
    r = c.request(1, 11, _fetch_body("parked", 0, min_bytes=1000, max_wait_ms=10_000))
    elapsed = time.monotonic() - t0
    timer.join()
    part = r.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 50
    assert sum(h.records_count for h in iter_headers(part.records)) == 50
    assert 0.25 < elapsed < 5, "answered when the data arrived, not at max.wait.ms"


def test_fetch_returns_after_max_wait_when_not_enough_data(broker: BrokerProcess) -> None:
    c = WireClient(broker.bootstrap)
    _create(c, "slow")
    _produce(c, "slow", 1)
    t0 = time.monotonic()
    r = c.request(1, 11, _fetch_body("slow", 0, min_bytes=1 << 20, max_wait_ms=400))
    elapsed = time.monotonic() - t0
    assert elapsed >= 0.35
    assert sum(h.records_count for h in iter_headers(r.responses[0].partitions[0].records)) == 1


def test_partition_max_bytes_and_kip74(broker: BrokerProcess) -> None:
    c = WireClient(broker.bootstrap)
    _create(c, "sizes")
    for _ in range(10):
        _produce(c, "sizes", 10, value_size=1000)  # ~10 KB batches
    r = c.request(1, 11, _fetch_body("sizes", 0, partition_max_bytes=25_000))
    recs = r.responses[0].partitions[0].records
    assert 10_000 < len(recs) <= 25_000 and len(list(iter_headers(recs))) == 2  # whole batches only
    # A limit below one batch still returns that batch, so the consumer makes progress (KIP-74).
    r = c.request(1, 11, _fetch_body("sizes", 0, partition_max_bytes=100, max_bytes=100))
    assert len(list(iter_headers(r.responses[0].partitions[0].records))) == 1
    # Fetching from the middle of a batch returns the batch that holds the offset.
    r = c.request(1, 11, _fetch_body("sizes", 15, partition_max_bytes=100))
    assert [h.base_offset for h in iter_headers(r.responses[0].partitions[0].records)] == [10]


def test_out_of_range_and_unknown_partition(broker: BrokerProcess) -> None:
    c = WireClient(broker.bootstrap)
    _create(c, "range")
    _produce(c, "range", 5)
    part = c.request(1, 11, _fetch_body("range", 6)).responses[0].partitions[0]
    assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert part.high_watermark == 5 and part.log_start_offset == 0
    part = c.request(1, 11, _fetch_body("range", 5)).responses[0].partitions[0]
    assert part.error_code == 0 and len(part.records) == 0  # at the end: empty, not an error
    part = c.request(1, 11, _fetch_body("never-created", 0)).responses[0].partitions[0]
    assert part.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_acks_zero_gets_no_response(broker: BrokerProcess) -> None:
    c = WireClient(broker.bootstrap)
    _create(c, "acks0")
    batch = build_batch([Record(0, 1, None, b"fire-and-forget")])
    c.send(0, 9, {"transactional_id": None, "acks": 0, "timeout_ms": 5000,
                  "topic_data": [{"name": "acks0", "partition_data": [{"index": 0, "records": batch}]}]})
    # The next response on the connection is for the next request: nothing was sent for acks=0.
    r = c.request(1, 11, _fetch_body("acks0", 0))
    assert sum(h.records_count for h in iter_headers(r.responses[0].partitions[0].records)) == 1


def test_topic_compression_type_recompresses(broker: BrokerProcess) -> None:
    from gregor.protocol import compression
    from gregor.protocol.records import decode_records

    c = WireClient(broker.bootstrap)
    r = c.request(19, 5, {"topics": [{"name": "zstd-topic", "num_partitions": 1, "replication_factor": 1,
                                       "assignments": [], "configs": [{"name": "compression.type", "value": "zstd"}]}],
                          "timeout_ms": 5000, "validate_only": False})
    assert r.topics[0].error_code == 0
    batch = build_batch([Record(i, 1000 + i, b"k%d" % i, b"value-%d" % i) for i in range(30)], codec=compression.GZIP)
    _produce_raw = c.request(0, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": "zstd-topic", "partition_data": [{"index": 0, "records": batch}]}]})
    assert _produce_raw.responses[0].partition_responses[0].error_code == 0
    recs = c.request(1, 11, _fetch_body("zstd-topic", 0)).responses[0].partitions[0].records
    (h,) = list(iter_headers(recs))
    assert h.compression == compression.ZSTD  # stored in the topic's codec, not the producer's
    assert [(r.offset, r.timestamp, r.key, r.value) for r in decode_records(recs, h)] == \
        [(i, 1000 + i, b"k%d" % i, b"value-%d" % i) for i in range(30)]


def _fetch_topics(topics: list[tuple[str, list[int]]], *, max_bytes: int = 2**31 - 1,
                  partition_max_bytes: int = 1 << 20) -> dict[str, Any]:
    body = _fetch_body("x", 0, max_bytes=max_bytes)
    body["topics"] = [{"topic": t, "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "fetch_offset": o, "log_start_offset": -1,
         "partition_max_bytes": partition_max_bytes} for o in offsets]} for t, offsets in topics]
    return body


def test_partition_named_many_times_is_answered_once(broker: BrokerProcess) -> None:
    """Finding 7: a Fetch naming one partition N times got a response N times larger. Kafka
    reads a full fetch into a map keyed by partition: one answer, with the last entry's
    offset, where the first entry stood."""
    c = WireClient(broker.bootstrap)
    _create(c, "dup-a")
    _create(c, "dup-b")
    for _ in range(10):
        _produce(c, "dup-a", 10, value_size=1000)
    _produce(c, "dup-b", 3)
    r = c.request(1, 11, _fetch_topics([("dup-a", [0] * 499 + [25])]))
    assert [(t.topic, len(t.partitions)) for t in r.responses] == [("dup-a", 1)]
    recs = r.responses[0].partitions[0].records
    assert next(iter_headers(recs)).base_offset == 20, "the last entry's fetch offset wins"
    assert len(recs) < 100_000
    r = c.request(1, 11, _fetch_topics([("dup-a", [0]), ("dup-b", [0]), ("dup-a", [90])]))
    assert [(t.topic, [p.partition_index for p in t.partitions]) for t in r.responses] == [
        ("dup-a", [0]), ("dup-b", [0])]
    assert next(iter_headers(r.responses[0].partitions[0].records)).base_offset == 90


def test_broker_fetch_max_bytes_caps_responses(start_broker: Any) -> None:
    b = start_broker({"fetch.max.bytes": "30000"})
    c = WireClient(b.bootstrap)
    _create(c, "capped")
    for _ in range(10):
        _produce(c, "capped", 10, value_size=1000)  # ~10 KB batches
    r = c.request(1, 11, _fetch_body("capped", 0, max_bytes=1 << 30, partition_max_bytes=1 << 30))
    recs = r.responses[0].partitions[0].records
    assert 20_000 < len(recs) <= 30_000, "whole batches up to fetch.max.bytes, whatever the request asks"
    b2 = start_broker({"fetch.max.bytes": "1024"})
    c2 = WireClient(b2.bootstrap)
    _create(c2, "tiny")
    _produce(c2, "tiny", 10, value_size=1000)
    _produce(c2, "tiny", 10, value_size=1000)
    r = c2.request(1, 11, _fetch_body("tiny", 0, max_bytes=1 << 30))
    assert len(list(iter_headers(r.responses[0].partitions[0].records))) == 1, "one batch beyond the cap (KIP-74)"
