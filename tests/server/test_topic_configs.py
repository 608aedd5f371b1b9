"""Topic configs: whatever CreateTopics / AlterConfigs / IncrementalAlterConfigs accept loads at restart.

Issue 8 finding 3: `segment.index.bytes=8` passed CreateTopics and was then refused by the log at the
next start, so the broker could never start again. These tests walk every topic config of the one
table (gregor.storage.config.TOPIC_CONFIGS) with its boundary values through a real admin client,
a clean restart, produce and consume, and DescribeConfigs; values just outside the bounds must be
refused with INVALID_CONFIG naming the key. A stored config that no longer validates (the metadata
store edited while the broker is down) is reported and loaded with its default.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic

from tests.broker_process import BrokerProcess

StartBroker = Callable[..., BrokerProcess]
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
# Companion settings for a boundary value that would otherwise cost much disk: preallocate=true with the
# default segment.bytes would fallocate 1 GiB per segment.
COMPANIONS = {("preallocate", "true"): {"segment.bytes": "1048576"}}


# A record's CreateTime is taken by the client a few ms before the broker sees it: with a tiny
# message.timestamp.before.max.ms it may or may not be refused, so either answer is right.
EITHER_TIMESTAMP = "INVALID_TIMESTAMP or none"


def _refusal(key: str, value: str) -> str | None:
    """The error with which a partition refuses our ~60-byte batches though it is served, as Kafka's
    would: batches above max.message.bytes, or larger than a whole segment, and records that are not in
    the schema registry's wire format (a magic byte and a schema id) where the topic checks schemas."""
    if key in ("confluent.key.schema.validation", "confluent.value.schema.validation") and value == "true":
        return "INVALID_RECORD"
    if key == "message.timestamp.before.max.ms" and int(value) < 60_000:
        return EITHER_TIMESTAMP
    if key == "max.message.bytes" and int(value) < 100:
        return "MSG_SIZE_TOO_LARGE"
    if key == "segment.bytes" and int(value) < 100:
        return "RECORD_LIST_TOO_LARGE"
    return None


def _boundaries(prop: Any) -> tuple[list[str], list[str]]:
    """(values that must be accepted, values just outside the bounds that must be refused)."""
    t = prop.type
    if t in ("int", "long"):
        tmin, tmax = (INT_MIN, INT_MAX) if t == "int" else (LONG_MIN, LONG_MAX)
        lo = tmin if prop.lo is None else int(prop.lo)
        hi = tmax if prop.hi is None else int(prop.hi)
        return [str(v) for v in sorted({lo, lo + 1, hi})], [str(lo - 1), str(hi + 1), "12x"]
    if t == "double":
        return [str(float(prop.lo)), str(float(prop.hi))], [str(prop.lo - 0.001), str(prop.hi + 0.001), "half"]
    if t == "bool":
        return ["true", "false"], ["yes"]
    if prop.name == "message.format.version":  # deprecated, no effect: any Kafka 3.x version (KIP-724)
        return ["0.10.0.0", "2.8", "3.0-IV1"], ["4.0", "nope"]
    if t == "string":
        assert prop.choices, prop.name
        return list(prop.choices), ["nope"]
    if t == "list" and prop.name.endswith(".replication.throttled.replicas"):  # partition:broker items, or *
        return ["*", "0:1,1:2", ""], ["nope", "0:1,x", "1:"]
    assert t == "list" and prop.choices, prop.name
    return [*prop.choices, ",".join(reversed(prop.choices))], ["nope", f"{prop.choices[0]},nope", ""]


def _cases() -> list[tuple[str, str, str]]:
    """(topic config, accepted value, value out of bounds or None) for every config of the table."""
    from gregor.storage.config import TOPIC_CONFIGS

    out = []
    for name, t in sorted(TOPIC_CONFIGS.items()):
        ok, bad = _boundaries(t.prop)
        out += [(name, v, "ok") for v in ok] + [(name, v, "bad") for v in bad]
    return out


def _same(key: str, a: str, b: str) -> bool:
    """Equal as config values (0 and 0.0 for doubles, lists in any order)."""
    from gregor.storage.config import TOPIC_CONFIGS

    t = TOPIC_CONFIGS[key].prop.type
    if t == "double":
        return float(a) == float(b)
    if t == "list":
        return sorted(a.split(",")) == sorted(b.split(","))
    return a.strip().lower() == b.strip().lower()


def _error(fut: Any) -> Any:
    with pytest.raises(KafkaException) as ei:
        fut.result(30)
    return ei.value.args[0]


def _describe(admin: AdminClient, topics: list[str]) -> dict[str, dict[str, Any]]:
    out = {}
    for i in range(0, len(topics), 50):
        resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics[i:i + 50]]
        for res, fut in admin.describe_configs(resources).items():
            out[res.name] = fut.result(30)
    return out


def _produce_all(bootstrap: str, topics: list[str], tag: bytes) -> dict[str, str | None]:
    """One keyed record to each topic (acks=1: min.insync.replicas may be above what one broker holds).
    Returns each topic's delivery error name, or None."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "message.timeout.ms": 30000})
    errors: dict[str, str | None] = {}

    def done(err: KafkaError | None, msg: Any) -> None:
        errors[msg.topic()] = None if err is None else err.name()

    for t in topics:
        p.produce(t, key=b"k", value=tag + b" " + t.encode(), on_delivery=done)
        p.poll(0)
    assert p.flush(60) == 0
    return errors


def _consume_all(bootstrap: str, expected: dict[str, int], timeout_s: float = 60.0) -> dict[str, list[bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "walk", "enable.auto.commit": False,
                  "fetch.queue.backoff.ms": 1})
    c.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in expected])
    got: dict[str, list[bytes]] = {t: [] for t in expected}
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and any(len(got[t]) < n for t, n in expected.items()):
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got[msg.topic()].append(msg.value())
    finally:
        c.close()
    return got


def test_every_topic_config_boundary_survives_restart(start_broker: StartBroker) -> None:
    """create / AlterConfigs / IncrementalAlterConfigs with each bound -> SIGTERM -> restart -> the
    topic is served and shows the value; values just outside the bounds get INVALID_CONFIG naming the key."""
    cases = _cases()
    ok = [(k, v) for k, v, kind in cases if kind == "ok"]
    bad = [(k, v) for k, v, kind in cases if kind == "bad"]
    from gregor.storage.config import TOPIC_CONFIGS
    assert {k for k, _ in ok} == {k for k, _ in bad} == set(TOPIC_CONFIGS)  # every config, both ways
    b = start_broker({"auto.create.topics.enable": "false"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})

    # Accepted values, through each of the three paths; each topic holds one boundary value.
    topics: dict[str, tuple[str, str]] = {}
    new_topics = []
    for i, (k, v) in enumerate(ok):
        name = f"create-{i}"
        topics[name] = (k, v)
        new_topics.append(NewTopic(name, 1, 1, config={k: v, **COMPANIONS.get((k, v), {})}))
    for i, (k, v) in enumerate(ok):
        for path in ("alter", "incremental"):
            name = f"{path}-{i}"
            topics[name] = (k, v)
            new_topics.append(NewTopic(name, 1, 1, config=COMPANIONS.get((k, v), {})))
    for fut in admin.create_topics(new_topics).values():
        fut.result(30)
    alters = []
    incrementals = []
    for i, (k, v) in enumerate(ok):
        alters.append(ConfigResource(ConfigResource.Type.TOPIC, f"alter-{i}",
                                     set_config={k: v, **COMPANIONS.get((k, v), {})}))
        incrementals.append(ConfigResource(ConfigResource.Type.TOPIC, f"incremental-{i}", incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)]))
    with pytest.warns(DeprecationWarning):
        results = admin.alter_configs(alters)
    for fut in results.values():
        fut.result(30)
    for fut in admin.incremental_alter_configs(incrementals).values():
        fut.result(30)

    # Values out of bounds: refused by every path, with INVALID_CONFIG naming the key.
    admin.create_topics([NewTopic("victim", 1, 1)])["victim"].result(30)
    futs = admin.create_topics([NewTopic(f"refused-{i}", 1, 1, config={k: v}) for i, (k, v) in enumerate(bad)])
    for i, (k, v) in enumerate(bad):
        err = _error(futs[f"refused-{i}"])
        assert err.code() == KafkaError.INVALID_CONFIG and k in err.str(), (k, v, err)
    for k, v in bad:
        res = ConfigResource(ConfigResource.Type.TOPIC, "victim", set_config={k: v})
        with pytest.warns(DeprecationWarning):
            err = _error(admin.alter_configs([res])[res])
        assert err.code() == KafkaError.INVALID_CONFIG and k in err.str(), (k, v, err)
        res = ConfigResource(ConfigResource.Type.TOPIC, "victim", incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)])
        err = _error(admin.incremental_alter_configs([res])[res])
        assert err.code() == KafkaError.INVALID_CONFIG and k in err.str(), (k, v, err)

    # validate_only: the same checks, nothing stored.
    k, v = ok[0]
    admin.create_topics([NewTopic("dry", 1, 1, config={k: v})], validate_only=True)["dry"].result(30)
    k_bad, v_bad = bad[0]
    err = _error(admin.create_topics([NewTopic("dry", 1, 1, config={k_bad: v_bad})], validate_only=True)["dry"])
    assert err.code() == KafkaError.INVALID_CONFIG and k_bad in err.str()
    res = ConfigResource(ConfigResource.Type.TOPIC, "victim", incremental_configs=[
        ConfigEntry("retention.ms", "-1", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res], validate_only=True)[res].result(30)
    res = ConfigResource(ConfigResource.Type.TOPIC, "victim", incremental_configs=[
        ConfigEntry(k_bad, v_bad, incremental_operation=AlterConfigOpType.SET)])
    err = _error(admin.incremental_alter_configs([res], validate_only=True)[res])
    assert err.code() == KafkaError.INVALID_CONFIG and k_bad in err.str()
    res = ConfigResource(ConfigResource.Type.TOPIC, "victim", set_config={"retention.ms": "-1"})
    with pytest.warns(DeprecationWarning):
        admin.alter_configs([res], validate_only=True)[res].result(30)

    names = sorted(topics)
    before = _produce_all(b.bootstrap, names, b"before")
    assert b.stop() == 0
    b.restart()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    after = _produce_all(b.bootstrap, names, b"after")
    expected = {}
    for name in names:
        refusal = _refusal(*topics[name])
        if refusal == EITHER_TIMESTAMP:
            assert {before[name], after[name]} <= {None, "INVALID_TIMESTAMP"}, (name, before[name], after[name])
        else:
            assert before[name] == refusal and after[name] == refusal, (name, topics[name], before[name], after[name])
        expected[name] = [f"{tag} {name}".encode() for tag, res in (("before", before[name]), ("after", after[name]))
                          if res is None]
    got = _consume_all(b.bootstrap, {name: len(want) for name, want in expected.items()})
    for name in names:
        assert got[name] == expected[name], (name, topics[name], got[name])

    described = _describe(admin, [*names, "victim"])
    for name in names:
        k, v = topics[name]
        entry = described[name][k]
        assert _same(k, entry.value, v), (name, k, v, entry.value)
        assert entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, (name, entry)
    victim = described["victim"]
    assert all(e.source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value for e in victim.values()), \
        "no refused or validate_only value may be stored"
    existing = set(admin.list_topics(timeout=10).topics)
    assert not any(t.startswith("refused-") for t in existing) and "dry" not in existing
    assert "Traceback" not in b.log_text()
    assert "stored config" not in b.log_text()

    # And after a crash: recovery re-validates and re-indexes every segment with the same configs.
    b.kill()
    b.restart()
    assert _consume_all(b.bootstrap, {name: len(want) for name, want in expected.items()}) == got
    assert "Traceback" not in b.log_text()


def test_segment_index_bytes_without_room_for_an_entry_is_refused(start_broker: StartBroker) -> None:
    """The finding itself: segment.index.bytes=8 was stored, and the broker could never start again."""
    b = start_broker()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    err = _error(admin.create_topics([NewTopic("tiny-index", 1, 1, config={"segment.index.bytes": "8"})])["tiny-index"])
    assert err.code() == KafkaError.INVALID_CONFIG and "segment.index.bytes" in err.str()
    admin.create_topics([NewTopic("small-index", 1, 1, config={"segment.index.bytes": "12",
                                                                 "index.interval.bytes": "0"})])["small-index"].result(30)
    assert _produce_all(b.bootstrap, ["small-index"] * 3, b"x") == {"small-index": None}
    assert b.stop() == 0
    b.restart()
    assert _consume_all(b.bootstrap, {"small-index": 3})["small-index"] == [b"x small-index"] * 3


def test_stored_config_that_no_longer_validates_loads_with_its_default(start_broker: StartBroker,
                                                                       tmp_path: Path) -> None:
    """Configs edited in the metadata store while the broker is down: the broker warns naming topic and
    key, uses the key's default, keeps the topic's valid overrides, and serves every topic."""
    data = tmp_path / "data"
    b = start_broker({"auto.create.topics.enable": "false"}, data_dir=data)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for fut in admin.create_topics([NewTopic("edited", 1, 1, config={"max.message.bytes": "5000"}),
                                    NewTopic("untouched", 1, 1, config={"retention.ms": "-1"})]).values():
        fut.result(30)
    assert _produce_all(b.bootstrap, ["edited", "untouched"], b"before") == {"edited": None, "untouched": None}
    assert b.stop() == 0

    path = data / "gregor-metadata.json"
    doc = json.loads(path.read_text())
    for t in doc["topics"]:
        if t["name"] == "edited":
            t["configs"].update({"segment.index.bytes": "8", "retention.ms": "soon", "no.such.config": "1",
                                 "cleanup.policy": "purge"})
    path.write_text(json.dumps(doc))

    b.restart()
    text = b.log_text()
    for key in ("segment.index.bytes", "retention.ms", "no.such.config", "cleanup.policy"):
        assert any("edited" in line and key in line and "WARN" in line.upper() for line in text.splitlines()), key
    assert "Traceback" not in text
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    cfg = _describe(admin, ["edited", "untouched"])
    assert cfg["edited"]["segment.index.bytes"].value == "10485760"
    assert cfg["edited"]["retention.ms"].value == "604800000"
    assert cfg["edited"]["cleanup.policy"].value == "delete"
    assert cfg["edited"]["max.message.bytes"].value == "5000"  # the valid override still applies
    assert cfg["untouched"]["retention.ms"].value == "-1"
    assert _produce_all(b.bootstrap, ["edited", "untouched"], b"after") == {"edited": None, "untouched": None}
    got = _consume_all(b.bootstrap, {"edited": 2, "untouched": 2})
    assert got == {"edited": [b"before edited", b"after edited"], "untouched": [b"before untouched", b"after untouched"]}
    # The bad keys can be removed (or fixed) through the admin API.
    res = ConfigResource(ConfigResource.Type.TOPIC, "edited", incremental_configs=[
        ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
        for k in ("segment.index.bytes", "retention.ms", "no.such.config", "cleanup.policy")])
    admin.incremental_alter_configs([res])[res].result(30)
    assert json.loads(path.read_text())  # still a readable store


def test_describe_configs_synonyms_documentation_and_broker_modes(start_broker: StartBroker) -> None:
    """DescribeConfigs reads the same table: a topic config's synonyms are its override, then its broker
    synonyms in their own units, finest first (static before default); documentation only when asked
    (v3+), with the valid values; broker properties carry Kafka's update mode and stay unalterable."""
    from tests.wire import WireClient

    b = start_broker({"log.retention.minutes": "30"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("described", 1, 1, config={"retention.ms": "1000"})])["described"].result(30)
    c = WireClient(b.bootstrap)
    try:
        def describe(version: int, docs: bool, resource_type: int, name: str, keys: list[str] | None) -> dict[str, Any]:
            r = c.request(32, version, {"resources": [{"resource_type": resource_type, "resource_name": name,
                                                       "configuration_keys": keys}],
                                        "include_synonyms": True, "include_documentation": docs})
            assert r.results[0].error_code == 0, r.results[0].error_message
            return {e.name: e for e in r.results[0].configs}

        topic = describe(4, True, 2, "described", None)
        retention = topic["retention.ms"]
        assert (retention.value, retention.config_source, retention.read_only) == ("1000", 1, False)
        assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
            ("retention.ms", "1000", 1), ("log.retention.minutes", "30", 4), ("log.retention.hours", "168", 5)]
        index = topic["segment.index.bytes"]
        assert index.config_type == 3 and index.config_source == 5  # INT, DEFAULT_CONFIG
        assert [(s.name, s.value, s.source) for s in index.synonyms] == [("log.index.size.max.bytes", "10485760", 5)]
        assert "12" in index.documentation
        assert all(e.documentation for e in topic.values())
        assert all(e.documentation is None for e in describe(4, False, 2, "described", None).values())
        assert describe(1, False, 2, "described", ["retention.ms"])["retention.ms"].value == "1000"
        from gregor.storage.config import TOPIC_CONFIGS
        assert set(topic) == set(TOPIC_CONFIGS)

        broker = describe(4, True, 4, "0", None)
        from gregor.config.dynamic import APPLIED
        for name, e in broker.items():
            assert e.read_only == (name not in APPLIED) and "Update mode:" in e.documentation, name
        assert "cluster-wide" in broker["log.retention.ms"].documentation
        assert "read-only" in broker["log.retention.hours"].documentation
        assert "per-broker" in broker["listeners"].documentation
        assert broker["log.retention.ms"].value is None and broker["log.retention.minutes"].value == "30"
    finally:
        c.close()
    res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("advertised.listeners", "PLAINTEXT://h:1", incremental_operation=AlterConfigOpType.SET)])
    err = _error(admin.incremental_alter_configs([res])[res])
    assert err.code() == KafkaError.INVALID_REQUEST and "Cannot update these configs dynamically" in err.str()


def test_dynamic_broker_configs(start_broker: StartBroker) -> None:
    """IncrementalAlterConfigs on BROKER resources: a per-broker value and the cluster default (empty name)
    are stored in the metadata store, described with Kafka's sources (per-broker before default before
    static), survive a restart, and are removed by DELETE; a read-only property, an unknown one and a bad
    value are refused with Kafka's error codes; validate_only stores nothing."""
    b = start_broker({"follower.replication.throttled.rate": "999"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    rate = "leader.replication.throttled.rate"

    def alter(name: str, key: str, value: str | None, op: Any = AlterConfigOpType.SET, validate: bool = False) -> None:
        if name == "":  # the cluster default: confluent-kafka refuses an empty resource name, so on the wire
            from tests.wire import WireClient

            c = WireClient(b.bootstrap)
            try:
                r = c.request(44, 1, {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
                    {"name": key, "config_operation": op.value, "value": value}]}], "validate_only": validate})
            finally:
                c.close()
            assert r.responses[0].error_code == 0, r.responses[0].error_message
            return
        res = ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=op)])
        admin.incremental_alter_configs([res], validate_only=validate)[res].result(30)

    def described(name: str = "0") -> dict[str, Any]:
        if name == "":
            from tests.wire import WireClient

            c = WireClient(b.bootstrap)
            try:
                r = c.request(32, 4, {"resources": [{"resource_type": 4, "resource_name": "", "configuration_keys": None}],
                                      "include_synonyms": True, "include_documentation": False})
            finally:
                c.close()
            return {e.name: e for e in r.results[0].configs}
        res = ConfigResource(ConfigResource.Type.BROKER, name)
        return admin.describe_configs([res])[res].result(30)

    alter("", rate, "2000")
    alter("0", rate, "1000")
    e = described()[rate]
    assert (e.value, e.source, e.is_read_only) == ("1000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    assert {k: v.value for k, v in described("").items()} == {rate: "2000"}
    follower = described()["follower.replication.throttled.rate"]
    assert (follower.value, follower.source) == ("999", ConfigSource.STATIC_BROKER_CONFIG.value)
    alter("0", rate, "5", validate=True)
    assert described()[rate].value == "1000"

    assert b.stop() == 0
    b.restart()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    assert described()[rate].value == "1000"
    alter("0", rate, None, AlterConfigOpType.DELETE)
    e = described()[rate]
    assert (e.value, e.source) == ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    alter("", rate, None, AlterConfigOpType.DELETE)
    assert described()[rate].source == ConfigSource.DEFAULT_CONFIG.value

    for key, value, code, text in [
            ("no.such.broker.config", "4", KafkaError.INVALID_CONFIG, "Unknown"),
            ("log.dirs", "/tmp/x", KafkaError.INVALID_REQUEST, "Cannot update these configs dynamically"),
            (rate, "-5", KafkaError.INVALID_CONFIG, rate)]:
        with pytest.raises(KafkaException) as err:
            alter("0", key, value)
        assert err.value.args[0].code() == code and text in err.value.args[0].str(), (key, err.value)
