"""Avro schema resolution done on Arrow arrays: records decoded with the writer's schema turned into the
reader schema's type, column by column rather than record by record.

It covers what schema evolution does in practice: fields added (filled with the reader's default) or
removed, promotions (int to long, float, double; long to float, double; float to double; string and
bytes either way), enum symbols (a symbol the reader lacks becomes its default), nullable fields and
nested records, arrays and maps of those. Anything else raises NotResolvable and the caller reads
those payloads per record with fastavro, which resolves everything the specification allows.
"""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.compute as pc

from gregor.typed import avro_types as at
from gregor.typed import avro_values

_PROMOTIONS = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
               ("float", "double"), ("string", "bytes"), ("bytes", "string")}


class NotResolvable(Exception):
    """This pair of schemas (or these values) needs the per-record path."""


def default_value(field: dict[str, Any], named: dict[str, Any]) -> Any:
    """A reader field's default as pyarrow takes it (fastavro reads it, logical types and all)."""
    reader = {"type": "record", "name": "_Default", "fields": [
        {"name": "v", "type": field["type"], "default": field["default"]}]}
    writer = {"type": "record", "name": "_Default", "fields": []}
    named2 = dict(named)
    parsed_r = fastavro.parse_schema(reader, named2, _write_hint=False)
    parsed_w = fastavro.parse_schema(writer, {}, _write_hint=False)
    value = fastavro.schemaless_reader(io.BytesIO(b""), parsed_w, parsed_r)["v"]  # type: ignore[index,call-overload]
    conv = avro_values.to_arrow(field["type"], named)
    return conv(value) if conv else value


def resolve(arr: pa.Array, w: Any, r: Any, wn: dict[str, Any], rn: dict[str, Any]) -> pa.Array:
    """`arr` (values of writer schema `w`) as values of reader schema `r`."""
    w, r = at.resolve(w, wn), at.resolve(r, rn)
    target = at.arrow_type(r, rn)
    wk, rk = at.type_name(w), at.type_name(r)
    if wk == "union" or rk == "union":
        w_null, w_members = at.union_shape(w, wn) if wk == "union" else (False, [w])
        r_null, r_members = at.union_shape(r, rn) if rk == "union" else (False, [r])
        if len(w_members) != 1 or len(r_members) != 1 or (w_null and not r_null):
            if at.expanded(w, wn) == at.expanded(r, rn):
                return arr
            raise NotResolvable("unions")
        return resolve(arr, w_members[0], r_members[0], wn, rn)
    if wk == "record" and rk == "record":
        return _record(arr, w, r, wn, rn, target)
    if wk == "enum" and rk == "enum":
        missing = [s for s in w["symbols"] if s not in r["symbols"]]
        if missing:
            bad = pc.is_in(arr, value_set=pa.array(missing, pa.string()))
            if pc.any(bad).as_py():
                if r.get("default") is None:
                    raise NotResolvable("an enum symbol the reader lacks")
                arr = pc.if_else(bad, pa.scalar(r["default"], pa.string()), arr)
        return arr
    if wk == "array" and rk == "array":
        values = resolve(arr.values, w["items"], r["items"], wn, rn)
        return pa.ListArray.from_arrays(arr.offsets, values, type=target, mask=_mask(arr))
    if wk == "map" and rk == "map":
        values = resolve(arr.items, w["values"], r["values"], wn, rn)
        return pa.MapArray.from_arrays(arr.offsets, arr.keys, values, type=target, mask=_mask(arr))
    if arr.type == target and (wk == rk or (wk, rk) in {("fixed", "fixed")}) and at.logical(w) == at.logical(r):
        return arr
    if (wk, rk) in _PROMOTIONS and not at.logical(w) and not at.logical(r):
        try:
            return arr.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise NotResolvable(f"{wk} to {rk}") from None
    raise NotResolvable(f"{wk} to {rk}")


def _mask(arr: pa.Array) -> pa.Array | None:
    return arr.is_null() if arr.null_count else None


def _record(arr: pa.Array, w: Any, r: Any, wn: dict[str, Any], rn: dict[str, Any], target: pa.DataType) -> pa.Array:
    if arr.offset:
        arr = pa.concat_arrays([arr])
    by_name = {f["name"]: i for i, f in enumerate(w["fields"])}
    children = []
    for f in r["fields"]:
        i = next((by_name[n] for n in [f["name"], *f.get("aliases", ())] if n in by_name), None)
        if i is not None:
            children.append(resolve(arr.field(i), w["fields"][i]["type"], f["type"], wn, rn))
        elif "default" in f:
            ftype = at.arrow_type(f["type"], rn)
            value = default_value(f, rn)
            children.append(pa.nulls(len(arr), ftype) if value is None else pa.repeat(pa.scalar(value, ftype), len(arr)))
        else:
            raise NotResolvable(f"reader field {f['name']} has no default and the writer lacks it")
    return pa.StructArray.from_arrays(children, fields=list(target), mask=_mask(arr))
