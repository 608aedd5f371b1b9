"""format("gregor") with valueFormat / keyFormat, against a real broker running its own schema registry: typed
columns read from records that confluent-kafka's serializers wrote, and written for its deserializers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.broker_process import BrokerProcess
from tests.schema_registry.conftest import wait_writable
from tests.schema_registry.test_schema_checked_topics import registry_url
from tests.spark.util import consume_all, create_topic, load, produce, unique

pytestmark = pytest.mark.timeout(300)

VIEW_V1 = {"type": "record", "name": "PageView", "namespace": "demo", "fields": [
    {"name": "user", "type": "string"}, {"name": "n", "type": "long"},
    {"name": "ref", "type": ["null", "string"], "default": None}]}
VIEW_V2 = {**VIEW_V1, "fields": [*VIEW_V1["fields"], {"name": "country", "type": "string", "default": "??"}]}


@pytest.fixture(scope="module")
def typed_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker with its in-broker registry for the module (the typed sink tests share it)."""
    b = BrokerProcess(tmp_path_factory.mktemp("typed-spark"), {
        "schema.registry.listeners": "http://127.0.0.1:0", "group.initial.rebalance.delay.ms": "0"}).start()
    wait_writable(registry_url(b))
    yield b
    b.kill()


@pytest.fixture(scope="module")
def url(typed_broker: BrokerProcess) -> str:
    return registry_url(typed_broker)


def vctx(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def avro_topic(broker: BrokerProcess, url: str, partitions: int = 2) -> str:
    """A topic holding 30 records written with VIEW_V1 then 30 with VIEW_V2 (registered in that order)."""
    topic = create_topic(broker.bootstrap, unique("views"), partitions)
    sr = SchemaRegistryClient({"url": url})
    v1 = AvroSerializer(sr, json.dumps(VIEW_V1), conf={"auto.register.schemas": True})
    v2 = AvroSerializer(sr, json.dumps(VIEW_V2), conf={"auto.register.schemas": True})
    items = [{"key": f"u{i % 5}".encode(), "partition": i % partitions,
              "value": v1({"user": f"u{i % 5}", "n": i, "ref": None if i % 3 else f"r{i}"}, vctx(topic))}
             for i in range(30)]
    produce(broker.bootstrap, topic, items)
    items = [{"key": f"u{i % 5}".encode(), "partition": i % partitions,
              "value": v2({"user": f"u{i % 5}", "n": i, "ref": None, "country": f"c{i}"}, vctx(topic))}
             for i in range(30, 60)]
    produce(broker.bootstrap, topic, items)
    return topic


def test_avro_two_versions_read_into_the_reader_schema(spark: Any, typed_broker: BrokerProcess, url: str) -> None:
    topic = avro_topic(typed_broker, url)
    df = load(spark, typed_broker.bootstrap, subscribe=topic, valueFormat="avro", keyFormat="string",
              **{"schema.registry.url": url})
    assert df.schema["value"].dataType.simpleString() == "struct<user:string,n:bigint,ref:string,country:string>"
    assert df.schema["key"].dataType.simpleString() == "string"
    assert "_corrupt_record" not in df.columns  # FAILFAST: no corrupt column
    rows = {r["value"]["n"]: r for r in df.collect()}
    assert sorted(rows) == list(range(60))
    for n, r in rows.items():
        assert r["key"] == f"u{n % 5}" and r["value"]["user"] == f"u{n % 5}"
        assert r["value"]["country"] == ("??" if n < 30 else f"c{n}")  # v1 records take the reader's default
        assert r["value"]["ref"] == (None if n % 3 or n >= 30 else f"r{n}")
    # The older version as reader schema: v2's added field is dropped, the rest read as written.
    old = load(spark, typed_broker.bootstrap, subscribe=topic, valueFormat="avro", valueSchemaVersion="1",
               **{"schema.registry.url": url}).selectExpr("value.*")
    assert old.columns == ["user", "n", "ref"]
    assert sorted(r["n"] for r in old.collect()) == list(range(60))


def test_permissive_keeps_corrupt_rows_and_failfast_names_the_offset(spark: Any, typed_broker: BrokerProcess,
                                                                     url: str) -> None:
    topic = create_topic(typed_broker.bootstrap, unique("dirty"), 1)
    ser = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(VIEW_V1), conf={"auto.register.schemas": True})
    good = [ser({"user": "a", "n": i, "ref": None}, vctx(topic)) for i in range(4)]
    bad = b"not avro at all"
    produce(typed_broker.bootstrap, topic, [{"value": v} for v in good[:2] + [bad, None] + good[2:]])
    opts = {"subscribe": topic, "valueFormat": "avro", "schema.registry.url": url}
    df = load(spark, typed_broker.bootstrap, mode="PERMISSIVE", **opts)
    got = sorted((r["offset"], r["value"] and r["value"]["n"], r["_corrupt_record"]) for r in df.collect())
    # The tombstone (offset 3) is a null value, not a corrupt record.
    assert got == [(0, 0, None), (1, 1, None), (2, None, bad), (3, None, None), (4, 2, None), (5, 3, None)]
    with pytest.raises(Exception, match=r"malformed record at offset 2: value of .*-0: not in Confluent's wire"):
        load(spark, typed_broker.bootstrap, **opts).collect()


def test_json_schema_values(spark: Any, typed_broker: BrokerProcess, url: str) -> None:
    topic = create_topic(typed_broker.bootstrap, unique("jsonviews"), 1)
    schema = {"type": "object", "title": "Click", "properties": {
        "user": {"type": "string"}, "ms": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["user", "ms"]}
    ser = JSONSerializer(json.dumps(schema), SchemaRegistryClient({"url": url}), conf={"auto.register.schemas": True})
    produce(typed_broker.bootstrap, topic, [{"value": ser({"user": f"u{i}", "ms": i * 1000, "tags": ["a"] * i},
                                                          vctx(topic))} for i in range(5)])
    df = load(spark, typed_broker.bootstrap, subscribe=topic, valueFormat="json", **{"schema.registry.url": url})
    got = sorted((r["user"], r["ms"], r["tags"]) for r in df.selectExpr("value.*").collect())
    assert got == [(f"u{i}", i * 1000, ["a"] * i) for i in range(5)]


def test_protobuf_values(spark: Any, typed_broker: BrokerProcess, url: str, tmp_path: Path) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    from tests.schema_registry.test_clients import _proto_classes

    topic = create_topic(typed_broker.bootstrap, unique("protoviews"), 1)
    cls = _proto_classes(tmp_path, {"view.proto": 'syntax = "proto3";\npackage demo;\n'
                                    "message View { string url = 1; int64 ms = 2; repeated string tags = 3; }\n"},
                         "demo.View")
    ser = ProtobufSerializer(cls, SchemaRegistryClient({"url": url}), {"use.deprecated.format": False})
    produce(typed_broker.bootstrap, topic, [{"value": ser(cls(url=f"/p{i}", ms=i, tags=["t"] * i), vctx(topic))}
                                            for i in range(5)])
    df = load(spark, typed_broker.bootstrap, subscribe=topic, valueFormat="protobuf", **{"schema.registry.url": url})
    assert sorted((r["url"], r["ms"], r["tags"]) for r in df.selectExpr("value.*").collect()) == [
        (f"/p{i}", i, ["t"] * i) for i in range(5)]


def test_several_topics_with_one_reader_subject(spark: Any, typed_broker: BrokerProcess, url: str) -> None:
    sr = SchemaRegistryClient({"url": url})
    topics = [create_topic(typed_broker.bootstrap, unique("multi"), 1) for _ in range(2)]
    for t in topics:
        ser = AvroSerializer(sr, json.dumps(VIEW_V1), conf={"auto.register.schemas": True})
        produce(typed_broker.bootstrap, t, [{"value": ser({"user": t, "n": i, "ref": None}, vctx(t))} for i in range(3)])
    df = load(spark, typed_broker.bootstrap, subscribe=",".join(topics), valueFormat="avro",
              valueSubject=f"{topics[0]}-value", **{"schema.registry.url": url})
    assert sorted((r["topic"], r["value"]["user"], r["value"]["n"]) for r in df.collect()) == sorted(
        (t, t, i) for t in topics for i in range(3))


def test_streaming_read_of_typed_values(spark: Any, typed_broker: BrokerProcess, url: str, tmp_path: Path) -> None:
    topic = avro_topic(typed_broker, url)
    name = unique("typedstream").replace("-", "_")
    q = (spark.readStream.format("gregor").option("kafka.bootstrap.servers", typed_broker.bootstrap)
         .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "25")
         .option("valueFormat", "avro").option("schema.registry.url", url).load()
         .selectExpr("value.n as n", "value.country as country")
         .writeStream.format("memory").queryName(name)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    got = sorted((r["n"], r["country"]) for r in spark.sql(f"select * from {name}").collect())
    assert got == [(n, "??" if n < 30 else f"c{n}") for n in range(60)]
    assert len(q.recentProgress) >= 3  # 60 records, at most 25 per micro-batch


def test_typed_option_errors_fail_at_load(spark: Any, typed_broker: BrokerProcess, url: str) -> None:
    a, b = unique("a"), unique("b")
    with pytest.raises(Exception, match="needs valueSubject or valueSchemaId"):
        load(spark, typed_broker.bootstrap, subscribe=f"{a},{b}", valueFormat="avro", **{"schema.registry.url": url})
    with pytest.raises(Exception, match="needs valueSubject or valueSchemaId"):
        load(spark, typed_broker.bootstrap, subscribePattern="views-.*", valueFormat="avro",
             **{"schema.registry.url": url})
    with pytest.raises(Exception, match="valueFormat must be one of"):
        load(spark, typed_broker.bootstrap, subscribe=a, valueFormat="xml")
    with pytest.raises(Exception, match="schema.registry.url is required"):
        load(spark, typed_broker.bootstrap, subscribe=a, valueFormat="avro")
    with pytest.raises(Exception, match="40401|not found"):  # no such subject in the registry
        load(spark, typed_broker.bootstrap, subscribe=a, valueFormat="avro", **{"schema.registry.url": url})


def write(df: Any, bootstrap: str, **options: str) -> None:
    w = df.write.format("gregor").mode("append").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def test_sink_writes_avro_that_confluents_deserializer_reads(spark: Any, typed_broker: BrokerProcess,
                                                              url: str) -> None:
    topic = create_topic(typed_broker.bootstrap, unique("out"), 2)
    df = spark.createDataFrame([(f"u{i % 3}", i, None if i % 2 else f"r{i}") for i in range(40)],
                               "user string, n long, ref string")
    write(df.selectExpr("user as key", "named_struct('user', user, 'n', n, 'ref', ref) as value"),
          typed_broker.bootstrap, topic=topic, valueFormat="avro", **{"schema.registry.url": url})
    sr = SchemaRegistryClient({"url": url})
    registered = sr.get_latest_version(f"{topic}-value")  # auto.register.schemas defaults to true
    assert [f["name"] for f in json.loads(registered.schema.schema_str)["fields"]] == ["user", "n", "ref"]
    de = AvroDeserializer(sr)
    recs = consume_all(typed_broker.bootstrap, topic)
    got = sorted((r.key, de(r.value, vctx(topic))["n"], de(r.value, vctx(topic))["ref"]) for r in recs)
    assert got == sorted((f"u{i % 3}".encode(), i, None if i % 2 else f"r{i}") for i in range(40))
    assert all(r.value[1:5] == registered.schema_id.to_bytes(4, "big") for r in recs)


def test_sink_to_a_schema_checked_topic_with_the_latest_version_in_a_transaction(spark: Any, typed_broker: BrokerProcess,
                                                                           url: str) -> None:
    topic = unique("views-out")  # schema-checked: the broker refuses a record not framed with the subject's id
    admin = AdminClient({"bootstrap.servers": typed_broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"confluent.value.schema.validation": "true"})])[topic].result(30)
    sr = SchemaRegistryClient({"url": url})
    sid = sr.register_schema(f"{topic}-value", Schema(json.dumps(VIEW_V2), "AVRO"))
    df = spark.createDataFrame([(f"u{i}", i, f"c{i}") for i in range(10)], "user string, n long, country string")
    write(df.selectExpr("named_struct('user', user, 'n', n, 'ref', cast(null as string), 'country', country) as value"),
          typed_broker.bootstrap, topic=topic, valueFormat="avro", transactional="true",
          **{"schema.registry.url": url, "use.latest.version": "true"})
    recs = consume_all(typed_broker.bootstrap, topic, isolation="read_committed")
    assert len(recs) == 10 and all(r.value[1:5] == sid.to_bytes(4, "big") for r in recs)
    de = AvroDeserializer(sr)
    assert sorted(de(r.value, vctx(topic))["country"] for r in recs) == sorted(f"c{i}" for i in range(10))
    back = load(spark, typed_broker.bootstrap, subscribe=topic, valueFormat="avro", **{"schema.registry.url": url,
                                                                                        "kafka.isolation.level": "read_committed"})
    assert sorted((r["n"], r["country"]) for r in back.selectExpr("value.*").collect()) == [(i, f"c{i}") for i in range(10)]
    with pytest.raises(Exception, match="cannot both be true"):
        write(df, typed_broker.bootstrap, topic=topic, valueFormat="avro",
              **{"schema.registry.url": url, "use.latest.version": "true", "auto.register.schemas": "true"})


def test_pipeline_typed_step_survives_a_schema_change_while_live(spark: Any, typed_broker: BrokerProcess, url: str,
                                                                tmp_path: Path) -> None:
    from gregor.pipeline.typed_events import run_typed_step

    lines: list[str] = []
    result = run_typed_step(spark, typed_broker.bootstrap, url, tmp_path, 200, say=lines.append,
                            suffix="_" + unique("t").replace("-", "_"), trigger="500 milliseconds")
    assert (result.produced_v1, result.produced_v2, result.rows_streamed) == (100, 100, 200), lines
    assert result.evolution_checked and result.counts_checked, lines
