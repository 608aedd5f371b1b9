"""JSON Schema payloads to Arrow and back.

Types: an object with `properties` is a struct (in the order the properties are written; a property is
non-null when `required` and its schema does not allow null), an object with only
`additionalProperties` a map<string, ...>, an array a list, string (format date-time: timestamp[us, UTC],
format date: date32), integer (int64), number (double), boolean; `["T", "null"]` and a oneOf/anyOf of
a type and null make a nullable T. `$ref`s to the schema's own definitions and to its references are
followed. A schema without one fixed type (`{}`, a oneOf of two types, a recursive $ref) has no Arrow
type and is refused with UnsupportedSchema.

Decoding projects every payload onto the reader schema's properties whatever schema it was written
with (properties the reader lacks are ignored, the ones the payload lacks are null): the frames'
headers are overwritten in place by a newline and spaces, and pyarrow's C++ JSON reader parses the
whole column at once with the reader's schema. Where it refuses the batch (and for schemas with maps, which it
cannot read), each payload is parsed by the json module and checked against the type, which names the
bad ones.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

from gregor.typed.errors import UnsupportedSchema
from gregor.typed.registry_client import RegistryClient, SchemaInfo

HEADER = 5
UTC_US = pa.timestamp("us", tz="UTC")
MAX_DEPTH = 64


class JsonSchema:
    def __init__(self, info: SchemaInfo, registry: RegistryClient | None = None) -> None:
        self.info = info
        try:
            self.doc = json.loads(info.schema)
            self.refs = {name: json.loads(dep.schema) for name, dep in registry.dependencies(info)} \
                if registry and info.references else {}
        except ValueError as e:
            raise UnsupportedSchema(f"not a JSON schema: {e}") from None
        self.arrow_type, self.nullable = self._convert(self.doc, self.doc, ())
        # pyarrow's JSON reader parses dates only as strings: read them so, cast afterwards
        self.read_type = _dates_as_strings(self.arrow_type)

    def _deref(self, s: Any, root: Any, seen: tuple[str, ...]) -> tuple[Any, Any, tuple[str, ...]]:
        while isinstance(s, dict) and "$ref" in s:
            ref = s["$ref"]
            if ref in seen or len(seen) > MAX_DEPTH:
                raise UnsupportedSchema(f"the $ref {ref} is recursive: recursive types have no Arrow type")
            seen = (*seen, ref)
            doc, _, pointer = ref.partition("#")
            if doc:
                if doc not in self.refs:
                    raise UnsupportedSchema(f"the $ref {ref} names no reference of the schema")
                root = self.refs[doc]
            target = root
            for part in [p for p in pointer.split("/") if p]:
                part = part.replace("~1", "/").replace("~0", "~")
                try:
                    target = target[int(part)] if isinstance(target, list) else target[part]
                except (KeyError, IndexError, ValueError, TypeError):
                    raise UnsupportedSchema(f"the $ref {ref} points at nothing") from None
            s = target
        return s, root, seen

    def _convert(self, s: Any, root: Any, seen: tuple[str, ...]) -> tuple[pa.DataType, bool]:
        """(Arrow type, whether null is allowed) of JSON schema `s`."""
        s, root, seen = self._deref(s, root, seen)
        if s is True or s == {}:
            raise UnsupportedSchema("a schema that allows any value has no Arrow type")
        if not isinstance(s, dict):
            raise UnsupportedSchema(f"not a JSON schema: {s!r}")
        for key in ("oneOf", "anyOf"):
            if key in s:
                options = [self._deref(o, root, seen) for o in s[key]]
                non_null = [o for o in options if not (isinstance(o[0], dict) and o[0].get("type") == "null")]
                if len(non_null) != 1:
                    raise UnsupportedSchema(f"a {key} of {len(non_null)} types other than null has no Arrow type")
                t, _ = self._convert(*non_null[0])
                return t, len(non_null) != len(options)
        if "allOf" in s and len(s["allOf"]) == 1:
            return self._convert(s["allOf"][0], root, seen)
        types = s.get("type")
        if types is None:
            values = s.get("enum", [s["const"]] if "const" in s else None)
            if values and all(isinstance(v, str) for v in values):
                types = "string"
            elif "properties" in s:
                types = "object"
            else:
                raise UnsupportedSchema(f"a schema without a type has no Arrow type: {json.dumps(s)[:200]}")
        if isinstance(types, list):
            non_null = [t for t in types if t != "null"]
            if len(non_null) != 1:
                raise UnsupportedSchema(f"a value of types {types} has no single Arrow type")
            t, _ = self._convert({**s, "type": non_null[0]}, root, seen)
            return t, len(non_null) != len(types)
        if types == "null":
            return pa.null(), True
        if types == "string":
            fmt = s.get("format")
            return (UTC_US if fmt == "date-time" else pa.date32() if fmt == "date" else pa.string()), False
        if types == "integer":
            return pa.int64(), False
        if types == "number":
            return pa.float64(), False
        if types == "boolean":
            return pa.bool_(), False
        if types == "array":
            items = s.get("items")
            if not isinstance(items, dict):
                raise UnsupportedSchema("an array without one `items` schema has no Arrow type")
            t, _ = self._convert(items, root, seen)
            return pa.list_(pa.field("element", t, nullable=True)), False
        if types == "object":
            props = s.get("properties")
            if not props:
                extra = s.get("additionalProperties")
                if isinstance(extra, dict) and extra:
                    t, n = self._convert(extra, root, seen)
                    return pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", t, nullable=n)), False
                raise UnsupportedSchema("an object without properties has no Arrow type")
            required = set(s.get("required", ()))
            fields = []
            for name, sub in props.items():
                t, n = self._convert(sub, root, seen)
                fields.append(pa.field(name, t, nullable=n or name not in required))
            return pa.struct(fields), False
        raise UnsupportedSchema(f"unknown JSON type {types!r}")


def _dates_as_strings(t: pa.DataType) -> pa.DataType:
    if t == pa.date32():
        return pa.string()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_dates_as_strings(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_dates_as_strings(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(t.key_field, t.item_field.with_type(_dates_as_strings(t.item_type)))
    return t


class JsonDecoder:
    schema_type = "JSON"

    def __init__(self, reader: JsonSchema) -> None:
        self.reader = reader
        self.arrow_type = reader.arrow_type
        if not pa.types.is_struct(self.arrow_type):
            raise UnsupportedSchema("a JSON value column needs an object schema")
        self._options = pj.ParseOptions(explicit_schema=pa.schema(list(reader.read_type)),
                                        unexpected_field_behavior="ignore")
        self._options_nl = pj.ParseOptions(explicit_schema=pa.schema(list(reader.read_type)),
                                           unexpected_field_behavior="ignore", newlines_in_values=True)
        self.bulk = "map<" not in str(self.arrow_type)  # pyarrow's JSON reader has no map type

    def decode_group(self, col: pa.Array, rows: np.ndarray | None,
                     info: SchemaInfo) -> tuple[pa.Array, list[tuple[int, str]]]:
        part = col if rows is None else col.take(pa.array(rows))
        if self.bulk:
            try:
                return self._parse(_lines(part), len(part)), []
            except (pa.ArrowInvalid, ValueError):
                pass
        return self._one_by_one(part)

    def _parse(self, data: np.ndarray, n: int) -> pa.Array:
        newlines = int(np.count_nonzero(data == 10))
        opts = self._options if newlines == n else self._options_nl
        table = pj.read_json(io.BytesIO(data.tobytes()), parse_options=opts,
                             read_options=pj.ReadOptions(block_size=max(1 << 20, len(data) + 1)))
        if table.num_rows != n:
            raise ValueError(f"{table.num_rows} JSON values in {n} payloads")
        arr = table.to_struct_array().combine_chunks() if table.num_rows else pa.array([], self.reader.read_type)
        if arr.type != self.arrow_type:
            arr = arr.cast(self.arrow_type)
        return arr

    def _one_by_one(self, part: pa.Array) -> tuple[pa.Array, list[tuple[int, str]]]:
        """Each payload parsed by the json module and checked against the Arrow type: slower, but it names
        the bad payloads, and reads maps (which pyarrow's JSON reader does not)."""
        values: list[Any] = []
        errors: list[tuple[int, str]] = []
        for k, payload in enumerate(part.to_pylist()):
            try:
                values.append(_value(self.arrow_type, json.loads(payload[HEADER:]), False))
            except (ValueError, TypeError, UnicodeDecodeError) as e:
                errors.append((k, f"{type(e).__name__}: {e}"[:300]))
                values.append(None)
        return pa.array(values, self.arrow_type), errors


def _value(t: pa.DataType, v: Any, nullable: bool) -> Any:
    """A JSON value checked against Arrow type t and put in the form pyarrow takes."""
    if v is None:
        if not nullable:
            raise ValueError("null or missing where a value is required")
        return None
    if pa.types.is_struct(t):
        if not isinstance(v, dict):
            raise ValueError(f"{type(v).__name__} where an object belongs")
        return {f.name: _value(f.type, v.get(f.name), f.nullable) for f in t}
    if pa.types.is_map(t):
        if not isinstance(v, dict):
            raise ValueError(f"{type(v).__name__} where an object belongs")
        return [(k, _value(t.item_type, x, t.item_field.nullable)) for k, x in v.items()]
    if pa.types.is_list(t):
        if not isinstance(v, list):
            raise ValueError(f"{type(v).__name__} where an array belongs")
        return [_value(t.value_type, x, True) for x in v]
    if t == pa.int64():
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{v!r} is not an integer")
        return v
    if t == pa.float64():
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValueError(f"{v!r} is not a number")
        return float(v)
    if t == pa.bool_():
        if not isinstance(v, bool):
            raise ValueError(f"{v!r} is not a boolean")
        return v
    if not isinstance(v, str):
        raise ValueError(f"{v!r} is not a string")
    if t == UTC_US:
        return dt.datetime.fromisoformat(v)
    if t == pa.date32():
        return dt.date.fromisoformat(v)
    return v


def _lines(part: pa.Array) -> np.ndarray:
    """The payloads of `part` as one buffer of lines: each 5-byte header becomes a newline and 4 spaces."""
    bufs = part.buffers()
    n = len(part)
    offsets = np.frombuffer(bufs[1], dtype="<i4", count=n + 1, offset=part.offset * 4)
    raw = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    data = raw[offsets[0]:offsets[-1]].copy()
    starts = offsets[:-1] - offsets[0]
    data[starts] = 10
    for i in range(1, HEADER):
        data[starts + i] = 32
    return data


def _json_default(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        return v.isoformat().replace("+00:00", "Z")
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    raise TypeError(f"{type(v).__name__} is not JSON serializable")


def _plain(t: pa.DataType, v: Any) -> Any:
    """A value as its JSON document: maps (lists of pairs in Arrow) as objects, null properties left out
    (a property whose schema does not allow null may still be absent)."""
    if v is None:
        return None
    if pa.types.is_map(t):
        return {k: _plain(t.item_type, x) for k, x in v}
    if pa.types.is_struct(t):
        return {f.name: _plain(f.type, v[f.name]) for f in t if v.get(f.name) is not None}
    if pa.types.is_list(t):
        return [_plain(t.value_type, x) for x in v]
    return v


def encode_json(arr: pa.Array, schema_id: int) -> list[bytes | None]:
    header = b"\x00" + schema_id.to_bytes(4, "big")
    out: list[bytes | None] = []
    for v in arr.to_pylist():
        if v is None:
            out.append(None)
            continue
        v = _plain(arr.type, v)
        out.append(header + json.dumps(v, separators=(",", ":"), default=_json_default).encode())
    return out
