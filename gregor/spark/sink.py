"""The `gregor` sink: write a DataFrame's rows as records, with Spark's Kafka sink columns and rules.

Columns: `value` (required, string or binary; any type with `valueFormat` avro, a struct with json or
protobuf: encoded per batch into Confluent's wire format, see gregor.spark.typed), `key` (likewise), `headers`
(array<struct<key:string,value:binary>>), `topic` (string; the `topic` option overrides it) and
`partition` (int; null or absent lets the partitioner choose). Other columns are ignored.

Delivery is at least once by default, like Spark's Kafka sink: every task flushes its producer and
fails if any record was not acknowledged, and Spark retries failed tasks. The Arrow writer receives
columns, so the only per-row Python work left is the produce() call itself.

With the option `transactional` (true) delivery is exactly once: each task writes its share of a
micro-batch in one Kafka transaction whose transactional id is `transactionalIdPrefix` + the query id +
the task's partition, and commits, in the same transaction, a marker offset (batch id + 1) for the
group of that id. A replayed batch (a retried task, a query restarted from its checkpoint) first
reads the marker: a task whose share was committed writes nothing again; one whose earlier attempt
was left open is fenced by the new attempt's InitProducerId, which aborts it. Readers with
isolation.level=read_committed see each task's records once, when its transaction commits. (The
shares of one micro-batch commit task by task, not as one transaction: Kafka transactions belong to
one producer, and librdkafka cannot hand a transaction over to Spark's driver to commit.)
"""

from __future__ import annotations

import itertools
import logging
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from gregor.spark.errors import GregorOptionError, GregorSourceError
from gregor.spark.options import SinkOptions
from gregor.spark.typed import SinkColumns

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
log = logging.getLogger("gregor.spark.sink")

_POLL_EVERY = 10_000
_FLUSH_TIMEOUT_S = 120.0
# How long past its own timeout a send_offsets_to_transaction may run before the task gives up on its producer.
_STALL_GRACE_S = 10.0


@dataclass
class GregorCommitMessage(WriterCommitMessage):
    """What one task wrote (Spark hands these to commit(); we only report them)."""

    records: int


def validate_columns(schema: StructType, opts: SinkOptions, columns: SinkColumns | None = None) -> None:
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
    columns = columns or SinkColumns()
    columns.check(fields)
    for col in ("key", "value"):
        if getattr(columns, col) is not None:
            continue  # typed: encoded by its format (valueFormat / keyFormat)
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


def _make_producer(opts: SinkOptions, errors: list[str], **extra: Any) -> Any:
    from confluent_kafka import KafkaException, Producer

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}-{msg.partition()}: {err.str() if hasattr(err, 'str') else err}")

    try:
        return Producer({**producer_config(opts, on_delivery), **extra})
    except KafkaException as e:
        raise GregorOptionError(f"Invalid kafka.* producer setting: {e.args[0] if e.args else e}") from e


def write_batches(opts: SinkOptions, batches: Iterator[pa.RecordBatch], columns: SinkColumns | None = None) -> int:
    """Produce every row of `batches`, flush, and raise if any record was not delivered."""
    errors: list[str] = []
    producer = _make_producer(opts, errors)
    count = _produce_rows(producer, opts, batches, errors, columns)
    remaining = producer.flush(_FLUSH_TIMEOUT_S)
    if errors:
        raise GregorSourceError(f"{len(errors)} records were not delivered; first: {errors[0]}")
    if remaining:
        raise GregorSourceError(f"{remaining} records were still undelivered after {_FLUSH_TIMEOUT_S:.0f} s")
    return count


def _produce_rows(producer: Any, opts: SinkOptions, batches: Iterator[pa.RecordBatch], errors: list[str],
                  columns: SinkColumns | None = None) -> int:
    produce, poll = producer.produce, producer.poll
    count = 0
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        if columns is not None and not columns.plain:
            batch = columns.encode(batch)
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
    return count


def _first_topic(opts: SinkOptions, batch: pa.RecordBatch) -> str:
    if opts.topic is not None:
        return opts.topic
    topic = batch.column(batch.schema.names.index("topic"))[0].as_py()
    if topic is None:
        raise GregorSourceError("null topic present in the data. Use the topic option for setting a topic.")
    return str(topic)


@dataclass
class _TxnClients:
    """A task slot's transactional producer and marker reader, kept in the Python worker between
    micro-batches: InitProducerId (about 50 ms with librdkafka) is then paid once per slot, not per batch."""

    producer: Any
    consumer: Any
    errors: list[str]


# Per Python worker process, by transactional id; bounded (a batch write's ids are used once).
_TXN_CLIENTS: dict[str, _TxnClients] = {}
_MAX_TXN_CLIENTS = 16


def _txn_clients(opts: SinkOptions, txn_id: str) -> _TxnClients:
    from confluent_kafka import Consumer

    clients = _TXN_CLIENTS.pop(txn_id, None)
    if clients is None:
        errors: list[str] = []
        producer = _make_producer(opts, errors, **{"transactional.id": txn_id})
        producer.init_transactions(_FLUSH_TIMEOUT_S)  # fences (and aborts) an earlier attempt's transaction
        consumer = Consumer({**opts.kafka_params, "group.id": txn_id, "isolation.level": "read_committed",
                             "enable.auto.commit": False})
        clients = _TxnClients(producer, consumer, errors)
    _TXN_CLIENTS[txn_id] = clients  # most recently used last
    while len(_TXN_CLIENTS) > _MAX_TXN_CLIENTS:
        _drop_txn_clients(next(iter(_TXN_CLIENTS)))
    return clients


def _drop_txn_clients(txn_id: str) -> None:
    clients = _TXN_CLIENTS.pop(txn_id, None)
    if clients is not None:
        clients.consumer.close()


class TransactionStalled(GregorSourceError):
    """A transactional producer call did not return within its timeout (see _send_offsets)."""


def _send_offsets(producer: Any, offsets: list[Any], group_metadata: Any, timeout_s: float) -> None:
    """producer.send_offsets_to_transaction, bounded. librdkafka (2.10 to at least 2.16:
    confluentinc/librdkafka#5511 and #5456) can wait in it forever, past its timeout: when the broker it
    last used as the group's coordinator is killed and leaves the Metadata, that broker's handle is
    decommissioned, and the request waits for the old handle to connect, which it never does. The call runs
    in a thread; past `timeout_s` + _STALL_GRACE_S the task raises TransactionStalled and the producer is
    left to that thread (never reused: the next attempt's InitProducerId fences it and aborts its transaction)."""
    outcome: list[BaseException | None] = []
    done = threading.Event()

    def call() -> None:
        try:
            producer.send_offsets_to_transaction(offsets, group_metadata, timeout_s)
            outcome.append(None)
        except BaseException as e:  # handed to the task's thread below
            outcome.append(e)
        finally:
            done.set()

    threading.Thread(target=call, name="gregor-send-offsets", daemon=True).start()
    if not done.wait(timeout_s + _STALL_GRACE_S):
        raise TransactionStalled(f"send_offsets_to_transaction did not return within {timeout_s + _STALL_GRACE_S:.0f} s "
                                 "(librdkafka#5511: its group coordinator was decommissioned)")
    if outcome[0] is not None:
        raise outcome[0]


def _txn_api_timeout_s(opts: SinkOptions) -> float:
    """librdkafka caps a transactional call's timeout at transaction.timeout.ms (60 s by default)."""
    try:
        txn_timeout_s = int(opts.kafka_params.get("transaction.timeout.ms", 60_000)) / 1000.0
    except ValueError:
        txn_timeout_s = 60.0  # librdkafka has refused the value already, when the producer was made
    return min(_FLUSH_TIMEOUT_S, txn_timeout_s)


def write_transactional(opts: SinkOptions, batches: Iterator[pa.RecordBatch], query_id: str, batch_id: int,
                        task: int, columns: SinkColumns | None = None) -> int:
    """Exactly once (see the module docstring): this task's rows of micro-batch `batch_id` in one
    transaction, skipped if a previous attempt committed them. Returns the rows written (0 if skipped)."""
    from confluent_kafka import KafkaException, TopicPartition

    first = next((b for b in batches if b.num_rows), None)
    if first is None:
        return 0
    txn_id = f"{opts.transactional_id_prefix}{query_id}-{task}"
    marker = TopicPartition(_first_topic(opts, first), 0)
    for attempt in range(2):
        clients = _txn_clients(opts, txn_id)
        # The marker group's committed offset says which batch this task slot committed last. Read
        # committed (librdkafka then asks the broker for stable offsets: a commit under way is waited for).
        done = clients.consumer.committed([marker], timeout=_FLUSH_TIMEOUT_S)[0].offset
        if done > batch_id:
            return 0  # this task's share of the batch is in the log already
        try:
            clients.producer.begin_transaction()
            # The marker first: a producer kept from an earlier batch that another worker has fenced since
            # fails here, before any row is taken from `batches`, and is replaced.
            _send_offsets(clients.producer, [TopicPartition(marker.topic, 0, batch_id + 1)],
                          clients.consumer.consumer_group_metadata(), _txn_api_timeout_s(opts))
            break
        except (KafkaException, TransactionStalled) as e:
            if isinstance(e, TransactionStalled):
                log.warning("transaction %s of batch %d: %s; retrying with a new producer", txn_id, batch_id, e)
            _drop_txn_clients(txn_id)
            if attempt == 1:
                raise GregorSourceError(f"transaction {txn_id} of batch {batch_id} failed: {e.args[0] if e.args else e}"
                                        ) from e
    producer, errors = clients.producer, clients.errors
    errors.clear()
    try:
        count = _produce_rows(producer, opts, itertools.chain([first], batches), errors, columns)
        if errors:
            raise GregorSourceError(f"{len(errors)} records were not delivered; first: {errors[0]}")
        producer.commit_transaction(_FLUSH_TIMEOUT_S)
    except (KafkaException, GregorSourceError) as e:
        err = e.args[0] if e.args else e
        _drop_txn_clients(txn_id)
        if hasattr(err, "txn_requires_abort") and err.txn_requires_abort():
            producer.abort_transaction(_FLUSH_TIMEOUT_S)
        raise GregorSourceError(f"transaction {txn_id} of batch {batch_id} failed: {err}") from e
    if errors:
        raise GregorSourceError(f"{len(errors)} records were not delivered; first: {errors[0]}")
    return count


def _task_ids() -> tuple[str | None, int | None, int]:
    """(query id, batch id, partition) of the running task, from Spark's local properties."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        return None, None, 0
    qid = tc.getLocalProperty("sql.streaming.queryId")
    bid = tc.getLocalProperty("streaming.sql.batchId")
    return qid, int(bid) if bid is not None else None, tc.partitionId()


class GregorWriter(DataSourceArrowWriter):
    """`df.write.format("gregor")`."""

    def __init__(self, opts: SinkOptions, schema: StructType, columns: SinkColumns | None = None) -> None:
        self.columns = columns or SinkColumns()
        validate_columns(schema, opts, self.columns)
        self.opts = opts
        self.write_id = uuid.uuid4().hex  # a batch write's transactions are keyed by this job

    def write(self, iterator: Iterator[pa.RecordBatch]) -> GregorCommitMessage:
        if self.opts.transactional:
            _, _, task = _task_ids()
            return GregorCommitMessage(write_transactional(self.opts, iterator, self.write_id, 0, task, self.columns))
        return GregorCommitMessage(write_batches(self.opts, iterator, self.columns))


class GregorStreamWriter(DataSourceStreamArrowWriter):
    """`df.writeStream.format("gregor")`: each micro-batch is produced by its tasks; commit has
    nothing left to do (at least once as Spark's Kafka sink, or exactly once with `transactional`)."""

    def __init__(self, opts: SinkOptions, schema: StructType, columns: SinkColumns | None = None) -> None:
        self.columns = columns or SinkColumns()
        validate_columns(schema, opts, self.columns)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> GregorCommitMessage:
        if self.opts.transactional:
            query_id, batch_id, task = _task_ids()
            if query_id is None or batch_id is None:
                raise GregorSourceError("the transactional sink needs Spark's streaming query and batch ids")
            return GregorCommitMessage(write_transactional(self.opts, iterator, query_id, batch_id, task,
                                                           self.columns))
        return GregorCommitMessage(write_batches(self.opts, iterator, self.columns))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Records are already acknowledged by the broker when write() returns."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Produced records cannot be taken back; Spark re-runs the batch (at least once)."""
