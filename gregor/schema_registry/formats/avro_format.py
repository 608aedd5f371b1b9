"""AVRO schemas, parsed and compared by the Apache `avro` package.

Compatibility is Avro's schema resolution, as the specification defines it and `avro.compatibility`
implements it (the same checker design as Java's SchemaCompatibility, which Confluent uses): a reader
schema can read a writer's data when every field it has without a default is written, types promote
(int to long, float, double; string and bytes), enum symbols the writer may send are known, union
branches resolve, and names match (or aliases do).

References name other subjects' named types by full name (`com.acme.Address`): they are parsed first,
into the same set of names, so the referencing schema may use them as types.
"""

from __future__ import annotations

import json
from typing import Any

import avro.errors
import avro.name
import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from gregor.schema_registry.errors import invalid_schema
from gregor.schema_registry.formats.base import Dependency, ParsedSchema
from gregor.schema_registry.records import AVRO, Reference


def _compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class AvroSchema:
    schema_type = AVRO

    def __init__(self, text_json: Any, parsed: avro.schema.Schema, dep_schemas: list[avro.schema.Schema]) -> None:
        self._json = text_json
        self.parsed = parsed
        self._deps = dep_schemas

    def canonical(self) -> str:
        """The schema's JSON without insignificant white space, keys in the order written."""
        return _compact(self._json)

    def normalized(self) -> str:
        """The JSON the avro library writes from the parsed schema: one key order, full names, referenced
        types by name (as in the request, so the references still apply)."""
        names = avro.name.Names()
        for dep in self._deps:
            dep.to_json(names)
        return _compact(self.parsed.to_json(names))

    def formatted(self, fmt: str) -> str | None:
        if fmt == "resolved":  # the referenced types written out where they are first used
            return _compact(self.parsed.to_json(avro.name.Names()))
        return None

    def reader_errors(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, AvroSchema):
            return [f"a {writer.schema_type} schema cannot be read as AVRO"]
        result = ReaderWriterCompatibilityChecker().get_compatibility(self.parsed, writer.parsed)
        if result.compatibility is SchemaCompatibilityType.compatible:
            return []
        out = []
        for kind, location, message in zip(result.incompatibilities, result.locations, result.messages, strict=False):
            out.append(f"{kind.value.upper()} at '{location}': {message}")
        return out or ["the reader schema cannot read data written with the writer schema"]


def _load(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise invalid_schema(f"{what} is not JSON: {e}") from None


def parse_avro(text: str, references: tuple[Reference, ...], deps: list[Dependency]) -> AvroSchema:
    names = avro.name.Names()
    dep_schemas = []
    for dep in deps:
        try:
            dep_schemas.append(avro.schema.make_avsc_object(_load(dep.schema, f"reference {dep.name}"), names))
        except (avro.errors.AvroException, ValueError, TypeError) as e:
            raise invalid_schema(f"reference {dep.name}: {e}") from None
    obj = _load(text, "the schema")
    try:
        parsed = avro.schema.make_avsc_object(obj, names)
    except (avro.errors.AvroException, ValueError, TypeError, KeyError) as e:
        raise invalid_schema(str(e)) from None
    return AvroSchema(obj, parsed, dep_schemas)
