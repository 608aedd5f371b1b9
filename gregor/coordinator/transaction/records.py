"""The records of `__transaction_state`: one per transactional id, the latest state wins (compacted).

Layout as Kafka's (so its tools can read the topic): key = int16 version 0 then the transactional id;
value = int16 version 0 then producer id, producer epoch, transaction timeout, status (state.py's
numbers), the partitions by topic, last update and start timestamps. A null value is a tombstone
(the id expired).
"""

from __future__ import annotations

from gregor.coordinator.transaction.state import TransactionMetadata
from gregor.protocol.primitives import DecodeError, Reader, Writer
from gregor.protocol.schema import INT8, INT16, INT32, INT64, STRING, Array, Schema, f

KEY_VERSION = 0
VALUE_VERSION = 0

_KEY = Schema("TransactionLogKey", [f("transactional_id", STRING)], "0", "none")
_VALUE = Schema("TransactionLogValue", [
    f("producer_id", INT64),
    f("producer_epoch", INT16),
    f("transaction_timeout_ms", INT32),
    f("transaction_status", INT8),
    f("transaction_partitions", [
        f("topic", STRING),
        f("partition_ids", Array(INT32)),
    ], nullable="0+"),
    f("transaction_last_update_timestamp_ms", INT64),
    f("transaction_start_timestamp_ms", INT64),
], "0", "none")


def key(transactional_id: str) -> bytes:
    w = Writer()
    w.int16(KEY_VERSION)
    _KEY.encode(w, {"transactional_id": transactional_id}, KEY_VERSION)
    return w.getvalue()


def value(m: TransactionMetadata) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(m.partitions):
        by_topic.setdefault(t, []).append(p)
    w = Writer()
    w.int16(VALUE_VERSION)
    _VALUE.encode(w, {
        "producer_id": m.producer_id, "producer_epoch": m.producer_epoch, "transaction_timeout_ms": m.timeout_ms,
        "transaction_status": m.state,
        "transaction_partitions": [{"topic": t, "partition_ids": ps} for t, ps in by_topic.items()],
        "transaction_last_update_timestamp_ms": m.last_update_ms, "transaction_start_timestamp_ms": m.start_ms,
    }, VALUE_VERSION)
    return w.getvalue()


def decode_key(data: bytes) -> str:
    r = Reader(data)
    version = r.int16()
    if version != KEY_VERSION:
        raise DecodeError(f"unknown __transaction_state key version {version}")
    return str(_KEY.decode(r, version).transactional_id)


def decode_value(transactional_id: str, data: bytes) -> TransactionMetadata:
    r = Reader(data)
    version = r.int16()
    if version != VALUE_VERSION:
        raise DecodeError(f"unknown __transaction_state value version {version}")
    v = _VALUE.decode(r, version)
    parts = {(t.topic, p) for t in v.transaction_partitions or () for p in t.partition_ids}
    return TransactionMetadata(transactional_id, v.producer_id, v.producer_epoch, v.transaction_timeout_ms,
                               v.transaction_status, parts, v.transaction_start_timestamp_ms,
                               v.transaction_last_update_timestamp_ms)
