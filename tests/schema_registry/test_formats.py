"""Schema formats without a broker: parsing (and refusing) with each format's library, normalization, and
each format's compatibility rules as Confluent applies them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gregor.schema_registry.errors import RegistryError
from gregor.schema_registry.formats import Dependency, ParsedSchema, parse
from gregor.schema_registry.records import Reference


def avro(*fields: dict[str, Any], name: str = "R") -> ParsedSchema:
    return parse("AVRO", json.dumps({"type": "record", "name": name, "fields": list(fields)}), (), [])


def js(obj: dict[str, Any]) -> ParsedSchema:
    return parse("JSON", json.dumps(obj), (), [])


def proto(body: str, package: str = "p") -> ParsedSchema:
    return parse("PROTOBUF", f'syntax = "proto3";\npackage {package};\n{body}', (), [])


def kinds(errors: list[str]) -> list[str]:
    return [e.split(" ", 1)[0] for e in errors]


# --- Avro: schema resolution ------------------------------------------------------------------------------

def test_avro_resolution_rules() -> None:
    v1 = avro({"name": "a", "type": "int"})
    assert avro({"name": "a", "type": "long"}).reader_errors(v1) == []  # int promotes to long
    assert kinds(v1.reader_errors(avro({"name": "a", "type": "long"}))) == ["TYPE_MISMATCH"]
    assert avro({"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": ""}).reader_errors(v1) == []
    assert kinds(avro({"name": "a", "type": "int"}, {"name": "b", "type": "string"}).reader_errors(v1)) == \
        ["READER_FIELD_MISSING_DEFAULT_VALUE"]
    e1 = parse("AVRO", '{"type":"enum","name":"E","symbols":["A","B"]}', (), [])
    e2 = parse("AVRO", '{"type":"enum","name":"E","symbols":["A"]}', (), [])
    assert e1.reader_errors(e2) == [] and kinds(e2.reader_errors(e1)) == ["MISSING_ENUM_SYMBOLS"]
    assert kinds(avro({"name": "a", "type": "int"}, name="Other").reader_errors(v1)) == ["NAME_MISMATCH"]


def test_avro_parse_errors_references_and_forms() -> None:
    for bad in ('{"type": "record", "name": "R"}', '{"type": "nope"}', "not json", '{"type":"record","name":"R",'
                '"fields":[{"name":"a","type":"Missing"}]}'):
        with pytest.raises(RegistryError) as e:
            parse("AVRO", bad, (), [])
        assert e.value.error_code == 42201
    dep = Dependency("x.Addr", "AVRO", '{"type":"record","name":"Addr","namespace":"x","fields":[{"name":"c","type":"string"}]}')
    text = '{ "type": "record", "name": "P", "namespace": "x", "fields": [{"name": "a", "type": "Addr"}] }'
    p = parse("AVRO", text, (Reference("x.Addr", "addr", 1),), [dep])
    assert p.canonical() == '{"type":"record","name":"P","namespace":"x","fields":[{"name":"a","type":"Addr"}]}'
    assert '"type":"x.Addr"' in p.normalized()  # the reference stays a reference
    assert '"name":"Addr"' in (p.formatted("resolved") or "")  # and is written out when resolved
    same = parse("AVRO", '{"namespace":"x","fields":[{"type":"Addr","name":"a"}],"name":"P","type":"record"}',
                 (Reference("x.Addr", "addr", 1),), [dep])
    assert same.normalized() == p.normalized() and same.canonical() != p.canonical()


# --- JSON Schema: Confluent's rules -------------------------------------------------------------------------

OPEN = {"type": "object", "properties": {"a": {"type": "string"}}}
CLOSED = {**OPEN, "additionalProperties": False}


@pytest.mark.parametrize(("writer", "reader", "expected"), [
    (CLOSED, {**CLOSED, "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}, []),
    (CLOSED, {**CLOSED, "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "required": ["b"]},
     ["REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"]),
    (CLOSED, {**CLOSED, "properties": {"a": {"type": "string"}, "b": {"type": "integer", "default": 0}},
              "required": ["b"]}, []),
    (OPEN, {**OPEN, "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}},
     ["PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"]),
    (OPEN, {**OPEN, "properties": {"a": {"type": "string"}, "b": {}}}, []),
    ({**OPEN, "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}, OPEN, []),
    ({**CLOSED, "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}, CLOSED,
     ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"]),
    ({**OPEN, "additionalProperties": {"type": "integer"}}, {**OPEN, "additionalProperties": {"type": "integer"},
                                                             "properties": {"a": {"type": "string"}, "n": {"type": "integer"}}}, []),
    (OPEN, {**OPEN, "required": ["a"]}, ["REQUIRED_ATTRIBUTE_ADDED"]),
    (OPEN, CLOSED, ["ADDITIONAL_PROPERTIES_REMOVED"]),
    (CLOSED, OPEN, []),
    ({"type": "integer"}, {"type": "number"}, []),
    ({"type": "number"}, {"type": "integer"}, ["TYPE_NARROWED"]),
    ({"type": "string"}, {"type": "integer"}, ["TYPE_CHANGED"]),
    ({"type": "string"}, {"type": ["string", "null"]}, []),
    ({"type": ["string", "null"]}, {"type": "string"}, ["TYPE_CHANGED"]),
    ({"type": "string", "maxLength": 5}, {"type": "string", "maxLength": 10}, []),
    ({"type": "string", "maxLength": 10}, {"type": "string", "maxLength": 5}, ["MAX_LENGTH_DECREASED"]),
    ({"type": "string"}, {"type": "string", "pattern": "^a"}, ["PATTERN_ADDED"]),
    ({"type": "number", "minimum": 0}, {"type": "number"}, []),
    ({"type": "number"}, {"type": "number", "minimum": 0}, ["MINIMUM_ADDED"]),
    ({"type": "integer", "multipleOf": 10}, {"type": "integer", "multipleOf": 5}, []),
    ({"enum": ["a", "b"]}, {"enum": ["a", "b", "c"]}, []),
    ({"enum": ["a", "b"]}, {"enum": ["a"]}, ["ENUM_ARRAY_NARROWED"]),
    ({"oneOf": [{"type": "string"}]}, {"oneOf": [{"type": "string"}, {"type": "integer"}]}, []),
    ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, {"oneOf": [{"type": "string"}]}, ["SUM_TYPE_NARROWED"]),
    ({"type": "array", "items": {"type": "integer"}}, {"type": "array", "items": {"type": "number"}}, []),
    ({"type": "array", "items": {"type": "string"}}, {"type": "array", "items": {"type": "integer"}}, ["TYPE_CHANGED"]),
    ({"type": "array"}, {"type": "array", "maxItems": 3}, ["MAX_ITEMS_ADDED"]),
    ({"type": "array"}, {"type": "array", "uniqueItems": True}, ["UNIQUE_ITEMS_ADDED"]),
    ({"type": "string"}, {}, []),
    ({"$ref": "#/definitions/s", "definitions": {"s": {"type": "string"}}}, {"type": "string"}, []),
])
def test_json_schema_rules(writer: dict[str, Any], reader: dict[str, Any], expected: list[str]) -> None:
    assert kinds(js(reader).reader_errors(js(writer))) == expected


def test_json_schema_validity_references_and_normal_form() -> None:
    for bad in ('{"type": "objekt"}', '{"minLength": "three"}', '[1, 2]', '{"$ref": "#/definitions/missing"}'):
        with pytest.raises(RegistryError) as e:
            parse("JSON", bad, (), [])
        assert e.value.error_code == 42201
    dep = Dependency("address.json", "JSON", '{"type":"object","properties":{"city":{"type":"string"}}}')
    ref = (Reference("address.json", "address", 1),)
    v1 = parse("JSON", '{"type":"object","properties":{"home":{"$ref":"address.json"}}}', ref, [dep])
    dep2 = Dependency("address.json", "JSON", '{"type":"object","properties":{"city":{"type":"integer"}}}')
    v2 = parse("JSON", '{"type":"object","properties":{"home":{"$ref":"address.json"}}}', ref, [dep2])
    assert kinds(v2.reader_errors(v1)) == ["TYPE_CHANGED"]  # compared through the reference
    with pytest.raises(RegistryError):
        parse("JSON", '{"properties":{"home":{"$ref":"elsewhere.json"}}}', ref, [dep])
    a = js({"type": "object", "properties": {"x": {"type": "string"}}})
    b = parse("JSON", '{"properties": {"x": {"type": "string"}}, "type": "object"}', (), [])
    assert a.normalized() == b.normalized() and a.canonical() != b.canonical()


# --- Protobuf: Confluent's rules over descriptors -----------------------------------------------------------

@pytest.mark.parametrize(("writer", "reader", "expected"), [
    ("message M { string a = 1; int32 b = 2; }", "message M { string a = 1; int64 b = 2; string c = 3; }", []),
    ("message M { string a = 1; int32 b = 2; }", "message M { string a = 1; }", []),
    ("message M { string a = 1; }", "message M { string renamed = 1; }", []),
    ("message M { int32 b = 2; }", "message M { string b = 2; }", ["FIELD_SCALAR_KIND_CHANGED"]),
    ("message M { sint32 b = 2; }", "message M { int32 b = 2; }", ["FIELD_SCALAR_KIND_CHANGED"]),
    ("message M { string a = 1; }", "message M { bytes a = 1; }", []),
    ("message M { string a = 1; }", "message M { repeated string a = 1; }", []),
    ("message M { int32 a = 1; }", "message M { repeated int32 a = 1; }", ["FIELD_LABEL_CHANGED"]),
    ("message M { N n = 1; } message N { int32 x = 1; }", "message M { int32 n = 1; } message N { int32 x = 1; }",
     ["FIELD_KIND_CHANGED"]),
    ("message M { N n = 1; } message N { int32 x = 1; }", "message M { N n = 1; } message N { string x = 1; }",
     ["FIELD_SCALAR_KIND_CHANGED", "FIELD_NAMED_TYPE_CHANGED"]),  # N compared once, from M's field
    ("message M { N n = 1; } message N { int32 x = 1; } message O { int32 x = 1; }",
     "message M { O n = 1; } message N { int32 x = 1; } message O { int32 x = 1; }", ["FIELD_NAMED_TYPE_CHANGED"]),
    ("message M { string a = 1; } message N { string a = 1; }", "message M { string a = 1; }", ["MESSAGE_REMOVED"]),
    ("message M { string a = 1; }", "message M { string a = 1; } message N { string a = 1; }", []),
    ("message M { string a = 1; int32 b = 2; }", "message M { oneof o { string a = 1; } int32 b = 2; }", []),
    ("message M { string a = 1; int32 b = 2; }", "message M { oneof o { string a = 1; int32 b = 2; } }",
     ["MULTIPLE_FIELDS_MOVED_TO_ONEOF"]),
    ("message M { oneof o { string a = 1; int32 b = 2; } }", "message M { oneof o { string a = 1; } }",
     ["ONEOF_FIELD_REMOVED"]),
    ("message M { map<string, int32> m = 1; }", "message M { map<string, int64> m = 1; }", []),
    ("message M { map<string, int32> m = 1; }", "message M { map<string, string> m = 1; }",
     ["FIELD_SCALAR_KIND_CHANGED"]),
    ("enum E { A = 0; B = 1; } message M { E e = 1; }", "enum E { A = 0; } message M { E e = 1; }", []),
])
def test_protobuf_rules(writer: str, reader: str, expected: list[str]) -> None:
    assert kinds(proto(reader).reader_errors(proto(writer))) == expected


def test_protobuf_required_package_and_forms() -> None:
    def p2(body: str) -> ParsedSchema:
        return parse("PROTOBUF", f'syntax = "proto2";\npackage p;\n{body}', (), [])

    assert kinds(p2("message M { required int32 a = 1; required int32 b = 2; }").reader_errors(
        p2("message M { required int32 a = 1; }"))) == ["REQUIRED_FIELD_ADDED"]
    assert kinds(p2("message M { required int32 a = 1; }").reader_errors(
        p2("message M { required int32 a = 1; required int32 b = 2; }"))) == ["REQUIRED_FIELD_REMOVED"]
    assert kinds(proto("message M { int32 a = 1; }", "q").reader_errors(proto("message M { int32 a = 1; }"))) == \
        ["PACKAGE_CHANGED"]
    text = proto('import "google/protobuf/timestamp.proto";\nmessage M { google.protobuf.Timestamp at = 1; }')
    serialized = text.formatted("serialized")
    assert serialized is not None and text.formatted("nope") is None
    again = parse("PROTOBUF", serialized, (), [])  # a client's base64 FileDescriptorProto, imports included
    assert again.reader_errors(text) == [] and text.reader_errors(again) == []
    for bad in ("message M { strin a = 1; }", "message M { int32 a = 1; int32 b = 1; }", 'import "nowhere.proto";'):
        with pytest.raises(RegistryError) as e:
            proto(bad)
        assert e.value.error_code == 42201 and "schema.proto" in e.value.message
    dep = Dependency("common.proto", "PROTOBUF", 'syntax = "proto3";\npackage c;\nmessage Page { string url = 1; }')
    ref = (Reference("common.proto", "common", 1),)
    with_ref = parse("PROTOBUF", 'syntax = "proto3";\nimport "common.proto";\nmessage M { c.Page p = 1; }', ref, [dep])
    assert with_ref.reader_errors(with_ref) == []
    dep_changed = Dependency("common.proto", "PROTOBUF", 'syntax = "proto3";\npackage c;\nmessage Page { int32 url = 1; }')
    other = parse("PROTOBUF", 'syntax = "proto3";\nimport "common.proto";\nmessage M { c.Page p = 1; }', ref, [dep_changed])
    assert "FIELD_NAMED_TYPE_CHANGED" in kinds(other.reader_errors(with_ref))


def test_protobuf_written_back_as_text() -> None:
    """A serialized descriptor is shown as .proto text that compiles back to the same descriptor."""
    src = """syntax = "proto3";
package demo.v1;
import "google/protobuf/timestamp.proto";
option java_package = "com.demo";
message Click {
  reserved 9, 12 to 14;
  reserved "old";
  string url = 1 [deprecated = true];
  google.protobuf.Timestamp at = 2;
  map<string, int64> counts = 3;
  oneof who { string user = 4; int64 uid = 5; }
  optional int32 maybe = 6;
  repeated Inner inners = 7;
  message Inner { enum Kind { A = 0; B = 1; } Kind kind = 1; }
}
enum Color { option allow_alias = true; RED = 0; CRIMSON = 0; }
service S { rpc Get (Click) returns (stream Click); }
"""
    text = parse("PROTOBUF", src, (), [])
    serialized = parse("PROTOBUF", text.formatted("serialized") or "", (), [])
    shown = serialized.formatted("") or ""
    assert "map<string, int64> counts = 3;" in shown and "oneof who {" in shown and "optional int32 maybe = 6;" in shown
    assert text.formatted("") is None  # text is shown as it was sent
    again = parse("PROTOBUF", shown, (), [])
    assert again.normalized() == text.normalized() == serialized.normalized()
    proto2 = parse("PROTOBUF", 'syntax = "proto2";\npackage x;\nmessage M { required int32 a = 1 [default = 5]; '
                               'optional string s = 2 [default = "q\\"x"]; extensions 100 to max; }\n'
                               "extend M { optional int32 e = 100; }", (), [])
    back = parse("PROTOBUF", parse("PROTOBUF", proto2.formatted("serialized") or "", (), []).formatted("") or "", (), [])
    assert back.normalized() == proto2.normalized()
    # A .proto text schema importing a reference that was registered serialized.
    dep = Dependency("common.proto", "PROTOBUF", parse("PROTOBUF", 'syntax = "proto3"; package c; message Page { '
                                                                   'string url = 1; }', (), []).formatted("serialized") or "")
    m = parse("PROTOBUF", 'syntax = "proto3"; import "common.proto"; message M { c.Page p = 1; }',
              (Reference("common.proto", "common", 1),), [dep])
    assert m.reader_errors(m) == []
