"""What a schema says about the records written with it: their record name, and whether a payload decodes.

Schema-checked topics use both (gregor.schema_registry.checks). The record name is what Confluent's
RecordNameStrategy and TopicRecordNameStrategy put in a subject: an Avro schema's full name (a primitive's
type name, as Confluent's serializers use it; a union has none), a JSON schema's `title`, a Protobuf
schema's first message's full name. A decoder takes a payload after the 5-byte wire-format prefix and
returns why it does not decode, or None: Avro with fastavro (every byte must be used), JSON with
`jsonschema` against the schema and its references, Protobuf with the `protobuf` runtime, the message
chosen by the message-index varints Confluent's serializers write first.

Decoders are built once per schema and called from the produce path's validation threads; each is safe
to call from several threads at once (they share only immutable parsed schemas).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import avro.schema
import fastavro
import jsonschema
import jsonschema.validators
import referencing
import referencing.jsonschema
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from gregor.schema_registry.formats.avro_format import AvroSchema
from gregor.schema_registry.formats.base import ParsedSchema
from gregor.schema_registry.formats.json_format import JsonSchema
from gregor.schema_registry.formats.protobuf_format import ProtobufSchema

Decoder = Callable[[bytes], str | None]
MAX_MESSAGE_INDEXES = 64  # message-index varints of one Protobuf payload (nesting deeper than this is refused)


def record_name(schema: ParsedSchema) -> str | None:
    """The record name RecordNameStrategy puts in the subject, None when the schema has none."""
    if isinstance(schema, AvroSchema):
        parsed = schema.parsed
        if isinstance(parsed, avro.schema.NamedSchema):
            return str(parsed.fullname)
        if isinstance(parsed, avro.schema.PrimitiveSchema):
            return str(parsed.type)
        return None
    if isinstance(schema, JsonSchema):
        title = schema.obj.get("title") if isinstance(schema.obj, dict) else None
        return title if isinstance(title, str) and title else None
    if isinstance(schema, ProtobufSchema):
        if not schema.main.message_type:
            return None
        package = schema.main.package
        return f"{package}.{schema.main.message_type[0].name}" if package else schema.main.message_type[0].name
    return None


def decoder(schema: ParsedSchema) -> Decoder | None:
    """A decoder for payloads written with `schema`; None when payloads of this schema cannot be checked
    safely (an Avro array or map of items that take no bytes: a few bytes could claim billions of them)."""
    if isinstance(schema, AvroSchema):
        return _avro_decoder(schema)
    if isinstance(schema, JsonSchema):
        return _json_decoder(schema)
    if isinstance(schema, ProtobufSchema):
        return _protobuf_decoder(schema)
    raise TypeError(f"no decoder for {schema.schema_type} schemas")


# --- Avro ---------------------------------------------------------------------------------------------


def _avro_decoder(schema: AvroSchema) -> Decoder | None:
    resolved = json.loads(schema.formatted("resolved") or schema.canonical())
    if _holds_zero_size_items(resolved, {}):
        return None
    parsed = fastavro.parse_schema(resolved)

    def decode(data: bytes) -> str | None:
        buf = io.BytesIO(data)
        try:
            fastavro.schemaless_reader(buf, parsed)
        except Exception as e:  # fastavro raises whatever its readers meet (EOFError, ValueError, ...)
            return f"does not decode with its Avro schema: {type(e).__name__}: {e}"
        left = len(data) - buf.tell()
        return f"{left} bytes left after the Avro datum" if left else None

    return decode


def _zero_size(node: Any, named: dict[str, bool]) -> bool:
    """Whether a value of this Avro type can be written in no bytes (null, fixed of size 0, a record of such)."""
    if isinstance(node, str):
        return node == "null" or named.get(node, False)
    if isinstance(node, list):
        return False  # a union writes its branch index
    if isinstance(node, dict):
        t = node.get("type")
        if t == "fixed":
            size = node.get("size") == 0
            named[str(node.get("name"))] = size
            return size
        if t == "record":
            named.setdefault(str(node.get("name")), True)  # a recursive record is not zero-size: it needs a union
            size = all(_zero_size(f.get("type"), named) for f in node.get("fields", []))
            named[str(node.get("name"))] = size
            return size
        if isinstance(t, dict | list) or t == "null":
            return _zero_size(t, named)
    return False


def _holds_zero_size_items(node: Any, named: dict[str, bool]) -> bool:
    """Whether an array's items or a map's values anywhere in the schema can take no bytes."""
    if isinstance(node, list):
        return any(_holds_zero_size_items(n, named) for n in node)
    if not isinstance(node, dict):
        return False
    t = node.get("type")
    if t == "array" and _zero_size(node.get("items"), named):
        return True
    if t == "map" and _zero_size(node.get("values"), named):
        return True
    if t in ("record", "fixed"):
        _zero_size(node, named)
    children = [f.get("type") for f in node.get("fields", [])] + [node.get("items"), node.get("values")]
    if isinstance(t, dict | list):
        children.append(t)
    return any(_holds_zero_size_items(c, named) for c in children if c is not None)


# --- JSON ---------------------------------------------------------------------------------------------


def _json_decoder(schema: JsonSchema) -> Decoder:
    cls = jsonschema.validators.validator_for(schema.obj, default=jsonschema.Draft7Validator)
    spec = referencing.jsonschema.specification_with(cls.META_SCHEMA.get("$schema", ""),
                                                     default=referencing.jsonschema.DRAFT7)
    registry: referencing.Registry[Any] = referencing.Registry()
    for name, doc in schema.docs.items():
        registry = registry.with_resource(name, referencing.Resource.from_contents(doc, default_specification=spec))
    validator = cls(schema.obj, registry=registry)

    def decode(data: bytes) -> str | None:
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError) as e:
            return f"is not JSON: {e}"
        try:
            error = jsonschema.exceptions.best_match(validator.iter_errors(doc))
        except (jsonschema.exceptions.JsonSchemaException, referencing.exceptions.Unresolvable, RecursionError) as e:
            return f"cannot be checked against its JSON schema: {e}"
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path)
        return f"does not match its JSON schema{' at ' + where if where else ''}: {error.message}"

    return decode


# --- Protobuf -----------------------------------------------------------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint (as Confluent writes message indexes) at pos: (value, new pos). Raises ValueError."""
    u, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("the message indexes are truncated")
        b = data[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            return (u >> 1) ^ -(u & 1), pos
        shift += 7


def _protobuf_decoder(schema: ProtobufSchema) -> Decoder:
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(name: str) -> None:
        if name in added:
            return
        fdp = schema.main if name == schema.main.name else schema.files[name]
        for dep in fdp.dependency:
            add(dep)
        added.add(name)
        pool.AddSerializedFile(fdp.SerializeToString())

    add(schema.main.name)
    package = schema.main.package
    classes: dict[tuple[int, ...], Any] = {}

    def message_class(indexes: tuple[int, ...]) -> Any:
        cls = classes.get(indexes)
        if cls is None:
            messages, names = list(schema.main.message_type), [package] if package else []
            for i in indexes:
                if not 0 <= i < len(messages):
                    raise ValueError(f"message index {list(indexes)} names no message of the schema")
                names.append(messages[i].name)
                messages = list(messages[i].nested_type)
            cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(".".join(names)))
            classes[indexes] = cls
        return cls

    def decode(data: bytes) -> str | None:
        try:
            count, pos = _varint(data, 0)
            if count < 0 or count > MAX_MESSAGE_INDEXES:
                return f"invalid message-index count {count}"
            indexes = []
            for _ in range(count):
                i, pos = _varint(data, pos)
                indexes.append(i)
            cls = message_class(tuple(indexes) or (0,))
        except ValueError as e:
            return str(e)
        try:
            cls.FromString(data[pos:])
        except (DecodeError, RuntimeError, ValueError) as e:
            return f"does not decode as {cls.DESCRIPTOR.full_name}: {e}"
        return None

    return decode
