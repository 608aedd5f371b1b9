"""A one-voter KRaft node (process.roles=broker,controller) as a user runs it: formatted, started, used by
confluent-kafka (CreateTopics, idempotent produce, a group's consume), stopped cleanly or killed, and
started again with its topics, data and committed offsets back from the replayed metadata log."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.tools.kraft_nodes import kraft_quorum
from gregor.tools.local_broker import BrokerProcess


@pytest.fixture
def node(tmp_path: Path) -> Iterator[BrokerProcess]:
    (n,) = kraft_quorum(tmp_path, 1)
    yield n.start(timeout_s=30)
    n.kill()


def _produce(bs: str, topic: str, n: int, start: int = 0) -> None:
    p = Producer({"bootstrap.servers": bs, "acks": "all", "enable.idempotence": True})
    for i in range(start, start + n):
        p.produce(topic, key=str(i).encode(), value=f"v{i}".encode())
    assert p.flush(30) == 0


def _consume(bs: str, topic: str, group: str, want: int, timeout_s: float = 30) -> list[str]:
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got: list[str] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value().decode())
    if got:
        c.commit(asynchronous=False)
    c.close()
    return got


def _create(bs: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(15)


def test_serves_and_survives_restarts(node: BrokerProcess) -> None:
    bs = node.bootstrap
    _create(bs, "orders", 3)
    admin = AdminClient({"bootstrap.servers": bs})
    with pytest.raises(Exception, match="TOPIC_ALREADY_EXISTS|already exists"):
        for f in admin.create_topics([NewTopic("orders", 3, 1)]).values():
            f.result(15)
    _produce(bs, "orders", 200)
    assert sorted(_consume(bs, "orders", "g1", 200)) == sorted(f"v{i}" for i in range(200))
    md = admin.list_topics(timeout=10)
    assert md.controller_id == 1
    assert len(md.topics["orders"].partitions) == 3

    assert node.stop() == 0
    assert "fenced by the controller at its stop" in node.log_text()
    t0 = time.monotonic()
    node.restart()
    restart_s = time.monotonic() - t0
    assert restart_s < 20
    assert "is registered by another incarnation" not in node.log_text()  # a clean stop leaves no session
    _create(bs, "later", 2)  # metadata writes accepted again
    _produce(bs, "orders", 50, start=200)
    got = _consume(bs, "orders", "g1", 50)  # the group's offsets came back too: only the new records
    assert sorted(got) == sorted(f"v{i}" for i in range(200, 250))
    topics = AdminClient({"bootstrap.servers": bs}).list_topics(timeout=10).topics
    assert {"orders", "later"} <= set(topics)

    node.kill()  # a crash: the next start replays the metadata log and waits out the old session
    since = len(node.log_lines)
    node.restart()
    assert "replayed up to offset" in node.wait_for_log("replayed up to offset", since=since)
    assert sorted(_consume(bs, "orders", "g2", 250)) == sorted(f"v{i}" for i in range(250))
    assert len(AdminClient({"bootstrap.servers": bs}).list_topics(timeout=10).topics["later"].partitions) == 2


def test_metadata_snapshot_replayed(tmp_path: Path) -> None:
    """With snapshots every few hundred bytes the metadata log is cut at each: a restart loads the state from
    the latest snapshot, then the records after it."""
    (n,) = kraft_quorum(tmp_path, 1, {"metadata.log.max.record.bytes.between.snapshots": "1",
                                      "metadata.log.max.snapshot.interval.ms": "0"})
    try:
        n.start(timeout_s=30)
        for i in range(5):
            _create(n.bootstrap, f"s{i}", 1)
        _produce(n.bootstrap, "s4", 10)
        assert n.stop() == 0
        snapshots = list((tmp_path / "node-1" / "__cluster_metadata-0").glob("*.checkpoint"))
        assert snapshots, "no metadata snapshot was written"
        since = len(n.log_lines)
        n.restart()
        n.wait_for_log("loaded the metadata snapshot", since=since)
        topics = AdminClient({"bootstrap.servers": n.bootstrap}).list_topics(timeout=10).topics
        assert {f"s{i}" for i in range(5)} <= set(topics)
        assert sorted(_consume(n.bootstrap, "s4", "g", 10)) == sorted(f"v{i}" for i in range(10))
    finally:
        n.kill()


def test_describe_quorum_and_cluster(node: BrokerProcess) -> None:
    from kafka.admin import KafkaAdminClient

    from tests.tools.cli import gregor

    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap)
    try:
        q = admin.describe_metadata_quorum()
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    (topic,) = q["topics"]
    (p,) = topic["partitions"]
    assert topic["topic_name"] == "__cluster_metadata" and p["error"] is None
    assert p["leader_id"] == 1 and p["leader_epoch"] >= 1 and p["high_watermark"] > 0
    assert [v["replica_id"] for v in p["current_voters"]] == [1]
    assert q["nodes"][0]["node_id"] == 1 and q["nodes"][0]["listeners"][0]["name"] == "CONTROLLER"
    assert cluster["controller_id"] == 1

    r = gregor("metadata-quorum", "--bootstrap-server", node.bootstrap, "describe", "--status")
    assert r.returncode == 0, r.stderr
    fields = dict(line.split(":", 1) for line in r.stdout.splitlines())
    assert fields["LeaderId"].strip() == "1" and fields["CurrentVoters"].strip() == "[1]"
    assert int(fields["HighWatermark"]) > 0 and len(fields["ClusterId"].strip()) == 22
    r = gregor("metadata-quorum", "--bootstrap-server", node.bootstrap, "describe", "--replication")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[0] == "NodeId" and lines[1].split()[0] == "1" and lines[1].split()[-1] == "Leader"


def test_metadata_writes_of_every_kind_survive_a_restart(tmp_path: Path) -> None:
    """Admin changes go through the quorum (configs, partitions, ACLs, SCRAM credentials, deletions, producer
    id blocks for transactions) and come back from the metadata log after a kill."""
    (node,) = kraft_quorum(tmp_path, 1, {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                         "super.users": "User:ANONYMOUS"})
    try:
        node.start(timeout_s=30)
        _every_kind(node)
    finally:
        node.kill()


def _every_kind(node: BrokerProcess) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    bs = node.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    _create(bs, "cfg", 1)
    _create(bs, "gone", 1)
    res = ConfigResource(ResourceType.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(15)
    for f in admin.create_partitions([NewPartitions("cfg", 4)]).values():
        f.result(15)
    for f in admin.delete_topics(["gone"]).values():
        f.result(15)
    acl = AclBinding(ResourceType.TOPIC, "cfg", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                     AclPermissionType.ALLOW)
    for f in admin.create_acls([acl]).values():
        f.result(15)
    upsert = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                          b"secret")
    for f in admin.alter_user_scram_credentials([upsert]).values():
        f.result(15)
    from tests.tools.cli import gregor

    r = gregor("quotas", "--bootstrap-server", bs, "--alter", "--add-config", "producer_byte_rate=1048576",
               "--entity-type", "users", "--entity-name", "alice")
    assert r.returncode == 0, r.stderr
    p = Producer({"bootstrap.servers": bs, "transactional.id": "tx-1"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("cfg", value=b"in a transaction")
    p.commit_transaction(30)

    def check() -> None:
        a = AdminClient({"bootstrap.servers": bs})
        topics = a.list_topics(timeout=10).topics
        assert "gone" not in topics and len(topics["cfg"].partitions) == 4
        (cfgs,) = a.describe_configs([ConfigResource(ResourceType.TOPIC, "cfg")]).values()
        assert cfgs.result(15)["retention.ms"].value == "123456"
        acls = a.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                AclOperation.ANY, AclPermissionType.ANY)).result(15)
        assert [(b.name, b.principal) for b in acls] == [("cfg", "User:alice")]
        (users,) = a.describe_user_scram_credentials(["alice"]).values()
        assert [c.mechanism for c in users.result(15).scram_credential_infos] == [ScramMechanism.SCRAM_SHA_256]
        assert _consume(bs, "cfg", f"g-{time.monotonic()}", 1, 20) == ["in a transaction"]
        q = gregor("quotas", "--bootstrap-server", bs, "--describe", "--entity-type", "users")
        assert q.returncode == 0 and "alice" in q.stdout and "producer_byte_rate=1048576" in q.stdout, q.stdout

    check()
    node.kill()
    node.restart()
    check()
    p2 = Producer({"bootstrap.servers": bs, "transactional.id": "tx-2"})
    p2.init_transactions(30)  # a producer id from a block the controller had not given out before the kill


def test_metadata_quorum_tool_on_a_broker_without_kraft(start_broker) -> None:  # noqa: ANN001
    from tests.tools.cli import gregor

    b = start_broker()
    r = gregor("metadata-quorum", "--bootstrap-server", b.bootstrap, "describe", "--status")
    assert r.returncode == 1
    assert "does not serve DescribeQuorum (API key 55): it does not run in KRaft mode" in r.stderr
