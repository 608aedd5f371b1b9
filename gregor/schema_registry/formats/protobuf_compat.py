"""Protobuf evolution: Confluent's rules, over two sets of descriptors (FileDescriptorProto).

Protobuf identifies fields by number, so the rules are about numbers and wire types. Allowed: adding
or removing a message, enum or enum value, adding or removing an optional field (by number), renaming a
field, changing a field's scalar type within one wire-compatible group (int32/int64/uint32/uint64/bool/
enum; sint32/sint64; string/bytes; fixed32/sfixed32; fixed64/sfixed64), a string or bytes field
becoming repeated or back, adding a oneof, or moving one field into a new oneof. Refused, with
Confluent's difference names: PACKAGE_CHANGED, MESSAGE_REMOVED (top-level or nested: serialized
message indexes point at it), REQUIRED_FIELD_ADDED, REQUIRED_FIELD_REMOVED, FIELD_KIND_CHANGED (scalar,
message, map), FIELD_SCALAR_KIND_CHANGED, FIELD_NAMED_TYPE_CHANGED (a message field now of another
message type, or of the same one changed incompatibly), FIELD_LABEL_CHANGED, ONEOF_FIELD_REMOVED,
MULTIPLE_FIELDS_MOVED_TO_ONEOF, FIELD_MOVED_TO_EXISTING_ONEOF.

The writer's schema is compared to the reader's; the rules are symmetric but for additions and removals
of messages, which BACKWARD and FORWARD see from opposite sides.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2

FDP = descriptor_pb2.FieldDescriptorProto
_SCALAR_KIND = {
    FDP.TYPE_INT32: "GENERAL_NUMBER", FDP.TYPE_INT64: "GENERAL_NUMBER", FDP.TYPE_UINT32: "GENERAL_NUMBER",
    FDP.TYPE_UINT64: "GENERAL_NUMBER", FDP.TYPE_BOOL: "GENERAL_NUMBER", FDP.TYPE_ENUM: "GENERAL_NUMBER",
    FDP.TYPE_SINT32: "SIGNED_NUMBER", FDP.TYPE_SINT64: "SIGNED_NUMBER",
    FDP.TYPE_STRING: "STRING_OR_BYTES", FDP.TYPE_BYTES: "STRING_OR_BYTES",
    FDP.TYPE_FIXED32: "FIXED32", FDP.TYPE_SFIXED32: "FIXED32", FDP.TYPE_FIXED64: "FIXED64", FDP.TYPE_SFIXED64: "FIXED64",
    FDP.TYPE_FLOAT: "FLOAT", FDP.TYPE_DOUBLE: "DOUBLE",
}


class TypeIndex:
    """Every message and enum a schema can use, by full name (without the leading dot)."""

    def __init__(self, main: descriptor_pb2.FileDescriptorProto,
                 files: dict[str, descriptor_pb2.FileDescriptorProto]) -> None:
        self.main = main
        self.messages: dict[str, descriptor_pb2.DescriptorProto] = {}
        self.packages: dict[str, str] = {}  # message full name -> its file's package
        self.enums: set[str] = set()
        for fdp in [*files.values(), main]:
            prefix = fdp.package + "." if fdp.package else ""
            self._add(prefix, fdp.package, fdp.message_type, fdp.enum_type)

    def _add(self, prefix: str, package: str, messages: list[descriptor_pb2.DescriptorProto],
             enums: list[descriptor_pb2.EnumDescriptorProto]) -> None:
        for e in enums:
            self.enums.add(prefix + e.name)
        for m in messages:
            self.messages[prefix + m.name] = m
            self.packages[prefix + m.name] = package
            self._add(prefix + m.name + ".", package, list(m.nested_type), list(m.enum_type))

    def local_name(self, full: str) -> str:
        package = self.packages.get(full, "")
        return full[len(package) + 1:] if package and full.startswith(package + ".") else full

    def is_map(self, full: str) -> bool:
        m = self.messages.get(full)
        return m is not None and m.options.map_entry


def _label_repeated(f: descriptor_pb2.FieldDescriptorProto) -> bool:
    return f.label == FDP.LABEL_REPEATED


def _real_oneof(m: descriptor_pb2.DescriptorProto, f: descriptor_pb2.FieldDescriptorProto) -> str | None:
    """The oneof a field belongs to, ignoring proto3 `optional`'s synthetic oneofs."""
    if not f.HasField("oneof_index") or f.proto3_optional:
        return None
    return m.oneof_decl[f.oneof_index].name


class ProtobufDiff:
    def __init__(self, writer: TypeIndex, reader: TypeIndex) -> None:
        self.w = writer
        self.r = reader
        self.errors: list[str] = []
        self._seen: set[tuple[str, str]] = set()

    def _add(self, path: str, kind: str) -> None:
        self.errors.append(f"{kind} at '#/{path}'")

    def compare(self) -> list[str]:
        if self.w.main.package != self.r.main.package:
            self._add("", "PACKAGE_CHANGED")
        prefix = self.w.main.package + "." if self.w.main.package else ""
        rprefix = self.r.main.package + "." if self.r.main.package else ""
        self._types(prefix, rprefix, list(self.w.main.message_type), list(self.r.main.message_type), "")
        return self.errors

    def _types(self, wprefix: str, rprefix: str, wmsgs: list[descriptor_pb2.DescriptorProto],
               rmsgs: list[descriptor_pb2.DescriptorProto], path: str) -> None:
        rby = {m.name: m for m in rmsgs}
        for m in wmsgs:
            if m.options.map_entry:
                continue
            if m.name not in rby:
                self._add(path + m.name, "MESSAGE_REMOVED")
            else:
                self._message(wprefix + m.name, rprefix + m.name, path + m.name)

    def _message(self, wname: str, rname: str, path: str) -> None:
        if (wname, rname) in self._seen:
            return
        self._seen.add((wname, rname))
        wm, rm = self.w.messages[wname], self.r.messages[rname]
        w_top = {f.number: f for f in wm.field if _real_oneof(wm, f) is None}
        r_top = {f.number: f for f in rm.field if _real_oneof(rm, f) is None}
        w_all = {f.number: f for f in wm.field}
        r_all = {f.number: f for f in rm.field}
        w_oneofs: dict[str, dict[int, descriptor_pb2.FieldDescriptorProto]] = {}
        r_oneofs: dict[str, dict[int, descriptor_pb2.FieldDescriptorProto]] = {}
        for m, out in ((wm, w_oneofs), (rm, r_oneofs)):
            for f in m.field:
                name = _real_oneof(m, f)
                if name is not None:
                    out.setdefault(name, {})[f.number] = f
        w_in_oneof = {n for fields in w_oneofs.values() for n in fields}
        moved: set[int] = set()
        for oname, fields in r_oneofs.items():
            n_moved = sum(1 for n in fields if n in w_top)
            n_existing = sum(1 for n in fields if n not in w_top and n in w_in_oneof)
            moved.update(n for n in fields if n in w_top)
            if n_moved > 1:
                self._add(f"{path}/{oname}", "MULTIPLE_FIELDS_MOVED_TO_ONEOF")
            elif n_moved == 1 and n_existing > 0:
                self._add(f"{path}/{oname}", "FIELD_MOVED_TO_EXISTING_ONEOF")
        for oname, wfields in w_oneofs.items():
            rfields = r_oneofs.get(oname)
            if rfields is None:
                continue  # ONEOF_REMOVED is allowed; its fields are compared by number below
            for n in wfields:
                if n not in rfields:
                    self._add(f"{path}/{oname}/{n}", "ONEOF_FIELD_REMOVED")
                else:
                    self._field(wfields[n], rfields[n], f"{path}/{oname}/{n}")
        for n in sorted(set(w_top) | set(r_top)):
            wf, rf = w_top.get(n), r_top.get(n)
            if rf is None:
                if n in moved:
                    continue
                if wf is not None and wf.label == FDP.LABEL_REQUIRED:
                    self._add(f"{path}/{n}", "REQUIRED_FIELD_REMOVED")
            elif wf is None:
                if rf.label == FDP.LABEL_REQUIRED:
                    self._add(f"{path}/{n}", "REQUIRED_FIELD_ADDED")
            else:
                self._field(wf, rf, f"{path}/{n}")
        for n in sorted(set(w_all) & set(r_all)):  # fields whose oneof changed: compare their contents too
            wo, ro = _real_oneof(wm, w_all[n]), _real_oneof(rm, r_all[n])
            if wo != ro:
                self._field(w_all[n], r_all[n], f"{path}/{n}")
        self._types(wname + ".", rname + ".", list(wm.nested_type), list(rm.nested_type), path + ".")

    def _kind(self, index: TypeIndex, f: descriptor_pb2.FieldDescriptorProto) -> str:
        if f.type in _SCALAR_KIND:
            return "SCALAR"
        if index.is_map(f.type_name.lstrip(".")):
            return "MAP"
        return "MESSAGE"

    def _field(self, wf: descriptor_pb2.FieldDescriptorProto, rf: descriptor_pb2.FieldDescriptorProto, path: str) -> None:
        wk, rk = self._kind(self.w, wf), self._kind(self.r, rf)
        if wk != rk:
            self._add(path, "FIELD_KIND_CHANGED")
            return
        if wk == "SCALAR":
            if _SCALAR_KIND[wf.type] != _SCALAR_KIND[rf.type]:
                self._add(path, "FIELD_SCALAR_KIND_CHANGED")
            elif _label_repeated(wf) != _label_repeated(rf) and _SCALAR_KIND[wf.type] != "STRING_OR_BYTES":
                self._add(path, "FIELD_LABEL_CHANGED")
            return
        wname, rname = wf.type_name.lstrip("."), rf.type_name.lstrip(".")
        if wk == "MAP":
            wm, rm = self.w.messages[wname], self.r.messages[rname]
            for wsub, rsub in zip(sorted(wm.field, key=lambda x: x.number), sorted(rm.field, key=lambda x: x.number),
                                  strict=False):
                self._field(wsub, rsub, path)
            return
        if _label_repeated(wf) != _label_repeated(rf):
            self._add(path, "FIELD_LABEL_CHANGED")
        if wname not in self.w.messages or rname not in self.r.messages:
            if wname != rname:
                self._add(path, "FIELD_NAMED_TYPE_CHANGED")
            return
        if self.w.local_name(wname) != self.r.local_name(rname):
            self._add(path, "FIELD_NAMED_TYPE_CHANGED")
            return
        before = len(self.errors)
        self._message(wname, rname, self.r.local_name(rname))
        if len(self.errors) > before:
            self._add(path, "FIELD_NAMED_TYPE_CHANGED")
