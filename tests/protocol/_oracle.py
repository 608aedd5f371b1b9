"""kafka-python 3.0 as an independent oracle for our message definitions.

kafka-python builds its codec from Apache Kafka's own JSON message schemas, so agreeing
with it byte for byte checks our hand-written definitions against the source of truth
rather than against themselves. This module finds its message classes by API key,
fills them with random but valid values (every field of a version, tagged fields
included), and flattens both sides' layouts for structural comparison.
"""

from __future__ import annotations

import importlib.resources
import random
import uuid
from typing import Any

from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.api_message import ApiMessage

from gregor.protocol import compression
from gregor.protocol.apis import ALL
from gregor.protocol.records import Header, Record, build_batch
from gregor.protocol.schema import Api, Array, Field, Schema, StructType

_INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}
_ALPHABET = "abcXYZ-_.019éø€"
_RESOURCES = "kafka.protocol.schemas.resources"


def kp_classes() -> dict[tuple[int, str], type]:
    """kafka-python message classes built straight from Kafka's JSON, by (api key, side).

    kafka-python's own classes patch a few schemas for its convenience (renamed
    authorized-operations fields decoded as bit sets, changed defaults); the oracle must
    be Kafka's schema as published, so fresh unpatched classes are built here. Building
    one registers it as the response class for its key, which kafka-python clients in the
    same process would then use, so that registry is restored afterwards.
    """
    names = sorted(
        p.name[: -len(".json")]
        for p in importlib.resources.files(_RESOURCES).iterdir()
        if p.name.endswith(("Request.json", "Response.json"))
    )
    registry = ResponseClassRegistry._response_class_registry
    saved = dict(registry)
    found: dict[tuple[int, str], type] = {}
    try:
        for name in names:
            cls = type(ApiMessage)(name, (ApiMessage,), {"__module__": __name__})
            found[(cls.API_KEY, cls.type)] = cls
    finally:
        registry.clear()
        registry.update(saved)
    return found


KP = kp_classes()


def kp_class(api: Api, side: str) -> type | None:
    return KP.get((api.key, side))


def oracle_cases() -> list[tuple[Api, int, str]]:
    """Every (api, version, side) both codecs know: kafka-python may lack newer APIs or versions."""
    cases = []
    for api in ALL:
        for side in ("request", "response"):
            cls = kp_class(api, side)
            if cls is None:
                continue
            for v in range(api.min_version, api.max_version + 1):
                if v <= cls.max_version:
                    cases.append((api, v, side))
    return cases


def schema_of(api: Api, side: str) -> Schema:
    return api.request if side == "request" else api.response


# --- random values -----------------------------------------------------------------------

def _records(rng: random.Random) -> bytes:
    n = rng.randint(1, 4)
    base = rng.randint(0, 1 << 40)
    recs = [
        Record(base + i, 1_700_000_000_000 + rng.randint(0, 10_000),
               None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 8)),
               rng.randbytes(rng.choice([0, 10, 300, 5000])),
               [Header("h", rng.randbytes(3))] if rng.random() < 0.5 else [])
        for i in range(n)
    ]
    return build_batch(recs, base_offset=base, codec=rng.choice([compression.NONE, compression.GZIP]))


def _simple(type_str: str, rng: random.Random, nullable: bool, avoid: Any = None) -> Any:
    while True:
        v = _simple_once(type_str, rng, nullable)
        if avoid is _NO_AVOID or v != avoid:
            return v


_NO_AVOID = object()


def _simple_once(type_str: str, rng: random.Random, nullable: bool) -> Any:
    if nullable and type_str in ("string", "bytes", "records") and rng.random() < 0.25:
        return None
    if type_str in _INT_RANGES:
        lo, hi = _INT_RANGES[type_str]
        return rng.choice([v for v in (lo, hi, -1, 0, 1) if lo <= v <= hi] + [rng.randint(lo, hi)])  # uint16: no -1
    if type_str == "bool":
        return rng.random() < 0.5
    if type_str == "float64":
        return rng.choice([0.0, -1.5, 1e300, rng.random()])
    if type_str == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    if type_str == "string":
        return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 12)))
    if type_str == "bytes":
        return rng.randbytes(rng.choice([0, 1, 7, 33]))
    if type_str == "records":
        return _records(rng)

    raise AssertionError(f"no generator for {type_str}")


def _kp_value(field: Any, version: int, rng: random.Random, tagged: bool) -> Any:
    nullable = field.nullable_for_version_q(version)
    default = field.default
    if field.is_struct_array() or field.is_struct():
        if nullable and rng.random() < 0.25:
            return None
        if field.is_struct():
            return _kp_struct(field, version, rng)
        count = rng.randint(1, 3) if tagged else rng.randint(0, 3)
        return [_kp_struct(field.array_of, version, rng) for _ in range(count)]
    if field.is_array():
        if nullable and rng.random() < 0.25:
            return None
        count = rng.randint(1, 3) if tagged else rng.randint(0, 3)
        return [_simple(field.array_of.type_str, rng, False, _NO_AVOID) for _ in range(count)]
    return _simple(field.type_str, rng, nullable, default if tagged else _NO_AVOID)


def _kp_struct(sf: Any, version: int, rng: random.Random, cls: type | None = None) -> Any:
    vals: dict[str, Any] = {}
    for fld in sf._fields:
        if not fld.for_version_q(version):
            continue
        tagged = fld.tagged_field_q(version)
        if tagged and rng.random() < 0.3:
            continue  # leave some tagged fields at their default, i.e. absent on the wire
        vals[fld.name] = _kp_value(fld, version, rng, tagged)
    return (cls or sf.data_class)(version=version, **vals)


def random_kp_message(api: Api, version: int, side: str, seed: int) -> Any:
    """A kafka-python message of this API/version with every field filled at random."""
    cls = kp_class(api, side)
    assert cls is not None
    rng = random.Random(seed)
    return _kp_struct(cls._struct, version, rng, cls=cls[None])


def kp_encode(msg: Any, version: int) -> bytes:
    return bytes(msg.encode(version=version))


# --- comparison ------------------------------------------------------------------------

def normalize(v: Any) -> Any:
    """Plain comparable values: bytes for views, dicts for structs, recursively."""
    if isinstance(v, memoryview | bytearray):
        return bytes(v)
    if isinstance(v, dict):
        return {k: normalize(x) for k, x in v.items()}
    if isinstance(v, list):
        return [normalize(x) for x in v]
    if hasattr(v, "to_dict") and not isinstance(v, dict):
        return normalize(v.to_dict())
    return v


def _kp_dict(obj: Any, sf: Any, version: int) -> Any:
    out: dict[str, Any] = {}
    for fld in sf._fields:
        if not fld.for_version_q(version):
            continue
        v = getattr(obj, fld.name)
        if fld.is_struct_array():
            v = None if v is None else [_kp_dict(x, fld.array_of, version) for x in v]
        elif fld.is_struct():
            v = None if v is None else _kp_dict(v, fld, version)
        out[fld.name] = normalize(v)
    return out


def kp_to_dict(msg: Any) -> dict[str, Any]:
    """kafka-python's view of a message: only the fields its version has, in our value types."""
    return _kp_dict(msg, type(msg)._struct, msg.version)


def project(ours: Any, theirs: Any) -> Any:
    """Restrict our decoded value to the keys kafka-python reports (ours also holds absent-field defaults)."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        return {k: project(ours.get(k, "<missing>"), theirs[k]) for k in theirs}
    if isinstance(theirs, list) and isinstance(ours, list) and len(ours) == len(theirs):
        return [project(o, t) for o, t in zip(ours, theirs, strict=True)]
    return ours


def our_layout(fields: list[Field], version: int, flexible: bool) -> list[tuple]:
    """(name, type, nullable, tag, default, children) of every field a version carries on the wire."""
    out = []
    for fd in fields:
        tagged = flexible and version in fd.tagged and fd.tag is not None
        if version not in fd.versions and not tagged:
            continue
        t = fd.type
        children = None
        if isinstance(t, Array) and isinstance(t.item, StructType):
            kind, children = "[]struct", our_layout(t.item.fields, version, flexible)
        elif isinstance(t, StructType):
            kind, children = "struct", our_layout(t.fields, version, flexible)
        else:
            kind = t.name
        out.append((fd.name, kind, version in fd.nullable, fd.tag if tagged else None, children))
    return out


def kp_layout(sf: Any, version: int, flexible: bool) -> list[tuple]:
    out = []
    for fld in sf._fields:
        if not fld.for_version_q(version):
            continue
        tagged = flexible and fld.tagged_field_q(version)
        children = None
        if fld.is_struct_array():
            kind, children = "[]struct", kp_layout(fld.array_of, version, flexible)
        elif fld.is_struct():
            kind, children = "struct", kp_layout(fld, version, flexible)
        else:
            kind = fld.type_str if not fld.is_array() else "[]" + fld.array_of.type_str
        out.append((fld.name, kind, fld.nullable_for_version_q(version), fld.tag if tagged else None, children))
    return out


def default_pairs(fields: list[Field], sf: Any, version: int, path: str = "") -> list[tuple[str, Any, Any]]:
    """(path, our default, kafka-python default) for every field of a version, recursively."""
    kp_fields = {fld.name: fld for fld in sf._fields}
    out = []
    for fd in fields:
        kp = kp_fields.get(fd.name)
        if kp is None or not kp.for_version_q(version):
            continue
        name = f"{path}{fd.name}"
        t = fd.type
        if isinstance(t, Array) and isinstance(t.item, StructType):
            out.extend(default_pairs(t.item.fields, kp.array_of, version, name + "."))
        elif isinstance(t, StructType):
            out.extend(default_pairs(t.fields, kp, version, name + "."))
        ours = fd.default_value()
        theirs = kp.default
        if isinstance(t, StructType):
            continue  # struct defaults are "all fields at their defaults"; compared field by field above
        if t.name == "uuid":
            theirs = theirs or uuid.UUID(int=0)
        if t.name in ("bytes", "records") and theirs == b"" and ours is None and not fd.has_default:
            theirs = None  # records/bytes without a declared default: both sides write nothing for it
        out.append((name, ours, theirs))
    return out
