"""`gregor elect-leaders` and `gregor reassign`: their parsing and JSON (pure), --generate against an
in-process cluster, and end-to-end runs against the controller's ElectLeaders (43),
AlterPartitionReassignments (45) and ListPartitionReassignments (46). The end-to-end tests need the
controller (issue 10's ctl slice) and replication (repl) in the cluster."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.tools.common import UsageError
from gregor.tools.elect_leaders import parse_partitions_json, request_body
from gregor.tools.reassign import format_json, parse_reassignment_json, parse_topics_json
from tests.admin.cluster import InProcessCluster
from tests.tools.cli import gregor

RACKS = {1: "a", 2: "b", 3: "a", 4: "b"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[InProcessCluster]:
    c = InProcessCluster(tmp_path, [1, 2, 3, 4], RACKS)
    yield c
    c.stop()


def _create(c: InProcessCluster, topic: NewTopic) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([topic])[topic.topic].result(20)


# --- pure parts ----------------------------------------------------------------------------------
def test_partitions_json() -> None:
    assert parse_partitions_json('{"partitions": [{"topic": "t", "partition": 0}, {"topic": "u", "partition": 2}]}',
                                 "f") == [("t", 0), ("u", 2)]
    for bad, why in [("[]", "needs"), ('{"partitions": [{"topic": "t"}]}', "entry 0"),
                     ('{"partitions": [{"topic": "t", "partition": true}]}', "entry 0"),
                     ('{"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 0}]}', "duplicate"),
                     ('{"partitions": []}', "names no partitions"), ("{", "not JSON")]:
        with pytest.raises(UsageError, match=why):
            parse_partitions_json(bad, "f")
    body = request_body(1, [("t", 0), ("t", 2), ("u", 1)], 5000)
    assert body == {"election_type": 1, "timeout_ms": 5000, "topic_partitions": [
        {"topic": "t", "partitions": [0, 2]}, {"topic": "u", "partitions": [1]}]}
    assert request_body(0, None, 5000)["topic_partitions"] is None


def test_reassignment_json_round_trip_and_checks() -> None:
    text = ('{"version":1,"partitions":[{"topic":"t","partition":1,"replicas":[3,1],"log_dirs":["any","any"]},'
            '{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}')
    parsed = parse_reassignment_json(json.loads(text), "f")
    assert parsed == {("t", 1): [3, 1], ("t", 0): [1, 2]}
    assert format_json(parsed) == ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],'
                                   '"log_dirs":["any","any"]},{"topic":"t","partition":1,"replicas":[3,1],'
                                   '"log_dirs":["any","any"]}]}')
    assert parse_reassignment_json({"partitions": [{"topic": "t", "partition": 0, "replicas": [2]}]}, "f") == {("t", 0): [2]}
    for bad, why in [
        ({"version": 2, "partitions": []}, "version 2"),
        ({"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}, "non-empty list"),
        ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}, "duplicate replicas"),
        ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["d"]}]}, 'neither "any"'),
        ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": []}]}, "one entry per replica"),
        ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}] * 2}, "listed twice"),
    ]:
        with pytest.raises(UsageError, match=why):
            parse_reassignment_json(bad, "f")
    assert parse_topics_json({"topics": [{"topic": "t"}, {"topic": "u"}], "version": 1}, "f") == ["t", "u"]
    with pytest.raises(UsageError, match="twice"):
        parse_topics_json({"topics": [{"topic": "t"}, {"topic": "t"}]}, "f")


def test_usage_errors() -> None:
    r = gregor("elect-leaders", "--election-type", "preferred", "--all-topic-partitions", "--topic", "t")
    assert r.returncode == 2 and "exactly one of" in r.stderr
    r = gregor("elect-leaders", "--election-type", "sideways", "--all-topic-partitions")
    assert r.returncode == 2 and "preferred or unclean" in r.stderr
    r = gregor("reassign", "--generate", "--broker-list", "1,2")
    assert r.returncode == 2 and "--topics-to-move-json-file" in r.stderr
    r = gregor("reassign", "--execute", "--verify", "--reassignment-json-file", "x")
    assert r.returncode == 2 and "exactly one of" in r.stderr


# --- against a cluster ------------------------------------------------------------------------------
def test_generate(cluster: InProcessCluster, tmp_path: Path) -> None:
    _create(cluster, NewTopic("t", 4, 2))
    topics = tmp_path / "topics.json"
    topics.write_text('{"topics":[{"topic":"t"}],"version":1}')
    r = gregor("reassign", "--bootstrap-server", cluster.bootstrap, "--generate",
               "--topics-to-move-json-file", str(topics), "--broker-list", "1,2,3,4")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment" and lines[2] == ""
    assert lines[3] == "Proposed partition reassignment configuration"
    current = parse_reassignment_json(json.loads(lines[1]), "current")
    proposed = parse_reassignment_json(json.loads(lines[4]), "proposed")
    assert sorted(current) == sorted(proposed) == [("t", p) for p in range(4)]
    for replicas in proposed.values():  # rack-aware: one replica per rack
        assert len(replicas) == 2 and {RACKS[b] for b in replicas} == {"a", "b"}
    assert sorted(r[0] for r in proposed.values()) == [1, 2, 3, 4]
    r = gregor("reassign", "--bootstrap-server", cluster.bootstrap, "--generate",
               "--topics-to-move-json-file", str(topics), "--broker-list", "1,9")
    assert r.returncode == 1 and "Broker(s) 9 in --broker-list are not live brokers" in r.stderr
    topics.write_text('{"topics":[{"topic":"nope"}],"version":1}')
    r = gregor("reassign", "--bootstrap-server", cluster.bootstrap, "--generate",
               "--topics-to-move-json-file", str(topics), "--broker-list", "1,2")
    assert r.returncode == 1 and "Topic 'nope'" in r.stderr


# --- end to end: need the controller's handlers (ctl) and replication (repl) --------------------------
def test_elect_leaders_end_to_end(cluster: InProcessCluster, tmp_path: Path) -> None:
    _create(cluster, NewTopic("t", 2, 3))
    r = gregor("elect-leaders", "--bootstrap-server", cluster.bootstrap, "--election-type", "preferred",
               "--topic", "t")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "Valid replica already elected for partitions t-0, t-1"
    f = tmp_path / "p.json"
    f.write_text('{"partitions": [{"topic": "t", "partition": 1}, {"topic": "t", "partition": 7}]}')
    r = gregor("elect-leaders", "--bootstrap-server", cluster.bootstrap, "--election-type", "PREFERRED",
               "--path-to-json-file", str(f))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Valid replica already elected for partitions t-1" in r.stdout
    assert "Error completing leader election (PREFERRED) for partition: t-7: UNKNOWN_TOPIC_OR_PARTITION" in r.stdout


def test_reassign_end_to_end(cluster: InProcessCluster, tmp_path: Path) -> None:
    _create(cluster, NewTopic("m", 1, replica_assignment=[[1, 2]]))
    plan = tmp_path / "plan.json"
    plan.write_text('{"version":1,"partitions":[{"topic":"m","partition":0,"replicas":[3,4],"log_dirs":["any","any"]}]}')
    common = ("--bootstrap-server", cluster.bootstrap, "--reassignment-json-file", str(plan))
    r = gregor("reassign", "--execute", *common)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ('{"version":1,"partitions":[{"topic":"m","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}'
            in r.stdout.splitlines())
    assert "Successfully started partition reassignments for m-0" in r.stdout
    deadline = time.monotonic() + 60
    while True:
        r = gregor("reassign", "--verify", *common)
        if "Reassignment of partition m-0 is completed." in r.stdout:
            assert r.returncode == 0
            break
        assert "Reassignment of partition m-0 is still in progress." in r.stdout, r.stdout + r.stderr
        assert time.monotonic() < deadline, "reassignment did not complete"
        time.sleep(0.5)
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics("m", timeout=20)
    assert md.topics["m"].partitions[0].replicas == [3, 4]
    r = gregor("reassign", "--cancel", *common)  # nothing under way any more
    assert r.returncode == 1 and "m-0: NO_REASSIGNMENT_IN_PROGRESS" in r.stdout


def test_reassign_with_throttle(tmp_path: Path) -> None:
    """--execute --throttle: the brokers get leader/follower.replication.throttled.rate and the topic its
    throttled replicas (old replicas lead, the new one follows); the copying to the new replica is paced
    to the rate (6 MB at 1 MB/s takes seconds, where unthrottled it takes well under one); --verify
    removes every throttle once the reassignment completed, and the new replica holds every record."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import ConfigResource

    c = InProcessCluster(tmp_path, [1, 2, 3], props={"replication.quota.window.num": "2"})
    try:
        _create(c, NewTopic("big", 1, replica_assignment=[[1]]))
        p = Producer({"bootstrap.servers": c.bootstrap, "linger.ms": 20, "compression.type": "none"})
        for i in range(6000):
            p.produce("big", b"%06d" % i + b"x" * 994, partition=0)
            if i % 1000 == 0:
                p.poll(0)
        assert p.flush(30) == 0
        plan = tmp_path / "plan.json"
        plan.write_text('{"version":1,"partitions":[{"topic":"big","partition":0,"replicas":[1,2]}]}')
        common = ("--bootstrap-server", c.bootstrap, "--reassignment-json-file", str(plan))
        t0 = time.monotonic()
        r = gregor("reassign", "--execute", "--throttle", "1000000", *common)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "The inter-broker throttle limit was set to 1000000 B/s" in r.stdout

        admin = AdminClient({"bootstrap.servers": c.bootstrap})

        def config(kind: Any, name: str, key: str) -> Any:
            res = ConfigResource(kind, name)
            return admin.describe_configs([res])[res].result(20)[key]

        for b in ("1", "2"):
            e = config(ConfigResource.Type.BROKER, b, "follower.replication.throttled.rate")
            assert (e.value, e.source) == ("1000000", 2), b  # DYNAMIC_BROKER_CONFIG
        assert config(ConfigResource.Type.TOPIC, "big", "leader.replication.throttled.replicas").value == "0:1"
        assert config(ConfigResource.Type.TOPIC, "big", "follower.replication.throttled.replicas").value == "0:2"

        deadline = time.monotonic() + 60
        while True:
            r = gregor("reassign", "--verify", *common)
            if r.returncode == 0:
                break
            assert "still in progress" in r.stdout, r.stdout + r.stderr
            assert time.monotonic() < deadline, "reassignment did not complete"
            time.sleep(0.3)
        elapsed = time.monotonic() - t0
        assert elapsed >= 3.0, f"6 MB copied in {elapsed:.1f} s: not throttled to 1 MB/s"
        assert "Clearing broker-level throttles on brokers 1,2,3" in r.stdout
        assert "Clearing topic-level throttles on topic(s) big" in r.stdout
        for b in ("1", "2", "3"):
            assert config(ConfigResource.Type.BROKER, b, "leader.replication.throttled.rate").source == 5  # DEFAULT
        assert config(ConfigResource.Type.TOPIC, "big", "follower.replication.throttled.replicas").value == ""
        replica = c.brokers[2].replica_manager.partitions[("big", 0)]
        assert replica.log.log_end_offset == 6000
        assert c.brokers[1].replica_manager.leader_quota.rate == c.brokers[2].replica_manager.follower_quota.rate
        assert not c.brokers[2].replica_manager.follower_quota.active
    finally:
        c.stop()
