"""Avro columns against a real registry: confluent-kafka's AvroSerializer writes, gregor.typed decodes (fast C
path and per-record path), two schema versions in one column read into the reader's version, corrupt
payloads in both modes, and gregor.typed's encoding read back by AvroDeserializer."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

import gregor.client as gc
from gregor.typed import CorruptRecordError, RegistryClient, arrow_type_for, decode_column, encode_column
from gregor.typed.avro_codec import AvroDecoder, AvroSchema
from gregor.typed.codec import ColumnDecoder
from gregor.typed.registry_client import SchemaInfo
from tests.broker_process import BrokerProcess
from tests.schema_registry.conftest import unique
from tests.typed.conftest import binary, ctx

pytestmark = pytest.mark.timeout(180)

UTC = dt.UTC
PAGEVIEW_V1 = {"type": "record", "name": "PageView", "namespace": "demo", "fields": [
    {"name": "url", "type": "string"},
    {"name": "user", "type": "string"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "duration_ms", "type": "int"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["VIEW", "CLICK", "SCROLL"]}},
    {"name": "referrer", "type": ["null", "string"], "default": None},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": ["null", "long"]}},
]}
# v2: duration widened int -> long, a field added with a default, one removed (tags), a nested record added
PAGEVIEW_V2 = {"type": "record", "name": "PageView", "namespace": "demo", "fields": [
    {"name": "url", "type": "string"},
    {"name": "user", "type": "string"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "duration_ms", "type": "long"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["VIEW", "CLICK", "SCROLL"]}},
    {"name": "referrer", "type": ["null", "string"], "default": None},
    {"name": "attrs", "type": {"type": "map", "values": ["null", "long"]}},
    {"name": "country", "type": "string", "default": "NL"},
    {"name": "device", "type": {"type": "record", "name": "Device", "fields": [
        {"name": "os", "type": "string"}, {"name": "mobile", "type": "boolean"}]},
     "default": {"os": "unknown", "mobile": False}},
]}
ALL_TYPES = {"type": "record", "name": "All", "fields": [
    {"name": "b", "type": "boolean"}, {"name": "i", "type": "int"}, {"name": "l", "type": "long"},
    {"name": "f", "type": "float"}, {"name": "d", "type": "double"}, {"name": "s", "type": "string"},
    {"name": "by", "type": "bytes"}, {"name": "fx", "type": {"type": "fixed", "name": "F4", "size": 4}},
    {"name": "date", "type": {"type": "int", "logicalType": "date"}},
    {"name": "tsu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}},
    {"name": "decf", "type": {"type": "fixed", "name": "D8", "size": 8, "logicalType": "decimal", "precision": 18,
                              "scale": 2}},
    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "u", "type": ["null", "int", "string", {"type": "record", "name": "R", "fields": [{"name": "x", "type": "int"}]}]},
    {"name": "il", "type": ["int", "long"]},
    {"name": "nested", "type": {"type": "array", "items": ["null", {"type": "record", "name": "N", "fields": [
        {"name": "m", "type": {"type": "map", "values": "string"}}]}]}},
]}


def pageview(i: int) -> dict[str, Any]:
    return {"url": f"/page/{i % 50}", "user": f"user-{i % 1000:04d}",
            "ts": dt.datetime(2026, 11, 1, tzinfo=UTC) + dt.timedelta(milliseconds=i * 7),
            "duration_ms": (i * 37) % 100_000, "kind": ["VIEW", "CLICK", "SCROLL"][i % 3],
            "referrer": None if i % 4 else f"https://ref/{i}", "tags": [f"t{j}" for j in range(i % 3)],
            "attrs": {"a": i, "b": None} if i % 2 else {}}


def serializer(client: SchemaRegistryClient, schema: dict[str, Any], subject_topic: str) -> Any:
    s = AvroSerializer(client, json.dumps(schema), conf={"auto.register.schemas": True})
    return lambda v: s(v, ctx(subject_topic))


def as_arrow_values(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What to_pylist gives back for these records (maps as pairs)."""
    return [{**r, "attrs": list(r["attrs"].items())} for r in rows]


def test_confluent_avro_round_trip(sr_client: SchemaRegistryClient, registry_url: str) -> None:
    topic = unique("pv")
    ser = serializer(sr_client, PAGEVIEW_V1, topic)
    rows = [pageview(i) for i in range(500)]
    col = binary([ser(r) for r in rows])
    registry = RegistryClient.from_options({"schema.registry.url": registry_url})
    t = arrow_type_for(registry, subject=f"{topic}-value")
    assert t == pa.struct([
        pa.field("url", pa.string(), False), pa.field("user", pa.string(), False),
        pa.field("ts", pa.timestamp("us", "UTC"), False), pa.field("duration_ms", pa.int32(), False),
        pa.field("kind", pa.string(), False), pa.field("referrer", pa.string(), True),
        pa.field("tags", pa.list_(pa.field("element", pa.string(), False)), False),
        pa.field("attrs", pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.int64(), True)), False)])
    out = decode_column(col, registry, subject=f"{topic}-value")
    assert out.value.type == t and out.errors == [] and out.corrupt.null_count == len(rows)
    assert out.value.to_pylist() == as_arrow_values(rows)
    # the Arrow type is the one pyspark derives from the Spark type it maps to
    from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type
    assert to_arrow_type(from_arrow_type(t), timezone="UTC") == t

    # and back: gregor.typed encodes, confluent-kafka's AvroDeserializer reads
    payloads = encode_column(out.value, registry, f"{topic}-value", schema_type="AVRO")
    de = AvroDeserializer(sr_client)
    back = [de(p, ctx(topic)) for p in payloads.to_pylist()]
    assert back == rows


def test_all_types_fast_path_equals_per_record(sr_client: SchemaRegistryClient, registry_url: str) -> None:
    topic = unique("all")
    ser = serializer(sr_client, ALL_TYPES, topic)
    rng = np.random.default_rng(7)
    rows = []
    for i in range(300):
        rows.append({
            "b": bool(i % 2), "i": int(rng.integers(-2**31, 2**31)), "l": int(rng.integers(-2**63, 2**63)),
            "f": float(np.float32(rng.normal())), "d": float(rng.normal()), "s": "é" * (i % 5),
            "by": bytes(rng.integers(0, 256, i % 7, dtype=np.uint8)), "fx": b"\x00\x01\x02" + bytes([i % 256]),
            "date": dt.date(2000, 1, 1) + dt.timedelta(days=i), "tsu": dt.datetime(2026, 1, 1, 0, 0, 0, i, tzinfo=UTC),
            "dec": decimal.Decimal(f"{i - 150}.{i % 1000:03d}"), "decf": decimal.Decimal(f"-{i}.25"),
            "id": uuid.UUID(int=i * 7919),
            "u": [None, i, f"s{i}", {"x": i}][i % 4], "il": i * 1000,
            "nested": [None, {"m": {"k": str(i)}}][: i % 3]})
    col = binary([ser(r) for r in rows])
    registry = RegistryClient.from_options({"schema.registry.url": registry_url})
    info = registry.version(f"{topic}-value").info
    fast = ColumnDecoder(AvroDecoder(AvroSchema(info, registry), registry), registry).decode(col)
    slow = ColumnDecoder(AvroDecoder(AvroSchema(info, registry), registry, fast=False), registry).decode(col)
    assert AvroSchema(info, registry).plan is not None, "the schema compiles for the C decoder"
    assert fast.value.equals(slow.value), (fast.value.to_pylist()[:2], slow.value.to_pylist()[:2])
    first = fast.value.to_pylist()[3]
    assert first["u"] == {"member0": None, "member1": None, "member2": {"x": 3}}
    assert first["id"] == str(uuid.UUID(int=3 * 7919)) and first["dec"] == decimal.Decimal("-147.003")
    payloads = encode_column(fast.value, registry, f"{topic}-value")
    de = AvroDeserializer(sr_client)
    assert [de(p, ctx(topic)) for p in payloads.to_pylist()] == rows


def test_two_versions_in_one_column_read_into_the_reader_version(sr_client: SchemaRegistryClient,
                                                                 registry_url: str) -> None:
    topic = unique("evolve")
    v1, v2 = serializer(sr_client, PAGEVIEW_V1, topic), serializer(sr_client, PAGEVIEW_V2, topic)
    rows1 = [pageview(i) for i in range(200)]
    rows2 = [{**{k: v for k, v in pageview(i).items() if k != "tags"}, "country": "DE",
              "device": {"os": "ios", "mobile": True}} for i in range(200, 400)]
    v1(rows1[0])  # registers version 1 first
    mixed = [v1(r) if i % 2 else v2(rows2[i // 2]) for i, r in enumerate(rows1)] + [v2(r) for r in rows2[100:]]
    col = binary(mixed)
    registry = RegistryClient.from_options({"schema.registry.url": registry_url})
    for fast in (True, False):
        info = registry.version(f"{topic}-value").info
        out = ColumnDecoder(AvroDecoder(AvroSchema(info, registry), registry, fast=fast), registry).decode(col)
        values = out.value.to_pylist()
        assert out.errors == []
        for i, v in enumerate(values[:200]):
            if i % 2:  # written with v1: tags dropped, country and device from the defaults, duration widened
                want = {k: x for k, x in rows1[i].items() if k != "tags"}
                want.update(country="NL", device={"os": "unknown", "mobile": False})
            else:
                want = dict(rows2[i // 2])
            want["attrs"] = list(want["attrs"].items())
            assert v == want, (i, fast)
        assert out.value.type.field("duration_ms").type == pa.int64()
    # the older version as the reader: v2's records lose what v1 lacks (tags has no default: v2 records
    # cannot be read as v1, the compatibility check's verdict too)
    v1_id = registry.version(f"{topic}-value", 1).info.id
    out = decode_column(col, registry, schema_id=v1_id, mode="PERMISSIVE")
    assert [r for r, _ in out.errors] == [i for i in range(len(mixed)) if not (i < 200 and i % 2)]
    assert out.value.to_pylist()[1] == as_arrow_values([rows1[1]])[0]


def test_corrupt_payloads_failfast_and_permissive(sr_client: SchemaRegistryClient, registry_url: str) -> None:
    topic = unique("corrupt")
    ser = serializer(sr_client, PAGEVIEW_V1, topic)
    good = [ser(pageview(i)) for i in range(10)]
    sid = int.from_bytes(good[0][1:5], "big")
    bad = {
        2: b"\x01" + good[2][1:],                        # bad magic byte
        3: good[3][:5] + b"\x07",                        # truncated
        5: b"\x00" + (sid + 1000).to_bytes(4, "big") + good[5][5:],  # unknown schema id
        6: good[6] + b"\x00",                            # bytes left over
        7: b"\x00\x00",                                  # too short for a frame
        8: good[8][:5] + b"\x06\xff\xfe\xfd" + good[8][9:],  # a string that is not UTF-8
    }
    values = [bad.get(i, g) for i, g in enumerate(good)] + [None]
    col = binary(values)
    registry = RegistryClient.from_options({"schema.registry.url": registry_url})
    with pytest.raises(CorruptRecordError) as e:
        decode_column(col, registry, subject=f"{topic}-value", offsets=pa.array(range(1000, 1011)))
    assert e.value.row == 2 and e.value.offset == 1002 and "magic byte" in e.value.reason
    for fast in (True, False):
        info = registry.version(f"{topic}-value").info
        out = ColumnDecoder(AvroDecoder(AvroSchema(info, registry), registry, fast=fast), registry, "PERMISSIVE").decode(col)
        assert [r for r, _ in out.errors] == sorted(bad)
        reasons = dict(out.errors)
        assert "unknown schema id" in reasons[5] and "left over" in reasons[6]
        assert out.corrupt.to_pylist() == [bad.get(i) for i in range(11)]
        got = out.value.to_pylist()
        for i in range(11):
            if i in bad or i == 10:
                assert got[i] is None
            else:
                assert got[i] == as_arrow_values([pageview(i)])[0]


def test_read_from_a_topic_through_the_arrow_reader(sr_client: SchemaRegistryClient, registry_url: str,
                                                    typed_broker: BrokerProcess) -> None:
    topic = unique("pvtopic")
    ser = serializer(sr_client, PAGEVIEW_V1, topic)
    p = Producer({"bootstrap.servers": typed_broker.bootstrap})
    rows = [pageview(i) for i in range(1000)]
    for r in rows:
        p.produce(topic, value=ser(r))
    assert p.flush(30) == 0
    table = gc.read_arrow(typed_broker.bootstrap, topic)
    registry = RegistryClient.from_options({"schema.registry.url": registry_url})
    out = decode_column(table.column("value"), registry, subject=f"{topic}-value", offsets=table.column("offset"))
    assert out.value.to_pylist() == as_arrow_values(rows)


def test_encode_registers_a_schema_derived_from_the_arrow_type(sr_client: SchemaRegistryClient,
                                                               registry_url: str) -> None:
    topic = unique("derived")
    t = pa.struct([pa.field("page", pa.string(), False), pa.field("views", pa.int64(), False),
                   pa.field("at", pa.timestamp("us", "UTC")), pa.field("share", pa.decimal128(10, 2))])
    values = pa.array([{"page": "/a", "views": 3, "at": dt.datetime(2026, 1, 1, tzinfo=UTC), "share": decimal.Decimal("0.25")},
                       {"page": "/b", "views": 5, "at": None, "share": None}], t)
    registry = RegistryClient.from_options({"schema.registry.url": registry_url})
    with pytest.raises(Exception, match="40401|not found"):
        encode_column(values, registry, f"{topic}-value")  # no schema and nothing registered
    from gregor.typed.columns import ColumnOptions, ColumnWriter
    opts = ColumnOptions("value", "avro", f"{topic}-value", auto_register=True, registry=registry.options)
    payloads = ColumnWriter(opts, registry).encode(values)
    de = AvroDeserializer(sr_client)
    assert [de(p, ctx(topic)) for p in payloads.to_pylist()] == values.to_pylist()
    assert decode_column(payloads, registry, subject=f"{topic}-value").value.equals(values)


def test_schema_ids_are_looked_up_once(sr_client: SchemaRegistryClient, proxy: Any) -> None:
    topic = unique("cached")
    v1, v2 = serializer(sr_client, PAGEVIEW_V1, topic), serializer(sr_client, PAGEVIEW_V2, topic)
    v1(pageview(0))  # registers version 1 first
    batch = binary([v1(pageview(i)) if i % 2 else v2({**pageview(i), "country": "x", "device": {"os": "a", "mobile": True}})
                    for i in range(100)] + [b"\x00\x00\x0f\x42\x40" + b"\x00" * 10])  # id 1000000: unknown
    registry = RegistryClient.from_options({"schema.registry.url": proxy.url})
    from gregor.typed.columns import ColumnOptions, TypedColumn
    col = TypedColumn(ColumnOptions.from_options({"valueFormat": "avro", "mode": "PERMISSIVE",
                                                  "schema.registry.url": proxy.url}, "value", topic), registry)
    for _ in range(50):
        out = col.decode(batch)
        assert len(out.errors) == 1
    ids = [k for k in proxy.counts if k.startswith("GET /schemas/ids/")]
    assert len(ids) == 2 and all(proxy.counts[k] == 1 for k in ids), proxy.counts
    assert sum(proxy.counts.values()) == 3, proxy.counts  # the latest version, and the writer ids not already known


def test_schema_registry_options() -> None:
    from gregor.typed.registry_client import RegistryOptions
    o = RegistryOptions.from_options({"schema.registry.url": "https://a:1,https://b:2",
                                      "schema.registry.basic.auth.user.info": "u:p",
                                      "schema.registry.ssl.ca.location": "/ca.pem",
                                      "schema.registry.ssl.keystore.location": "/both.pem",
                                      "schema.registry.cache.capacity": "5"})
    assert o.urls == ("https://a:1", "https://b:2") and o.user_info == "u:p" and o.ca_location == "/ca.pem"
    assert o.certificate_location == o.key_location == "/both.pem" and o.cache_capacity == 5
    for bad in ({}, {"schema.registry.url": "ftp://x"}, {"schema.registry.url": "http://x", "basic.auth.user.info": "nocolon"},
                {"schema.registry.url": "http://x", "schema.registry.cache.capacity": "0"}):
        with pytest.raises(ValueError):
            RegistryOptions.from_options(bad)
    assert SchemaInfo(1, "AVRO", "{}").references == ()
    # among a Spark source's options only the schema.registry.* names count, and the column options are checked
    from gregor.typed.columns import ColumnOptions
    c = ColumnOptions.from_options({"valueformat": "AVRO", "schema.registry.url": "http://r:1", "ssl.ca.location": "/k.pem",
                                    "valueschemaversion": "3", "mode": "permissive"}, "value", "t")
    assert c.format == "avro" and c.subject == "t-value" and c.version == "3" and c.mode == "PERMISSIVE"
    assert c.registry is not None and c.registry.ca_location is None
    assert ColumnOptions.from_options({}, "key", "t").format == "binary"
    for bad in ({"valueFormat": "xml"}, {"valueFormat": "avro"}, {"valueFormat": "avro", "schema.registry.url": "http://r",
                "valueSchemaId": "x"}, {"valueFormat": "avro", "schema.registry.url": "http://r", "valueSchemaId": "1",
                "valueSchemaVersion": "2"}, {"mode": "DROPMALFORMED"}):
        with pytest.raises(ValueError):
            ColumnOptions.from_options(bad, "value", "t")
