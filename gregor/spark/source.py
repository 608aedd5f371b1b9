"""The `gregor` data source: batch and streaming readers planned on the driver, read on executors.

Planning follows Spark's Kafka source: the driver resolves the subscription and the starting/ending
offsets to exact ranges, and each range becomes a task. In streaming, each micro-batch's end offsets
come from latestOffset() and are written by Spark to its checkpoint before the batch runs, so a
restarted query replays exactly the ranges it had planned: nothing lost, nothing read twice. The
reader keeps no progress of its own, since Spark's commit() lags a batch and stop() may never be
called (measured on pyspark 4.3).

Readers are pickled to executors: driver-side clients are created lazily and dropped when pickled.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from gregor.spark.errors import GregorOptionError, log
from gregor.spark.fetch import freeze_worker_heap, read_range
from gregor.spark.metadata import KafkaMetadata
from gregor.spark.options import (
    SourceOptions,
    TopicPartitionKey,
    parse_sink_options,
    parse_source_options,
    parse_subscription,
    partition_offsets_from_json,
    partition_offsets_json,
)
from gregor.spark.ranges import OffsetRange, backlog, plan_ranges, rate_limit, split_ranges
from gregor.spark.reader_settings import reader_settings
from gregor.spark.schema import arrow_schema, source_schema
from gregor.spark.typed import SinkColumns, SourceColumns, wants_types

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType, StructType

    from gregor.spark.sink import GregorStreamWriter, GregorWriter


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """One task: one offset range (picklable; shipped to the executor that reads it)."""

    range: OffsetRange


class GregorDataSource(DataSource):
    """`format("gregor")`: Spark's Kafka source (read with gregor.client) and sink (written with confluent-kafka)."""

    @classmethod
    def name(cls) -> str:
        return "gregor"

    def schema(self) -> StructType:
        """The fixed Kafka schema. Source options are checked here too, because this is what Spark
        calls at `load()`: a bad option fails there, before any job is planned. Spark does not say
        here whether the read is batch or streaming, so only options wrong in both modes fail now;
        mode-specific ones (startingOffsets=latest in batch) fail when the query is planned."""
        if any(k.lower() in ("subscribe", "subscribepattern", "assign") for k in self.options):
            _validate_for_some_mode(self.options)
        return self._expected_schema(_include_headers(self.options))

    def _expected_schema(self, include_headers: bool) -> StructType:
        """The fixed Kafka schema, with typed key / value columns when the options ask for them. Their
        schemas are resolved here, once: Spark pickles this object after schema() and unpickles it to make
        the reader, which thus reads with the very schema the DataFrame was given."""
        base = source_schema(include_headers)
        if not wants_types(self.options):
            return base
        typed: tuple[SourceColumns, dict[str, DataType]] | None = getattr(self, "_typed", None)
        if typed is None:
            typed = self._typed = SourceColumns.resolve(self.options, parse_subscription(self.options))
        return typed[0].schema(base, typed[1])

    def _columns(self) -> SourceColumns:
        typed = getattr(self, "_typed", None)
        return typed[0] if typed is not None else SourceColumns()

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_source_options(self.options, streaming=False)
        _check_schema(schema, self._expected_schema(opts.include_headers))
        return GregorBatchReader(opts, schema, self._columns())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = parse_source_options(self.options, streaming=True)
        _check_schema(schema, self._expected_schema(opts.include_headers))
        return GregorStreamReader(opts, schema, self._columns())

    def writer(self, schema: StructType, overwrite: bool) -> GregorWriter:
        from gregor.spark.sink import GregorWriter

        if overwrite:
            raise GregorOptionError("Save mode Overwrite is not allowed for gregor: a topic is append-only. "
                                    "Use mode('append') (the default for the Kafka sink).")
        opts = parse_sink_options(self.options)
        return GregorWriter(opts, schema, SinkColumns.parse(self.options, opts.topic))

    def streamWriter(self, schema: StructType, overwrite: bool) -> GregorStreamWriter:
        from gregor.spark.sink import GregorStreamWriter

        opts = parse_sink_options(self.options)
        return GregorStreamWriter(opts, schema, SinkColumns.parse(self.options, opts.topic))


def _validate_for_some_mode(options: Any) -> None:
    """Raise the batch-mode error unless the options are valid for a streaming read."""
    try:
        parse_source_options(options, streaming=False)
    except GregorOptionError as batch_error:
        try:
            parse_source_options(options, streaming=True)
        except GregorOptionError:
            raise batch_error from None


def _include_headers(options: Any) -> bool:
    return str(options.get("includeheaders", "false")).strip().lower() == "true"


def _check_schema(schema: StructType, expected: StructType) -> None:
    if schema != expected:
        raise GregorOptionError("The gregor source has a fixed schema (set by includeHeaders, keyFormat, valueFormat and "
                                "mode) and cannot be given another one: "
                                f"expected {expected.simpleString()}, got {schema.simpleString()}")


class _Planner:
    """Shared state of both readers: options, reader settings, a lazily made metadata client (driver only)."""

    def __init__(self, opts: SourceOptions, schema: StructType, columns: SourceColumns | None = None) -> None:
        self.opts = opts
        self.schema = schema
        self.columns = columns or SourceColumns()
        # Made here, on the driver, so that a bad kafka.* setting fails the query as it is planned.
        self.driver_settings = reader_settings(opts.kafka_params)
        self.read_settings = reader_settings(opts.kafka_params, opts.poll_timeout_ms)
        self._metadata: KafkaMetadata | None = None
        self._arrow: pa.Schema | None = None
        self._read_arrow: pa.Schema | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_metadata"] = None  # a live client cannot be pickled; executors never need it
        state["_arrow"] = None
        state["_read_arrow"] = None
        return state

    @property
    def metadata(self) -> KafkaMetadata:
        if self._metadata is None:
            self._metadata = KafkaMetadata(self.driver_settings, retries=self.opts.fetch_offset_num_retries,
                                           retry_interval_ms=self.opts.fetch_offset_retry_interval_ms)
        return self._metadata

    def close_metadata(self) -> None:
        if self._metadata is not None:
            self._metadata.close()
            self._metadata = None

    def current_partitions(self, *, at_start: bool) -> set[TopicPartitionKey]:
        """What the subscription covers now. Topics it names that do not exist fail the query when
        failOnDataLoss is true (at the start: a misspelt name), else they are read once they appear."""
        found, missing = self.metadata.partitions(self.opts.subscription)
        if missing and at_start:
            what = "Topic-partitions" if self.opts.subscription.kind == "assign" else "Topics"
            msg = (f"{what} {', '.join(missing)} of {self.opts.subscription.describe()} do not exist on "
                   f"{self.metadata.bootstrap}")
            if self.opts.fail_on_data_loss:
                raise GregorOptionError(msg + ". Check the names or create the topics first; with "
                                        "failOnDataLoss=false they are treated as empty (a streaming query "
                                        "picks them up when they appear).")
            log.warning("%s: reading them as empty (failOnDataLoss=false)", msg)
        return found

    def ranges_to_partitions(self, ranges: list[OffsetRange]) -> list[InputPartition]:
        pieces = split_ranges(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
        return [KafkaInputPartition(r) for r in pieces]

    def read_partition(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KafkaInputPartition):  # Spark's placeholder for "no partitions"
            return iter(())
        if self._arrow is None or self._read_arrow is None:
            self._arrow = arrow_schema(self.schema)
            self._read_arrow = self._arrow if self.columns.plain else arrow_schema(source_schema(self.opts.include_headers))
        freeze_worker_heap()
        batches = read_range(self.read_settings, partition.range, self._read_arrow,
                             fail_on_data_loss=self.opts.fail_on_data_loss)
        if self.columns.plain:
            return batches
        columns, out = self.columns, self._arrow
        return (columns.decode(b, out) for b in batches)


class GregorBatchReader(_Planner, DataSourceReader):
    """`spark.read.format("gregor")`: startingOffsets..endingOffsets, fixed at planning time."""

    def partitions(self) -> list[InputPartition]:
        try:
            tps = self.current_partitions(at_start=True)
            opts = self.opts
            start = self.metadata.resolve(opts.starting, tps, which="starting",
                                          timestamp_strategy=opts.starting_timestamp_strategy,
                                          fail_on_data_loss=opts.fail_on_data_loss)
            end = self.metadata.resolve(opts.ending, tps, which="ending", fail_on_data_loss=opts.fail_on_data_loss)
        finally:
            self.close_metadata()
        ranges = []
        for tp in sorted(tps):
            if end[tp] < start[tp]:
                raise GregorOptionError(f"Beginning offset {start[tp]} is after the ending offset {end[tp]} for "
                                        f"{tp[0]}-{tp[1]}: the starting and ending options contradict each other")
            ranges.append(OffsetRange(tp[0], tp[1], start[tp], end[tp]))
        return self.ranges_to_partitions(ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.read_partition(partition)


class GregorStreamReader(_Planner, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("gregor")`: micro-batches of exact offset ranges.

    Offsets are Spark's Kafka JSON ({"topic": {"0": 42}}), so checkpoints read like the Kafka
    source's. Partitions that appear mid-query (new partitions, new topics matching a pattern) are
    read from their earliest offset.
    """

    def __init__(self, opts: SourceOptions, schema: StructType, columns: SourceColumns | None = None) -> None:
        super().__init__(opts, schema, columns)
        self._available_now: dict[TopicPartitionKey, int] | None = None
        self._latest_seen: dict[TopicPartitionKey, int] | None = None
        self._last_trigger_ms = 0.0

    def initialOffset(self) -> dict:
        tps = self.current_partitions(at_start=True)
        opts = self.opts
        start = self.metadata.resolve(opts.starting, tps, which="starting",
                                      timestamp_strategy=opts.starting_timestamp_strategy,
                                      fail_on_data_loss=opts.fail_on_data_loss)
        return partition_offsets_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: fix the end of the query to the offsets that exist right now."""
        tps = self.current_partitions(at_start=False)
        self._available_now = self.metadata.latest(tps)

    def _latest(self) -> dict[TopicPartitionKey, int]:
        if self._available_now is not None:
            return dict(self._available_now)
        tps = self.current_partitions(at_start=False)
        return self.metadata.latest(tps)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = partition_offsets_from_json(start)
        latest = self._latest()
        self._latest_seen = latest
        if isinstance(limit, ReadAllAvailable):
            return partition_offsets_json(latest)
        # The minimum applies with the default limit (processing-time triggers), not when Spark
        # asks for everything; it is read from the options as the Python API has no composite limit.
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else self.opts.min_offsets_per_trigger
        if min_rows is not None and self._available_now is None and self._delay_batch(min_rows, begin, latest):
            return start
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(limit.max_rows, begin, latest, self.metadata.earliest)
            return partition_offsets_json(end)
        return partition_offsets_json(latest)

    def _delay_batch(self, min_rows: int, begin: dict[TopicPartitionKey, int],
                     latest: dict[TopicPartitionKey, int]) -> bool:
        """minOffsetsPerTrigger: wait for enough new records, but never longer than maxTriggerDelay."""
        now_ms = time.time() * 1000
        if now_ms - self._last_trigger_ms >= self.opts.max_trigger_delay_ms:
            self._last_trigger_ms = now_ms
            return False
        if backlog(begin, latest) < min_rows:
            return True
        self._last_trigger_ms = now_ms
        return False

    def reportLatestOffset(self) -> dict | None:
        return partition_offsets_json(self._latest_seen) if self._latest_seen is not None else None

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin = partition_offsets_from_json(start)
        until = partition_offsets_from_json(end)
        if begin == until:
            return []
        ranges = plan_ranges(begin, until, self.metadata.earliest, self.opts.fail_on_data_loss)
        return self.ranges_to_partitions(ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.read_partition(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: Spark's checkpoint, not the broker, records the query's progress."""

    def stop(self) -> None:
        self.close_metadata()


__all__ = ["GregorDataSource", "GregorBatchReader", "GregorStreamReader", "KafkaInputPartition"]
