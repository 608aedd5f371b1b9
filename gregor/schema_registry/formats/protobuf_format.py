"""PROTOBUF schemas: .proto text compiled by protoc (grpcio-tools), or a serialized FileDescriptorProto.

The `protobuf` package has no .proto parser, so text goes through protoc itself, in process
(grpc_tools' compiler, the same protoc that generates code): its errors come back as exceptions with
line and column, and the result is a FileDescriptorProto with every type name resolved. Confluent's
clients (confluent-kafka's ProtobufSerializer among them) register schemas as base64 of the
FileDescriptorProto instead, and ask for them back with `?format=serialized`; both forms are accepted,
stored as they were sent, and both can be served serialized.

Imports are satisfied by the schema's references (the reference name is the import path) and by the
well-known files clients leave out of their references: google/protobuf/*.proto from `protobuf`,
google/type/*.proto (googleapis-common-protos) and Confluent's confluent/*.proto when installed.

A serialized descriptor is checked by building it, with its imports, into a fresh DescriptorPool: an
unresolved type or a duplicate name is refused like a compile error.
"""

from __future__ import annotations

import ast
import base64
import binascii
import importlib
import os
import re
import tempfile
import threading
import warnings
from importlib import resources
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message import DecodeError

from gregor.schema_registry.errors import invalid_schema
from gregor.schema_registry.formats.base import Dependency, ParsedSchema
from gregor.schema_registry.formats.protobuf_compat import ProtobufDiff, TypeIndex
from gregor.schema_registry.formats.protobuf_text import to_text
from gregor.schema_registry.records import PROTOBUF, Reference

MAIN_FILE = "schema.proto"  # the name a registered schema compiles under (its references keep theirs)
_BASE64 = re.compile(r"^[A-Za-z0-9+/=\s]+$")
_BUILTIN = re.compile(r"^(google/protobuf|google/type|confluent)(/[a-z0-9_]+)+\.proto$")
_BUILTIN_MODULES = {"google/protobuf/": "google.protobuf.", "google/type/": "google.type.",
                    "confluent/": "confluent_kafka.schema_registry.confluent."}
_protoc_lock = threading.Lock()  # protoc keeps global state: one compile at a time


def builtin_file(name: str) -> bytes | None:
    """The serialized descriptor of a well-known .proto file, or None if `name` is not one installed here."""
    if not _BUILTIN.match(name):
        return None
    for prefix, package in _BUILTIN_MODULES.items():
        if name.startswith(prefix):
            module = package + name[len(prefix):-len(".proto")].replace("/", ".") + "_pb2"
            try:
                return bytes(importlib.import_module(module).DESCRIPTOR.serialized_pb)
            except (ImportError, AttributeError):
                return None
    return None


def _decode_serialized(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The descriptor a base64 schema holds, or None when the text is not base64 of one."""
    if not _BASE64.match(text):
        return None
    try:
        raw = base64.b64decode("".join(text.split()), validate=True)
        fdp = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (binascii.Error, ValueError, DecodeError):
        return None
    return fdp if (fdp.message_type or fdp.enum_type or fdp.service or fdp.package or fdp.syntax) else None


def _serialized_files(code: bytes) -> list[bytes]:
    """The serialized FileDescriptorProtos in protoc's generated Python (its AddSerializedFile(b'...') call)."""
    out = []
    for node in ast.walk(ast.parse(code)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "AddSerializedFile"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, bytes)):
            out.append(node.args[0].value)
    return out


def _compile(text: str, deps: dict[str, str]) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """Compile `text` with protoc, its imports from `deps` (name -> .proto text) and the well-known files.
    Returns every compiled file's descriptor by name. Raises RegistryError 42201 with protoc's errors."""
    from grpc_tools import _protoc_compiler

    include = str(resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory(prefix="gregor-proto-") as tmp:
        for name, source in [*deps.items(), (MAIN_FILE, text)]:
            path = os.path.realpath(os.path.join(tmp, name))
            if not path.startswith(os.path.realpath(tmp) + os.sep) or name.startswith("google/protobuf/"):
                raise invalid_schema(f"reference name {name!r} is not a relative .proto path")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(source)
        try:
            with _protoc_lock, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                generated = _protoc_compiler.get_protos(MAIN_FILE.encode(), [tmp.encode(), include.encode()])
        except _protoc_compiler.ProtocErrors as e:
            errors = e.args[0] if e.args else []
            detail = "; ".join(f"{err.filename.decode()}:{err.line + 1}:{err.column + 1}: {err.message.decode()}"
                               for err in errors[:5]) or str(e)
            raise invalid_schema(detail) from None
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    for _module, code in generated:
        for raw in _serialized_files(code):
            fdp = descriptor_pb2.FileDescriptorProto.FromString(raw)
            files[fdp.name] = fdp
    if MAIN_FILE not in files:
        raise invalid_schema("protoc produced no descriptor for the schema")
    return files


class ProtobufSchema:
    schema_type = PROTOBUF

    def __init__(self, text: str, main: descriptor_pb2.FileDescriptorProto,
                 files: dict[str, descriptor_pb2.FileDescriptorProto], serialized: bool) -> None:
        self._text = text
        self.main = main
        self.files = files  # every file the schema needs, the well-known ones included
        self.index = TypeIndex(main, files)
        self.was_serialized = serialized
        try:
            self._printed: str | None = to_text(main)
        except ValueError:
            self._printed = None

    def canonical(self) -> str:
        return self._text

    def normalized(self) -> str:
        """The .proto text written from the descriptor: the same for a schema sent as text or serialized."""
        return self._printed or self._text

    def serialized(self) -> str:
        return base64.b64encode(self.main.SerializeToString(deterministic=True)).decode("ascii")

    def formatted(self, fmt: str) -> str | None:
        """`serialized`: base64 of the descriptor; "" (no format): .proto text, written from the descriptor
        when the schema was registered serialized."""
        if fmt == "serialized":
            return self.serialized()
        if fmt == "" and self.was_serialized:
            return self._printed
        return None

    def reader_errors(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, ProtobufSchema):
            return [f"a {writer.schema_type} schema cannot be read as PROTOBUF"]
        return ProtobufDiff(writer.index, self.index).compare()


def _check_in_pool(files: dict[str, descriptor_pb2.FileDescriptorProto], main: descriptor_pb2.FileDescriptorProto) -> None:
    """Build `main` with its imports into a fresh pool: what does not resolve raises RegistryError 42201."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(fdp: descriptor_pb2.FileDescriptorProto, depth: int) -> None:
        if fdp.name in added:
            return
        if depth > 64:
            raise invalid_schema("imports nest too deeply")
        for dep in fdp.dependency:
            if dep not in files:
                raise invalid_schema(f"import {dep!r} is neither a reference nor a well-known file")
            add(files[dep], depth + 1)
        added.add(fdp.name)
        try:
            pool.AddSerializedFile(fdp.SerializeToString())
        except (TypeError, ValueError) as e:
            raise invalid_schema(f"{fdp.name}: {e}") from None

    add(main, 0)


def _with_builtins(files: dict[str, Any], wanted: list[str]) -> None:
    todo = list(wanted)
    while todo:
        name = todo.pop()
        if name in files:
            continue
        raw = builtin_file(name)
        if raw is not None:
            fdp = descriptor_pb2.FileDescriptorProto.FromString(raw)
            files[name] = fdp
            todo.extend(fdp.dependency)


def parse_protobuf(text: str, references: tuple[Reference, ...], deps: list[Dependency]) -> ProtobufSchema:
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    texts: dict[str, str] = {}
    for dep in deps:
        fdp = _decode_serialized(dep.schema)
        if fdp is not None:
            fdp.name = dep.name
            files[dep.name] = fdp
        else:
            texts[dep.name] = dep.schema
    main = _decode_serialized(text)
    serialized = main is not None
    if main is None:
        for name, fdp in files.items():  # protoc reads text only: serialized references are written out as text
            try:
                texts[name] = to_text(fdp)
            except ValueError as e:
                raise invalid_schema(f"reference {name} cannot be imported by a .proto text schema: {e}") from None
        compiled = _compile(text, texts)
        main = compiled.pop(MAIN_FILE)
        files.update(compiled)
    else:
        for name, source in texts.items():  # text references of a serialized schema: compile each on its own
            compiled = _compile(source, {n: s for n, s in texts.items() if n != name})
            fdp = compiled.pop(MAIN_FILE)
            fdp.name = name
            files[name] = fdp
        if not main.name:
            main.name = MAIN_FILE
    _with_builtins(files, [*main.dependency, *(d for f in list(files.values()) for d in f.dependency)])
    _check_in_pool(files, main)
    return ProtobufSchema(text, main, files, serialized)
