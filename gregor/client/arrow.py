"""Read a topic's partitions between two offsets or times into Apache Arrow: `read_arrow` for a pyarrow.Table,
`read_arrow_batches` / `ArrowReader` for a stream of RecordBatches in bounded memory.

    import gregor.client as gc

    table = gc.read_arrow("localhost:9092", "events")                      # everything there is now
    table = gc.read_arrow("localhost:9092", "events", partitions=[0, 1],
                          start={0: 1000, 1: "earliest"}, end="latest")
    table = gc.read_arrow("localhost:9092", "events",
                          start=datetime(2026, 11, 1, tzinfo=timezone.utc), end=gc.ByTimestamp(1762000000000))

pandas:  df = table.to_pandas()                (types_mapper=pd.ArrowDtype keeps the Arrow types)
Polars:  df = polars.from_arrow(table)
         for batch in gc.read_arrow_batches("localhost:9092", "events"):   # bounded memory
             part = polars.from_arrow(batch)
DuckDB:  tbl = gc.read_arrow("localhost:9092", "events")
         duckdb.sql("select key, count(*) from tbl group by key")          # finds the local `tbl`
         rbr = gc.ArrowReader("localhost:9092", "events", start=1000).to_reader()
         duckdb.sql('select count(*), max("offset") from rbr')             # streams; quote "offset"

Settings are librdkafka's (gregor.client.reader_config lists them all): pass `config={"security.protocol":
"sasl_ssl", ...}` or keywords with underscores for dots (`fetch_max_bytes=8 << 20`). Offsets: an int
(an offset; -2 and -1 also mean earliest and latest, as in Spark's JSON offsets), "earliest", "latest"
(the high watermark, or the last stable offset under isolation.level=read_committed), a datetime or
`ByTimestamp(ms)` (the first offset whose timestamp is at least that time, or the end if none is), or a
dict of those by partition. A range [start, end) returns exactly the records with start <= offset < end;
offsets missing from it (compaction, transaction markers, aborted transactions under read_committed)
are simply absent. A start below the log start (deleted data) or an end past the end of the log fails
with OffsetOutOfRangeError.

It speaks only the Kafka protocol (Metadata, ListOffsets, Fetch v4-12), so it reads Kafka brokers as
well as Gregor's.

Memory: a read holds at most two Fetch responses per broker (one decoded, one arriving: see
queued.max.messages.kbytes) and the RecordBatches being built (arrow.batch.max.records / .bytes). The
column buffers of tables a process has dropped are kept for reuse by its next reads, up to
`gregor.client.buffer_pool_bytes()` (an eighth of the machine's memory, at most 1 GiB; the kernel may
take them back whenever it needs the memory): writing into memory already mapped saves the page faults
that otherwise cost a fresh read much of its time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gregor.client.arrow_columns import ArrowLayout, import_pyarrow, record_batch
from gregor.client.cluster import EARLIEST, LATEST, Cluster
from gregor.client.decoder import Decoder
from gregor.client.decompress import Decompressor
from gregor.client.errors import OffsetOutOfRangeError
from gregor.client.fetcher import Cursor, Fetcher, FetchStats
from gregor.client.reader_config import ReaderConfig

if TYPE_CHECKING:
    import pyarrow as pa


# Splitting a partition's range pays only for long ranges: each sub-range costs a connection.
MIN_SUBRANGE_OFFSETS = 100_000


@dataclass(frozen=True)
class ByTimestamp:
    """An offset given by time: the first record whose timestamp is at least `ms` (epoch milliseconds)."""

    ms: int


Position = int | str | dt.datetime | ByTimestamp
PositionSpec = Position | Mapping[int, Position]


def _timestamp_ms(t: dt.datetime) -> int:
    if t.tzinfo is None:
        raise ValueError(f"the datetime {t} has no time zone: give one (e.g. tzinfo=timezone.utc)")
    return int(t.timestamp() * 1000)


def _query(spec: Position, what: str) -> tuple[int | None, int | None]:
    """(offset given, or None) and (the ListOffsets timestamp to ask, or None)."""
    if isinstance(spec, bool):
        raise TypeError(f"{what}: {spec!r} is not an offset")
    if isinstance(spec, int):
        if spec == -2:
            return None, EARLIEST
        if spec == -1:
            return None, LATEST
        if spec < 0:
            raise ValueError(f"{what}: offset {spec} is negative (-2 earliest and -1 latest are the only ones)")
        return spec, None
    if isinstance(spec, str):
        if spec.lower() == "earliest":
            return None, EARLIEST
        if spec.lower() == "latest":
            return None, LATEST
        raise ValueError(f"{what}: {spec!r} is neither 'earliest' nor 'latest'")
    if isinstance(spec, ByTimestamp):
        if spec.ms < 0:
            raise ValueError(f"{what}: timestamp {spec.ms} is negative")
        return None, spec.ms
    if isinstance(spec, dt.datetime):
        return None, _timestamp_ms(spec)
    raise TypeError(f"{what}: {spec!r} is not an offset, 'earliest', 'latest', a datetime or ByTimestamp")


class ArrowReader:
    """One read: the ranges are planned when it is made (Metadata, ListOffsets), the records fetched while
    it is iterated. Iterate it for RecordBatches (each holds rows of one partition, in offset order), or
    call read_all(). Close it (or use it as a context manager) to close its connections early.

    With fetch.partition.ranges > 1, long partition ranges are read as sub-ranges in parallel: read_all()
    puts the rows back in order; iterated, a partition's batches come from its sub-ranges in turn (each
    batch in offset order)."""

    def __init__(self, bootstrap: str | None, topic: str, partitions: Sequence[int] | None = None,
                 start: PositionSpec = "earliest", end: PositionSpec = "latest", *,
                 columns: Sequence[str] | None = None, schema: pa.Schema | None = None,
                 config: Mapping[str, Any] | None = None, **options: Any) -> None:
        settings = dict(config or {})
        settings.update(options)
        if bootstrap is not None:
            settings["bootstrap.servers"] = bootstrap
        self.cfg = ReaderConfig.parse(settings)
        import_pyarrow()
        kw: dict[str, Any] = {"timestamp_unit": self.cfg.arrow_timestamp_unit,
                              "timezone": self.cfg.arrow_timestamp_timezone, "schema": schema}
        if columns is not None:
            kw["columns"] = tuple(columns)
        self.layout = ArrowLayout(**kw)
        self.schema = self.layout.arrow_schema()
        self.topic = topic
        self.cluster = Cluster(self.cfg)
        try:
            self.ranges = self._plan(partitions, start, end)
        except BaseException:
            self.cluster.close()
            raise
        self._fetcher: Fetcher | None = None

    def _plan(self, partitions: Sequence[int] | None, start: PositionSpec, end: PositionSpec) -> dict[int, tuple[int, int]]:
        """partition -> [start, end) offsets, checked against the log's bounds."""
        if partitions is None:
            given = start if isinstance(start, Mapping) else end if isinstance(end, Mapping) else None
            partitions = sorted(given) if given is not None else sorted(self.cluster.partitions(self.topic))
        parts = [int(p) for p in partitions]
        if len(set(parts)) != len(parts):
            raise ValueError(f"partitions {parts} name one more than once")

        committed = self.cfg.read_committed
        earliest = self.cluster.list_offsets(self.topic, {p: EARLIEST for p in parts}, committed)
        latest = self.cluster.list_offsets(self.topic, {p: LATEST for p in parts}, committed)

        def resolve(s: PositionSpec, default: str, what: str) -> dict[int, int]:
            queries = {p: _query(s.get(p, default) if isinstance(s, Mapping) else s, f"{what} of partition {p}")
                       for p in parts}
            out = {p: offset for p, (offset, _) in queries.items() if offset is not None}
            out.update({p: earliest[p] if ts == EARLIEST else latest[p]
                        for p, (_, ts) in queries.items() if ts in (EARLIEST, LATEST)})
            by_time = {p: ts for p, (_, ts) in queries.items() if ts is not None and ts >= 0}
            if by_time:
                found = self.cluster.list_offsets(self.topic, by_time, committed)
                out.update({p: off if off >= 0 else latest[p] for p, off in found.items()})
            return out

        starts, ends = resolve(start, "earliest", "start"), resolve(end, "latest", "end")
        what = "last stable offset" if committed else "high watermark"
        ranges: dict[int, tuple[int, int]] = {}
        for p in parts:
            lo, hi = starts[p], ends[p]
            if lo < earliest[p]:
                raise OffsetOutOfRangeError(self.topic, p, lo, earliest[p], latest[p], "start offset")
            if hi > latest[p]:
                raise OffsetOutOfRangeError(self.topic, p, hi, earliest[p], latest[p], f"end offset (past the {what})")
            ranges[p] = (lo, max(lo, hi))
        return ranges

    def _cursors(self, ranges_per_partition: int) -> list[Cursor]:
        """A cursor per partition, or per sub-range of at least MIN_SUBRANGE_OFFSETS offsets."""
        flags = self.layout.decoder_flags()
        cursors = []
        for p, (lo, hi) in self.ranges.items():
            k = max(1, min(ranges_per_partition, (hi - lo) // MIN_SUBRANGE_OFFSETS))
            bounds = [lo + (hi - lo) * i // k for i in range(k)] + [hi]
            for lane in range(k):
                d = Decoder(check_crcs=self.cfg.check_crcs, read_committed=self.cfg.read_committed, **flags)
                d.set_range(bounds[lane], bounds[lane + 1])
                cursors.append(Cursor(self.topic, p, bounds[lane], bounds[lane + 1], d, lane=lane))
        return cursors

    def _batches(self, ranges_per_partition: int) -> Iterator[tuple[Cursor, pa.RecordBatch]]:
        if self._fetcher is not None:
            raise RuntimeError("an ArrowReader is read once")
        self._fetcher = Fetcher(self.cluster, self.cfg, self._cursors(ranges_per_partition),
                                Decompressor(self.cfg.batch_decompressed_max_bytes))
        try:
            for cursor, taken in self._fetcher.run():
                yield cursor, record_batch(self.layout, self.schema, self.topic, cursor.partition, taken)
        finally:
            self.close()

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for _, batch in self._batches(self.cfg.fetch_partition_ranges):
            yield batch

    def read_all(self) -> pa.Table:
        """Every row as one Table, partition after partition, each in offset order."""
        pa = import_pyarrow()
        parts: dict[tuple[int, int], list[pa.RecordBatch]] = {}
        for cursor, batch in self._batches(self.cfg.fetch_partition_ranges):
            parts.setdefault((cursor.partition, cursor.lane), []).append(batch)
        return pa.Table.from_batches([b for key in sorted(parts) for b in parts[key]], schema=self.schema)

    def to_reader(self) -> pa.RecordBatchReader:
        """A pyarrow.RecordBatchReader over the batches (what DuckDB and Polars scan lazily)."""
        pa = import_pyarrow()
        return pa.RecordBatchReader.from_batches(self.schema, iter(self))

    @property
    def stats(self) -> FetchStats:
        return self._fetcher.stats if self._fetcher is not None else FetchStats()

    def close(self) -> None:
        self.cluster.close()

    def __enter__(self) -> ArrowReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_arrow_batches(bootstrap: str | None, topic: str, partitions: Sequence[int] | None = None,
                       start: PositionSpec = "earliest", end: PositionSpec = "latest", *,
                       columns: Sequence[str] | None = None, schema: pa.Schema | None = None,
                       config: Mapping[str, Any] | None = None, **options: Any) -> Iterator[pa.RecordBatch]:
    """The records of `topic` in [start, end) as RecordBatches of at most arrow.batch.max.records rows, each
    from one partition in offset order, in bounded memory."""
    reader = ArrowReader(bootstrap, topic, partitions, start, end, columns=columns, schema=schema, config=config,
                         **options)
    with reader:
        yield from reader


def read_arrow(bootstrap: str | None, topic: str, partitions: Sequence[int] | None = None,
               start: PositionSpec = "earliest", end: PositionSpec = "latest", *,
               columns: Sequence[str] | None = None, schema: pa.Schema | None = None,
               config: Mapping[str, Any] | None = None, **options: Any) -> pa.Table:
    """The records of `topic` in [start, end) as one pyarrow.Table (partition after partition, each in
    offset order). See this module's docstring for the arguments."""
    with ArrowReader(bootstrap, topic, partitions, start, end, columns=columns, schema=schema, config=config,
                     **options) as reader:
        return reader.read_all()
