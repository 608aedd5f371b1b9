"""Typed key and value columns as a reader or writer of a topic sees them: the format, the subject and the
schema version chosen by options, the Arrow (and Spark) type, and decode / encode of whole columns.

Options (Spark's `DataSource.options` lowercases names; either case is accepted here), for the value
column (`key...` for the key):

- `valueFormat`: binary (default: no conversion), string, avro, json, protobuf
- `valueSubject`: the subject (default `<topic>-value`, Confluent's TopicNameStrategy)
- `valueSchemaVersion` or `valueSchemaId`: the reader schema (default: the subject's latest version)
- `valueMessageName`: Protobuf, the message to read or write (default: the schema's first)
- `mode`: FAILFAST (default) or PERMISSIVE, as Spark's from_avro / from_json
- writing: `valueSchema` (the schema text to write with; for Avro it may be left out and is then derived
  from the column's type as Spark's to_avro does), `auto.register.schemas` (default false: the schema
  must be in the subject already; true registers it), `use.latest.version` (write with the subject's
  latest version; the default when no `valueSchema` is given)
- the registry: `schema.registry.url` and the other gregor.typed.registry_client options

`TypedColumn.for_options(...)` keeps one TypedColumn per process and options, so executors reuse their
schemas, compiled decoders and registry cache from batch to batch.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gregor.typed.codec import CORRUPT_COLUMN, FAILFAST, MODES, ColumnDecoder, DecodedColumn
from gregor.typed.errors import CorruptRecordError, UnsupportedSchema
from gregor.typed.registry_client import RegistryClient, RegistryOptions, SchemaInfo, client_for

FORMATS = ("binary", "string", "avro", "json", "protobuf")
SCHEMA_TYPES = {"avro": "AVRO", "json": "JSON", "protobuf": "PROTOBUF"}
MAX_COLUMNS = 64


def _truthy(v: str | None, name: str) -> bool:
    if v is None:
        return False
    if v.lower() not in ("true", "false"):
        raise ValueError(f"{name} must be true or false, not {v!r}")
    return v.lower() == "true"


@dataclass(frozen=True)
class ColumnOptions:
    """What options say about one typed column (hashable and picklable)."""

    field: str  # "key" or "value"
    format: str
    subject: str = ""
    version: str | None = None
    schema_id: int | None = None
    message_name: str | None = None
    mode: str = FAILFAST
    schema: str | None = None
    auto_register: bool = False
    use_latest: bool = False
    registry: RegistryOptions | None = None

    @staticmethod
    def from_options(options: Mapping[str, str], field: str, topic: str | None = None) -> ColumnOptions:
        opts = {k.lower(): v for k, v in options.items()}
        fmt = (opts.get(f"{field}format") or "binary").lower()
        if fmt not in FORMATS:
            raise ValueError(f"{field}Format must be one of {', '.join(FORMATS)}, not {fmt!r}")
        mode = (opts.get("mode") or FAILFAST).upper()
        if mode not in MODES:
            raise ValueError(f"mode must be FAILFAST or PERMISSIVE, not {mode!r}")
        if fmt not in SCHEMA_TYPES:
            return ColumnOptions(field, fmt, mode=mode)
        subject = opts.get(f"{field}subject") or (f"{topic}-{field}" if topic else "")
        version, schema_id = opts.get(f"{field}schemaversion"), opts.get(f"{field}schemaid")
        if version is not None and schema_id is not None:
            raise ValueError(f"give {field}SchemaVersion or {field}SchemaId, not both")
        if schema_id is not None and not schema_id.isdigit():
            raise ValueError(f"{field}SchemaId must be a schema id (a number), not {schema_id!r}")
        if version is not None and version != "latest" and not version.lstrip("-").isdigit():
            raise ValueError(f"{field}SchemaVersion must be a version number or latest, not {version!r}")
        if not subject and schema_id is None:
            raise ValueError(f"{field}Format={fmt} needs a topic, {field}Subject or {field}SchemaId")
        return ColumnOptions(
            field, fmt, subject, version, int(schema_id) if schema_id is not None else None,
            opts.get(f"{field}messagename"), mode, opts.get(f"{field}schema"),
            _truthy(opts.get("auto.register.schemas"), "auto.register.schemas"),
            _truthy(opts.get("use.latest.version"), "use.latest.version"),
            RegistryOptions.from_options(opts, bare_names=False))


def load_schema(registry: RegistryClient, *, subject: str = "", version: int | str | None = None,
                schema_id: int | None = None) -> SchemaInfo:
    """A schema by id, or a subject's version (the latest by default)."""
    if schema_id is not None:
        return registry.schema_by_id(schema_id)
    if not subject:
        raise ValueError("a schema is chosen by a subject or a schema id")
    return registry.version(subject, version if version is not None else "latest").info


def make_decoder(info: SchemaInfo, registry: RegistryClient, message_name: str | None = None,
                 cache_capacity: int = 1000, fast: bool = True) -> Any:
    """The format decoder reading into schema `info` (gregor.typed.codec.FormatDecoder)."""
    if info.schema_type == "AVRO":
        from gregor.typed.avro_codec import AvroDecoder, AvroSchema
        return AvroDecoder(AvroSchema(info, registry), registry, cache_capacity, fast=fast)
    if info.schema_type == "JSON":
        from gregor.typed.json_codec import JsonDecoder, JsonSchema
        return JsonDecoder(JsonSchema(info, registry))
    if info.schema_type == "PROTOBUF":
        from gregor.typed.protobuf_codec import ProtobufDecoder, ProtobufSchema
        return ProtobufDecoder(ProtobufSchema(info, registry, message_name), registry, cache_capacity)
    raise UnsupportedSchema(f"unknown schema type {info.schema_type}")


def spark_type(t: pa.DataType) -> Any:
    """The pyspark DataType whose Arrow type (pyspark's to_arrow_type, UTC) is `t`."""
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(t)


class TypedColumn:
    """One typed column: its Arrow type, and decode / encode of binary columns."""

    def __init__(self, opts: ColumnOptions, registry: RegistryClient | None = None) -> None:
        self.opts = opts
        self.format = opts.format
        self._decoder: ColumnDecoder | None = None
        self._writer: ColumnWriter | None = None
        self._lock = threading.Lock()
        if opts.format in SCHEMA_TYPES:
            assert opts.registry is not None
            self.registry = registry or client_for(opts.registry)
            self.info = load_schema(self.registry, subject=opts.subject, version=opts.version, schema_id=opts.schema_id)
            if self.info.schema_type != SCHEMA_TYPES[opts.format]:
                raise UnsupportedSchema(f"{opts.field}Format is {opts.format} but the schema "
                                        f"{self.info.id} is {self.info.schema_type}")
            self._decoder = ColumnDecoder(make_decoder(self.info, self.registry, opts.message_name,
                                                       opts.registry.cache_capacity), self.registry, opts.mode)
            self.arrow_type = self._decoder.arrow_type
        else:
            self.arrow_type = pa.string() if opts.format == "string" else pa.binary()

    _cache: OrderedDict[tuple[ColumnOptions, str], TypedColumn] = OrderedDict()
    _cache_lock = threading.Lock()

    @classmethod
    def for_options(cls, opts: ColumnOptions, reader_schema_key: str = "") -> TypedColumn:
        """The process's TypedColumn for `opts` (`reader_schema_key` tells apart readers pinned to different
        schemas, e.g. the id the driver resolved "latest" to)."""
        key = (opts, reader_schema_key)
        with cls._cache_lock:
            col = cls._cache.get(key)
        if col is None:
            col = cls(opts)
            with cls._cache_lock:
                cls._cache[key] = col
                while len(cls._cache) > MAX_COLUMNS:
                    cls._cache.popitem(last=False)
        return col

    def pinned(self) -> ColumnOptions:
        """These options with the schema fixed to the id resolved now, so executors read with the schema
        the driver planned with even if the subject moves on."""
        if self.format not in SCHEMA_TYPES:
            return self.opts
        return ColumnOptions(**{**self.opts.__dict__, "schema_id": self.info.id, "version": None})

    def spark_type(self) -> Any:
        return spark_type(self.arrow_type)

    def decode(self, col: pa.Array, offsets: Any = None) -> DecodedColumn:
        """Binary payloads to typed values. FAILFAST raises CorruptRecordError; PERMISSIVE returns the
        raw payloads of the rows it could not decode in `corrupt`."""
        if self._decoder is not None:
            return self._decoder.decode(col, offsets)
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        if self.format == "binary":
            return DecodedColumn(col, pa.nulls(len(col), pa.binary()), [])
        return self._decode_string(col, offsets)

    def _decode_string(self, col: pa.Array, offsets: Any) -> DecodedColumn:
        try:
            return DecodedColumn(col.cast(pa.string()), pa.nulls(len(col), pa.binary()), [])
        except pa.ArrowInvalid:
            pass
        values, errors = [], []
        for i, v in enumerate(col.to_pylist()):
            try:
                values.append(None if v is None else v.decode("utf-8"))
            except UnicodeDecodeError as e:
                values.append(None)
                errors.append((i, f"not UTF-8: {e}"))
        if errors and self.opts.mode == FAILFAST:
            row, reason = errors[0]
            raise CorruptRecordError(row, reason, None if offsets is None else int(offsets[row].as_py()))
        mask = pa.array([False] * len(col))
        if errors:
            flags = [False] * len(col)
            for r, _ in errors:
                flags[r] = True
            mask = pa.array(flags)
        return DecodedColumn(pa.array(values, pa.string()), pc.if_else(mask, col, pa.scalar(None, pa.binary())), errors)

    def encode(self, col: pa.Array) -> pa.Array:
        """Typed values to binary payloads (see ColumnWriter)."""
        with self._lock:
            if self._writer is None:
                self._writer = ColumnWriter(self.opts, getattr(self, "registry", None))
        return self._writer.encode(col)


class ColumnWriter:
    """Encodes typed columns with one schema, chosen on the first batch: the options' schema (registered
    with auto.register.schemas, else looked up in the subject), or the subject's latest version."""

    def __init__(self, opts: ColumnOptions, registry: RegistryClient | None = None) -> None:
        self.opts = opts
        self.format = opts.format
        self.registry = registry or (client_for(opts.registry) if opts.registry else None)
        self._schema: tuple[Any, int] | None = None
        self._lock = threading.Lock()

    def _writer_schema(self, value_type: pa.DataType) -> tuple[Any, int]:
        with self._lock:
            if self._schema is not None:
                return self._schema
            o = self.opts
            assert self.registry is not None
            stype = SCHEMA_TYPES[o.format]
            text = o.schema
            if text is None and o.auto_register and stype == "AVRO":
                from gregor.typed.avro_codec import avro_schema_for_arrow
                text = avro_schema_for_arrow(value_type)
            if text is None or (o.use_latest and not o.auto_register):
                info = load_schema(self.registry, subject=o.subject, version=o.version, schema_id=o.schema_id)
            elif o.auto_register:
                info = SchemaInfo(self.registry.register(o.subject, stype, text), stype, text)
            else:
                info = self.registry.lookup(o.subject, stype, text).info
            if info.schema_type != stype:
                raise UnsupportedSchema(f"{o.field}Format is {o.format} but the schema {info.id} is {info.schema_type}")
            self._schema = (self._schema_object(info), info.id)
            return self._schema

    def _schema_object(self, info: SchemaInfo) -> Any:
        if info.schema_type == "AVRO":
            from gregor.typed.avro_codec import AvroSchema
            return AvroSchema(info, self.registry)
        if info.schema_type == "JSON":
            return None
        from gregor.typed.protobuf_codec import ProtobufSchema
        return ProtobufSchema(info, self.registry, self.opts.message_name)

    def encode(self, col: pa.Array) -> pa.Array:
        """Typed values to binary payloads (Confluent's wire format for avro, json and protobuf; a null value
        stays null)."""
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        if self.format == "binary":
            return col.cast(pa.binary())
        if self.format == "string":
            return col.cast(pa.string()).cast(pa.binary())
        schema, sid = self._writer_schema(col.type)
        if self.format == "avro":
            from gregor.typed.avro_codec import encode_avro
            return pa.array(encode_avro(col, schema, sid), pa.binary())
        if self.format == "json":
            from gregor.typed.json_codec import encode_json
            return pa.array(encode_json(col, sid), pa.binary())
        from gregor.typed.protobuf_codec import encode_protobuf
        return pa.array(encode_protobuf(col, schema, sid), pa.binary())


__all__ = ["CORRUPT_COLUMN", "ColumnOptions", "ColumnWriter", "TypedColumn", "load_schema", "make_decoder", "spark_type"]
