"""Several registry instances on one topic: one primary takes the writes (the others forward them and
read their own writes back), and SIGKILLing the primary between writes loses no acknowledged schema and
issues no id twice."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError

from tests.broker_process import BrokerProcess
from tests.schema_registry.conftest import RegistryProcess, http, unique, wait_writable
from tests.schema_registry.test_clients import PAGEVIEW_V1, PAGEVIEW_V2, consume, ctx, produce

pytestmark = pytest.mark.timeout(240)

def primary_of(regs: list[RegistryProcess], timeout_s: float = 30.0) -> RegistryProcess:
    """The instance whose last word on the election is that it is the primary."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for r in regs:
            said = [line for line in r.lines if "Schema registry primary:" in line]
            if said and said[-1].endswith("(this instance)"):
                return r
        time.sleep(0.1)
    raise AssertionError("no instance says it is the primary")


def retrying(call: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    """A write while the primary may be changing: 50002/50003/50004 and a dead instance are retried."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except SchemaRegistryError as e:
            if e.error_code not in (50002, 50003, 50004) or time.monotonic() > deadline:
                raise
        except Exception as e:  # the killed instance's connection refused: the client tries the next URL
            if time.monotonic() > deadline:
                raise AssertionError(f"no answer within {timeout_s} s: {e!r}") from e
        time.sleep(0.3)


def schema(i: int) -> Schema:
    return Schema(json.dumps({"type": "record", "name": f"S{i}", "fields": [{"name": "f", "type": "int"}]}), "AVRO")


def test_primary_killed_between_writes(start_registry: Callable[..., RegistryProcess], sr_broker: BrokerProcess) -> None:
    a, b = start_registry(), start_registry()
    wait_writable(a.url)
    primary = primary_of([a, b])
    follower = b if primary is a else a
    client = SchemaRegistryClient({"url": f"{follower.url},{primary.url}"})
    acked: dict[str, int] = {}
    for i in range(3):  # through the follower: forwarded to the primary
        s = unique(f"fo{i}")
        acked[s] = client.register_schema(s, schema(i))
        # read-your-write on the instance that forwarded it
        assert http("GET", f"{follower.url}/subjects/{s}/versions/1").json["id"] == acked[s]
    topic = unique("fo-pageviews")
    first = AvroSerializer(client, json.dumps(PAGEVIEW_V1))({"url": "/a", "ms": 1}, ctx(topic))

    primary.kill()  # SIGKILL: no LeaveGroup, the group notices when the session expires
    survivor = SchemaRegistryClient({"url": follower.url})
    for i in range(3, 6):
        s = unique(f"fo{i}")
        acked[s] = retrying(lambda s=s, i=i: survivor.register_schema(s, schema(i)))
    second = retrying(lambda: AvroSerializer(survivor, json.dumps(PAGEVIEW_V2))({"url": "/b", "ms": 2, "user": "u"},
                                                                                  ctx(topic)))
    assert "(this instance)" in follower.log()

    # A third instance reads the topic from scratch: every acknowledged schema, each id once.
    c = start_registry()
    for s, sid in acked.items():
        assert http("GET", f"{c.url}/subjects/{s}/versions/1").json["id"] == sid
    assert len(set(acked.values())) == len(acked)
    ids = [int.from_bytes(x[1:5], "big") for x in (first, second)]
    assert len(set(ids) | set(acked.values())) == len(acked) + 2
    produce(sr_broker, topic, [first, second])
    reader = AvroDeserializer(SchemaRegistryClient({"url": c.url}))
    assert [reader(v, ctx(topic)) for v in consume(sr_broker, topic, 2)] == [
        {"url": "/a", "ms": 1}, {"url": "/b", "ms": 2, "user": "u"}]
