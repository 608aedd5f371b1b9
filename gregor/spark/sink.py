"""The `gregor` sink: write a DataFrame's rows as records, with Spark's Kafka sink columns and rules.

Columns: `value` (required, string or binary), `key` (string or binary), `headers`
(array<struct<key:string,value:binary>>), `topic` (string; the `topic` option overrides it) and
`partition` (int; null or absent lets the partitioner choose). Other columns are ignored.

Delivery is at least once, like Spark's Kafka sink: every task flushes its producer and fails if
any record was not acknowledged, and Spark retries failed tasks. The Arrow writer receives columns,
so the only per-row Python work left is the produce() call itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from gregor.spark.errors import GregorOptionError, GregorSourceError
from gregor.spark.options import SinkOptions

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

_PRODUCER_DEFAULTS: dict[str, Any] = {
    # Kafka's Java default partitioner hashes keys with murmur2; so does Spark's Kafka sink. Keep
    # the same key -> partition mapping (librdkafka's own default is CRC32-based).
    "partitioner": "murmur2_random",
    "linger.ms": 5,
    "queue.buffering.max.messages": 500_000,
    "queue.buffering.max.kbytes": 256 * 1024,
}
_POLL_EVERY = 10_000
_FLUSH_TIMEOUT_S = 120.0


@dataclass
class GregorCommitMessage(WriterCommitMessage):
    """What one task wrote (Spark hands these to commit(); we only report them)."""

    records: int


def validate_columns(schema: StructType, opts: SinkOptions) -> None:
    """Spark's KafkaWriter.validateQuery: fail before any task starts, naming the column."""
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

    fields = {f.name: f.dataType for f in schema.fields}
    if opts.topic is None:
        if "topic" not in fields:
            raise GregorOptionError("topic option required when no 'topic' attribute is present. "
                                    "Use the topic option for setting a topic.")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise GregorOptionError(f"Topic type must be a string, got {fields['topic'].simpleString()}")
    if "value" not in fields:
        raise GregorOptionError("Required attribute 'value' not found")
    for col in ("key", "value"):
        if col in fields and not isinstance(fields[col], (StringType, BinaryType)):
            raise GregorOptionError(f"{col} attribute type must be a string or binary, "
                                    f"got {fields[col].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise GregorOptionError(f"partition attribute type must be an int, got {fields['partition'].simpleString()}")
    if "headers" in fields:
        t = fields["headers"]
        ok = (isinstance(t, ArrayType) and isinstance(t.elementType, StructType)
              and [f.name for f in t.elementType.fields] == ["key", "value"]
              and isinstance(t.elementType.fields[0].dataType, StringType)
              and isinstance(t.elementType.fields[1].dataType, BinaryType))
        if not ok:
            raise GregorOptionError("headers attribute type must be array<struct<key:string,value:binary>>, "
                                    f"got {t.simpleString()}")


def producer_config(opts: SinkOptions, on_delivery: Any) -> dict[str, Any]:
    conf: dict[str, Any] = dict(_PRODUCER_DEFAULTS)
    conf.update(opts.kafka_params)
    conf.update({"on_delivery": on_delivery, "delivery.report.only.error": True})
    return conf


def write_batches(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """Produce every row of `batches`, flush, and raise if any record was not delivered."""
    from confluent_kafka import KafkaException, Producer

    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}-{msg.partition()}: {err.str() if hasattr(err, 'str') else err}")

    try:
        producer = Producer(producer_config(opts, on_delivery))
    except KafkaException as e:
        raise GregorOptionError(f"Invalid kafka.* producer setting: {e.args[0] if e.args else e}") from e
    produce, poll = producer.produce, producer.poll
    count = 0
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        names = batch.schema.names
        values = batch.column(names.index("value")).to_pylist()
        keys = batch.column(names.index("key")).to_pylist() if "key" in names else repeat(None, n)
        if opts.topic is not None:
            topics: Any = repeat(opts.topic, n)
        else:
            topics = batch.column(names.index("topic")).to_pylist()
            if None in topics:
                raise GregorSourceError("null topic present in the data. Use the topic option for setting a topic.")
        parts: Any = repeat(-1, n)
        if "partition" in names:
            parts = [-1 if p is None else p for p in batch.column(names.index("partition")).to_pylist()]
        headers: Any = repeat(None, n)
        if "headers" in names:
            headers = [None if h is None else [(kv["key"], kv["value"]) for kv in h]
                       for h in batch.column(names.index("headers")).to_pylist()]
        for topic, value, key, part, hdrs in zip(topics, values, keys, parts, headers, strict=True):
            try:
                produce(topic, value, key, part, headers=hdrs)
            except BufferError:  # local queue full: let deliveries drain, then retry once more
                poll(0.1)
                produce(topic, value, key, part, headers=hdrs)
            count += 1
            if count % _POLL_EVERY == 0:
                poll(0)
        if errors:
            break
    remaining = producer.flush(_FLUSH_TIMEOUT_S)
    if errors:
        raise GregorSourceError(f"{len(errors)} records were not delivered; first: {errors[0]}")
    if remaining:
        raise GregorSourceError(f"{remaining} records were still undelivered after {_FLUSH_TIMEOUT_S:.0f} s")
    return count


class GregorWriter(DataSourceArrowWriter):
    """`df.write.format("gregor")`."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        validate_columns(schema, opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> GregorCommitMessage:
        return GregorCommitMessage(write_batches(self.opts, iterator))


class GregorStreamWriter(DataSourceStreamArrowWriter):
    """`df.writeStream.format("gregor")`: each micro-batch is produced by its tasks; commit has
    nothing left to do (at-least-once, as Spark's Kafka sink)."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        validate_columns(schema, opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> GregorCommitMessage:
        return GregorCommitMessage(write_batches(self.opts, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Records are already acknowledged by the broker when write() returns."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Produced records cannot be taken back; Spark re-runs the batch (at least once)."""
