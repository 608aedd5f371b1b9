"""Schema formats: parsing, normalization and compatibility of AVRO, JSON and PROTOBUF schemas.

Each format parses with its own well-kept library (Apache `avro`, `jsonschema`, protoc from
grpcio-tools and `protobuf`'s descriptors) and answers the one compatibility question every level is
built from: can a reader using this schema read data written with that one? (`reader_errors`: the
reasons it cannot, empty when it can). BACKWARD asks it of the new schema against the old, FORWARD the
other way round, FULL both (gregor.schema_registry.compatibility).

`parse` is given the referenced schemas already resolved, dependencies first, so a format never looks
anything up itself.
"""

from __future__ import annotations

from gregor.schema_registry.errors import invalid_schema
from gregor.schema_registry.formats.avro_format import parse_avro
from gregor.schema_registry.formats.base import Dependency, ParsedSchema
from gregor.schema_registry.formats.json_format import parse_json
from gregor.schema_registry.formats.protobuf_format import parse_protobuf
from gregor.schema_registry.records import AVRO, JSON, PROTOBUF, Reference


def parse(schema_type: str, text: str, references: tuple[Reference, ...], deps: list[Dependency]) -> ParsedSchema:
    """Parse a schema of `schema_type`. Raises RegistryError 42201 for an invalid schema."""
    if schema_type == AVRO:
        return parse_avro(text, references, deps)
    if schema_type == JSON:
        return parse_json(text, references, deps)
    if schema_type == PROTOBUF:
        return parse_protobuf(text, references, deps)
    raise invalid_schema(f"unknown schema type {schema_type}")
