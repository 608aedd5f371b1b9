"""ACLs in ZooKeeper (real server): Kafka's znodes and change notifications, a change made through one store
seen by another within a second, concurrent writers on one pattern losing nothing, and two brokers
enforcing an ACL created through one of them."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from gregor.config import BrokerConfig
from gregor.metadata.store import ACLS
from gregor.metadata.zookeeper import ZooKeeperMetadataStore, parse_connect
from gregor.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tests.broker_process import BrokerProcess
from tests.metadata.test_zookeeper_store import Events
from tests.wire import WireClient

StoreFactory = Callable[..., ZooKeeperMetadataStore]


@pytest.fixture
def stores(zk_connect: str) -> Iterator[StoreFactory]:
    made: list[ZooKeeperMetadataStore] = []

    def make(broker_id: int = 1) -> ZooKeeperMetadataStore:
        s = ZooKeeperMetadataStore(BrokerConfig({"zookeeper.connect": zk_connect, "broker.id": str(broker_id),
                                                 "zookeeper.session.timeout.ms": "4000"}))
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


@pytest.fixture
def raw_zk(zk_connect: str) -> Iterator[KazooClient]:
    hosts, chroot = parse_connect(zk_connect)
    zk = KazooClient(hosts=hosts)
    zk.start(timeout=10)
    zk.ensure_path(chroot)
    zk.chroot = chroot
    yield zk
    zk.stop()
    zk.close()


def _ace(principal: str, op: AclOperation = AclOperation.READ) -> AccessControlEntry:
    return AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW)


def _wait(cond: Callable[[], bool], timeout_s: float = 5.0) -> float:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)
    return time.monotonic() - t0


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
        _wait(lambda: sum(e.kind == ACLS for e in ev.items) >= 2, 1.0)
        assert b.snapshot().acls == {lit: frozenset({_ace("User:alice")}),
                                     pre: frozenset({_ace("User:bob", AclOperation.DESCRIBE)})}
        a.alter_acls(lit, remove=frozenset({_ace("User:alice")}))
        assert raw_zk.exists("/kafka-acl/Topic/orders") is None
        _wait(lambda: lit not in b.snapshot().acls, 1.0)
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
    _wait(lambda: len(a.snapshot().acls.get(p, ())) == 30 and len(b.snapshot().acls.get(p, ())) == 30)


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
