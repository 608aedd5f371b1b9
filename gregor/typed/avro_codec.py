"""Avro payloads to Arrow and back.

Decoding takes the payloads written with one schema id at a time. The fast path runs the C decoder
with the writer's schema (gregor.typed.avro_plan) and, when the reader's schema differs, resolves the
arrays to it in Arrow (gregor.typed.avro_resolve). Whatever the fast path cannot do (no compiler, a
schema it does not compile, a resolution it does not cover, a string that is not UTF-8) is done per
record by fastavro, which resolves schemas by the specification and also names each bad payload. The
per-record path is the reference the fast one is tested against.

Encoding goes per record through fastavro's writer: writes have no throughput target, and fastavro
checks every value against the schema.
"""

from __future__ import annotations

import io
import json
import threading
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

from gregor.typed import avro_types as at
from gregor.typed import avro_values
from gregor.typed.avro_plan import Plan, compile_plan, int32_view
from gregor.typed.avro_resolve import NotResolvable, resolve
from gregor.typed.registry_client import LruCache, RegistryClient, SchemaInfo

HEADER = 5  # magic byte and schema id


class AvroSchema:
    """A parsed Avro schema with what decoding and encoding need of it."""

    def __init__(self, info: SchemaInfo, registry: RegistryClient | None = None) -> None:
        deps = [d.schema for _, d in registry.dependencies(info)] if registry and info.references else []
        self.info = info
        self.parsed, self.named = at.parse(info.schema, deps)
        self.arrow_type = at.arrow_type(self.parsed, self.named)
        self.nullable = at.nullable(self.parsed, self.named)
        self.to_arrow = avro_values.to_arrow(self.parsed, self.named)
        self.from_arrow = avro_values.from_arrow(self.parsed, self.named)
        self.plan: Plan | None = compile_plan(self.parsed, self.named)
        self._decoder: Any = None
        self.lock = threading.Lock()  # one C decoder per schema: one batch at a time

    def decoder(self) -> Any:
        if self._decoder is None and self.plan is not None:
            self._decoder = self.plan.decoder()
        return self._decoder

    def same_as(self, other: AvroSchema) -> bool:
        return self.info.id == other.info.id or (self.parsed == other.parsed and self.named == other.named)


class AvroDecoder:
    """Payloads of any writer schema id, read into `reader`'s Arrow type."""

    schema_type = "AVRO"
    header_len = HEADER

    def __init__(self, reader: AvroSchema, registry: RegistryClient, cache_capacity: int = 1000,
                 fast: bool = True) -> None:
        self.reader = reader
        self.registry = registry
        self.arrow_type = reader.arrow_type
        self.fast = fast
        self._writers = LruCache(cache_capacity)

    def writer(self, info: SchemaInfo) -> AvroSchema:
        if info.id == self.reader.info.id:
            return self.reader
        w = self._writers.get(info.id)
        if w is None:
            w = AvroSchema(info, self.registry)
            self._writers.put(info.id, w)
        return w

    def decode_group(self, col: pa.Array, rows: np.ndarray | None,
                     info: SchemaInfo) -> tuple[pa.Array, list[tuple[int, str]]]:
        """See gregor.typed.codec.FormatDecoder."""
        w = self.writer(info)
        known: dict[int, str] = {}
        if self.fast and w.plan is not None:
            arr, errors = self._fast(col, rows, w)
            try:
                if not w.same_as(self.reader):
                    arr = resolve(arr, w.parsed, self.reader.parsed, w.named, self.reader.named)
                arr.validate(full=True)  # strings are UTF-8
                if arr.type == self.arrow_type:
                    return arr, errors
            except (NotResolvable, pa.ArrowInvalid):
                # fastavro is not handed the payloads the C decoder refused: a few bytes declaring billions
                # of empty values would keep it busy for hours
                known = dict(errors)
        return self.per_record(col, rows, w, known)

    def _fast(self, col: pa.Array, rows: np.ndarray | None, w: AvroSchema) -> tuple[pa.Array, list[tuple[int, str]]]:
        bufs = col.buffers()
        offsets = int32_view(bufs[1], col.offset, len(col) + 1)
        assert w.plan is not None
        with w.lock:
            dec = w.decoder()
            try:
                errors = dec.decode(bufs[2] if bufs[2] is not None else b"", offsets, rows, HEADER)
            finally:
                out = dec.finish()
        return w.plan.build(out), errors

    def per_record(self, col: pa.Array, rows: np.ndarray | None, w: AvroSchema,
                   known: dict[int, str] | None = None) -> tuple[pa.Array, list[tuple[int, str]]]:
        """fastavro, one payload at a time; `known`: positions already found corrupt, with the reason."""
        bufs = col.buffers()
        offsets = int32_view(bufs[1], col.offset, len(col) + 1)
        data = memoryview(bufs[2]) if bufs[2] is not None else memoryview(b"")
        reader = None if w.same_as(self.reader) else self.reader.parsed
        conv = self.reader.to_arrow
        values: list[Any] = []
        errors: list[tuple[int, str]] = []
        for k, r in enumerate(range(len(col)) if rows is None else rows.tolist()):
            if known and k in known:
                values.append(None)
                errors.append((k, known[k]))
                continue
            payload = data[offsets[r] + HEADER: offsets[r + 1]]
            bio = io.BytesIO(payload)
            try:
                v = fastavro.schemaless_reader(bio, w.parsed, reader)  # type: ignore[call-overload]
                if bio.tell() != len(payload):
                    raise ValueError("bytes left over after the record")
                values.append(conv(v) if conv else v)
            except Exception as e:  # fastavro raises many kinds on bad input; every one makes the row corrupt
                values.append(None)
                errors.append((k, f"{type(e).__name__}: {e}"[:300]))
        try:
            return pa.array(values, type=self.arrow_type), errors
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError):
            return self._one_by_one(values, errors)

    def _one_by_one(self, values: list[Any], errors: list[tuple[int, str]]) -> tuple[pa.Array, list[tuple[int, str]]]:
        for k, v in enumerate(values):
            try:
                pa.array([v], type=self.arrow_type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError) as e:
                values[k] = None
                errors.append((k, f"value does not fit the Arrow type: {e}"[:300]))
        errors.sort()
        return pa.array(values, type=self.arrow_type), errors


def encode_avro(arr: pa.Array, schema: AvroSchema, schema_id: int) -> list[bytes | None]:
    """Confluent-framed Avro payloads of `arr`'s values (a null stays null)."""
    header = b"\x00" + schema_id.to_bytes(4, "big")
    conv = schema.from_arrow
    out: list[bytes | None] = []
    bio = io.BytesIO()
    for v in arr.to_pylist():
        if v is None and not schema.nullable:
            out.append(None)
            continue
        bio.seek(0)
        bio.truncate()
        bio.write(header)
        fastavro.schemaless_writer(bio, schema.parsed, conv(v) if conv else v)  # type: ignore[arg-type]
        out.append(bio.getvalue())
    return out


def avro_schema_for_arrow(t: pa.DataType, name: str = "topLevelRecord", namespace: str = "") -> str:
    """An Avro schema for values of Arrow type `t`, as Spark's to_avro derives one (nullable fields as
    [type, null] unions; records named after their field, under the parent's namespace)."""

    def conv(t: pa.DataType, name: str, ns: str, nullable: bool) -> Any:
        out = _avro_of(t, name, ns)
        return [out, "null"] if nullable else out

    def _avro_of(t: pa.DataType, name: str, ns: str) -> Any:
        if pa.types.is_struct(t):
            rec: dict[str, Any] = {"type": "record", "name": name}
            if ns:
                rec["namespace"] = ns
            child_ns = f"{ns}.{name}" if ns else name
            rec["fields"] = [{"name": f.name, "type": conv(f.type, f.name, child_ns, f.nullable)} for f in t]
            return rec
        if pa.types.is_map(t):
            return {"type": "map", "values": conv(t.item_type, name, ns, t.item_field.nullable)}
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return {"type": "array", "items": conv(t.value_type, name, ns, t.value_field.nullable)}
        if pa.types.is_decimal(t):
            return {"type": "fixed", "name": name, "size": _decimal_size(t.precision),
                    "logicalType": "decimal", "precision": t.precision, "scale": t.scale}
        if pa.types.is_timestamp(t):
            return {"type": "long", "logicalType": "timestamp-micros" if t.tz else "local-timestamp-micros"}
        simple = {pa.bool_(): "boolean", pa.int8(): "int", pa.int16(): "int", pa.int32(): "int", pa.int64(): "long",
                  pa.float32(): "float", pa.float64(): "double", pa.string(): "string", pa.large_string(): "string",
                  pa.binary(): "bytes", pa.large_binary(): "bytes", pa.null(): "null"}
        if t in simple:
            return simple[t]
        if pa.types.is_date32(t):
            return {"type": "int", "logicalType": "date"}
        raise TypeError(f"no Avro type for Arrow type {t}")

    return json.dumps(_avro_of(t, name, namespace))


def _decimal_size(precision: int) -> int:
    n = 1
    while 10 ** precision > 2 ** (8 * n - 1):
        n += 1
    return n
