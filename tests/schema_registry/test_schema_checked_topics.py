"""Schema-checked topics and the registry inside the broker, through real broker processes and real clients.

One broker runs its own registry (`schema.registry.listeners`); schemas are registered with confluent-kafka's
SchemaRegistryClient and serializers; records are produced by confluent-kafka and kafka-python producers and
read back by a confluent-kafka consumer. A refused batch must leave nothing in the log, and the producer's
connection must go on serving the next batch.
"""

from __future__ import annotations

import io
import json
import re
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, record_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from kafka import KafkaProducer
from kafka.errors import InvalidRecordError, RequestTimedOutError
from kafka.errors import KafkaError as KafkaPythonError

from gregor.tools.ports import pick_port
from tests.broker_process import BrokerProcess
from tests.schema_registry.conftest import RegistryProcess, unique, wait_writable
from tests.schema_registry.test_clients import _proto_classes

pytestmark = pytest.mark.timeout(240)

ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [{"name": "n", "type": "long"},
                                                                          {"name": "item", "type": "string"}]}
OTHER = {"type": "record", "name": "Other", "namespace": "shop", "fields": [{"name": "s", "type": "string"}]}
_LISTENING = re.compile(r"Schema registry listening on (\S+)")
RECORD_NAME_STRATEGY = "io.confluent.kafka.serializers.subject.RecordNameStrategy"


def registry_url(broker: BrokerProcess, after: int = 0, timeout_s: float = 60.0) -> str:
    """The URL the broker's registry logged it listens on (the last start's, from log line `after` on)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in reversed(broker.log_lines[after:]):
            m = _LISTENING.search(line)
            if m:
                return m.group(1).rstrip(",")
        time.sleep(0.1)
    raise AssertionError("the broker's registry did not start:\n" + broker.log_text()[-3000:])


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("sc-broker"), {
        "schema.registry.listeners": "http://127.0.0.1:0", "group.initial.rebalance.delay.ms": "0",
        "schema.registry.session.timeout.ms": "6000", "schema.registry.heartbeat.interval.ms": "500"}).start()
    wait_writable(registry_url(b))
    yield b
    b.kill()


def create_topic(broker: BrokerProcess, **configs: str) -> str:
    name = unique("orders")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config={k.replace("_", "."): v for k, v in configs.items()})])[name].result(30)
    return name


def value_ctx(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def framed(schema_id: int, payload: bytes = b"") -> bytes:
    return struct.pack(">bI", 0, schema_id) + payload


def produce_ck(broker: BrokerProcess, topic: str, values: list[bytes | None], keys: list[bytes | None] | None = None,
               **conf: Any) -> list[str | None]:
    """One confluent-kafka batch (linger): each record's delivery error name, None when delivered."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 200, "retries": 0, **conf})
    out: list[str | None] = [None] * len(values)
    done = [False] * len(values)

    def report(i: int) -> Any:
        def cb(err: KafkaError | None, _msg: Any) -> None:
            out[i] = err.name() if err is not None else None
            done[i] = True
        return cb

    p.list_topics(topic, timeout=30)  # metadata first, so that the records leave as one batch
    for i, v in enumerate(values):
        p.produce(topic, value=v, key=keys[i] if keys else None, partition=0, on_delivery=report(i))
    assert p.flush(60) == 0 and all(done)
    return out


def produce_kp(broker: BrokerProcess, topic: str, values: list[bytes], **conf: Any) -> list[BaseException | None]:
    """One kafka-python batch (linger): each record's exception, None when delivered."""
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=200, retries=0, **conf)
    try:
        p.partitions_for(topic)  # metadata first, so that the records leave as one batch
        futures = [p.send(topic, value=v, partition=0) for v in values]
        p.flush(60)
        out: list[BaseException | None] = []
        for f in futures:
            try:
                f.get(30)
                out.append(None)
            except KafkaPythonError as e:
                out.append(e)
        return out
    finally:
        p.close(10)


def consume(broker: BrokerProcess, topic: str) -> list[bytes | None]:
    """Everything in partition 0 (to its end)."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("g"), "enable.auto.commit": False,
                  "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes | None] = []
        for _ in range(200):
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return out
                continue
            out.append(m.value())
        raise AssertionError(f"did not reach the end of {topic}")
    finally:
        c.close()


@pytest.fixture(scope="module")
def schemas(broker: BrokerProcess) -> dict[str, Any]:
    """A registry client, and serializers for the subject `<topic>-value` and for another subject."""
    return {"client": SchemaRegistryClient({"url": registry_url(broker)})}


def serialize(client: SchemaRegistryClient, schema: dict[str, Any], obj: dict[str, Any], topic: str,
              **conf: Any) -> bytes:
    out = AvroSerializer(client, json.dumps(schema), conf=conf or None)(obj, value_ctx(topic))
    assert out is not None
    return out


# --- refusals ---------------------------------------------------------------------------------------------


def test_confluent_kafka_records_without_a_registered_schema_are_refused(broker: BrokerProcess,
                                                                         schemas: dict[str, Any]) -> None:
    client = schemas["client"]
    topic = create_topic(broker, confluent_value_schema_validation="true")
    good = [serialize(client, ORDER, {"n": i, "item": f"i{i}"}, topic) for i in range(3)]
    wrong_subject = serialize(client, OTHER, {"s": "x"}, unique("elsewhere"))  # registered, under elsewhere-value
    unknown = framed(int.from_bytes(good[0][1:5], "big") + 10_000, b"\x02\x02x")
    # Two bad records per batch: librdkafka then reports INVALID_RECORD for exactly the records the broker named
    # (its KIP-467 record errors) and _INVALID_DIFFERENT_RECORD for the others of the batch.
    cases = {
        "bad magic byte": [good[0], b'{"n": 1}', good[1], b"\x01\x00\x00\x00\x01"],
        "unknown schema id": [good[0], unknown, good[1], unknown],
        "wrong subject": [good[0], wrong_subject, good[1], wrong_subject],
        "no schema id": [good[0], b"\x00\x00\x01", good[1], b""],
    }
    for name, values in cases.items():
        assert produce_ck(broker, topic, values) == [
            "_INVALID_DIFFERENT_RECORD", "INVALID_RECORD", "_INVALID_DIFFERENT_RECORD", "INVALID_RECORD"], name
    # Nothing of the refused batches was appended; tombstones pass, as in Confluent Server; the producer goes on.
    assert produce_ck(broker, topic, [good[0], None, good[2]]) == [None, None, None]
    assert consume(broker, topic) == [good[0], None, good[2]]


def test_kafka_python_is_told_the_reason_and_the_offset_in_the_batch(broker: BrokerProcess,
                                                                     schemas: dict[str, Any]) -> None:
    client = schemas["client"]
    topic = create_topic(broker, confluent_value_schema_validation="true")
    good = serialize(client, ORDER, {"n": 1, "item": "a"}, topic)
    good_id = int.from_bytes(good[1:5], "big")
    wrong = serialize(client, OTHER, {"s": "x"}, unique("elsewhere"))
    wrong_id = int.from_bytes(wrong[1:5], "big")
    cases = [
        (b"\x7b}", "offset 1 in the batch: value: bad magic byte (it starts with 0x7b"),
        (framed(good_id + 5000, b"x"), f"offset 1 in the batch: value: unknown schema id {good_id + 5000}"),
        (wrong, f"offset 1 in the batch: value: schema id {wrong_id} is not registered under subject {topic}-value"),
    ]
    for bad, expected in cases:
        errors = produce_kp(broker, topic, [good, bad, good])
        assert isinstance(errors[1], InvalidRecordError), errors
        assert expected in str(errors[1]), errors[1]
        assert errors[0] is not None and errors[2] is not None  # the batch is refused whole
    assert produce_kp(broker, topic, [good, good]) == [None, None]
    assert consume(broker, topic) == [good, good]


def test_good_records_from_confluent_serializers_pass(broker: BrokerProcess, schemas: dict[str, Any]) -> None:
    client = schemas["client"]
    topic = create_topic(broker, confluent_value_schema_validation="true", confluent_key_schema_validation="true")
    key_ser = AvroSerializer(client, json.dumps({"type": "string"}))
    keys = [key_ser(f"k{i}", SerializationContext(topic, MessageField.KEY)) for i in range(50)]
    values = [serialize(client, ORDER, {"n": i, "item": "x" * 150}, topic) for i in range(50)]
    assert produce_ck(broker, topic, values, keys) == [None] * 50  # registered under <topic>-key and <topic>-value
    assert consume(broker, topic) == values
    # Keys are checked too: a plain string key is refused, a null key passes.
    assert produce_ck(broker, topic, values[:2], [b"plain", b"keys"]) == ["INVALID_RECORD"] * 2
    assert produce_ck(broker, topic, values[:1], [None]) == [None]


def test_a_schema_registered_after_a_refusal_is_accepted(broker: BrokerProcess, schemas: dict[str, Any]) -> None:
    """An id refused as unknown is asked again once confluent.schema.registry.cache.refresh.ms has passed."""
    client = schemas["client"]
    topic = create_topic(broker, confluent_value_schema_validation="true")
    first = serialize(client, ORDER, {"n": 1, "item": "a"}, topic)
    later_id = int.from_bytes(first[1:5], "big")
    while True:  # the next id the registry will give: refused while unknown
        later_id += 1
        if produce_ck(broker, topic, [framed(later_id)]) == ["INVALID_RECORD"]:
            break
    schema = {**ORDER, "fields": [*ORDER["fields"], {"name": "note", "type": "string", "default": ""}]}
    registered = client.register_schema(f"{topic}-value", Schema(json.dumps(schema), "AVRO"))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), {"n": 2, "item": "b", "note": "c"})
    value = framed(registered, buf.getvalue())
    deadline = time.monotonic() + 10
    while produce_ck(broker, topic, [value]) != [None]:
        assert time.monotonic() < deadline, "a newly registered schema id stayed refused"
        time.sleep(0.3)
    assert consume(broker, topic)[-1] == value


def test_batches_with_many_distinct_ids(broker: BrokerProcess, schemas: dict[str, Any]) -> None:
    """More distinct ids in one batch than the C walk's table holds (64): every one is still checked; a batch of
    hundreds of unknown ids is refused after one lookup, the ids past the first refusal not asked for."""
    client = schemas["client"]
    topic = create_topic(broker, confluent_value_schema_validation="true")
    client.set_compatibility(f"{topic}-value", "NONE")
    values = [serialize(client, {"type": "record", "name": f"R{i}", "fields": [{"name": "n", "type": "int"}]},
                        {"n": i}, topic) for i in range(70)]
    assert len({v[1:5] for v in values}) == 70
    assert produce_ck(broker, topic, values) == [None] * 70
    top = max(int.from_bytes(v[1:5], "big") for v in values)
    unknown = [framed(top + 1000 + i, b"\x02") for i in range(400)]
    errors = produce_kp(broker, topic, [values[0], *unknown])
    assert all(isinstance(e, KafkaPythonError) for e in errors)
    assert f"unknown schema id {top + 1000}" in str(errors[1]), errors[1]
    assert consume(broker, topic) == values


def test_record_name_strategy(broker: BrokerProcess, schemas: dict[str, Any]) -> None:
    client = schemas["client"]
    topic = create_topic(broker, confluent_value_schema_validation="true",
                         confluent_value_subject_name_strategy=RECORD_NAME_STRATEGY)
    by_name = serialize(client, ORDER, {"n": 1, "item": "a"}, topic,
                        **{"subject.name.strategy": record_subject_name_strategy})  # subject shop.Order
    by_topic = serialize(client, OTHER, {"s": "x"}, topic)  # subject <topic>-value: not what this topic asks
    assert produce_ck(broker, topic, [by_name]) == [None]
    errors = produce_kp(broker, topic, [by_topic])
    assert "is not registered under subject shop.Other" in str(errors[0])


def test_a_topic_without_validation_takes_anything(broker: BrokerProcess) -> None:
    topic = create_topic(broker)
    values = [b"{json}", b"\x00\x00\x00\x00\x01", b"", None, framed(987654)]
    assert produce_ck(broker, topic, values) == [None] * 5
    assert consume(broker, topic) == values


def test_deep_validation_refuses_payloads_that_do_not_decode(broker: BrokerProcess, schemas: dict[str, Any]) -> None:
    client = schemas["client"]
    topic = create_topic(broker, confluent_value_schema_validation="true", gregor_value_schema_validation_deep="true")
    good = serialize(client, ORDER, {"n": 7, "item": "fine"}, topic)
    truncated = good[:-3]
    padded = good + b"\x00"
    assert produce_ck(broker, topic, [good, truncated, good, padded]) == [
        "_INVALID_DIFFERENT_RECORD", "INVALID_RECORD", "_INVALID_DIFFERENT_RECORD", "INVALID_RECORD"]
    errors = produce_kp(broker, topic, [good, truncated])
    assert "offset 1 in the batch: value (schema id" in str(errors[1]) and "does not decode with its Avro schema" \
        in str(errors[1])
    # JSON Schema: the document must match.
    json_topic = create_topic(broker, confluent_value_schema_validation="true", gregor_value_schema_validation_deep="true")
    json_schema = json.dumps({"title": "Order", "type": "object", "properties": {"n": {"type": "integer"}},
                              "required": ["n"]})
    ok = JSONSerializer(json_schema, client)({"n": 1}, value_ctx(json_topic))
    assert ok is not None
    not_matching = ok[:5] + b'{"n": "one"}'
    errors = produce_kp(broker, json_topic, [ok, not_matching])
    assert errors[0] is not None and "does not match its JSON schema at n" in str(errors[1])
    assert produce_ck(broker, json_topic, [ok]) == [None]
    assert consume(broker, json_topic) == [ok]


def test_deep_validation_of_protobuf_follows_the_message_indexes(broker: BrokerProcess, schemas: dict[str, Any],
                                                                  tmp_path: Path) -> None:
    """ProtobufSerializer writes the message's index path after the schema id: the second message of the file
    here ([1]), decoded as that message, not the first."""
    client = schemas["client"]
    topic = create_topic(broker, confluent_value_schema_validation="true", gregor_value_schema_validation_deep="true")
    proto = ('syntax = "proto3";\npackage shop;\nmessage Order { int64 n = 1; }\n'
             'message Note { string text = 1; repeated int32 tags = 2; }\n')
    note_cls = _proto_classes(tmp_path, {"shop.proto": proto}, "shop.Note")
    ser = ProtobufSerializer(note_cls, client, {"use.deprecated.format": False})
    good = ser(note_cls(text="hello", tags=[1, 2, 3]), value_ctx(topic))
    assert good is not None and good[5:6] == b"\x02"  # one index, zigzag 1: the file's second message
    truncated = good[:-2]  # the packed tags run past the end
    assert produce_ck(broker, topic, [good]) == [None]
    errors = produce_kp(broker, topic, [good, truncated])
    assert "offset 1 in the batch" in str(errors[1]) and "does not decode as shop.Note" in str(errors[1]), errors
    assert consume(broker, topic) == [good]


def test_a_broker_without_a_registry_says_so(tmp_path_factory: pytest.TempPathFactory) -> None:
    b = BrokerProcess(tmp_path_factory.mktemp("sc-none"), {}).start()
    try:
        topic = create_topic(b, confluent_value_schema_validation="true")
        errors = produce_kp(b, topic, [framed(1, b"x")])
        assert isinstance(errors[0], InvalidRecordError) and "has no schema registry" in str(errors[0]), errors
        errors = produce_kp(b, topic, [b"{not framed}"])  # the wire format is checked all the same
        assert "bad magic byte" in str(errors[0]), errors
    finally:
        b.kill()


# --- the registry inside the broker --------------------------------------------------------------------------


def test_the_registry_inside_the_broker_survives_a_restart(tmp_path_factory: pytest.TempPathFactory) -> None:
    b = BrokerProcess(tmp_path_factory.mktemp("sc-restart"), {
        "schema.registry.listeners": "http://127.0.0.1:0", "group.initial.rebalance.delay.ms": "0"}).start()
    try:
        url = registry_url(b)
        wait_writable(url)
        client = SchemaRegistryClient({"url": url})
        sid = client.register_schema("pageviews-value", Schema(json.dumps(ORDER), "AVRO"))
        sid2 = client.register_schema("pageviews-value", Schema(json.dumps(
            {**ORDER, "fields": [*ORDER["fields"], {"name": "u", "type": "string", "default": "-"}]}), "AVRO"))
        topic = create_topic(b, confluent_value_schema_validation="true")
        value = serialize(client, ORDER, {"n": 1, "item": "a"}, topic)
        assert b.stop() == 0
        assert "The schema registry did not stop cleanly" not in b.log_text()
        mark = len(b.log_lines)
        b.restart()
        url = registry_url(b, after=mark)
        client = SchemaRegistryClient({"url": url})  # a new client: nothing cached
        assert client.get_schema(sid).schema_str == json.dumps(ORDER, separators=(",", ":"))
        assert client.get_versions("pageviews-value") == [1, 2]
        assert client.get_latest_version("pageviews-value").schema_id == sid2
        assert client.register_schema("pageviews-value", Schema(json.dumps(ORDER), "AVRO")) == sid  # same id
        wait_writable(url)
        assert client.register_schema("other-value", Schema(json.dumps(OTHER), "AVRO")) > max(sid, sid2, 2)
        assert produce_ck(b, topic, [value, framed(sid2 + 100)]) == ["INVALID_RECORD"] * 2
        assert produce_ck(b, topic, [value]) == [None]
    finally:
        b.kill()


# --- an external registry -----------------------------------------------------------------------------------




def test_an_external_registry_and_one_that_does_not_answer(tmp_path_factory: pytest.TempPathFactory) -> None:
    """confluent.schema.registry.url: ids looked up over HTTP; a registry that does not answer gives the producer
    a retriable error naming it, and no record is refused for it."""
    port = pick_port()
    b = BrokerProcess(tmp_path_factory.mktemp("sc-external"), {
        "group.initial.rebalance.delay.ms": "0",
        "confluent.schema.registry.url": f"http://127.0.0.1:{port}",
        "confluent.schema.registry.request.timeout.ms": "1500"}).start()
    reg: RegistryProcess | None = None
    try:
        topic = create_topic(b, confluent_value_schema_validation="true")
        errors = produce_kp(b, topic, [framed(1, b"x")])
        assert isinstance(errors[0], RequestTimedOutError), errors
        assert "schema registry unavailable" in str(errors[0]), errors
        reg = RegistryProcess(b.bootstrap, listeners=f"http://127.0.0.1:{port}").start()
        wait_writable(reg.url)
        client = SchemaRegistryClient({"url": reg.url})
        good = serialize(client, ORDER, {"n": 1, "item": "a"}, topic)
        assert produce_ck(b, topic, [good, framed(int.from_bytes(good[1:5], "big") + 77)]) == ["INVALID_RECORD"] * 2
        assert produce_ck(b, topic, [good]) == [None]
        assert consume(b, topic) == [good]
    finally:
        if reg is not None:
            reg.kill()
        b.kill()
