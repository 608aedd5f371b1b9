"""ACLs in ZooKeeper (real server): Kafka's znodes and change notifications, a change made through one store
seen by another within a second, concurrent writers on one pattern losing nothing, and two brokers
enforcing an ACL created through one of them."""

from __future__ import annotations

import json
import threading
import time

from confluent_kafka import KafkaException
from kazoo.client import KazooClient

from gregor.metadata.store import ACLS
from gregor.metadata.zookeeper import ZooKeeperMetadataStore
from gregor.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tests.broker_process import BrokerProcess
from tests.conftest import StoreFactory
from tests.metadata.test_zookeeper_store import Events
from tests.waiting import wait_for
from tests.wire import WireClient


def _ace(principal: str, op: AclOperation = AclOperation.READ) -> AccessControlEntry:
    return AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW)


def test_kafka_znodes_notifications_and_another_store_sees_changes(stores: StoreFactory, raw_zk: KazooClient) -> None:
    a, b = stores(1), stores(2)
    ev = Events(b)
    try:
        lit = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)
        pre = ResourcePattern(ResourceType.GROUP, "app-", PatternType.PREFIXED)
        a.alter_acls(lit, frozenset({_ace("User:alice")}))
        a.alter_acls(pre, frozenset({_ace("User:bob", AclOperation.DESCRIBE)}))
        data, _ = raw_zk.get("/kafka-acl/Topic/orders")
        assert json.loads(data) == {"version": 1, "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
        assert raw_zk.exists("/kafka-acl-extended/prefixed/Group/app-") is not None
        notes = raw_zk.get_children("/kafka-acl-changes")
        assert len(notes) == 1 and notes[0].startswith("acl_changes_")
        assert raw_zk.get(f"/kafka-acl-changes/{notes[0]}")[0] == b"Topic:orders"
        ext = raw_zk.get_children("/kafka-acl-extended-changes")
        assert json.loads(raw_zk.get(f"/kafka-acl-extended-changes/{ext[0]}")[0]) == {
            "version": 1, "resourceType": "Group", "name": "app-", "patternType": "PREFIXED"}
        wait_for(lambda: sum(e.kind == ACLS for e in ev.items) >= 2, 1.0)
        assert b.snapshot().acls == {lit: frozenset({_ace("User:alice")}),
                                     pre: frozenset({_ace("User:bob", AclOperation.DESCRIBE)})}
        a.alter_acls(lit, remove=frozenset({_ace("User:alice")}))
        assert raw_zk.exists("/kafka-acl/Topic/orders") is None
        wait_for(lambda: lit not in b.snapshot().acls, 1.0)
        # A third store starting now loads the ACLs from the znodes.
        assert stores(3).snapshot().acls == {pre: frozenset({_ace("User:bob", AclOperation.DESCRIBE)})}
    finally:
        ev.close()


def test_concurrent_writers_on_one_pattern_lose_nothing(stores: StoreFactory) -> None:
    a, b = stores(1), stores(2)
    p = ResourcePattern(ResourceType.TOPIC, "shared", PatternType.LITERAL)
    errors: list[BaseException] = []

    def add(store: ZooKeeperMetadataStore, who: str) -> None:
        try:
            for i in range(15):
                store.alter_acls(p, frozenset({_ace(f"User:{who}{i}")}))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=add, args=(s, w)) for s, w in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    wait_for(lambda: len(a.snapshot().acls.get(p, ())) == 30 and len(b.snapshot().acls.get(p, ())) == 30, 5)


def test_acl_created_through_one_broker_is_enforced_by_another(zk_connect: str, tmp_path: object) -> None:
    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AclBinding, AdminClient, NewTopic, ResourcePatternType
    from confluent_kafka.admin import AclOperation as CkOp
    from confluent_kafka.admin import AclPermissionType as CkPerm
    from confluent_kafka.admin import ResourceType as CkType

    common = {"zookeeper.connect": zk_connect, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
              "super.users": "User:ANONYMOUS", "auto.create.topics.enable": "false"}
    from pathlib import Path
    base = Path(str(tmp_path))
    b1 = BrokerProcess(base / "b1", {**common, "broker.id": "1"}).start()
    b2 = BrokerProcess(base / "b2", {**common, "broker.id": "2"}).start()
    try:
        admin1 = AdminClient({"bootstrap.servers": b1.bootstrap})
        admin1.create_topics([NewTopic("zt", 1, replica_assignment=[[2]])])["zt"].result(15)  # led by b2
        # b2 runs without super users from here: restart it so ANONYMOUS is an ordinary principal there.
        b2.stop()
        b2.overrides["super.users"] = ""
        b2.restart()
        def topic_error() -> int:
            """b2's own answer (a client's metadata requests may go to b1, where ANONYMOUS is a super user)."""
            c = WireClient(b2.bootstrap)
            try:
                body = {"topics": [{"name": "zt"}], "allow_auto_topic_creation": False}
                return int(c.request(3, 9, body).topics[0].error_code)
            finally:
                c.close()

        # No DESCRIBE (WRITE would imply it): b2 refuses the topic.
        assert topic_error() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        errors: list[object] = []
        p = Producer({"bootstrap.servers": b2.bootstrap, "message.timeout.ms": 3000, "retries": 0})
        try:
            p.produce("zt", b"denied", on_delivery=lambda e, _m: errors.append(e))
            p.flush(10)
        except KafkaException as e:  # librdkafka may refuse at once, from the metadata's error
            errors.append(e.args[0])
        assert errors[0] is not None and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED  # type: ignore[attr-defined]
        for f in admin1.create_acls([AclBinding(CkType.TOPIC, "zt", ResourcePatternType.LITERAL, "User:ANONYMOUS",
                                                "*", CkOp.WRITE, CkPerm.ALLOW)]).values():
            f.result(10)
        t0 = time.monotonic()
        while topic_error() != 0:  # b2 learns of the ACL through ZooKeeper's change notification
            assert time.monotonic() - t0 < 5
            time.sleep(0.02)
        assert time.monotonic() - t0 < 1.0
        errors.clear()
        p2 = Producer({"bootstrap.servers": b2.bootstrap, "message.timeout.ms": 5000})
        p2.produce("zt", b"allowed", on_delivery=lambda e, _m: errors.append(e))
        p2.flush(10)
        assert errors == [None]
    finally:
        b1.kill()
        b2.kill()


def test_a_replicated_topic_with_acls_on_two_brokers(zk_connect: str, tmp_path: object) -> None:
    """Clients authenticate with SASL/PLAIN; the brokers talk over the PLAINTEXT inter-broker listener as
    User:ANONYMOUS, a super user (their replica fetches need CLUSTER_ACTION). alice writes with acks=all to a
    topic replicated on both and reads it back; bob, without ACLs, is refused."""
    from pathlib import Path

    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
    from confluent_kafka.admin import AclBinding, AdminClient, NewTopic, ResourcePatternType
    from confluent_kafka.admin import AclOperation as CkOp
    from confluent_kafka.admin import AclPermissionType as CkPerm
    from confluent_kafka.admin import ResourceType as CkType

    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="a" '
            'user_admin="a" user_alice="alice-pw" user_bob="bob-pw";')
    common = {"zookeeper.connect": zk_connect, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
              "super.users": "User:admin;User:ANONYMOUS", "auto.create.topics.enable": "false",
              "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
              "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
              "inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
              "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas}
    base = Path(str(tmp_path))
    brokers = [BrokerProcess(base / f"b{i}", {**common, "broker.id": str(i)}).start() for i in (1, 2)]
    try:
        def conf(user: str, password: str) -> dict[str, str]:
            servers = ",".join(f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}" for b in brokers)
            return {"bootstrap.servers": servers, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                    "sasl.username": user, "sasl.password": password}

        admin = AdminClient(conf("admin", "a"))
        admin.create_topics([NewTopic("rep", 1, 2)])["rep"].result(15)
        grants = [AclBinding(CkType.TOPIC, "rep", ResourcePatternType.LITERAL, "User:alice", "*", op, CkPerm.ALLOW)
                  for op in (CkOp.WRITE, CkOp.READ)]
        for f in admin.create_acls(grants).values():
            f.result(10)

        def alice_may_read() -> bool:
            """The leader's answer to alice's Fetch: the end of the empty partition once the ACLs reached it
            (each broker learns them through its ZooKeeper watch, as in Kafka), else refused."""
            c = Consumer({**conf("alice", "alice-pw"), "group.id": "unused", "enable.partition.eof": True})
            try:
                c.assign([TopicPartition("rep", 0, 0)])
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    m = c.poll(0.2)
                    if m is not None and m.error() is not None:
                        return bool(m.error().code() == KafkaError._PARTITION_EOF)
                return False
            finally:
                c.close()

        wait_for(alice_may_read, 30)
        results: list[object] = []
        p = Producer({**conf("alice", "alice-pw"), "acks": "all", "enable.idempotence": True})
        for i in range(20):
            p.produce("rep", f"m{i}".encode(), on_delivery=lambda e, _m: results.append(e))
        p.flush(20)
        assert results == [None] * 20
        c = Consumer({**conf("alice", "alice-pw"), "group.id": "unused", "enable.auto.commit": False})
        c.assign([TopicPartition("rep", 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 15
        while len(got) < 20 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
        c.close()
        assert got == [f"m{i}".encode() for i in range(20)]
        md = admin.list_topics("rep", timeout=10).topics["rep"].partitions[0]
        assert sorted(md.isrs) == [1, 2]  # both replicas in sync: the follower's fetches were authorized
        errors: list[object] = []
        q = Producer({**conf("bob", "bob-pw"), "message.timeout.ms": 3000})
        try:
            q.produce("rep", b"no", on_delivery=lambda e, _m: errors.append(e))
            q.flush(10)
        except KafkaException as e:
            errors.append(e.args[0])
        assert errors and errors[0] is not None
        assert errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED  # type: ignore[attr-defined]
    finally:
        for b in brokers:
            b.kill()
