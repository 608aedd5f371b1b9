"""Avro values as Python objects, between fastavro's form and pyarrow's.

fastavro reads a union as the bare value of its branch, uuid as uuid.UUID and time-millis/-micros as
datetime.time; Spark's types want a struct of members, a string and a number. Writing goes the other
way: a struct of members becomes the value of its one non-null member, an Arrow map's (key, value) list a
dict. Both walks are built once per schema and are None where a schema needs no change (most do not).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

from gregor.typed import avro_types as at

Convert = Callable[[Any], Any]


def _matches(schema: Any, value: Any, named: dict[str, Any]) -> bool:
    """Whether `value`, as fastavro reads it, can be of union branch `schema`."""
    schema = at.resolve(schema, named)
    kind, lt = at.type_name(schema), at.logical(schema)
    if lt in ("timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros"):
        return isinstance(value, dt.datetime)
    if lt == "date":
        return isinstance(value, dt.date) and not isinstance(value, dt.datetime)
    if lt in ("time-millis", "time-micros"):
        return isinstance(value, dt.time)
    if lt == "uuid":
        return isinstance(value, uuid.UUID | str)
    if lt == "decimal":
        return value.__class__.__name__ == "Decimal"
    if kind in ("int", "long"):
        return isinstance(value, int) and not isinstance(value, bool)
    if kind in ("float", "double"):
        return isinstance(value, float)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in ("bytes", "fixed"):
        return isinstance(value, bytes)
    if kind == "string":
        return isinstance(value, str)
    if kind == "enum":
        return isinstance(value, str) and value in schema["symbols"]
    if kind == "array":
        return isinstance(value, list)
    if kind == "map":
        return isinstance(value, dict)
    if kind == "record":
        return isinstance(value, dict) and set(value) == {f["name"] for f in schema["fields"]}
    return False


def to_arrow(schema: Any, named: dict[str, Any]) -> Convert | None:
    """A function turning what fastavro read into what pyarrow takes for `schema`'s Arrow type, or None
    when they are the same."""
    schema = at.resolve(schema, named)
    kind, lt = at.type_name(schema), at.logical(schema)
    if lt == "uuid":
        return lambda v: None if v is None else str(v)
    if lt == "time-millis":
        return lambda v: None if v is None else ((v.hour * 60 + v.minute) * 60 + v.second) * 1000 + v.microsecond // 1000
    if lt == "time-micros":
        return lambda v: None if v is None else ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond
    if kind == "record":
        convs = [(f["name"], to_arrow(f["type"], named)) for f in schema["fields"]]
        convs = [(n, c) for n, c in convs if c is not None]
        if not convs:
            return None

        def record(v: Any) -> Any:
            if v is None:
                return None
            out = dict(v)
            for name, conv in convs:
                out[name] = conv(out[name])
            return out
        return record
    if kind in ("array", "map"):
        conv = to_arrow(schema["items" if kind == "array" else "values"], named)
        if conv is None:
            return None
        if kind == "array":
            return lambda v: None if v is None else [conv(x) for x in v]
        return lambda v: None if v is None else {k: conv(x) for k, x in v.items()}
    if kind == "union":
        _, members = at.union_shape(schema, named)
        if len(members) == 1 or at.promoted_union(members, named):
            return to_arrow(members[0], named) if len(members) == 1 else (lambda v: v)
        if not members:
            return None
        convs2 = [to_arrow(m, named) for m in members]

        def union(v: Any) -> Any:
            if v is None:
                return None
            for i, m in enumerate(members):
                if _matches(m, v, named):
                    conv = convs2[i]
                    return {f"member{i}": conv(v) if conv else v}
            raise ValueError(f"a value of type {type(v).__name__} matches no branch of the union")
        return union
    return None


def from_arrow(schema: Any, named: dict[str, Any]) -> Convert | None:
    """A function turning pyarrow's Python values (to_pylist) of `schema`'s Arrow type into values
    fastavro writes with `schema`, or None when they are the same."""
    schema = at.resolve(schema, named)
    kind = at.type_name(schema)
    if kind == "record":
        convs = [(f["name"], from_arrow(f["type"], named)) for f in schema["fields"]]
        convs = [(n, c) for n, c in convs if c is not None]
        if not convs:
            return None

        def record(v: Any) -> Any:
            if v is None:
                return None
            out = dict(v)
            for name, conv in convs:
                out[name] = conv(out.get(name))
            return out
        return record
    if kind == "array":
        conv = from_arrow(schema["items"], named)
        return None if conv is None else (lambda v: None if v is None else [conv(x) for x in v])
    if kind == "map":
        conv = from_arrow(schema["values"], named)
        if conv is None:
            return lambda v: None if v is None else dict(v)
        return lambda v: None if v is None else {k: conv(x) for k, x in v}
    if kind == "union":
        _, members = at.union_shape(schema, named)
        if len(members) <= 1 or at.promoted_union(members, named):
            return from_arrow(members[0], named) if len(members) == 1 else None
        convs2 = [from_arrow(m, named) for m in members]
        names = [at.resolve(m, named).get("name") if isinstance(at.resolve(m, named), dict) else None for m in members]

        def union(v: Any) -> Any:
            if v is None:
                return None
            for i in range(len(members)):
                x = v.get(f"member{i}")
                if x is not None:
                    x = convs2[i](x) if convs2[i] else x
                    return (names[i], x) if names[i] and at.type_name(at.resolve(members[i], named)) == "record" else x
            return None
        return union
    return None
