"""confluent-kafka's SchemaRegistryClient and its three serializer pairs against `gregor schema-registry`
in front of a real broker: register, evolve compatibly, refuse an incompatible change (409), produce and
consume typed records; a restarted registry reads its state back from the topic."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.broker_process import BrokerProcess
from tests.schema_registry.conftest import RegistryProcess, http, unique, wait_writable

pytestmark = pytest.mark.timeout(180)

PAGEVIEW_V1 = {"type": "record", "name": "PageView", "namespace": "demo",
               "fields": [{"name": "url", "type": "string"}, {"name": "ms", "type": "long"}]}
PAGEVIEW_V2 = {**PAGEVIEW_V1, "fields": [*PAGEVIEW_V1["fields"], {"name": "user", "type": "string", "default": "anon"}]}
PAGEVIEW_BAD = {**PAGEVIEW_V1, "fields": [{"name": "url", "type": "long"}, {"name": "ms", "type": "long"}]}


def produce(broker: BrokerProcess, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for v in values:
        p.produce(topic, value=v)
    assert p.flush(30) == 0


def consume(broker: BrokerProcess, topic: str, n: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("g"), "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes] = []
        for _ in range(200):
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m.value())
            if len(out) >= n:
                return out
        raise AssertionError(f"read {len(out)} of {n} records from {topic}")
    finally:
        c.close()


def ctx(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def test_avro_register_evolve_refuse_produce_consume(start_registry: Callable[..., RegistryProcess],
                                                     sr_broker: BrokerProcess) -> None:
    reg = start_registry()
    wait_writable(reg.url)
    client = SchemaRegistryClient({"url": reg.url})
    topic = unique("pageviews")
    v1 = AvroSerializer(client, json.dumps(PAGEVIEW_V1))
    v2 = AvroSerializer(client, json.dumps(PAGEVIEW_V2))
    first = v1({"url": "/a", "ms": 1}, ctx(topic))
    second = v2({"url": "/b", "ms": 2, "user": "ann"}, ctx(topic))
    id1, id2 = int.from_bytes(first[1:5], "big"), int.from_bytes(second[1:5], "big")
    assert first[0] == 0 and id2 == id1 + 1  # Confluent's wire format, two versions
    assert client.get_versions(f"{topic}-value") == [1, 2]

    with pytest.raises(SchemaRegistryError) as refused:
        AvroSerializer(client, json.dumps(PAGEVIEW_BAD))({"url": 3, "ms": 3}, ctx(topic))
    assert refused.value.http_status_code == 409 and refused.value.error_code == 409
    assert client.get_versions(f"{topic}-value") == [1, 2]

    produce(sr_broker, topic, [first, second])
    raw = consume(sr_broker, topic, 2)
    writer = AvroDeserializer(client)
    assert [writer(v, ctx(topic)) for v in raw] == [{"url": "/a", "ms": 1}, {"url": "/b", "ms": 2, "user": "ann"}]
    reader = AvroDeserializer(client, json.dumps(PAGEVIEW_V2))  # v1 data read with v2: the default fills in
    assert reader(raw[0], ctx(topic)) == {"url": "/a", "ms": 1, "user": "anon"}

    # The same schema under another subject keeps its id (global ids, as Confluent).
    assert client.register_schema(unique("other"), Schema(json.dumps(PAGEVIEW_V1), "AVRO")) == id1


def test_json_schema_serializer_pair(start_registry: Callable[..., RegistryProcess], sr_broker: BrokerProcess) -> None:
    reg = start_registry()
    wait_writable(reg.url)
    client = SchemaRegistryClient({"url": reg.url})
    topic = unique("orders")
    v1 = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
          "properties": {"id": {"type": "integer"}, "item": {"type": "string"}}, "required": ["id"],
          "additionalProperties": False}
    v2 = {**v1, "properties": {**v1["properties"], "qty": {"type": "integer"}}}  # optional, closed model: compatible
    bad = {**v1, "properties": {"id": {"type": "string"}, "item": {"type": "string"}}}
    a = JSONSerializer(json.dumps(v1), client)({"id": 1, "item": "pen"}, ctx(topic))
    b = JSONSerializer(json.dumps(v2), client)({"id": 2, "item": "ink", "qty": 3}, ctx(topic))
    assert client.get_versions(f"{topic}-value") == [1, 2]
    with pytest.raises(SchemaRegistryError) as refused:
        JSONSerializer(json.dumps(bad), client)({"id": "x", "item": "y"}, ctx(topic))
    assert refused.value.http_status_code == 409
    produce(sr_broker, topic, [a, b])
    de = JSONDeserializer(None, schema_registry_client=client)
    assert [de(v, ctx(topic)) for v in consume(sr_broker, topic, 2)] == [{"id": 1, "item": "pen"},
                                                                          {"id": 2, "item": "ink", "qty": 3}]


def _proto_classes(tmp: Path, files: dict[str, str], message: str) -> Any:
    """Compile .proto files with protoc and build the message class in a pool of its own (so two versions of
    one message can live in one process)."""
    from importlib import resources

    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from grpc_tools import protoc

    for name, text in files.items():
        (tmp / name).write_text(text)
    out = tmp / "set.pb"
    include = str(resources.files("grpc_tools") / "_proto")
    assert protoc.main(["protoc", f"-I{tmp}", f"-I{include}", f"--descriptor_set_out={out}", "--include_imports",
                        *files]) == 0
    pool = descriptor_pool.DescriptorPool()
    for fdp in descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file:
        pool.AddSerializedFile(fdp.SerializeToString())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(message))


COMMON_PROTO = 'syntax = "proto3";\npackage demo;\nmessage Page { string url = 1; }\n'


def test_protobuf_serializer_pair_with_a_reference(start_registry: Callable[..., RegistryProcess],
                                                   sr_broker: BrokerProcess, tmp_path: Path) -> None:
    reg = start_registry()
    wait_writable(reg.url)
    client = SchemaRegistryClient({"url": reg.url})
    topic = unique("clicks")
    head = 'syntax = "proto3";\npackage demo;\nimport "common.proto";\nimport "google/protobuf/timestamp.proto";\n'
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    (tmp_path / "bad").mkdir()
    v1 = _proto_classes(tmp_path / "v1", {"common.proto": COMMON_PROTO, "click.proto": head +
                        "message Click { Page page = 1; google.protobuf.Timestamp at = 2; int32 n = 3; }\n"}, "demo.Click")
    v2 = _proto_classes(tmp_path / "v2", {"common.proto": COMMON_PROTO, "click.proto": head +
                        "message Click { Page page = 1; google.protobuf.Timestamp at = 2; int64 n = 3; string who = 4; }\n"},
                        "demo.Click")
    bad = _proto_classes(tmp_path / "bad", {"common.proto": COMMON_PROTO, "click.proto": head +
                         "message Click { Page page = 1; google.protobuf.Timestamp at = 2; string n = 3; }\n"}, "demo.Click")
    conf = {"use.deprecated.format": False}
    m1 = v1(page={"url": "/x"}, n=7)
    m1.at.FromSeconds(1_700_000_000)
    a = ProtobufSerializer(v1, client, conf)(m1, ctx(topic))
    b = ProtobufSerializer(v2, client, conf)(v2(page={"url": "/y"}, n=8, who="bo"), ctx(topic))
    assert client.get_versions(f"{topic}-value") == [1, 2]
    assert client.get_versions("common.proto") == [1]  # the import, registered as its own subject and referenced
    latest = client.get_latest_version(f"{topic}-value")
    assert [(r.name, r.subject, r.version) for r in latest.schema.references] == [("common.proto", "common.proto", 1)]
    with pytest.raises(SchemaRegistryError) as refused:
        ProtobufSerializer(bad, client, conf)(bad(n="z"), ctx(topic))
    assert refused.value.http_status_code == 409
    produce(sr_broker, topic, [a, b])
    raw = consume(sr_broker, topic, 2)
    read_v2 = ProtobufDeserializer(v2, conf)
    got = [read_v2(v, ctx(topic)) for v in raw]
    assert (got[0].page.url, got[0].n, got[0].at.seconds, got[0].who) == ("/x", 7, 1_700_000_000, "")
    assert (got[1].page.url, got[1].n, got[1].who) == ("/y", 8, "bo")
    # The serializer registered base64 descriptors: curl sees .proto text, the deserializers' ?format=serialized
    # the base64 they sent.
    sid = int.from_bytes(a[1:5], "big")
    text = http("GET", f"{reg.url}/schemas/ids/{sid}").json["schema"]
    assert text.startswith('syntax = "proto3";\npackage demo;\nimport "common.proto";') and "int32 n = 3;" in text
    serialized = http("GET", f"{reg.url}/schemas/ids/{sid}?format=serialized").json
    assert serialized["schemaType"] == "PROTOBUF" and serialized["schema"] == client.get_schema(sid, fmt="serialized").schema_str


def test_a_restarted_registry_reads_its_state_back(start_registry: Callable[..., RegistryProcess]) -> None:
    reg = start_registry()
    wait_writable(reg.url)
    client = SchemaRegistryClient({"url": reg.url})
    subject = unique("restart")
    ids = [client.register_schema(subject, Schema(json.dumps(s), "AVRO")) for s in (PAGEVIEW_V1, PAGEVIEW_V2)]
    client.set_compatibility(subject, "FULL")
    client.delete_version(subject, 1)
    assert reg.stop() == 0

    again = start_registry()
    fresh = SchemaRegistryClient({"url": again.url})
    assert fresh.get_versions(subject) == [2]
    assert http("GET", f"{again.url}/subjects/{subject}/versions?deleted=true").json == [1, 2]
    assert fresh.get_compatibility(subject) == "FULL"
    assert fresh.get_schema(ids[0]).schema_str == json.dumps(PAGEVIEW_V1, separators=(",", ":"))
    wait_writable(again.url)
    third = {**PAGEVIEW_V2, "fields": [*PAGEVIEW_V2["fields"], {"name": "ref", "type": "string", "default": ""}]}
    assert fresh.register_schema(subject, Schema(json.dumps(third), "AVRO")) == ids[1] + 1  # no id reused
    assert fresh.get_versions(subject) == [2, 3]
