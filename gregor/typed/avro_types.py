"""Avro schemas, parsed by fastavro, and the Arrow types Spark's `from_avro` gives them.

The mapping is Spark's (SchemaConverters in spark-avro): boolean, int (int32), long (int64), float,
double, string, bytes and fixed (binary), enum (string), record (struct; a field is nullable only when
its type is a union with null), array (list, items nullable when they are a union with null), map
(map<string, ...>). Unions: [null, T] is a nullable T, [int, long] a long, [float, double] a double, any
other union a struct of its non-null branches named member0, member1, ... Logical types: date (date32),
timestamp-millis and -micros (timestamp[us, UTC]), local-timestamp-* (timestamp[us]), decimal
(decimal128), uuid (string); time-millis and time-micros stay int and long, as in Spark.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import fastavro
import pyarrow as pa

from gregor.typed.errors import UnsupportedSchema

PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
UTC_US = pa.timestamp("us", tz="UTC")
MAX_DECIMAL_PRECISION = 38


def parse(text: str, dependencies: Iterable[str] = ()) -> tuple[Any, dict[str, Any]]:
    """An Avro schema's text, with the texts of the schemas it references, parsed by fastavro.
    Returns the parsed schema and the named types by full name."""
    named: dict[str, Any] = {}
    try:
        for dep in dependencies:
            fastavro.parse_schema(json.loads(dep), named, _write_hint=False)
        return fastavro.parse_schema(json.loads(text), named, _write_hint=False), named
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as e:
        raise UnsupportedSchema(f"not a valid Avro schema: {e}") from None


def resolve(schema: Any, named: dict[str, Any]) -> Any:
    """A schema with a reference to a named type replaced by its definition."""
    if isinstance(schema, str) and schema not in PRIMITIVES:
        try:
            return named[schema]
        except KeyError:
            raise UnsupportedSchema(f"unknown Avro type {schema!r}") from None
    return schema


def expanded(schema: Any, named: dict[str, Any], depth: int = 0) -> Any:
    """`schema` with every named type written out where it is used (for comparing schemas of two sets of
    names; recursive types are refused before this is called)."""
    if depth > 64:
        raise UnsupportedSchema("the schema nests too deeply")
    schema = resolve(schema, named)
    if isinstance(schema, list):
        return [expanded(b, named, depth + 1) for b in schema]
    if isinstance(schema, dict):
        out = {k: v for k, v in schema.items() if not k.startswith("__")}
        if "fields" in out:
            out["fields"] = [{**f, "type": expanded(f["type"], named, depth + 1)} for f in out["fields"]]
        for key in ("items", "values"):
            if key in out:
                out[key] = expanded(out[key], named, depth + 1)
        if isinstance(out.get("type"), dict | list):
            out["type"] = expanded(out["type"], named, depth + 1)
        return out
    return schema


def type_name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    return schema["type"] if isinstance(schema["type"], str) else type_name(schema["type"])


def logical(schema: Any) -> str | None:
    return schema.get("logicalType") if isinstance(schema, dict) else None


def union_shape(branches: list[Any], named: dict[str, Any]) -> tuple[bool, list[Any]]:
    """(nullable, the non-null branches) of a union."""
    members = [b for b in branches if resolve(b, named) != "null" and type_name(resolve(b, named)) != "null"]
    return len(members) != len(branches), members


def promoted_union(members: list[Any], named: dict[str, Any]) -> str | None:
    """Spark reads [int, long] as long and [float, double] as double."""
    kinds = sorted(type_name(resolve(m, named)) for m in members)
    if any(logical(resolve(m, named)) for m in members):
        return None
    if kinds == ["int", "long"]:
        return "long"
    if kinds == ["double", "float"]:
        return "double"
    return None


def arrow_type(schema: Any, named: dict[str, Any], _stack: tuple[str, ...] = ()) -> pa.DataType:
    """The Arrow type of values of `schema` (nullability is the field's: see `nullable`)."""
    schema = resolve(schema, named)
    kind = type_name(schema)
    lt = logical(schema)
    if kind == "null":
        return pa.null()
    if kind == "boolean":
        return pa.bool_()
    if kind == "int":
        return pa.date32() if lt == "date" else pa.int32()
    if kind == "long":
        if lt in ("timestamp-millis", "timestamp-micros"):
            return UTC_US
        if lt in ("local-timestamp-millis", "local-timestamp-micros"):
            return pa.timestamp("us")
        return pa.int64()
    if kind == "float":
        return pa.float32()
    if kind == "double":
        return pa.float64()
    if kind in ("bytes", "fixed"):
        if lt == "decimal":
            return decimal_type(schema)
        return pa.binary()
    if kind in ("string", "enum"):
        return pa.string()
    if kind == "record":
        name = schema["name"]
        if name in _stack:
            raise UnsupportedSchema(f"the Avro record {name} contains itself: recursive types have no Arrow type")
        return pa.struct([pa.field(f["name"], arrow_type(f["type"], named, (*_stack, name)),
                                   nullable=nullable(f["type"], named)) for f in schema["fields"]])
    if kind == "array":
        items = schema["items"]
        return pa.list_(pa.field("element", arrow_type(items, named, _stack), nullable=nullable(items, named)))
    if kind == "map":
        values = schema["values"]
        return pa.map_(pa.field("key", pa.string(), nullable=False),
                       pa.field("value", arrow_type(values, named, _stack), nullable=nullable(values, named)))
    if kind == "union":
        has_null, members = union_shape(schema, named)
        if not members:
            return pa.null()
        if len(members) == 1:
            return arrow_type(members[0], named, _stack)
        promoted = promoted_union(members, named)
        if promoted:
            return pa.int64() if promoted == "long" else pa.float64()
        return pa.struct([pa.field(f"member{i}", arrow_type(m, named, _stack), nullable=True)
                          for i, m in enumerate(members)])
    raise UnsupportedSchema(f"unknown Avro type {kind!r}")


def nullable(schema: Any, named: dict[str, Any]) -> bool:
    schema = resolve(schema, named)
    if isinstance(schema, list):
        return union_shape(schema, named)[0]
    return type_name(schema) == "null"


def decimal_type(schema: dict[str, Any]) -> pa.DataType:
    precision, scale = int(schema.get("precision", 0)), int(schema.get("scale", 0))
    if not 1 <= precision <= MAX_DECIMAL_PRECISION or not 0 <= scale <= precision:
        raise UnsupportedSchema(f"decimal({precision}, {scale}): Spark's decimals have 1 to 38 digits")
    return pa.decimal128(precision, scale)
