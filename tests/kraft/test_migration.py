"""`gregor migrate zookeeper-to-kraft`, as an operator runs it: a three-broker ZooKeeper cluster with data,
configs, ACLs, a quota, a SCRAM credential and a group's committed offsets is stopped, each node is migrated,
and the same log dirs start as a three-node KRaft quorum with everything still there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from gregor.tools.local_cluster import LocalCluster
from tests.tools.cli import gregor

OVERRIDES = {"auto.create.topics.enable": "false",
             "auto.leader.rebalance.enable": "false", "group.initial.rebalance.delay.ms": "0",
             "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
             "super.users": "User:ANONYMOUS"}
ZOOKEEPER = {"zookeeper.session.timeout.ms": "3000"}
KRAFT = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}


def _wait(futures: dict[Any, Any]) -> None:
    for f in futures.values():
        f.result(30)


def _set_up(bs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    _wait(admin.create_topics([NewTopic("orders", 3, 3, config={"retention.ms": "123456789"}),
                               NewTopic("solo", 1, replica_assignment=[[0]])]))
    r = gregor("configs", "--bootstrap-server", bs, "--alter", "--entity-type", "brokers", "--entity-default",
               "--add-config", "log.cleaner.backoff.ms=16000")
    assert r.returncode == 0, r.stderr
    _wait(admin.create_acls([AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                                        AclOperation.READ, AclPermissionType.ALLOW)]))
    _wait(admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"secret")]))
    r = gregor("quotas", "--bootstrap-server", bs, "--alter", "--add-config", "producer_byte_rate=1048576",
               "--entity-type", "users", "--entity-name", "alice")
    assert r.returncode == 0, r.stderr
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 5})
    for i in range(300):
        p.produce("orders", key=str(i % 7).encode(), value=f"v{i}".encode())
    p.produce("solo", value=b"only here")
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bs, "group.id": "billing", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([TopicPartition("orders", p, 0) for p in range(3)])
    got = 0
    while got < 100:
        m = c.poll(10)
        assert m is not None and m.error() is None, m and m.error()
        got += 1
    c.commit(asynchronous=False)
    c.close()


def _state(bs: str) -> dict[str, Any]:
    """Everything the migration must carry, as clients see it."""
    admin = AdminClient({"bootstrap.servers": bs})
    from confluent_kafka import TopicCollection
    described = admin.describe_topics(TopicCollection(["orders", "solo"]))
    topics = {name: (str(f.result(30).topic_id), [sorted(r.id for r in p.replicas) for p in f.result(30).partitions])
              for name, f in described.items()}
    (cfg,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "orders")]).values()
    (brk,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")]).values()
    acls = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                AclOperation.ANY, AclPermissionType.ANY)).result(30)
    (users,) = admin.describe_user_scram_credentials(["alice"]).values()
    q = gregor("quotas", "--bootstrap-server", bs, "--describe", "--entity-type", "users")
    assert q.returncode == 0, q.stderr
    c = Consumer({"bootstrap.servers": bs, "group.id": "billing", "enable.auto.commit": False})
    committed = sorted((tp.partition, tp.offset) for tp in c.committed([TopicPartition("orders", p) for p in range(3)],
                                                                       timeout=30))
    c.close()
    return {"topics": topics, "retention.ms": cfg.result(30)["retention.ms"].value,
            "log.cleaner.backoff.ms": brk.result(30)["log.cleaner.backoff.ms"].value,
            "acls": [(b.name, b.principal, b.operation) for b in acls],
            "scram": [i.mechanism for i in users.result(30).scram_credential_infos],
            "quota": [line for line in q.stdout.splitlines() if "alice" in line],
            "committed": committed, "records": _read_all(bs)}


def _read_all(bs: str) -> dict[int, list[str]]:
    c = Consumer({"bootstrap.servers": bs, "group.id": "reader", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition("orders", p, 0) for p in range(3)])
    out: dict[int, list[str]] = {0: [], 1: [], 2: []}
    eof: set[int] = set()
    while len(eof) < 3:
        m = c.poll(15)
        assert m is not None, f"no record within 15 s, read {sum(map(len, out.values()))}"
        if m.error():
            assert m.error().code() == -191, m.error()  # _PARTITION_EOF
            eof.add(m.partition())
            continue
        out[m.partition()].append(m.value().decode())
    c.close()
    return out


def _migrate(kc: LocalCluster, i: int, zk_connect: str, tmp_path: Path,
             data_dir: Path | None = None) -> Any:
    props = {**kc.broker_props(i), "log.dirs": str(data_dir or kc.brokers[i].data_dir)}
    conf = tmp_path / f"node-{i}.properties"
    conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return gregor("migrate", "zookeeper-to-kraft", "--zookeeper-connect", zk_connect, "--config", str(conf))


def test_a_zookeeper_cluster_becomes_a_kraft_quorum_with_everything(tmp_path: Path, zk_connect: str) -> None:
    base = tmp_path / "cluster"
    zc = LocalCluster(3, base, {**OVERRIDES, **ZOOKEEPER}, zk_connect=zk_connect)
    kc: LocalCluster | None = None
    try:
        zc.start()
        _set_up(zc.bootstrap)
        before = _state(zc.bootstrap)
        assert sum(map(len, before["records"].values())) == 300 and before["acls"] and before["quota"]
        # the group consumed 100 records; a partition it read nothing from has no committed offset (-1001)
        assert sum(o for _, o in before["committed"] if o >= 0) == 100
        assert before["scram"] and before["retention.ms"] == "123456789"
        zadmin = AdminClient({"bootstrap.servers": zc.bootstrap})
        cluster_id = zadmin.describe_cluster().result(30).cluster_id

        kc = LocalCluster(3, base, {**OVERRIDES, **KRAFT}, kraft=True, cluster_id=cluster_id)
        running = _migrate(kc, 0, zk_connect, tmp_path)
        assert running.returncode == 1 and "still registered" in running.stderr, running.stderr
        for i in range(3):
            assert zc.stop(i) == 0

        # node 1 given broker 0's data: ZooKeeper assigns solo-0 to broker 0 alone
        wrong = _migrate(kc, 1, zk_connect, tmp_path, data_dir=kc.brokers[0].data_dir)
        assert wrong.returncode == 1 and "solo-0" in wrong.stderr and "broker.id it had" in wrong.stderr, wrong.stderr
        for i in range(3):
            r = _migrate(kc, i, zk_connect, tmp_path)
            assert r.returncode == 0, r.stderr
            assert f"cluster {cluster_id}" in r.stdout and "bootstrap records" in r.stdout, r.stdout

        kc.start()
        after = _state(kc.bootstrap)
        assert after == before
        again = _migrate(kc, 0, zk_connect, tmp_path)
        assert again.returncode == 1 and "already holds a KRaft metadata log" in again.stderr, again.stderr

        # the quorum takes writes: a new topic, and records from a new idempotent producer after the old ones
        admin = AdminClient({"bootstrap.servers": kc.bootstrap})
        _wait(admin.create_topics([NewTopic("after", 1, 3)]))
        p = Producer({"bootstrap.servers": kc.bootstrap, "enable.idempotence": True})
        for i in range(300, 330):
            p.produce("orders", key=str(i % 7).encode(), value=f"v{i}".encode())
        assert p.flush(30) == 0
        records = _read_all(kc.bootstrap)
        for part, values in records.items():
            assert values[:len(before["records"][part])] == before["records"][part]
        assert sum(map(len, records.values())) == 330
    finally:
        if kc is not None:
            kc.close()
        zc.close()
