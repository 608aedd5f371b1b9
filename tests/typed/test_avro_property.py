"""Property: on random schemas and random records, the fast Avro path (C decoder, resolution in Arrow)
gives exactly what fastavro per record gives, with the writer's schema as reader and with a reader that
drops a field, adds one with a default and promotes int and float fields."""

from __future__ import annotations

import copy
import datetime as dt
import decimal
import io
import itertools
import json
from typing import Any

import fastavro
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gregor.typed import avro_types as at
from gregor.typed.avro_codec import AvroDecoder, AvroSchema
from gregor.typed.registry_client import SchemaInfo

UTC = dt.UTC
_names = itertools.count()
PRIMITIVES = ["boolean", "int", "long", "float", "double", "string", "bytes"]
LOGICAL = [{"type": "int", "logicalType": "date"}, {"type": "long", "logicalType": "timestamp-millis"},
           {"type": "long", "logicalType": "timestamp-micros"}, {"type": "string", "logicalType": "uuid"},
           {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}]


def name() -> str:
    return f"T{next(_names)}"


@st.composite
def leaf(draw: Any) -> Any:
    kind = draw(st.sampled_from(["prim", "prim", "logical", "enum", "fixed", "decfixed"]))
    if kind == "prim":
        return draw(st.sampled_from(PRIMITIVES))
    if kind == "logical":
        return copy.deepcopy(draw(st.sampled_from(LOGICAL)))
    if kind == "enum":
        return {"type": "enum", "name": name(), "symbols": [f"S{i}" for i in range(draw(st.integers(1, 4)))]}
    if kind == "fixed":
        return {"type": "fixed", "name": name(), "size": draw(st.integers(0, 6))}
    return {"type": "fixed", "name": name(), "size": 8, "logicalType": "decimal", "precision": 18, "scale": 3}


def _kind(s: Any) -> str:
    """Kinds whose values fastavro's writer (or the per-record path's branch guess) cannot tell apart in a union."""
    if isinstance(s, list):
        return "union"
    if isinstance(s, dict) and s.get("logicalType") in ("date", "timestamp-millis", "timestamp-micros"):
        return "string"  # fastavro's writer parses a string as an ISO date/time and raises, not tries the next branch
    t = s if isinstance(s, str) else s["type"]
    # fastavro's writer takes bytes for a string branch (and str for bytes), so they are one kind here.
    return {"int": "num", "long": "num", "float": "real", "double": "real", "enum": "string", "fixed": "string", "bytes": "string",
            "record": "map"}.get(t, t)


def extend(children: Any) -> Any:
    def record(fields: list[Any]) -> Any:
        return {"type": "record", "name": name(), "fields": [{"name": f"f{i}", "type": t} for i, t in enumerate(fields)]}

    def union(members: list[Any]) -> Any:
        seen, out = set(), []
        for m in members:  # Avro: one branch per kind; and none the per-record path cannot tell apart
            k = _kind(m)
            if k not in seen and k != "union":
                seen.add(k)
                out.append(m)
        return out

    return st.one_of(
        st.lists(children, min_size=1, max_size=5).map(record),
        children.map(lambda t: {"type": "array", "items": t}),
        children.map(lambda t: {"type": "map", "values": t}),
        children.map(lambda t: ["null", t] if _kind(t) != "union" else t),
        st.lists(children, min_size=2, max_size=3).map(union).filter(lambda u: len(u) >= 1).map(
            lambda u: ["null", *u] if len(u) < 3 else u),
    )


schemas = st.recursive(leaf(), extend, max_leaves=8).map(
    lambda t: t if isinstance(t, dict) and t.get("type") == "record" else
    {"type": "record", "name": name(), "fields": [{"name": "v", "type": t}]})


def values(s: Any, named: dict[str, Any]) -> Any:
    s = at.resolve(s, named)
    kind, lt = at.type_name(s), at.logical(s)
    if lt == "date":
        return st.dates(dt.date(1900, 1, 1), dt.date(2200, 1, 1))
    if lt in ("timestamp-millis", "timestamp-micros"):
        ts = st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1), timezones=st.just(UTC))
        return ts.map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)) if lt == "timestamp-millis" else ts
    if lt == "uuid":
        return st.uuids()
    if lt == "decimal":
        p, sc = s["precision"], s["scale"]
        return st.integers(-(10 ** p) + 1, 10 ** p - 1).map(lambda i: decimal.Decimal(i).scaleb(-sc))
    if kind == "union":
        return st.one_of([st.none() if m == "null" else values(m, named) for m in s])
    simple = {"boolean": st.booleans(), "int": st.integers(-2**31, 2**31 - 1), "long": st.integers(-2**63, 2**63 - 1),
              "float": st.floats(width=32, allow_nan=False), "double": st.floats(allow_nan=False),
              "string": st.text(max_size=8), "bytes": st.binary(max_size=8), "null": st.none()}
    if kind in simple:
        return simple[kind]
    if kind == "enum":
        return st.sampled_from(s["symbols"])
    if kind == "fixed":
        return st.binary(min_size=s["size"], max_size=s["size"])
    if kind == "array":
        return st.lists(values(s["items"], named), max_size=3)
    if kind == "map":
        return st.dictionaries(st.text(max_size=4), values(s["values"], named), max_size=3)
    return st.fixed_dictionaries({f["name"]: values(f["type"], named) for f in s["fields"]})


def reader_of(writer: dict[str, Any]) -> dict[str, Any]:
    """A reader schema for `writer`: the last field dropped (if there are two), a field added with a default,
    int fields read as long and float fields as double."""
    promote = {"int": "long", "float": "double"}
    fields = [{**f, "type": promote.get(f["type"], f["type"]) if isinstance(f["type"], str) else f["type"]}
              for f in writer["fields"]]
    if len(fields) > 1:
        fields = fields[:-1]
    fields.append({"name": "added", "type": "string", "default": "dflt"})
    return {**writer, "fields": fields}


def payloads(schema: Any, records: list[Any], schema_id: int) -> pa.Array:
    parsed = fastavro.parse_schema(schema, {}, _write_hint=False)
    out = []
    for r in records:
        b = io.BytesIO()
        b.write(b"\x00" + schema_id.to_bytes(4, "big"))
        fastavro.schemaless_writer(b, parsed, r)
        out.append(b.getvalue())
    return pa.array(out, pa.binary())


# derandomize: the same 80 schemas every run, so CI does not meet a new corner of fastavro's own union
# rules (the reference here) one run in ten; explore with --hypothesis-seed=N.
@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_fast_path_equals_fastavro_per_record(data: Any) -> None:
    schema = data.draw(schemas)
    writer = SchemaInfo(1, "AVRO", json.dumps(schema))
    parsed, named = at.parse(writer.schema)
    records = data.draw(st.lists(values(parsed, named), min_size=1, max_size=20))
    col = payloads(schema, records, 1)
    for reader_schema in (schema, reader_of(schema)):
        reader = SchemaInfo(2 if reader_schema is not schema else 1, "AVRO", json.dumps(reader_schema))
        fast = AvroDecoder(AvroSchema(reader, None), None, fast=True)  # type: ignore[arg-type]
        if fast.writer(writer).plan is not None:  # compiled: the fast path must not fall back to per record
            fast.per_record = lambda *a: (_ for _ in ()).throw(AssertionError("the fast path fell back"))  # type: ignore[method-assign]
        slow = AvroDecoder(AvroSchema(reader, None), None, fast=False)  # type: ignore[arg-type]
        got_fast, errs_fast = fast.decode_group(col, None, writer)
        got_slow, errs_slow = slow.decode_group(col, None, writer)
        assert errs_fast == errs_slow == []
        assert got_fast.type == got_slow.type == at.arrow_type(*at.parse(reader.schema))
        assert got_fast.equals(got_slow), (schema, got_fast.to_pylist(), got_slow.to_pylist())


def test_the_fast_path_compiles_the_common_schemas() -> None:
    from gregor.typed.avro_plan import compile_plan
    for s in (["null", "string"], {"type": "array", "items": ["null", "int"]}, {"type": "map", "values": "double"},
              ["int", "long"], ["null", "int", "string"], {"type": "fixed", "name": "F", "size": 3}, *LOGICAL):
        schema = {"type": "record", "name": name(), "fields": [{"name": "v", "type": s}]}
        assert compile_plan(*at.parse(json.dumps(schema))) is not None, s


def test_sliced_columns_and_frames() -> None:
    from gregor.typed.codec import frames
    schema = {"type": "record", "name": name(), "fields": [{"name": "s", "type": "string"},
                                                           {"name": "n", "type": ["null", "long"]}]}
    records = [{"s": "x" * i, "n": None if i % 3 else i} for i in range(40)]
    col = payloads(schema, records, 7)
    info = SchemaInfo(7, "AVRO", json.dumps(schema))
    dec = AvroDecoder(AvroSchema(info, None), None)  # type: ignore[arg-type]
    whole, _ = dec.decode_group(col, None, info)
    part, errors = dec.decode_group(col.slice(5, 20), None, info)
    assert errors == [] and part.equals(whole.slice(5, 20))
    with_nulls = pa.concat_arrays([col.slice(0, 3), pa.array([None, b"\x01\x00\x00\x00\x07", b"\x00\x00"], pa.binary()),
                                   col.slice(3, 4)]).slice(2)
    ids, common = frames(with_nulls)
    assert ids.tolist() == [7, -1, -2, -2, 7, 7, 7, 7] and common == -3
    assert frames(col.slice(10, 5))[1] == 7


def test_hostile_block_counts_are_refused() -> None:
    """A few bytes may not declare millions of values: a block count is bounded by the bytes left, and the
    per-record path (taken here for the whole batch because of one string that is not UTF-8) is not handed
    the payloads the C decoder refused."""
    schema = {"type": "record", "name": name(), "fields": [{"name": "a", "type": {"type": "array", "items": "null"}},
                                                           {"name": "m", "type": {"type": "map", "values": "long"}},
                                                           {"name": "s", "type": "string"}]}
    info = SchemaInfo(9, "AVRO", json.dumps(schema))
    header = b"\x00" + (9).to_bytes(4, "big")

    def zigzag(v: int) -> bytes:
        z, out = (v << 1) ^ (v >> 63), bytearray()
        while z >= 0x80:
            out.append((z & 0x7F) | 0x80)
            z >>= 7
        return bytes(out + bytes([z]))

    col = pa.array([header + zigzag(3) + b"\x00" + b"\x00" + b"\x02x",           # three nulls, an empty map: fine
                    header + zigzag(1 << 40) + b"\x00" + b"\x00" + b"\x00",      # 2^40 nulls from 8 bytes
                    header + b"\x00" + zigzag(1 << 30) + b"\x02a\x02" + b"\x00",  # 2^30 map entries
                    header + b"\x00\x00" + b"\x02\xff"],                         # not UTF-8
                   pa.binary())
    dec = AvroDecoder(AvroSchema(info, None), None)  # type: ignore[arg-type]
    for c in (col.slice(0, 3), col):
        arr, errors = dec.decode_group(c, None, info)
        assert [k for k, _ in errors] == [1, 2, 3][: len(c) - 1], errors
        assert arr.to_pylist()[0] == {"a": [None, None, None], "m": [], "s": "x"}
