"""JSON Schema and Protobuf columns against a real registry: confluent-kafka's JSONSerializer and
ProtobufSerializer write, gregor.typed decodes into the reader schema's fields (two versions in one
column), corrupt payloads in both modes, and gregor.typed's encoding read back by the deserializers."""

from __future__ import annotations

import datetime as dt
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

from gregor.typed import CorruptRecordError, RegistryClient, arrow_type_for, decode_column, encode_column
from gregor.typed.errors import UnsupportedSchema
from gregor.typed.protobuf_codec import read_indexes, write_indexes
from tests.schema_registry.conftest import unique
from tests.typed.conftest import binary, ctx

pytestmark = pytest.mark.timeout(180)
UTC = dt.UTC

ORDER_V1 = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
            "properties": {
                "id": {"type": "integer"},
                "item": {"type": "string"},
                "price": {"type": "number"},
                "paid": {"type": "boolean"},
                "at": {"type": "string", "format": "date-time"},
                "day": {"type": "string", "format": "date"},
                "lines": {"type": "array", "items": {"$ref": "#/definitions/Line"}},
                "note": {"oneOf": [{"type": "null"}, {"type": "string"}]},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}},
            "required": ["id", "item", "price", "paid"], "additionalProperties": False,
            "definitions": {"Line": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                                     "required": ["sku", "qty"]}}}
# v2 adds an optional property (allowed by BACKWARD in a closed content model, as Confluent's rules have it)
ORDER_V2 = {**ORDER_V1, "properties": {**ORDER_V1["properties"], "coupon": {"type": "string"}}}


def order(i: int) -> dict[str, Any]:
    out: dict[str, Any] = {"id": i, "item": f"item-{i}", "price": i * 1.5, "paid": bool(i % 2),
                           "at": f"2026-11-0{1 + i % 9}T10:00:00.{i:06d}Z", "day": f"2026-10-{1 + i % 28:02d}",
                           "lines": [{"sku": f"s{j}", "qty": j} for j in range(i % 3)], "labels": {"k": str(i)}}
    if i % 2:
        out["note"] = f"note {i}"
    return out


def arrow_order(o: dict[str, Any], coupon: bool = False) -> dict[str, Any]:
    out = {k: o.get(k) for k in ORDER_V2["properties"] if coupon or k != "coupon"}
    out["at"] = dt.datetime.fromisoformat(o["at"].replace("Z", "+00:00"))
    out["day"] = dt.date.fromisoformat(o["day"])
    out["labels"] = list(o["labels"].items())
    return out


def test_json_schema_round_trip_two_versions_and_corrupt(sr_client: SchemaRegistryClient, registry_url: str) -> None:
    topic = unique("orders")
    conf = {"auto.register.schemas": True}
    v1 = JSONSerializer(json.dumps(ORDER_V1), sr_client, conf=conf)
    v2 = JSONSerializer(json.dumps(ORDER_V2), sr_client, conf=conf)
    rows = [order(i) for i in range(300)]
    first = v1(rows[0], ctx(topic))
    payloads = [first] + [v1(r, ctx(topic)) if i % 2 else v2({**r, "coupon": f"c{i}"}, ctx(topic))
                          for i, r in enumerate(rows) if i]
    registry = RegistryClient.from_options({"schema.registry.url": registry_url})
    t = arrow_type_for(registry, subject=f"{topic}-value")
    assert t.field("id").type == pa.int64() and not t.field("id").nullable
    assert t.field("at").type == pa.timestamp("us", "UTC") and t.field("day").type == pa.date32()
    assert t.field("lines").type == pa.list_(pa.field("element", pa.struct([
        pa.field("sku", pa.string(), False), pa.field("qty", pa.int64(), False)])))
    out = decode_column(binary(payloads), registry, subject=f"{topic}-value")
    want = [{**arrow_order(r, True), "coupon": None if i % 2 or i == 0 else f"c{i}"} for i, r in enumerate(rows)]
    assert out.errors == [] and out.value.to_pylist() == want
    # read with version 1: the coupon of version 2's documents is left out
    v1_id = registry.version(f"{topic}-value", 1).info.id
    assert decode_column(binary(payloads), registry, schema_id=v1_id).value.to_pylist() == [arrow_order(r) for r in rows]

    # corrupt: not JSON, a string where a number belongs, a required property missing, two documents, a bad date
    good = payloads[:8]
    header = good[0][:5]
    bad = {1: header + b"{not json", 3: header + b'{"id": "x", "item": "a", "price": 1, "paid": true}',
           4: header + b'{"item": "a", "price": 1, "paid": true}', 5: header + b'{"id":1,"item":"a","price":1,"paid":true}{}',
           6: header + b'{"id":1,"item":"a","price":1,"paid":true,"day":"2026-13-45"}'}
    col = binary([bad.get(i, g) for i, g in enumerate(good)])
    with pytest.raises(CorruptRecordError) as e:
        decode_column(col, registry, subject=f"{topic}-value")
    assert e.value.row == 1
    out = decode_column(col, registry, subject=f"{topic}-value", mode="PERMISSIVE")
    assert [r for r, _ in out.errors] == sorted(bad)
    assert out.corrupt.to_pylist() == [bad.get(i) for i in range(8)]
    assert [v is None for v in out.value.to_pylist()] == [i in bad for i in range(8)]
    assert out.value.to_pylist()[2] == want[2]

    # gregor.typed encodes, JSONDeserializer (which validates against the schema) reads
    back = encode_column(decode_column(binary(payloads), registry, subject=f"{topic}-value").value, registry,
                         f"{topic}-value", schema_type="JSON")
    de = JSONDeserializer(None, schema_registry_client=sr_client)
    got = [de(p, ctx(topic)) for p in back.to_pylist()]
    for g, r, i in zip(got, rows, range(len(rows)), strict=True):
        expect = {k: v for k, v in r.items()}
        if i % 2 == 0 and i:
            expect["coupon"] = f"c{i}"
        assert dt.datetime.fromisoformat(g.pop("at")) == dt.datetime.fromisoformat(expect.pop("at"))
        assert g == expect


def test_json_schemas_without_an_arrow_type_are_refused(sr_client: SchemaRegistryClient, registry_url: str) -> None:
    registry = RegistryClient.from_options({"schema.registry.url": registry_url})
    for schema in ({"type": "object", "properties": {"x": {}}},
                   {"type": "object", "properties": {"x": {"type": ["string", "integer"]}}},
                   {"type": "object", "properties": {"n": {"$ref": "#"}}}):
        subject = unique("nojson")
        from confluent_kafka.schema_registry import Schema
        sr_client.register_schema(subject, Schema(json.dumps(schema), "JSON"))
        with pytest.raises(UnsupportedSchema):
            arrow_type_for(registry, subject=subject)


def proto_class(tmp: Path, text: str, message: str) -> Any:
    """Compile a .proto file with protoc and build its message class in a pool of its own."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from grpc_tools import protoc

    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "m.proto").write_text(text)
    out = tmp / "set.pb"
    include = str(resources.files("grpc_tools") / "_proto")
    assert protoc.main(["protoc", f"-I{tmp}", f"-I{include}", f"--descriptor_set_out={out}", "--include_imports",
                        "m.proto"]) == 0
    pool = descriptor_pool.DescriptorPool()
    for fdp in descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file:
        pool.AddSerializedFile(fdp.SerializeToString())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(message))


PROTO_HEAD = 'syntax = "proto3";\npackage shop;\nimport "google/protobuf/timestamp.proto";\n'
CLICK_V1 = PROTO_HEAD + """
enum Kind { VIEW = 0; CLICK = 1; }
message Other { string x = 1; }
message Click {
  string url = 1;
  int64 n = 2;
  Kind kind = 3;
  google.protobuf.Timestamp at = 4;
  repeated string tags = 5;
  map<string, int32> counts = 6;
  message Device { string os = 1; bool mobile = 2; }
  Device device = 7;
  optional string referrer = 8;
  oneof target { string button = 9; int32 position = 10; }
  bytes raw = 11;
  double score = 12;
  uint64 big = 13;
  repeated Device seen = 14;
}
"""
CLICK_V2 = CLICK_V1.replace("repeated Device seen = 14;", "repeated Device seen = 14;\n  string country = 15;")


def click(cls: Any, i: int) -> Any:
    m = cls(url=f"/p/{i}", n=i * 1000, kind=i % 2, tags=[f"t{j}" for j in range(i % 3)], counts={"a": i},
            raw=bytes([i % 256]), score=i / 4, big=2**64 - 1 - i)
    m.at.FromMicroseconds(1_790_000_000_000_000 + i)
    if i % 2:
        m.device.os = "ios"
        m.device.mobile = True
        m.referrer = f"r{i}"
        m.button = "buy"
        m.seen.add(os="android", mobile=False)
    else:
        m.position = i
    return m


def arrow_click(i: int) -> dict[str, Any]:
    return {"url": f"/p/{i}", "n": i * 1000, "kind": ["VIEW", "CLICK"][i % 2],
            "at": dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=1_790_000_000_000_000 + i),
            "tags": [f"t{j}" for j in range(i % 3)], "counts": [("a", i)],
            "device": {"os": "ios", "mobile": True} if i % 2 else None, "referrer": f"r{i}" if i % 2 else None,
            "button": "buy" if i % 2 else None, "position": None if i % 2 else i, "raw": bytes([i % 256]),
            "score": i / 4, "big": (2**64 - 1 - i) - 2**64, "seen": [{"os": "android", "mobile": False}] if i % 2 else []}


def test_protobuf_round_trip_two_versions_and_corrupt(sr_client: SchemaRegistryClient, registry_url: str,
                                                      tmp_path: Path) -> None:
    topic = unique("clicks")
    v1 = proto_class(tmp_path / "v1", CLICK_V1, "shop.Click")
    v2 = proto_class(tmp_path / "v2", CLICK_V2, "shop.Click")
    conf = {"use.deprecated.format": False, "auto.register.schemas": True}
    s1, s2 = ProtobufSerializer(v1, sr_client, conf), ProtobufSerializer(v2, sr_client, conf)
    payloads = [s1(click(v1, 0), ctx(topic))]
    for i in range(1, 200):
        if i % 2:
            payloads.append(s1(click(v1, i), ctx(topic)))
        else:
            m = click(v2, i)
            m.country = "NL"
            payloads.append(s2(m, ctx(topic)))
    assert payloads[0][5] == 0 or payloads[0][5:6] == b"\x02"  # message indexes of the second message (Click)
    registry = RegistryClient.from_options({"schema.registry.url": registry_url})
    # the file's first message is Other: as in Confluent's clients, another message is named
    assert arrow_type_for(registry, subject=f"{topic}-value") == pa.struct([pa.field("x", pa.string())])
    t = arrow_type_for(registry, subject=f"{topic}-value", message_name="shop.Click")
    assert t.field("at").type == pa.timestamp("us", "UTC") and t.field("kind").type == pa.string()
    assert t.field("counts").type == pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.int32(), False))
    click_of = {"message_name": "shop.Click"}
    out = decode_column(binary(payloads), registry, subject=f"{topic}-value", **click_of)
    assert out.errors == []
    assert out.value.to_pylist() == [{**arrow_click(i), "country": "" if i % 2 or i == 0 else "NL"} for i in range(200)]
    v1_id = registry.version(f"{topic}-value", 1).info.id
    assert decode_column(binary(payloads), registry, schema_id=v1_id,
                         **click_of).value.to_pylist() == [arrow_click(i) for i in range(200)]

    # corrupt: bad message indexes, a truncated message, the wrong message of the schema
    other_idx = write_indexes([0])  # shop.Other
    header = payloads[1][:5]
    _, pos = read_indexes(payloads[1], 5)
    bad = {1: header + b"\x7f", 2: payloads[2][:pos] + payloads[2][pos:pos + 3] + b"\xff", 3: header + other_idx + b"\x0a\x01x"}
    col = binary([bad.get(i, p) for i, p in enumerate(payloads[:6])] + [None])
    with pytest.raises(CorruptRecordError):
        decode_column(col, registry, subject=f"{topic}-value", **click_of)
    out = decode_column(col, registry, subject=f"{topic}-value", mode="PERMISSIVE", **click_of)
    assert [r for r, _ in out.errors] == [1, 2, 3] and "shop.Other" in dict(out.errors)[3]
    assert out.corrupt.to_pylist() == [bad.get(i) for i in range(6)] + [None]
    assert out.value.to_pylist()[4] == {**arrow_click(4), "country": "NL"}

    # gregor.typed encodes with the latest version, ProtobufDeserializer reads
    decoded = decode_column(binary(payloads), registry, subject=f"{topic}-value", **click_of).value
    back = encode_column(decoded, registry, f"{topic}-value", schema_type="PROTOBUF", **click_of)
    de = ProtobufDeserializer(v2, {"use.deprecated.format": False})
    for i, p in enumerate(back.to_pylist()):
        want = click(v2, i)
        if i % 2 == 0 and i:
            want.country = "NL"
        assert de(p, ctx(topic)) == want


def test_message_indexes() -> None:
    for idx in ([0], [1], [0, 2], [3, 1, 4]):
        enc = write_indexes(idx)
        assert read_indexes(b"xx" + enc, 2) == (idx, 2 + len(enc))
    assert write_indexes([0]) == b"\x00"
    with pytest.raises(ValueError):
        read_indexes(b"\x04\x02", 0)
