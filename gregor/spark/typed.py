"""Typed `key` and `value` columns for the source and the sink (`valueFormat`, `keyFormat`, the registry
options), wired to gregor.typed.

Source: the reader schema is resolved once, on the driver, when Spark asks for the DataFrame's schema;
the options are then pinned to that schema's id, so every executor decodes into exactly the type the
query was planned with, even if the subject gets a new latest version meanwhile (and a restarted
streaming query re-plans with what its code asks for). Executors keep one TypedColumn per pinned
options (registry client, cache and compiled decoder live across tasks). Decoding maps over the Arrow
batches gregor.spark.fetch yields: the offsets read and so the exactly-once bookkeeping are untouched.

Several topics (a list, a pattern, an assignment over topics) have one reader schema: the one of
`valueSubject` or `valueSchemaId`, which must then be given; records of every topic are resolved to it
from their own writer schemas (the ids in their frames). With one topic the subject defaults to
Confluent's TopicNameStrategy, `<topic>-value`.

Sink: struct (or any Avro-typed) columns are encoded into Confluent's wire format with the subject's
schema before they are produced; as Confluent's serializers, `auto.register.schemas` defaults to true
(the schema given in `valueSchema`, or for Avro derived from the column type, is registered), and
`use.latest.version=true` writes with the subject's latest version instead.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gregor.spark.options import GregorOptionError, Subscription

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType, StructType

    from gregor.typed.columns import ColumnOptions, ColumnWriter

CORRUPT_VALUE = "_corrupt_record"
CORRUPT_KEY = "_corrupt_key"
SCHEMA_FORMATS = ("avro", "json", "protobuf")
_MAX_WRITERS = 64


def _typed_error(e: Exception) -> GregorOptionError:
    return GregorOptionError(f"{type(e).__name__}: {e}")


def _single_topic(sub: Subscription) -> str | None:
    if sub.kind == "subscribe" and len(sub.topics) == 1:
        return sub.topics[0]
    if sub.kind == "assign" and len({t for t, _ in sub.assigned}) == 1:
        return sub.assigned[0][0]
    return None


def _column_options(options: Mapping[str, str], field: str, topic: str | None) -> ColumnOptions:
    from gregor.typed.columns import ColumnOptions

    try:
        return ColumnOptions.from_options(options, field, topic)
    except ValueError as e:
        raise GregorOptionError(str(e)) from e


def _format(options: Mapping[str, str], field: str) -> str:
    return next((str(v).strip().lower() for k, v in options.items() if k.lower() == f"{field}format"), "binary")


def wants_types(options: Mapping[str, str]) -> bool:
    """Whether the options ask for a key or value other than binary."""
    return any(_format(options, f) != "binary" for f in ("key", "value"))


@dataclass(frozen=True)
class SourceColumns:
    """The key and value columns of a read, pinned to the schemas resolved on the driver (picklable)."""

    key: ColumnOptions | None = None  # None: binary, Kafka's bytes as they are
    value: ColumnOptions | None = None
    permissive: bool = False

    @property
    def plain(self) -> bool:
        return self.key is None and self.value is None

    @staticmethod
    def resolve(options: Mapping[str, str], subscription: Subscription) -> tuple[SourceColumns, dict[str, DataType]]:
        """Parse the options, resolve each typed column's reader schema (registry lookups, on the driver),
        pin it; also return the Spark type of each typed column."""
        from gregor.typed import TypedError
        from gregor.typed.columns import TypedColumn

        topic = _single_topic(subscription)
        pinned: dict[str, ColumnOptions | None] = {"key": None, "value": None}
        types: dict[str, DataType] = {}
        mode = "FAILFAST"
        for field in ("key", "value"):
            fmt = _format(options, field)
            if fmt in SCHEMA_FORMATS and topic is None and not _given(options, f"{field}schemaid") \
                    and not _given(options, f"{field}subject"):
                raise GregorOptionError(
                    f"{field}Format={fmt} with {subscription.describe()} needs {field}Subject or "
                    f"{field}SchemaId: records of several topics are read with one reader schema (the default "
                    f"subject <topic>-{field} names one topic)")
            opts = _column_options(options, field, topic)
            mode = opts.mode
            if opts.format == "binary":
                continue
            try:
                col = TypedColumn.for_options(_pin_now(opts))
                pinned[field] = col.pinned()
                types[field] = col.spark_type()
            except (TypedError, ValueError) as e:
                raise _typed_error(e) from e
        return SourceColumns(pinned["key"], pinned["value"], mode == "PERMISSIVE"), types

    def schema(self, base: StructType, types: Mapping[str, DataType]) -> StructType:
        """The source schema with the typed columns' types, plus (PERMISSIVE) the raw bytes of the corrupt
        ones: `_corrupt_record` for the value, `_corrupt_key` for the key."""
        from pyspark.sql.types import BinaryType, StructField, StructType

        fields = [StructField(f.name, types[f.name]) if f.name in types else f for f in base.fields]
        if self.permissive and self.value is not None:
            fields.append(StructField(CORRUPT_VALUE, BinaryType()))
        if self.permissive and self.key is not None:
            fields.append(StructField(CORRUPT_KEY, BinaryType()))
        return StructType(fields)

    def decode(self, batch: pa.RecordBatch, out: pa.Schema) -> pa.RecordBatch:
        """One batch of the binary source schema as a batch of `out` (typed key / value, corrupt columns)."""
        import pyarrow as pa

        from gregor.typed import CorruptRecordError
        from gregor.typed.columns import TypedColumn

        names = batch.schema.names
        arrays = list(batch.columns)
        offsets = batch.column(names.index("offset"))
        corrupt: dict[str, pa.Array] = {}
        for field, opts, extra in (("value", self.value, CORRUPT_VALUE), ("key", self.key, CORRUPT_KEY)):
            if opts is None:
                continue
            i = names.index(field)
            try:
                decoded = TypedColumn.for_options(opts).decode(batch.column(i), offsets=offsets)
            except CorruptRecordError as e:
                where = f"{batch.column(names.index('topic'))[0]}-{batch.column(names.index('partition'))[0]}"
                raise CorruptRecordError(e.row, f"{field} of {where}: {e.reason}", e.offset) from e
            want = out.field(field).type
            arrays[i] = decoded.value if decoded.value.type.equals(want) else decoded.value.cast(want)
            corrupt[extra] = decoded.corrupt
        arrays.extend(corrupt[n] for n in out.names[len(names):])
        return pa.RecordBatch.from_arrays(arrays, schema=out)


def _pin_now(opts: ColumnOptions) -> ColumnOptions:
    """`opts` with the schema they name (a subject's version, by default its latest) fixed to its id, as the
    registry answers now. A client of its own, with an empty cache: the process's shared clients keep a
    subject's latest version (Python workers outlive queries), and a query planned now must see today's."""
    import dataclasses

    from gregor.typed.columns import load_schema
    from gregor.typed.registry_client import RegistryClient

    if opts.format not in SCHEMA_FORMATS or opts.schema_id is not None:
        return opts
    assert opts.registry is not None
    info = load_schema(RegistryClient(opts.registry), subject=opts.subject, version=opts.version)
    return dataclasses.replace(opts, schema_id=info.id, version=None)


def _given(options: Mapping[str, str], name: str) -> bool:
    return any(k.lower() == name and str(v).strip() for k, v in options.items())


@dataclass(frozen=True)
class SinkColumns:
    """The key and value encodings of a write (picklable; each executor keeps its ColumnWriters)."""

    key: ColumnOptions | None = None
    value: ColumnOptions | None = None

    @staticmethod
    def parse(options: Mapping[str, str], topic: str | None) -> SinkColumns:
        lowered = {k.lower(): str(v) for k, v in options.items()}
        auto = lowered.get("auto.register.schemas")
        latest = lowered.get("use.latest.version", "false").strip().lower() == "true"
        if auto is None:  # Confluent's serializers: register unless told to use the latest version
            lowered["auto.register.schemas"] = "false" if latest else "true"
        elif auto.strip().lower() == "true" and latest:
            raise GregorOptionError("auto.register.schemas and use.latest.version cannot both be true")
        cols: dict[str, ColumnOptions | None] = {"key": None, "value": None}
        for field in ("key", "value"):
            opts = _column_options(lowered, field, topic)
            if opts.format == "binary":
                continue
            if opts.format in SCHEMA_FORMATS and topic is None and not _given(lowered, f"{field}subject"):
                raise GregorOptionError(f"{field}Format={opts.format} needs the topic option or {field}Subject: "
                                        f"the default subject is <topic>-{field}")
            if opts.format in ("json", "protobuf") and opts.auto_register and opts.schema is None:
                raise GregorOptionError(f"{field}Format={opts.format} with auto.register.schemas needs {field}Schema "
                                        "(the schema text; only Avro schemas are derived from the column type)")
            if opts.format in SCHEMA_FORMATS and (opts.use_latest or (opts.schema is None and not opts.auto_register)):
                from gregor.typed import TypedError
                try:
                    opts = _pin_now(opts)
                except (TypedError, ValueError) as e:
                    raise _typed_error(e) from e
            cols[field] = opts
        return SinkColumns(cols["key"], cols["value"])

    @property
    def plain(self) -> bool:
        return self.key is None and self.value is None

    def check(self, fields: Mapping[str, DataType]) -> None:
        """Typed columns must hold what their format encodes (a struct for JSON and Protobuf messages)."""
        from pyspark.sql.types import StructType

        for field, opts in (("key", self.key), ("value", self.value)):
            if opts is None or field not in fields:
                continue
            t = fields[field]
            if opts.format in ("json", "protobuf") and not isinstance(t, StructType):
                raise GregorOptionError(f"{field}Format={opts.format} writes a struct {field} column, "
                                        f"got {t.simpleString()}")

    def encode(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The batch with its typed key and value columns replaced by their binary encodings."""
        import pyarrow as pa

        from gregor.typed import TypedError

        names = batch.schema.names
        arrays = list(batch.columns)
        fields = list(batch.schema)
        for field, opts in (("key", self.key), ("value", self.value)):
            if opts is None or field not in names:
                continue
            i = names.index(field)
            try:
                arrays[i] = _writer(opts).encode(batch.column(i))
            except (TypedError, ValueError) as e:
                raise GregorOptionError(f"cannot encode the {field} column as {opts.format} for subject "
                                        f"{opts.subject}: {e}") from e
            fields[i] = pa.field(field, pa.binary())
        return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


_writers: OrderedDict[ColumnOptions, ColumnWriter] = OrderedDict()
_writers_lock = threading.Lock()


def _writer(opts: ColumnOptions) -> ColumnWriter:
    """The process's ColumnWriter for `opts`: the writer schema is looked up (or registered) once per
    executor, not once per task or batch."""
    from gregor.typed.columns import ColumnWriter

    with _writers_lock:
        w = _writers.get(opts)
        if w is None:
            w = _writers[opts] = ColumnWriter(opts)
            while len(_writers) > _MAX_WRITERS:
                _writers.popitem(last=False)
        return w


__all__ = ["CORRUPT_KEY", "CORRUPT_VALUE", "SinkColumns", "SourceColumns", "wants_types"]
