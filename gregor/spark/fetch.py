"""Executor side of the source: read exactly one offset range of one partition as Arrow batches.

This is the hot path. librdkafka fetches and decodes in its own threads; Python only gathers each
column with one C-level map over the messages and hands Arrow contiguous columns, which Spark takes
without per-row conversion (about 5x the rows/s of yielding tuples on this machine).

Each task makes its own Consumer, assigns the one partition at the range's first offset and stops at
its last: the consumer never subscribes, joins a group or commits, because Spark's checkpoint holds
the offsets. Ranges are exact, so a retried task reads the very same records.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from gregor.spark.errors import GregorSourceError, report_data_loss
from gregor.spark.metadata import consumer_config, leader_moving, make_consumer
from gregor.spark.ranges import OffsetRange

if TYPE_CHECKING:
    import pyarrow as pa

# Records per Arrow batch: large enough that per-batch costs vanish, small enough to stay a few MB.
BATCH_RECORDS = 32_768

# librdkafka's default fetch.queue.backoff.ms (1 s) stops fetching for a whole second whenever the
# local queue passes queued.min.messages, which a reader draining it in large gulps (as we do) hits
# all the time. Its other fetch defaults measured best here (a larger max.partition.fetch.bytes was
# slower: more page faults on the bigger buffers).
_EXECUTOR_DEFAULTS: dict[str, Any] = {
    "fetch.queue.backoff.ms": 1,
}

_EOF = -191  # KafkaError._PARTITION_EOF
_OFFSET_RESET = (-140, 1)  # KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE


def executor_consumer_config(params: Mapping[str, str], group_id: str) -> dict[str, Any]:
    conf = consumer_config(params, group_id + "-executor", **_EXECUTOR_DEFAULTS)
    # Owned by the connector: report the end of the log, and never jump silently past lost data.
    conf.update({"enable.partition.eof": True, "auto.offset.reset": "error"})
    return conf


def read_range(params: Mapping[str, str], group_id: str, rng: OffsetRange, schema: pa.Schema, *,
               include_headers: bool, fail_on_data_loss: bool, poll_timeout_ms: int) -> Iterator[pa.RecordBatch]:
    """Yield the records of `rng` in offset order as Arrow batches of `schema`."""
    from confluent_kafka import TopicPartition

    consumer = make_consumer(executor_consumer_config(params, group_id))
    try:
        tp = TopicPartition(rng.topic, rng.partition)
        low, high = _watermarks(consumer, tp, poll_timeout_ms)
        start, until = rng.from_offset, rng.until_offset
        if start < low:
            report_data_loss(fail_on_data_loss, f"Cannot fetch offset {start} of {rng.topic}-{rng.partition}: "
                                                f"the earliest available offset is {low}")
            start = low
        if until > high:
            report_data_loss(fail_on_data_loss, f"Cannot fetch offsets up to {until} of {rng.topic}-{rng.partition}:"
                                                f" the latest offset is {high}")
            until = high
        if start >= until:
            return
        consumer.assign([TopicPartition(rng.topic, rng.partition, start)])
        yield from _consume(consumer, rng, start, until, schema, include_headers, fail_on_data_loss,
                            poll_timeout_ms)
    finally:
        consumer.close()


# Between two watermark lookups while the partition's leader is moving.
_LEADER_WAIT_S = 0.2


def _watermarks(consumer: Any, tp: Any, poll_timeout_ms: int) -> tuple[int, int]:
    """The partition's (low, high) offsets from its leader. While a dead leader's partition moves to a
    new one the lookup fails with a transport or leader error: it is asked again until the new leader
    answers, within kafkaConsumer.pollTimeoutMs (Spark's Kafka consumer retries its lookups likewise;
    local mode gives a failed task no second attempt)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + poll_timeout_ms / 1000.0
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=max(deadline - time.monotonic(), 0.1),
                                                       cached=False)
            return int(low), int(high)
        except KafkaException as e:
            if not e.args or not leader_moving(e.args[0]) or time.monotonic() + _LEADER_WAIT_S >= deadline:
                raise
        time.sleep(_LEADER_WAIT_S)


def _consume(consumer: Any, rng: OffsetRange, start: int, until: int, schema: pa.Schema, include_headers: bool,
             fail_on_data_loss: bool, poll_timeout_ms: int) -> Iterator[pa.RecordBatch]:
    """The consume loop. Each step runs with the cyclic GC paused: Message objects are GC-tracked,
    and collections triggered while tens of thousands of them are alive cost more than the reading
    itself (one reader went from 0.6M to 1.6M records/s here). They hold no reference cycles, so
    reference counting frees them as soon as a step ends."""
    next_offset = start
    quiet_since = time.monotonic()
    while next_offset < until:
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            batch, next_offset, done, idle = _step(consumer, rng, next_offset, until, schema, include_headers,
                                                   fail_on_data_loss, poll_timeout_ms)
        finally:
            if gc_was_enabled:
                gc.enable()
        if batch is not None:
            yield batch
        if done:
            return
        if not idle:
            quiet_since = time.monotonic()
        elif (time.monotonic() - quiet_since) * 1000 > poll_timeout_ms:
            raise GregorSourceError(f"Cannot fetch offset {next_offset} of {rng.topic}-{rng.partition} "
                                    f"in {poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs)")


def _step(consumer: Any, rng: OffsetRange, next_offset: int, until: int, schema: pa.Schema, include_headers: bool,
          fail_on_data_loss: bool, poll_timeout_ms: int) -> tuple[pa.RecordBatch | None, int, bool, bool]:
    """One consume() call: (batch or None, next offset to read, whether the range is done, whether
    nothing arrived)."""
    from confluent_kafka import Message, TopicPartition

    msgs = consumer.consume(min(BATCH_RECORDS, until - next_offset), 0.5)
    if not msgs:
        return None, next_offset, False, True
    done = False
    if any(map(Message.error, msgs)):
        good = []
        for m in msgs:
            err = m.error()
            if err is None:
                good.append(m)
            elif err.code() == _EOF:
                # The fetch position reached the high watermark, which was >= `until` when we
                # started: everything below `until` has been seen (what is missing were gaps left by
                # compaction or transaction markers), unless the log was truncated under us.
                if m.offset() < until:
                    report_data_loss(fail_on_data_loss, f"{rng.topic}-{rng.partition} ends at {m.offset()}, "
                                                        f"before the planned end {until}")
                done = True
            elif err.code() in _OFFSET_RESET:
                low, _ = _watermarks(consumer, TopicPartition(rng.topic, rng.partition), poll_timeout_ms)
                report_data_loss(fail_on_data_loss, f"Offsets of {rng.topic}-{rng.partition} from "
                                                    f"{next_offset} were deleted while reading; resuming at {low}")
                if low >= until:
                    return None, next_offset, True, False
                consumer.assign([TopicPartition(rng.topic, rng.partition, low)])
                next_offset = low
            elif not leader_moving(err):
                raise GregorSourceError(f"Reading {rng.topic}-{rng.partition} at offset {next_offset} failed: {err}")
            # else: the leader died or moved; librdkafka finds the new one and fetches on from the same
            # position. If it does not within kafkaConsumer.pollTimeoutMs, the read fails as idle.
        msgs = good
        if not msgs and not done:
            return None, next_offset, False, True
    if msgs and msgs[-1].offset() >= until:
        msgs = [m for m in msgs if m.offset() < until]
        done = True
    if not msgs:
        return None, next_offset, done, False
    batch = messages_to_batch(msgs, rng.topic, rng.partition, schema, include_headers)
    return batch, msgs[-1].offset() + 1, done, False


def messages_to_batch(msgs: list[Any], topic: str, partition: int, schema: pa.Schema,
                      include_headers: bool) -> pa.RecordBatch:
    """Columns of a list of confluent-kafka Messages of one partition, as one Arrow batch.

    Every column is built by a C-level map over the messages (about 25 ns per record and column);
    offsets and the constant topic/partition columns skip Python objects altogether.
    """
    import numpy as np
    import pyarrow as pa
    from confluent_kafka import Message

    n = len(msgs)
    first, last = msgs[0].offset(), msgs[-1].offset()
    if last - first == n - 1:  # no gaps: offsets are a range
        offsets = pa.array(np.arange(first, last + 1, dtype=np.int64))
    else:
        offsets = pa.array(list(map(Message.offset, msgs)), pa.int64())
    stamps = list(map(Message.timestamp, msgs))  # (type, ms) pairs
    ts_ms = np.fromiter((s[1] for s in stamps), dtype=np.int64, count=n)
    # confluent-kafka: 0 none, 1 create time, 2 log append time; Kafka/Spark: -1, 0, 1.
    ts_type = np.fromiter((s[0] for s in stamps), dtype=np.int32, count=n) - 1
    columns = [
        pa.array(list(map(Message.key, msgs)), pa.binary()),
        pa.array(list(map(Message.value, msgs)), pa.binary()),
        _repeat_string(topic, n),
        pa.array(np.full(n, partition, dtype=np.int32)),
        offsets,
        pa.array(ts_ms * 1000, pa.timestamp("us", tz="UTC")),
        pa.array(ts_type),
    ]
    if include_headers:
        columns.append(pa.array(list(map(Message.headers, msgs)), schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _repeat_string(s: str, n: int) -> pa.Array:
    """A string column holding `s` n times, built from buffers rather than n Python strings."""
    import numpy as np
    import pyarrow as pa

    b = s.encode("utf-8")
    offsets = np.arange(0, (n + 1) * len(b), len(b), dtype=np.int32) if b else np.zeros(n + 1, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(b * n)])
