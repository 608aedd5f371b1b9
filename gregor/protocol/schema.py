"""A small declarative language for Kafka message layouts, and the codec compiled from it.

Each API is described once (fields, the versions each field exists in, nullability,
tags, defaults); `Schema.decode(reader, version)` and `Schema.encode(writer, obj, version)`
are compiled per version on first use into flat lists of closures, so the per-message
cost is a loop over fields with no version checks.

Decoded values are `Struct` objects (attribute access). Encoding accepts `Struct`
objects or plain dicts; a missing attribute encodes as the field's default.
"""

from __future__ import annotations

import uuid as _uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gregor.protocol.primitives import DecodeError, Reader, Writer


class Struct:
    """A decoded message or sub-structure: a bag of named fields."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"Struct({inner})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Struct) and self.__dict__ == other.__dict__

    def get(self, name: str, default: Any = None) -> Any:
        return self.__dict__.get(name, default)

    def to_dict(self) -> dict[str, Any]:
        def conv(v: Any) -> Any:
            if isinstance(v, Struct):
                return v.to_dict()
            if isinstance(v, list):
                return [conv(x) for x in v]
            return v

        return {k: conv(v) for k, v in self.__dict__.items()}


# --- version ranges -------------------------------------------------------------------

@dataclass(frozen=True)
class Versions:
    low: int
    high: int  # inclusive; a large number means "and later"

    def __contains__(self, v: int) -> bool:
        return self.low <= v <= self.high

    @staticmethod
    def parse(spec: str | None) -> Versions:
        """'0+', '3-5', '4', 'none' (or None)."""
        if spec is None or spec == "none":
            return NO_VERSIONS
        if spec.endswith("+"):
            return Versions(int(spec[:-1]), 1 << 15)
        if "-" in spec:
            lo, hi = spec.split("-")
            return Versions(int(lo), int(hi))
        return Versions(int(spec), int(spec))


NO_VERSIONS = Versions(1, 0)


# --- types ----------------------------------------------------------------------------

class Type:
    """A wire type. `default` is the value a field takes when absent from a version."""

    name = "?"
    default: Any = None

    def reader(self, flexible: bool, nullable: bool) -> Callable[[Reader], Any]:
        raise NotImplementedError

    def writer(self, flexible: bool, nullable: bool) -> Callable[[Writer, Any], None]:
        raise NotImplementedError


class _Prim(Type):
    def __init__(self, name: str, default: Any) -> None:
        self.name = name
        self.default = default

    def reader(self, flexible: bool, nullable: bool) -> Callable[[Reader], Any]:
        n = self.name
        if n == "string":
            return lambda r: r.string(flexible, nullable)
        if n in ("bytes", "records"):
            return lambda r: r.bytes_(flexible, nullable)
        meth = {"bool": "boolean", "float64": "float64"}.get(n, n)
        return getattr(Reader, meth)

    def writer(self, flexible: bool, nullable: bool) -> Callable[[Writer, Any], None]:
        n = self.name
        if n == "string":
            return lambda w, v: w.string(v, flexible)
        if n in ("bytes", "records"):
            return lambda w, v: w.bytes_(v, flexible)
        meth = {"bool": "boolean"}.get(n, n)
        return getattr(Writer, meth)


BOOL = _Prim("bool", False)
INT8 = _Prim("int8", 0)
INT16 = _Prim("int16", 0)
UINT16 = _Prim("uint16", 0)
INT32 = _Prim("int32", 0)
UINT32 = _Prim("uint32", 0)
INT64 = _Prim("int64", 0)
FLOAT64 = _Prim("float64", 0.0)
UUID = _Prim("uuid", _uuid.UUID(int=0))
STRING = _Prim("string", "")
BYTES = _Prim("bytes", b"")
RECORDS = _Prim("records", None)  # a record set: bytes on the wire, opaque here


class Array(Type):
    def __init__(self, item: Type | list[Field]) -> None:
        self.item = StructType(item) if isinstance(item, list) else item
        self.name = f"[]{self.item.name}"

    @property
    def default(self) -> Any:  # a fresh list per use
        return []

    def reader(self, flexible: bool, nullable: bool) -> Callable[[Reader], Any]:
        item = self.item.reader(flexible, False)

        def read(r: Reader) -> Any:
            n = r.array_length(flexible, nullable)
            if n < 0:
                return None
            return [item(r) for _ in range(n)]

        return read

    def writer(self, flexible: bool, nullable: bool) -> Callable[[Writer, Any], None]:
        item = self.item.writer(flexible, False)

        def write(w: Writer, v: Any) -> None:
            if v is None:
                if not nullable:
                    raise ValueError("null array in a non-nullable field")
                w.array_length(None, flexible)
                return
            w.array_length(len(v), flexible)
            for x in v:
                item(w, x)

        return write


class StructType(Type):
    """A nested structure. Its fields' versions are those of the enclosing message."""

    name = "struct"

    def __init__(self, fields: list[Field]) -> None:
        self.fields = fields
        self._version = -1  # set by the compiler before reader()/writer() are asked for

    @property
    def default(self) -> Any:
        return None

    def reader(self, flexible: bool, nullable: bool) -> Callable[[Reader], Any]:
        return _compile_reader(self.fields, self._version, flexible, nullable)

    def writer(self, flexible: bool, nullable: bool) -> Callable[[Writer, Any], None]:
        return _compile_writer(self.fields, self._version, flexible, nullable)


# --- fields ---------------------------------------------------------------------------

@dataclass
class Field:
    name: str
    type: Type
    versions: Versions
    nullable: Versions = NO_VERSIONS
    tag: int | None = None
    tagged: Versions = NO_VERSIONS
    default: Any = field(default=None)
    has_default: bool = False

    def default_value(self) -> Any:
        if self.has_default:
            return self.default
        return self.type.default


def f(
    name: str,
    type_: Type | list[Field],
    versions: str = "0+",
    *,
    nullable: str | None = None,
    tag: int | None = None,
    tagged: str | None = None,
    default: Any = None,
    has_default: bool | None = None,
) -> Field:
    """Declare a field. A list as the type means an array of that structure."""
    t = Array(type_) if isinstance(type_, list) else type_
    return Field(
        name,
        t,
        Versions.parse(versions),
        Versions.parse(nullable),
        tag,
        Versions.parse(tagged),
        default,
        default is not None if has_default is None else has_default,
    )


def struct(*fields: Field) -> StructType:
    return StructType(list(fields))


def _with_version(t: Type, version: int) -> Type:
    """StructTypes need the version of the message they are compiled for."""
    if isinstance(t, StructType):
        clone = StructType(t.fields)
        clone._version = version
        return clone
    if isinstance(t, Array) and isinstance(t.item, StructType):
        clone_a = Array(_with_version(t.item, version))
        return clone_a
    return t


def _compile_reader(fields: list[Field], version: int, flexible: bool, nullable_struct: bool) -> Callable[[Reader], Any]:
    plain: list[tuple[str, Callable[[Reader], Any]]] = []
    tagged: dict[int, tuple[str, Callable[[Reader], Any]]] = {}
    absent: list[Field] = []
    for fd in fields:
        is_tagged = flexible and version in fd.tagged and fd.tag is not None
        if version not in fd.versions and not is_tagged:
            absent.append(fd)
            continue
        t = _with_version(fd.type, version)
        rd = t.reader(flexible, version in fd.nullable)
        if is_tagged:
            tagged[fd.tag] = (fd.name, rd)  # type: ignore[index]
            absent.append(fd)  # default unless the tag shows up
        else:
            plain.append((fd.name, rd))

    def read(r: Reader) -> Any:
        if nullable_struct and flexible:
            if r.int8() < 0:
                return None
        s = Struct()
        d = s.__dict__
        for fd in absent:
            d[fd.name] = fd.default_value()
        for name, rd in plain:
            d[name] = rd(r)
        if flexible:
            count = r.unsigned_varint()
            for _ in range(count):
                tag = r.unsigned_varint()
                size = r.unsigned_varint()
                end = r.pos + size
                if end > r.end:
                    raise DecodeError("tagged field overruns buffer")
                known = tagged.get(tag)
                if known is None:
                    r.pos = end  # unknown tags are skipped, as the protocol requires
                    continue
                sub = Reader(r.buf, r.pos, end)
                d[known[0]] = known[1](sub)
                r.pos = end
        return s

    return read


def _get(obj: Any, name: str, fd: Field) -> Any:
    if isinstance(obj, dict):
        v = obj.get(name, _MISSING)
    else:
        v = getattr(obj, name, _MISSING)
    if v is _MISSING:
        return fd.default_value()
    return v


_MISSING = object()


def _compile_writer(fields: list[Field], version: int, flexible: bool, nullable_struct: bool) -> Callable[[Writer, Any], None]:
    plain: list[tuple[str, Field, Callable[[Writer, Any], None]]] = []
    tagged: list[tuple[int, str, Field, Callable[[Writer, Any], None]]] = []
    for fd in fields:
        is_tagged = flexible and version in fd.tagged and fd.tag is not None
        if version not in fd.versions and not is_tagged:
            continue
        t = _with_version(fd.type, version)
        wr = t.writer(flexible, version in fd.nullable)
        if is_tagged:
            tagged.append((fd.tag, fd.name, fd, wr))  # type: ignore[arg-type]
        else:
            plain.append((fd.name, fd, wr))
    tagged.sort(key=lambda x: x[0])

    def write(w: Writer, obj: Any) -> None:
        if nullable_struct and flexible:
            if obj is None:
                w.int8(-1)
                return
            w.int8(1)
        for name, fd, wr in plain:
            wr(w, _get(obj, name, fd))
        if flexible:
            present = []
            for tag, name, fd, wr in tagged:
                v = _get(obj, name, fd)
                if v is None or v == fd.default_value():
                    continue  # tagged fields at their default are omitted
                sub = Writer()
                wr(sub, v)
                present.append((tag, sub.getvalue()))
            w.unsigned_varint(len(present))
            for tag, data in present:
                w.unsigned_varint(tag)
                w.unsigned_varint(len(data))
                w.raw(data)

    return write


class Schema:
    """One side (request or response) of one API, with its valid and flexible versions."""

    def __init__(self, name: str, fields: list[Field], valid: str, flexible: str) -> None:
        self.name = name
        self.fields = fields
        self.valid = Versions.parse(valid)
        self.flexible = Versions.parse(flexible)
        self._readers: dict[int, Callable[[Reader], Any]] = {}
        self._writers: dict[int, Callable[[Writer, Any], None]] = {}

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible

    def decode(self, r: Reader, version: int) -> Struct:
        rd = self._readers.get(version)
        if rd is None:
            if version not in self.valid:
                raise DecodeError(f"{self.name} v{version} is not supported")
            rd = self._readers[version] = _compile_reader(self.fields, version, version in self.flexible, False)
        return rd(r)

    def encode(self, w: Writer, obj: Any, version: int) -> None:
        wr = self._writers.get(version)
        if wr is None:
            if version not in self.valid:
                raise ValueError(f"{self.name} v{version} is not supported")
            wr = self._writers[version] = _compile_writer(self.fields, version, version in self.flexible, False)
        wr(w, obj)

    def to_bytes(self, obj: Any, version: int) -> bytes:
        w = Writer()
        self.encode(w, obj, version)
        return w.getvalue()

    def from_bytes(self, data: bytes | memoryview, version: int) -> Struct:
        r = Reader(data)
        out = self.decode(r, version)
        return out


@dataclass
class Api:
    """An API key with its request and response schemas and the versions we serve."""

    key: int
    name: str
    request: Schema
    response: Schema
    min_version: int
    max_version: int
    flexible_from: int  # first flexible version (request and response share it)
    # What ApiVersions shows as the minimum when it must differ from what is served (Produce:
    # Kafka 4.0 advertises v0 but rejects v0-2, because librdkafka only compresses when it sees v0).
    advertised_min_version: int | None = None

    def request_header_version(self, version: int) -> int:
        return 2 if version >= self.flexible_from else 1

    def response_header_version(self, version: int) -> int:
        if self.key == 18:  # ApiVersions responses always use header v0 (clients parse them blind)
            return 0
        return 1 if version >= self.flexible_from else 0


def api(
    key: int,
    name: str,
    *,
    versions: str,
    flexible: str,
    request: list[Field],
    response: list[Field],
) -> Api:
    """Declare an API. `versions` is the range we serve; `flexible` like '9+' (or 'none')."""
    v = Versions.parse(versions)
    fl = Versions.parse(flexible)
    return Api(
        key,
        name,
        Schema(f"{name}Request", request, versions, flexible),
        Schema(f"{name}Response", response, versions, flexible),
        v.low,
        v.high,
        fl.low if fl != NO_VERSIONS else 1 << 15,
    )
