"""A FileDescriptorProto written back as .proto text: how a schema registered as a serialized descriptor
is shown (Confluent shows .proto text unless asked for `?format=serialized`), how such a schema is given
to protoc when a text schema imports it, and the normal form of PROTOBUF schemas.

Everything a descriptor holds is written: syntax, package, imports (public, weak), options (custom ones
as `(name)`), messages with their fields, labels, defaults, oneofs, maps, nested types, reserved ranges
and names, extension ranges; enums; services; extensions. Type names are written fully qualified
(`.pkg.Msg`), which protoc reads back to the same descriptor. proto2 groups and editions files are not
written (`ValueError`): callers keep the serialized form for them.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import descriptor_pb2
from google.protobuf.message import Message

F = descriptor_pb2.FieldDescriptorProto
_TYPES = {F.TYPE_DOUBLE: "double", F.TYPE_FLOAT: "float", F.TYPE_INT64: "int64", F.TYPE_UINT64: "uint64",
          F.TYPE_INT32: "int32", F.TYPE_FIXED64: "fixed64", F.TYPE_FIXED32: "fixed32", F.TYPE_BOOL: "bool",
          F.TYPE_STRING: "string", F.TYPE_BYTES: "bytes", F.TYPE_UINT32: "uint32", F.TYPE_SFIXED32: "sfixed32",
          F.TYPE_SFIXED64: "sfixed64", F.TYPE_SINT32: "sint32", F.TYPE_SINT64: "sint64"}
_MAX_FIELD = 536870911  # the highest field number: `max` in a range


def _json_name(name: str) -> str:
    """protoc's default json_name: underscores dropped, the letter after one upper-cased."""
    out, upper = [], False
    for c in name:
        if c == "_":
            upper = True
        else:
            out.append(c.upper() if upper else c)
            upper = False
    return "".join(out)


def _value(field: Any, value: Any) -> str:
    if field.type == field.TYPE_ENUM:
        v = field.enum_type.values_by_number.get(value)
        return v.name if v is not None else str(value)
    if field.type == field.TYPE_BOOL:
        return "true" if value else "false"
    if field.type == field.TYPE_STRING:
        return json.dumps(value)
    if field.type == field.TYPE_BYTES:
        return json.dumps(value.decode("latin-1"))
    if field.type == field.TYPE_MESSAGE:
        return "{ " + " ".join(f"{f.name}: {_value(f, v)}" for f, v in value.ListFields()) + " }"
    return repr(value) if isinstance(value, float) else str(value)


def _options(options: Message, skip: tuple[str, ...] = ()) -> list[str]:
    """`name = value` for each option set (repeated ones once per value)."""
    out = []
    for field, value in options.ListFields():
        if field.name in skip:
            continue
        name = f"({field.full_name})" if field.is_extension else field.name
        for v in (value if field.is_repeated else [value]):
            out.append(f"{name} = {_value(field, v)}")
    return out


def _ranges(ranges: Any, inclusive_end: bool) -> str:
    parts = []
    for r in ranges:
        end = r.end if inclusive_end else r.end - 1
        parts.append(str(r.start) if end == r.start else f"{r.start} to {'max' if end >= _MAX_FIELD else end}")
    return ", ".join(parts)


class _Writer:
    def __init__(self, proto3: bool) -> None:
        self.proto3 = proto3
        self.lines: list[str] = []
        self.depth = 0

    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def block(self, head: str) -> None:
        self.line(head + " {")
        self.depth += 1

    def end(self) -> None:
        self.depth -= 1
        self.line("}")

    def field(self, f: descriptor_pb2.FieldDescriptorProto, maps: dict[str, descriptor_pb2.DescriptorProto],
              in_oneof: bool) -> None:
        if f.type == F.TYPE_GROUP:
            raise ValueError("proto2 groups are not written as text")
        entry = maps.get(f.type_name)
        if entry is not None:
            key, value = sorted(entry.field, key=lambda x: x.number)
            head = f"map<{self.type_of(key)}, {self.type_of(value)}>"
        else:
            label = ""
            if not in_oneof:
                if f.label == F.LABEL_REPEATED:
                    label = "repeated "
                elif f.label == F.LABEL_REQUIRED:
                    label = "required "
                elif not self.proto3 or f.proto3_optional:
                    label = "optional "
            head = label + self.type_of(f)
        opts = []
        if f.HasField("default_value"):
            if f.type == F.TYPE_STRING:
                opts.append(f"default = {json.dumps(f.default_value)}")
            elif f.type == F.TYPE_BYTES:  # kept C-escaped in the descriptor, as the text has it
                opts.append(f'default = "{f.default_value}"')
            else:
                opts.append(f"default = {f.default_value}")
        if f.HasField("json_name") and f.json_name != _json_name(f.name):
            opts.append(f"json_name = {json.dumps(f.json_name)}")
        opts.extend(_options(f.options))
        self.line(f"{head} {f.name} = {f.number}{' [' + ', '.join(opts) + ']' if opts else ''};")

    @staticmethod
    def type_of(f: descriptor_pb2.FieldDescriptorProto) -> str:
        return _TYPES.get(f.type) or f.type_name

    def message(self, m: descriptor_pb2.DescriptorProto, scope: str) -> None:
        full = f"{scope}.{m.name}"
        maps = {f"{full}.{n.name}": n for n in m.nested_type if n.options.map_entry}
        self.block(f"message {m.name}")
        for o in _options(m.options, skip=("map_entry",)):
            self.line(f"option {o};")
        if m.reserved_range:
            self.line(f"reserved {_ranges(m.reserved_range, inclusive_end=False)};")
        if m.reserved_name:
            self.line(f"reserved {', '.join(json.dumps(n) for n in m.reserved_name)};")
        written: set[int] = set()
        for f in m.field:
            if f.HasField("oneof_index") and not f.proto3_optional:
                if f.oneof_index in written:
                    continue
                written.add(f.oneof_index)
                decl = m.oneof_decl[f.oneof_index]
                self.block(f"oneof {decl.name}")
                for o in _options(decl.options):
                    self.line(f"option {o};")
                for g in m.field:
                    if g.HasField("oneof_index") and g.oneof_index == f.oneof_index and not g.proto3_optional:
                        self.field(g, maps, in_oneof=True)
                self.end()
            else:
                self.field(f, maps, in_oneof=False)
        for n in m.nested_type:
            if not n.options.map_entry:
                self.message(n, full)
        for e in m.enum_type:
            self.enum(e)
        if m.extension_range:
            self.line(f"extensions {_ranges(m.extension_range, inclusive_end=False)};")
        self.extensions(list(m.extension))
        self.end()

    def enum(self, e: descriptor_pb2.EnumDescriptorProto) -> None:
        self.block(f"enum {e.name}")
        for o in _options(e.options):
            self.line(f"option {o};")
        if e.reserved_range:
            self.line(f"reserved {_ranges(e.reserved_range, inclusive_end=True)};")
        if e.reserved_name:
            self.line(f"reserved {', '.join(json.dumps(n) for n in e.reserved_name)};")
        for v in e.value:
            opts = _options(v.options)
            self.line(f"{v.name} = {v.number}{' [' + ', '.join(opts) + ']' if opts else ''};")
        self.end()

    def extensions(self, fields: list[descriptor_pb2.FieldDescriptorProto]) -> None:
        by_extendee: dict[str, list[descriptor_pb2.FieldDescriptorProto]] = {}
        for f in fields:
            by_extendee.setdefault(f.extendee, []).append(f)
        for extendee, group in by_extendee.items():
            self.block(f"extend {extendee}")
            for f in group:
                self.field(f, {}, in_oneof=False)
            self.end()

    def service(self, s: descriptor_pb2.ServiceDescriptorProto) -> None:
        self.block(f"service {s.name}")
        for o in _options(s.options):
            self.line(f"option {o};")
        for m in s.method:
            req = ("stream " if m.client_streaming else "") + m.input_type
            resp = ("stream " if m.server_streaming else "") + m.output_type
            opts = _options(m.options)
            if opts:
                self.block(f"rpc {m.name} ({req}) returns ({resp})")
                for o in opts:
                    self.line(f"option {o};")
                self.end()
            else:
                self.line(f"rpc {m.name} ({req}) returns ({resp});")
        self.end()


def to_text(fdp: descriptor_pb2.FileDescriptorProto) -> str:
    """The .proto text of a file descriptor. Raises ValueError for what text cannot hold here."""
    if fdp.syntax not in ("", "proto2", "proto3"):
        raise ValueError(f"{fdp.syntax} files are not written as text")
    w = _Writer(fdp.syntax == "proto3")
    w.line(f'syntax = "{fdp.syntax or "proto2"}";')
    if fdp.package:
        w.line(f"package {fdp.package};")
    public, weak = set(fdp.public_dependency), set(fdp.weak_dependency)
    for i, dep in enumerate(fdp.dependency):
        w.line(f'import {"public " if i in public else "weak " if i in weak else ""}{json.dumps(dep)};')
    for o in _options(fdp.options):
        w.line(f"option {o};")
    scope = f".{fdp.package}" if fdp.package else ""
    for m in fdp.message_type:
        w.message(m, scope)
    for e in fdp.enum_type:
        w.enum(e)
    for s in fdp.service:
        w.service(s)
    w.extensions(list(fdp.extension))
    return "\n".join(w.lines) + "\n"
