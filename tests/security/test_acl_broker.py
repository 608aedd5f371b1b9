"""ACLs end to end on one broker, with real clients, as User:ANONYMOUS on PLAINTEXT.

Until authentication tells principals apart, the principal is User:ANONYMOUS: the module's broker is first
started with super.users=User:ANONYMOUS to create topics, data and ACLs (ANONYMOUS may ALTER and DESCRIBE
the cluster, READ the topics prefixed "ok-" and the group "g1", WRITE the topic "wr"), then restarted
without super users, so every test runs against ACLs that also survived a restart.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.broker_process import BrokerProcess

AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
ANON = "User:ANONYMOUS"


def acl(rtype: ResourceType, name: str, op: AclOperation, pattern: ResourcePatternType = ResourcePatternType.LITERAL,
        perm: AclPermissionType = AclPermissionType.ALLOW, principal: str = ANON) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, perm)


BASE_ACLS = [
    acl(ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER),
    acl(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
    acl(ResourceType.TOPIC, "ok-", AclOperation.READ, ResourcePatternType.PREFIXED),
    acl(ResourceType.GROUP, "g1", AclOperation.READ),
    acl(ResourceType.TOPIC, "wr", AclOperation.WRITE),
]
ALL_FILTER = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                              AclPermissionType.ANY)


def _wait_all(futures: dict[Any, Any]) -> None:
    for f in futures.values():
        f.result(15)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("acl-broker"), {
        "authorizer.class.name": AUTHORIZER, "super.users": ANON, "auto.create.topics.enable": "false"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        _wait_all(admin.create_topics([NewTopic(t, 1, 1) for t in ("ok-1", "ok-2", "secret", "wr")]))
        p = Producer({"bootstrap.servers": b.bootstrap})
        for t in ("ok-1", "ok-2", "secret"):
            for i in range(3):
                p.produce(t, f"{t}-{i}".encode())
        assert p.flush(15) == 0
        _wait_all(admin.create_acls(BASE_ACLS))
        del p, admin  # no client of the first run keeps reconnecting during the restart
        b.stop()
        b.overrides["super.users"] = ""
        b.restart()
        yield b
    finally:
        _ADMINS.clear()
        b.kill()


_ADMINS: dict[str, AdminClient] = {}


def _admin(b: BrokerProcess) -> AdminClient:
    """One admin client per broker, kept alive (a client collected before its futures resolve destroys them)."""
    if b.bootstrap not in _ADMINS:
        _ADMINS[b.bootstrap] = AdminClient({"bootstrap.servers": b.bootstrap})
    return _ADMINS[b.bootstrap]


def _read(b: BrokerProcess, group: str, topic: str, n: int = 3, timeout_s: float = 10,
          assign: bool = False) -> tuple[list[bytes], Any]:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    got: list[bytes] = []
    err = None
    try:
        c.assign([TopicPartition(topic, 0, 0)]) if assign else c.subscribe([topic])
        deadline = time.time() + timeout_s
        while len(got) < n and time.time() < deadline and err is None:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() in (KafkaError._PARTITION_EOF,):
                    continue
                err = m.error()
                break
            got.append(m.value())
        if err is None and got and not assign:
            c.commit(asynchronous=False)
    except KafkaException as e:
        err = e.args[0]
    finally:
        c.close()
    return got, err


def test_acls_survive_restart_and_are_described(secured: BrokerProcess) -> None:
    found = _admin(secured).describe_acls(ALL_FILTER).result(10)
    assert {(a.restype, a.name, a.resource_pattern_type, a.operation) for a in found} == \
        {(a.restype, a.name, a.resource_pattern_type, a.operation) for a in BASE_ACLS}
    prefixed = AclBindingFilter(ResourceType.TOPIC, "ok-7", ResourcePatternType.MATCH, None, None, AclOperation.ANY,
                                AclPermissionType.ANY)
    assert [a.name for a in _admin(secured).describe_acls(prefixed).result(10)] == ["ok-"]


def test_metadata_hides_topics_not_describable(secured: BrokerProcess) -> None:
    md = _admin(secured).list_topics(timeout=10)
    assert {"ok-1", "ok-2", "wr"} <= set(md.topics) and "secret" not in md.topics
    for name in ("secret", "no-such-topic"):  # unauthorized whether or not it exists
        t = _admin(secured).list_topics(name, timeout=10).topics[name]
        assert t.error is not None and t.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_reads_prefixed_topics_and_its_group_only(secured: BrokerProcess) -> None:
    got, err = _read(secured, "g1", "ok-1")
    assert err is None and got == [b"ok-1-0", b"ok-1-1", b"ok-1-2"]
    _, err = _read(secured, "g2", "ok-2")
    assert err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    _, err = _read(secured, "g1", "secret")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_produce_without_write_fails_confluent(secured: BrokerProcess) -> None:
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": secured.bootstrap, "message.timeout.ms": 5000})
    p.produce("ok-1", b"x", on_delivery=lambda err, _m: errors.append(err))
    p.produce("wr", b"y", on_delivery=lambda err, _m: errors.append(("wr", err)))
    p.flush(10)
    assert ("wr", None) in errors
    codes = [e.code() for e in errors if e is not None and not isinstance(e, tuple)]
    assert codes == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_produce_without_write_fails_kafka_python(secured: BrokerProcess) -> None:
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    p = KafkaProducer(bootstrap_servers=secured.bootstrap, max_block_ms=5000, retries=0)
    try:
        p.send("wr", b"ok").get(10)
        with pytest.raises(TopicAuthorizationFailedError):
            p.send("ok-2", b"no").get(10)
    finally:
        p.close(2)


def test_deny_overrides_allow(secured: BrokerProcess) -> None:
    deny = acl(ResourceType.TOPIC, "ok-2", AclOperation.READ, perm=AclPermissionType.DENY)
    admin = _admin(secured)
    _wait_all(admin.create_acls([deny]))
    try:
        _, err = _read(secured, "g1", "ok-2", assign=True)
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        got, err = _read(secured, "g1", "ok-1", assign=True)
        assert err is None and len(got) == 3
    finally:
        f = AclBindingFilter(ResourceType.TOPIC, "ok-2", ResourcePatternType.LITERAL, ANON, "*", AclOperation.READ,
                             AclPermissionType.DENY)
        _wait_all(admin.delete_acls([f]))
    got, err = _read(secured, "g1", "ok-2", assign=True)
    assert err is None and len(got) == 3


def test_deleting_an_acl_takes_effect_for_a_connected_client(secured: BrokerProcess) -> None:
    topic = "wr"
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": secured.bootstrap, "message.timeout.ms": 3000, "retries": 0})
    p.produce(topic, b"before", on_delivery=lambda err, _m: errors.append(err))
    p.flush(10)
    assert errors == [None]
    admin = _admin(secured)
    f = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, ANON, None, AclOperation.WRITE,
                         AclPermissionType.ALLOW)
    try:
        deleted = [b for fut in admin.delete_acls([f]).values() for b in fut.result(10)]
        assert len(deleted) == 1
        t0 = time.time()
        p.produce(topic, b"after", on_delivery=lambda err, _m: errors.append(err))
        p.flush(10)
        assert errors[1] is not None and errors[1].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert time.time() - t0 < 5
    finally:
        _wait_all(admin.create_acls([acl(ResourceType.TOPIC, topic, AclOperation.WRITE)]))


def test_create_topics_and_groups_listing_need_acls(secured: BrokerProcess) -> None:
    admin = _admin(secured)
    fut = admin.create_topics([NewTopic(f"new-{uuid.uuid4().hex[:6]}", 1, 1)])
    for f in fut.values():
        with pytest.raises(KafkaException) as e:
            f.result(10)
        assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    for f in admin.delete_topics(["secret"]).values():
        with pytest.raises(KafkaException) as e:
            f.result(10)
        assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_invalid_acl_bindings_are_refused(secured: BrokerProcess) -> None:
    bad = AclBinding(ResourceType.BROKER, "not-the-cluster", ResourcePatternType.LITERAL, ANON, "*",
                     AclOperation.ALTER, AclPermissionType.ALLOW)
    for f in _admin(secured).create_acls([bad]).values():
        with pytest.raises(KafkaException) as e:
            f.result(10)
        assert e.value.args[0].code() == KafkaError.INVALID_REQUEST


def test_authorized_operations(secured: BrokerProcess) -> None:
    d = _admin(secured).describe_cluster(include_authorized_operations=True).result(10)
    assert set(d.authorized_operations) == {AclOperation.ALTER, AclOperation.DESCRIBE}


def test_without_authorizer_acl_apis_answer_security_disabled(broker: BrokerProcess) -> None:
    # kafka-python: librdkafka's DescribeAcls answers an empty list for a top-level error.
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import SecurityDisabledError

    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        f = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
                      resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY))
        with pytest.raises(SecurityDisabledError):
            a.describe_acls(f)
    finally:
        a.close()


def _gregor(*argv: str, stdin: str = "") -> tuple[int, str, str]:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "gregor", *argv], capture_output=True, text=True, input=stdin,
                       timeout=60)
    return r.returncode, r.stdout, r.stderr


def test_gregor_acls_tool_add_list_remove(secured: BrokerProcess) -> None:
    bs = ["--bootstrap-server", secured.bootstrap]
    rc, out, err = _gregor("acls", *bs, "--add", "--allow-principal", "User:carol", "--consumer", "--topic", "logs-",
                           "--resource-pattern-type", "prefixed", "--group", "carols")
    assert rc == 0, err
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=logs-, patternType=PREFIXED)`" in out
    assert "(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)" in out
    rc, out, err = _gregor("acls", *bs, "--list", "--principal", "User:carol")
    assert rc == 0, err
    assert out.count("Current ACLs for resource") == 2 and "operation=DESCRIBE" in out and "name=carols" in out
    rc, out, err = _gregor("acls", *bs, "--remove", "--topic", "logs-", "--resource-pattern-type", "prefixed",
                           stdin="n\n")
    assert rc == 1
    rc, out, err = _gregor("acls", *bs, "--remove", "--force", "--topic", "logs-", "--resource-pattern-type",
                           "prefixed")
    assert rc == 0, err
    assert "Removed ACLs for resource" in out
    _, out, _ = _gregor("acls", *bs, "--list", "--principal", "User:carol")
    assert "name=logs-" not in out and "name=carols" in out
    rc, _, err = _gregor("acls", *bs, "--add", "--topic", "x")
    assert rc == 2 and "--allow-principal" in err


def test_authorized_operations_of_topics_and_groups(secured: BrokerProcess) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicCollection  # noqa: F401

    admin = _admin(secured)
    t = admin.describe_topics(TopicCollection(["ok-1"]), include_authorized_operations=True)["ok-1"].result(10)
    assert set(t.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}
    got, err = _read(secured, "g1", "ok-1")  # leaves group g1 behind (empty), with its offsets
    assert err is None
    g = admin.describe_consumer_groups(["g1"], include_authorized_operations=True)["g1"].result(10)
    assert set(g.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}
    listed = admin.list_consumer_groups().result(10)  # cluster DESCRIBE: every group is listed
    assert "g1" in {x.group_id for x in listed.valid}


def test_configs_need_describe_configs(secured: BrokerProcess) -> None:
    from confluent_kafka.admin import ConfigResource

    admin = _admin(secured)
    for res, code in ((ConfigResource("topic", "ok-1"), KafkaError.TOPIC_AUTHORIZATION_FAILED),
                      (ConfigResource("broker", "0"), KafkaError.CLUSTER_AUTHORIZATION_FAILED)):
        with pytest.raises(KafkaException) as e:
            admin.describe_configs([res])[res].result(10)
        assert e.value.args[0].code() == code


def test_transactional_producer_needs_transactional_id_write(secured: BrokerProcess) -> None:
    p = Producer({"bootstrap.servers": secured.bootstrap, "transactional.id": "tx-denied"})
    with pytest.raises(KafkaException) as e:
        p.init_transactions(10)
    assert e.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    del p


def test_inter_broker_requests_need_cluster_action(secured: BrokerProcess) -> None:
    from tests.wire import WireClient

    c = WireClient(secured.bootstrap)
    try:
        fetch = {"replica_id": 7, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                 "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                 "topics": [{"topic": "ok-1", "partitions": [
                     {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                      "partition_max_bytes": 1 << 20}]}]}
        r = c.request(1, 11, fetch)  # a follower's fetch (ANONYMOUS may READ ok-1, but is no broker)
        assert r.responses[0].partitions[0].error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED
        fetch["replica_id"] = -1  # the same as a consumer: allowed
        assert c.request(1, 11, fetch).responses[0].partitions[0].error_code == 0
        r = c.request(7, 3, {"broker_id": 0, "broker_epoch": -1})  # ControlledShutdown
        assert r.error_code == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    finally:
        c.close()


def test_join_group_refused_early_answers_an_empty_protocol_name_before_v7(secured: BrokerProcess) -> None:
    """A JoinGroup refused before it reaches the coordinator (no READ on the group) answers protocol_name ""
    below v7, where the field is not nullable (a strict client fails to parse a null there), and null from
    v7 on."""
    import struct

    from gregor.protocol import apis
    from gregor.protocol.primitives import Reader
    from tests.wire import WireClient

    join = {"group_id": "no-such-acl", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer", "reason": None,
            "protocols": [{"name": "range", "metadata": b""}]}
    c = WireClient(secured.bootstrap)
    try:
        for version in (5, 7):
            c.send(11, version, join)
            frame = c.recv_frame()
            r = Reader(memoryview(frame))
            r.int32()  # correlation id
            if version >= 6:
                r.skip_tagged_fields()
            assert r.int32() == 0 and r.int16() == KafkaError.GROUP_AUTHORIZATION_FAILED  # throttle, error
            r.int32()  # generation
            if version >= 7:
                assert apis.BY_KEY[11].response.from_bytes(frame[4 + 1:], version).protocol_name is None
            else:
                (length,) = struct.unpack(">h", frame[r.pos:r.pos + 2])
                assert length == 0, "an empty string, not null (-1)"
    finally:
        c.close()
