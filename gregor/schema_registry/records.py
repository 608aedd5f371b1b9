"""The records of the `_schemas` topic, in Confluent's JSON: what a registry writes and reads back.

Keys and values are the JSON Confluent's Schema Registry writes, so a topic written by one can be read
by the other (and a compacted topic keeps one value per key):

    {"keytype":"SCHEMA","subject":"orders-value","version":1,"magic":1}
        -> {"subject":"orders-value","version":1,"id":1,"schemaType":"PROTOBUF","schema":"...",
            "references":[{"name":"a.proto","subject":"a","version":1}],"deleted":false}
           (schemaType omitted for AVRO, references when empty); null: the version is deleted for good
    {"keytype":"CONFIG","subject":"orders-value","magic":0}   -> {"compatibilityLevel":"FULL"} or null
    {"keytype":"CONFIG","subject":null,"magic":0}             -> the global level
    {"keytype":"MODE","subject":...,"magic":0}                 -> {"mode":"READONLY"} or null
    {"keytype":"DELETE_SUBJECT","subject":"s","magic":0}      -> {"subject":"s","version":3}
                                                                  (every version up to 3 soft-deleted)
    {"keytype":"CLEAR_SUBJECT","subject":"s","magic":0}       -> {"subject":"s"} (drop its soft-deleted versions)
    {"keytype":"NOOP","magic":0}                               -> ignored

`decode` raises RecordError for anything else, which the reader logs and skips: a record that cannot
be understood must not stop a registry from starting.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

SCHEMA, CONFIG, MODE, DELETE_SUBJECT, CLEAR_SUBJECT, NOOP = (
    "SCHEMA", "CONFIG", "MODE", "DELETE_SUBJECT", "CLEAR_SUBJECT", "NOOP")
KEY_TYPES = (SCHEMA, CONFIG, MODE, DELETE_SUBJECT, CLEAR_SUBJECT, NOOP)
AVRO, JSON, PROTOBUF = "AVRO", "JSON", "PROTOBUF"
SCHEMA_TYPES = (AVRO, JSON, PROTOBUF)


class RecordError(ValueError):
    """A `_schemas` record that is not one of Confluent's."""


@dataclass(frozen=True, slots=True)
class Reference:
    """A schema reference: the name the schema imports (a .proto file name, a JSON $ref URL, an Avro full
    name) and the subject version holding the referenced schema."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True, slots=True)
class Key:
    keytype: str
    subject: str | None = None
    version: int | None = None

    def encode(self) -> bytes:
        if self.keytype == SCHEMA:
            obj: dict[str, Any] = {"keytype": SCHEMA, "subject": self.subject, "version": self.version, "magic": 1}
        elif self.keytype == NOOP:
            obj = {"keytype": NOOP, "magic": 0}
        else:
            obj = {"keytype": self.keytype, "subject": self.subject, "magic": 0}
        return json.dumps(obj, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class SchemaValue:
    subject: str
    version: int
    id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...] = field(default_factory=tuple)
    deleted: bool = False

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"subject": self.subject, "version": self.version, "id": self.id}
        if self.schema_type != AVRO:
            obj["schemaType"] = self.schema_type
        if self.references:
            obj["references"] = [r.to_json() for r in self.references]
        obj["schema"] = self.schema
        obj["deleted"] = self.deleted
        return obj


def encode_value(value: SchemaValue | dict[str, Any] | None) -> bytes | None:
    if value is None:
        return None
    obj = value.to_json() if isinstance(value, SchemaValue) else value
    return json.dumps(obj, separators=(",", ":")).encode()


def _loads(raw: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise RecordError(f"{what} is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise RecordError(f"{what} is not a JSON object")
    return obj


def _int(obj: dict[str, Any], name: str, what: str) -> int:
    v = obj.get(name)
    if isinstance(v, bool) or not isinstance(v, int):
        raise RecordError(f"{what} has no integer {name!r}")
    return v


def _str(obj: dict[str, Any], name: str, what: str) -> str:
    v = obj.get(name)
    if not isinstance(v, str):
        raise RecordError(f"{what} has no string {name!r}")
    return v


def decode_key(raw: bytes | None) -> Key:
    if raw is None:
        raise RecordError("a record without a key")
    obj = _loads(raw, "key")
    kind = obj.get("keytype")
    if kind not in KEY_TYPES:
        raise RecordError(f"unknown keytype {kind!r}")
    subject = obj.get("subject")
    if subject is not None and not isinstance(subject, str):
        raise RecordError("key subject is not a string")
    if kind == SCHEMA:
        return Key(SCHEMA, _str(obj, "subject", "SCHEMA key"), _int(obj, "version", "SCHEMA key"))
    if kind in (DELETE_SUBJECT, CLEAR_SUBJECT) and subject is None:
        raise RecordError(f"{kind} key without a subject")
    return Key(kind, subject)


def parse_references(raw: Any, what: str) -> tuple[Reference, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise RecordError(f"{what}: references is not a list")
    out = []
    for r in raw:
        if not isinstance(r, dict):
            raise RecordError(f"{what}: a reference is not an object")
        out.append(Reference(_str(r, "name", "reference"), _str(r, "subject", "reference"), _int(r, "version", "reference")))
    return tuple(out)


def decode_schema_value(raw: bytes) -> SchemaValue:
    obj = _loads(raw, "SCHEMA value")
    schema_type = obj.get("schemaType") or AVRO
    if schema_type not in SCHEMA_TYPES:
        raise RecordError(f"unknown schemaType {schema_type!r}")
    deleted = obj.get("deleted", False)
    return SchemaValue(_str(obj, "subject", "SCHEMA value"), _int(obj, "version", "SCHEMA value"),
                       _int(obj, "id", "SCHEMA value"), schema_type, _str(obj, "schema", "SCHEMA value"),
                       parse_references(obj.get("references"), "SCHEMA value"), bool(deleted))


def decode_object(raw: bytes, what: str) -> dict[str, Any]:
    return _loads(raw, what)


def config_value(level: str) -> dict[str, Any]:
    return {"compatibilityLevel": level}


def mode_value(mode: str) -> dict[str, Any]:
    return {"mode": mode}


def delete_subject_value(subject: str, version: int) -> dict[str, Any]:
    return {"subject": subject, "version": version}
