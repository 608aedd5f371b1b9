"""gregor.typed's registry client against `gregor schema-registry`: TLS with a private CA and basic
authentication, bounded caches (least recently used dropped, counted at an HTTP proxy), negative
answers remembered, registration and lookups, and pickling for Spark's executors."""

from __future__ import annotations

import json
import pickle
import time
from pathlib import Path
from typing import Any

import pytest

from gregor.typed import RegistryClient, RegistryLookupError
from tests.broker_process import BrokerProcess
from tests.schema_registry.conftest import RegistryProcess, unique
from tests.security.certs import make_pki

pytestmark = pytest.mark.timeout(180)


def schema(i: int) -> str:
    return json.dumps({"type": "record", "name": f"R{i}", "fields": [{"name": "x", "type": "int"}]}, separators=(",", ":"))


def test_tls_and_basic_auth(typed_broker: BrokerProcess, tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_carol="carol-pw";'
    reg = RegistryProcess(typed_broker.bootstrap, {
        "schema.registry.topic": unique("_schemas"), "schema.registry.group.id": unique("sr"),
        "schema.registry.ssl.keystore.location": pki.keystore("broker"),
        "schema.registry.authentication.method": "BASIC", "schema.registry.basic.auth.jaas.config": jaas},
        listeners="https://127.0.0.1:0").start()
    try:
        opts = {"schema.registry.url": reg.url, "schema.registry.ssl.ca.location": pki.ca,
                "schema.registry.basic.auth.user.info": "carol:carol-pw"}
        client = RegistryClient.from_options(opts)
        deadline = time.monotonic() + 30
        while True:
            try:
                sid = client.register("tls-value", "AVRO", schema(1))
                break
            except RegistryLookupError as e:
                assert e.error_code == 50004 and time.monotonic() < deadline, e  # no primary elected yet
                time.sleep(0.2)
        assert client.schema_by_id(sid).schema == schema(1)
        assert client.version("tls-value").info.id == sid
        # credentials in the URL, as Confluent's clients take them
        host = reg.url.removeprefix("https://")
        in_url = RegistryClient.from_options({"schema.registry.url": f"https://carol:carol-pw@{host}",
                                              "schema.registry.ssl.ca.location": pki.ca})
        assert in_url.schema_by_id(sid).schema == schema(1)
        with pytest.raises(RegistryLookupError) as wrong:
            RegistryClient.from_options({**opts, "schema.registry.basic.auth.user.info": "carol:nope"}).schema_by_id(sid)
        assert wrong.value.status == 401
        with pytest.raises(RegistryLookupError, match="(?i)certificate"):
            RegistryClient.from_options({**opts, "schema.registry.ssl.ca.location": ""}).schema_by_id(sid)
    finally:
        reg.kill()


def test_bounded_caches_and_remembered_misses(proxy: Any) -> None:
    client = RegistryClient.from_options({"schema.registry.url": proxy.url, "schema.registry.cache.capacity": "2"})
    subject = unique("lru-value")
    ids = [client.register(f"{subject}{i}", "AVRO", schema(i)) for i in range(3)]
    fresh = RegistryClient.from_options({"schema.registry.url": proxy.url, "schema.registry.cache.capacity": "2"})
    before = sum(proxy.counts.values())
    for i in (0, 1, 0, 1, 0, 1):  # two ids fit: fetched once each
        assert fresh.schema_by_id(ids[i]).schema == schema(i)
    assert sum(proxy.counts.values()) - before == 2
    fresh.schema_by_id(ids[2])  # evicts the least recently used (ids[0])
    fresh.schema_by_id(ids[1])
    fresh.schema_by_id(ids[0])
    assert proxy.counts[f"GET /schemas/ids/{ids[0]}"] == 2 and proxy.counts[f"GET /schemas/ids/{ids[1]}"] == 1
    # a missing id is asked for once within cache.missing.ttl.sec
    for _ in range(5):
        with pytest.raises(RegistryLookupError) as e:
            fresh.schema_by_id(987654)
        assert e.value.error_code == 40403
    assert proxy.counts["GET /schemas/ids/987654"] == 1
    assert fresh.lookup(f"{subject}1", "AVRO", schema(1)).info.id == ids[1]
    # a client travels to executors without its cache or connections
    copy = pickle.loads(pickle.dumps(fresh))
    assert copy.options == fresh.options and copy.schema_by_id(ids[1]).schema == schema(1)
