"""Protobuf payloads to Arrow and back.

Schemas are built by the registry's own Protobuf support (gregor.schema_registry.formats: .proto text
through protoc, or a serialized FileDescriptorProto as confluent-kafka registers it) into a descriptor
pool; messages are parsed and serialized by the protobuf runtime (upb), one message at a time, and the
values gathered per batch into one Arrow array.

Types follow Spark's from_protobuf: messages are structs of nullable fields (oneof members included, as
plain fields), repeated fields lists, map fields maps, enums strings (their value names),
google.protobuf.Timestamp a timestamp[us, UTC], int32/sint32/sfixed32 int32, uint32/fixed32 and the
64-bit integers int64 (uint64 past 2^63 wraps, as in Spark), float, double, bool, string, bytes. A
scalar field without presence reads as its default, as the runtime gives it; a message field or a
field with presence (proto3 `optional`, proto2) that is unset reads as null.

The payload's message indexes (after the schema id: a zigzag varint count, then the indexes; a single 0
for the first message) name the writer's message; it must have the reader message's full name. The
payload is then parsed with the reader's message class: fields are matched by number, so records of
any compatible version are projected onto the reader's fields.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
from google.protobuf import descriptor, descriptor_pool, message_factory

from gregor.typed.errors import UnsupportedSchema
from gregor.typed.registry_client import LruCache, RegistryClient, SchemaInfo

FD = descriptor.FieldDescriptor
UTC_US = pa.timestamp("us", tz="UTC")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_INT32 = {FD.TYPE_INT32, FD.TYPE_SINT32, FD.TYPE_SFIXED32}
_INT64 = {FD.TYPE_INT64, FD.TYPE_SINT64, FD.TYPE_SFIXED64, FD.TYPE_UINT32, FD.TYPE_FIXED32,
          FD.TYPE_UINT64, FD.TYPE_FIXED64}
_SCALAR = {FD.TYPE_FLOAT: pa.float32(), FD.TYPE_DOUBLE: pa.float64(), FD.TYPE_BOOL: pa.bool_(),
           FD.TYPE_STRING: pa.string(), FD.TYPE_BYTES: pa.binary(), FD.TYPE_ENUM: pa.string(),
           **{t: pa.int32() for t in _INT32}, **{t: pa.int64() for t in _INT64}}
TIMESTAMP = "google.protobuf.Timestamp"


def read_indexes(data: memoryview | bytes, pos: int) -> tuple[list[int], int]:
    """Confluent's message indexes at `pos`: (the indexes, the position after them)."""
    def varint(p: int) -> tuple[int, int]:
        v, shift = 0, 0
        while True:
            if p >= len(data) or shift > 63:
                raise ValueError("truncated message indexes")
            b = data[p]
            p += 1
            v |= (b & 0x7F) << shift
            if not b & 0x80:
                return (v >> 1) ^ -(v & 1), p
            shift += 7

    count, pos = varint(pos)
    if count == 0:
        return [0], pos
    if not 0 < count <= 64:
        raise ValueError(f"bad message index count {count}")
    out = []
    for _ in range(count):
        i, pos = varint(pos)
        out.append(i)
    return out, pos


def write_indexes(indexes: list[int]) -> bytes:
    if indexes == [0]:
        return b"\x00"
    out = bytearray()
    for v in [len(indexes), *indexes]:
        z = (v << 1) ^ (v >> 63)
        while z >= 0x80:
            out.append((z & 0x7F) | 0x80)
            z >>= 7
        out.append(z)
    return bytes(out)


class ProtobufSchema:
    """A registered Protobuf schema built into a descriptor pool; `message` is the one read and written
    (the first of the file unless named)."""

    def __init__(self, info: SchemaInfo, registry: RegistryClient | None, message_name: str | None = None) -> None:
        from gregor.schema_registry.formats.base import Dependency
        from gregor.schema_registry.formats.protobuf_format import parse_protobuf
        from gregor.schema_registry.records import Reference as RecordReference

        self.info = info
        deps = registry.dependencies(info) if registry and info.references else []
        refs = tuple(RecordReference(r.name, r.subject, r.version) for r in info.references)
        try:
            parsed = parse_protobuf(info.schema, refs, [Dependency(n, d.schema_type, d.schema) for n, d in deps])
        except Exception as e:  # RegistryError from the registry's parser
            raise UnsupportedSchema(f"not a valid Protobuf schema: {e}") from None
        self.pool = descriptor_pool.DescriptorPool()
        added: set[str] = set()

        def add(name: str) -> None:
            if name in added:
                return
            added.add(name)
            fdp = parsed.files.get(name) if name != parsed.main.name else parsed.main
            if fdp is None:
                raise UnsupportedSchema(f"the import {name} is missing")
            for d in fdp.dependency:
                add(d)
            self.pool.Add(fdp)

        add(parsed.main.name)
        self.file = self.pool.FindFileByName(parsed.main.name)
        if not self.file.message_types_by_name:
            raise UnsupportedSchema("the Protobuf schema defines no message")
        if message_name:
            try:
                self.message = self.pool.FindMessageTypeByName(message_name)
            except KeyError:
                raise UnsupportedSchema(f"the schema has no message {message_name}") from None
        else:
            self.message = list(self.file.message_types_by_name.values())[0]
        self.cls = message_factory.GetMessageClass(self.message)
        self.indexes = self._indexes(self.message)
        self.arrow_type = message_type(self.message, ())

    def message_at(self, indexes: list[int]) -> descriptor.Descriptor:
        msgs = list(self.file.message_types_by_name.values())
        d = None
        for i in indexes:
            if not 0 <= i < len(msgs):
                raise ValueError(f"message index {i} is out of range")
            d = msgs[i]
            msgs = list(d.nested_types)
        assert d is not None
        return d

    def _indexes(self, d: descriptor.Descriptor) -> list[int]:
        path = []
        while d.containing_type is not None:
            path.append(list(d.containing_type.nested_types).index(d))
            d = d.containing_type
        path.append(list(self.file.message_types_by_name.values()).index(d))
        return path[::-1]


def message_type(d: descriptor.Descriptor, stack: tuple[str, ...]) -> pa.DataType:
    if d.full_name == TIMESTAMP:
        return UTC_US
    if d.full_name in stack:
        raise UnsupportedSchema(f"the message {d.full_name} contains itself: recursive types have no Arrow type")
    return pa.struct([pa.field(f.name, field_type(f, (*stack, d.full_name)), nullable=True) for f in d.fields])


def _is_map(f: descriptor.FieldDescriptor) -> bool:
    return f.message_type is not None and f.message_type.GetOptions().map_entry


def _is_repeated(f: descriptor.FieldDescriptor) -> bool:
    repeated = getattr(f, "is_repeated", None)  # protobuf >= 6; `label` before
    return bool(repeated) if repeated is not None else f.label == FD.LABEL_REPEATED


def value_type(f: descriptor.FieldDescriptor, stack: tuple[str, ...]) -> pa.DataType:
    if f.type in (FD.TYPE_MESSAGE, FD.TYPE_GROUP):
        return message_type(f.message_type, stack)
    return _SCALAR[f.type]


def field_type(f: descriptor.FieldDescriptor, stack: tuple[str, ...]) -> pa.DataType:
    if _is_map(f):
        k, v = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
        return pa.map_(pa.field("key", value_type(k, stack), nullable=False),
                       pa.field("value", value_type(v, stack), nullable=v.type == FD.TYPE_MESSAGE))
    if _is_repeated(f):
        return pa.list_(pa.field("element", value_type(f, stack), nullable=False))
    return value_type(f, stack)


Convert = Callable[[Any], Any]


def _wrap64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _value_reader(f: descriptor.FieldDescriptor) -> Convert | None:
    """Converts one value of f (not repeated) from the runtime's form; None where it is already right."""
    if f.type in (FD.TYPE_MESSAGE, FD.TYPE_GROUP):
        return message_reader(f.message_type)
    if f.type == FD.TYPE_ENUM:
        names = {v.number: v.name for v in f.enum_type.values}
        return lambda v: names.get(v, str(v))
    if f.type in (FD.TYPE_UINT64, FD.TYPE_FIXED64):
        return _wrap64
    return None


def message_reader(d: descriptor.Descriptor) -> Convert:
    """A function from a message of `d` to the Python value pyarrow takes for message_type(d)."""
    if d.full_name == TIMESTAMP:
        return lambda m: m.seconds * 1_000_000 + m.nanos // 1000
    plan = []
    for f in d.fields:
        conv = _value_reader(f)
        if _is_map(f):
            kconv = _value_reader(f.message_type.fields_by_name["key"])
            vconv = _value_reader(f.message_type.fields_by_name["value"])
            plan.append((f.name, 2, kconv, vconv))
        elif _is_repeated(f):
            plan.append((f.name, 1, conv, None))
        else:
            plan.append((f.name, 3 if f.has_presence else 0, conv, None))

    def read(m: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, how, conv, vconv in plan:
            v = getattr(m, name)
            if how == 0:
                out[name] = conv(v) if conv else v
            elif how == 3:
                out[name] = (conv(v) if conv else v) if m.HasField(name) else None
            elif how == 1:
                out[name] = [conv(x) for x in v] if conv else list(v)
            else:
                out[name] = [(conv(k) if conv else k, vconv(x) if vconv else x) for k, x in v.items()]
        return out

    return read


def message_writer(d: descriptor.Descriptor) -> Callable[[Any, Any], None]:
    """A function filling a message of `d` from a Python value of message_type(d) (to_pylist's form)."""
    if d.full_name == TIMESTAMP:
        def ts(m: Any, v: Any) -> None:
            us = v if isinstance(v, int) else (v - _EPOCH) // dt.timedelta(microseconds=1)
            m.seconds, m.nanos = divmod(us, 1_000_000)
            m.nanos *= 1000
        return ts

    def scalar(f: descriptor.FieldDescriptor) -> Convert:
        if f.type == FD.TYPE_ENUM:
            numbers = {v.name: v.number for v in f.enum_type.values}
            return lambda v: numbers[v] if isinstance(v, str) and v in numbers else int(v)
        if f.type in (FD.TYPE_UINT64, FD.TYPE_FIXED64):
            return lambda v: v + (1 << 64) if v < 0 else v
        return lambda v: v

    plan: list[tuple[str, int, Any, Any]] = []
    for f in d.fields:
        is_msg = f.type in (FD.TYPE_MESSAGE, FD.TYPE_GROUP)
        if _is_map(f):
            vf = f.message_type.fields_by_name["value"]
            vmsg = vf.type in (FD.TYPE_MESSAGE, FD.TYPE_GROUP)
            plan.append((f.name, 2, scalar(f.message_type.fields_by_name["key"]),
                         (message_writer(vf.message_type) if vmsg else scalar(vf), vmsg)))
        elif _is_repeated(f):
            plan.append((f.name, 1, message_writer(f.message_type) if is_msg else scalar(f), is_msg))
        else:
            plan.append((f.name, 0, message_writer(f.message_type) if is_msg else scalar(f), is_msg))

    def write(m: Any, v: dict[str, Any]) -> None:
        for name, how, conv, extra in plan:
            x = v.get(name)
            if x is None:
                continue
            if how == 0:
                if extra:
                    conv(getattr(m, name), x)
                else:
                    setattr(m, name, conv(x))
            elif how == 1:
                target = getattr(m, name)
                for item in x:
                    if extra:
                        conv(target.add(), item)
                    else:
                        target.append(conv(item))
            else:
                target = getattr(m, name)
                vconv, vmsg = extra
                for k, item in x:
                    if vmsg:
                        vconv(target[conv(k)], item)
                    elif item is not None:
                        target[conv(k)] = vconv(item)
    return write


class ProtobufDecoder:
    schema_type = "PROTOBUF"

    def __init__(self, reader: ProtobufSchema, registry: RegistryClient, cache_capacity: int = 1000) -> None:
        self.reader = reader
        self.registry = registry
        self.arrow_type = reader.arrow_type
        self._read = message_reader(reader.message)
        self._writers = LruCache(cache_capacity)

    def _writer(self, info: SchemaInfo) -> ProtobufSchema:
        if info.id == self.reader.info.id:
            return self.reader
        w = self._writers.get(info.id)
        if w is None:
            w = ProtobufSchema(info, self.registry)
            self._writers.put(info.id, w)
        return w

    def decode_group(self, col: pa.Array, rows: np.ndarray | None,
                     info: SchemaInfo) -> tuple[pa.Array, list[tuple[int, str]]]:
        writer = self._writer(info)
        names: dict[tuple[int, ...], str] = {}
        bufs = col.buffers()
        offsets = np.frombuffer(bufs[1], dtype="<i4", count=len(col) + 1, offset=col.offset * 4)
        data = memoryview(bufs[2]) if bufs[2] is not None else memoryview(b"")
        parse, read, want = self.reader.cls.FromString, self._read, self.reader.message.full_name
        values: list[Any] = []
        errors: list[tuple[int, str]] = []
        for k, r in enumerate(range(len(col)) if rows is None else rows.tolist()):
            start, end = int(offsets[r]), int(offsets[r + 1])
            try:
                indexes, pos = read_indexes(data[:end], start + 5)
                key = tuple(indexes)
                if key not in names:
                    names[key] = writer.message_at(indexes).full_name
                if names[key] != want:
                    raise ValueError(f"the payload is a {names[key]}, not a {want}")
                values.append(read(parse(data[pos:end])))
            except Exception as e:  # DecodeError, bad indexes, a wrong message: the row is corrupt
                values.append(None)
                errors.append((k, f"{type(e).__name__}: {e}"[:300]))
        return pa.array(values, type=self.arrow_type), errors


def encode_protobuf(arr: pa.Array, schema: ProtobufSchema, schema_id: int) -> list[bytes | None]:
    header = b"\x00" + schema_id.to_bytes(4, "big") + write_indexes(schema.indexes)
    write = message_writer(schema.message)
    out: list[bytes | None] = []
    for v in arr.to_pylist():
        if v is None:
            out.append(None)
            continue
        m = schema.cls()
        write(m, v)
        out.append(header + m.SerializeToString())
    return out
