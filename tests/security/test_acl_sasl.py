"""ACL acceptance with authenticated principals: SASL/PLAIN users on SASL_PLAINTEXT, real clients.

One broker for the module, `User:admin` its super user; alice may READ the topics prefixed "alice-" and the
group "alice-g" and WRITE "alice-w"; bob may DESCRIBE "bob-1" only.
"""

from __future__ import annotations

import time
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

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-pw" '
        'user_admin="admin-pw" user_alice="alice-pw" user_bob="bob-pw";')
PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
TOPICS = ("alice-1", "alice-2", "alice-w", "bob-1")


def acl(rtype: ResourceType, name: str, op: AclOperation, principal: str,
        pattern: ResourcePatternType = ResourcePatternType.LITERAL,
        perm: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, perm)


ALICE_READ = acl(ResourceType.TOPIC, "alice-", AclOperation.READ, "User:alice", ResourcePatternType.PREFIXED)
ACLS = [
    ALICE_READ,
    acl(ResourceType.GROUP, "alice-g", AclOperation.READ, "User:alice"),
    acl(ResourceType.TOPIC, "alice-w", AclOperation.WRITE, "User:alice"),
    acl(ResourceType.TOPIC, "bob-1", AclOperation.DESCRIBE, "User:bob"),
]


def conf(b: BrokerProcess, user: str) -> dict[str, Any]:
    return {"bootstrap.servers": f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": PASSWORDS[user]}


def _start(b: BrokerProcess) -> BrokerProcess:
    return b.start()


@pytest.fixture(scope="module")
def broker_and_admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, AdminClient]]:
    b = BrokerProcess(tmp_path_factory.mktemp("acl-sasl"), {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "auto.create.topics.enable": "false",
    }).start()
    admin = AdminClient(conf(b, "admin"))
    try:
        for f in admin.create_topics([NewTopic(t, 1, 1) for t in TOPICS]).values():
            f.result(15)
        p = Producer(conf(b, "admin"))
        for t in TOPICS:
            for i in range(3):
                p.produce(t, f"{t}-{i}".encode())
        assert p.flush(15) == 0
        for f in admin.create_acls(ACLS).values():
            f.result(10)
        del p
        yield b, admin
    finally:
        b.kill()


@pytest.fixture
def b(broker_and_admin: tuple[BrokerProcess, AdminClient]) -> BrokerProcess:
    return broker_and_admin[0]


@pytest.fixture
def admin(broker_and_admin: tuple[BrokerProcess, AdminClient]) -> AdminClient:
    return broker_and_admin[1]


def read(b: BrokerProcess, user: str, topic: str, group: str, subscribe: bool = True, n: int = 3,
         timeout_s: float = 10, ignore: tuple[int, ...] = ()) -> tuple[list[bytes], Any]:
    c = Consumer({**conf(b, user), "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got: list[bytes] = []
    err = None
    try:
        c.subscribe([topic]) if subscribe else c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.time() + timeout_s
        while len(got) < n and time.time() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() in ignore:
                    continue
                err = m.error()
                break
            got.append(m.value())
    except KafkaException as e:
        err = e.args[0]
    finally:
        c.close()
    return got, err


def test_a_principal_reads_its_prefixed_topics_and_group_and_nothing_else(b: BrokerProcess) -> None:
    for t in ("alice-1", "alice-2"):
        got, err = read(b, "alice", t, "alice-g")
        assert err is None and got == [f"{t}-{i}".encode() for i in range(3)]
    _, err = read(b, "alice", "bob-1", "alice-g")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    _, err = read(b, "alice", "alice-1", "other-group")
    assert err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    # DESCRIBE does not allow READ (librdkafka also looks up the group, which bob may not use either).
    _, err = read(b, "bob", "bob-1", "bob-g", subscribe=False, ignore=(KafkaError.GROUP_AUTHORIZATION_FAILED,))
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_produce_without_write_fails_confluent_kafka(b: BrokerProcess) -> None:
    results: list[Any] = []
    p = Producer({**conf(b, "alice"), "message.timeout.ms": 5000})
    p.produce("alice-w", b"ok", on_delivery=lambda e, _m: results.append(("alice-w", e)))
    p.produce("alice-1", b"no", on_delivery=lambda e, _m: results.append(("alice-1", e)))
    p.flush(10)
    by_topic = dict(results)
    assert by_topic["alice-w"] is None
    assert by_topic["alice-1"] is not None and by_topic["alice-1"].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_produce_without_write_fails_kafka_python(b: BrokerProcess) -> None:
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    p = KafkaProducer(bootstrap_servers=f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}", security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password="alice-pw",
                      max_block_ms=10000)
    try:
        p.send("alice-w", b"ok").get(10)  # idempotent (kafka-python's default): WRITE on a topic suffices
        with pytest.raises(TopicAuthorizationFailedError):
            p.send("alice-2", b"no").get(10)
    finally:
        p.close(2)


def test_a_deny_overrides_an_allow(b: BrokerProcess, admin: AdminClient) -> None:
    deny = acl(ResourceType.TOPIC, "alice-2", AclOperation.READ, "User:alice", perm=AclPermissionType.DENY)
    for f in admin.create_acls([deny]).values():
        f.result(10)
    try:
        _, err = read(b, "alice", "alice-2", "alice-g", subscribe=False)
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        got, err = read(b, "alice", "alice-1", "alice-g", subscribe=False)
        assert err is None and len(got) == 3
    finally:
        flt = AclBindingFilter(ResourceType.TOPIC, "alice-2", ResourcePatternType.LITERAL, "User:alice", None,
                               AclOperation.ANY, AclPermissionType.DENY)
        for f in admin.delete_acls([flt]).values():
            f.result(10)


def test_a_principal_without_describe_does_not_see_the_topic(b: BrokerProcess) -> None:
    bob = AdminClient(conf(b, "bob"))
    assert set(bob.list_topics(timeout=10).topics) == {"bob-1"}
    alice = AdminClient(conf(b, "alice"))
    assert set(alice.list_topics(timeout=10).topics) == {"alice-1", "alice-2", "alice-w"}
    t = bob.list_topics("alice-1", timeout=10).topics["alice-1"]
    assert t.error is not None and t.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_deleting_an_acl_takes_effect_for_a_connected_client(b: BrokerProcess, admin: AdminClient) -> None:
    c = Consumer({**conf(b, "alice"), "group.id": "alice-g", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 50, "topic.metadata.refresh.interval.ms": 100})
    try:
        c.assign([TopicPartition("alice-1", 0, 0)])
        got = 0
        deadline = time.time() + 10
        while got < 3 and time.time() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got += 1
        assert got == 3
        flt = AclBindingFilter(ResourceType.TOPIC, "alice-", ResourcePatternType.PREFIXED, "User:alice", None,
                               AclOperation.READ, AclPermissionType.ALLOW)
        for f in admin.delete_acls([flt]).values():
            assert len(f.result(10)) == 1
        t0 = time.monotonic()
        err = None
        while err is None and time.monotonic() - t0 < 10:
            m = c.poll(0.1)
            if m is not None and m.error() and m.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                err = m.error()
        assert err is not None
        assert time.monotonic() - t0 < 1.5  # the broker refuses the connected consumer's next fetch
    finally:
        c.close()
        for f in admin.create_acls([ALICE_READ]).values():
            f.result(10)


def test_acls_survive_a_restart(broker_and_admin: tuple[BrokerProcess, AdminClient]) -> None:
    b, _ = broker_and_admin
    b.stop()
    b.start()
    admin = AdminClient(conf(b, "admin"))
    flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)
    found = admin.describe_acls(flt).result(15)
    assert {(a.name, a.principal, a.operation) for a in found} == {(a.name, a.principal, a.operation) for a in ACLS}
    got, err = read(b, "alice", "alice-1", "alice-g", subscribe=False)
    assert err is None and len(got) == 3


def test_create_topics_with_create_on_the_topic_only(b: BrokerProcess, admin: AdminClient) -> None:
    grant = acl(ResourceType.TOPIC, "bob-new", AclOperation.CREATE, "User:bob")
    for f in admin.create_acls([grant]).values():
        f.result(10)
    bob = AdminClient(conf(b, "bob"))
    bob.create_topics([NewTopic("bob-new", 1, 1)])["bob-new"].result(10)  # CREATE on the topic suffices
    with pytest.raises(KafkaException) as e:
        bob.create_topics([NewTopic("bob-other", 1, 1)])["bob-other"].result(10)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as e:
        bob.delete_topics(["bob-new"])["bob-new"].result(10)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_group_listing_and_offsets_follow_group_acls(b: BrokerProcess) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions

    c = Consumer({**conf(b, "alice"), "group.id": "alice-g", "enable.auto.commit": False})
    try:  # a committed offset in alice-g
        c.commit(offsets=[TopicPartition("alice-1", 0, 2)], asynchronous=False)
    finally:
        c.close()
    alice, bob = AdminClient(conf(b, "alice")), AdminClient(conf(b, "bob"))
    assert "alice-g" in {g.group_id for g in alice.list_consumer_groups().result(10).valid}
    assert "alice-g" not in {g.group_id for g in bob.list_consumer_groups().result(10).valid}  # no DESCRIBE
    req = [ConsumerGroupTopicPartitions("alice-g", [TopicPartition("alice-1", 0)])]
    got = alice.list_consumer_group_offsets(req)["alice-g"].result(10)
    assert [(tp.topic, tp.offset) for tp in got.topic_partitions] == [("alice-1", 2)]
    with pytest.raises(KafkaException) as e:
        bob.list_consumer_group_offsets(req)["alice-g"].result(10)
    assert e.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_scram_credentials_need_cluster_alter_and_describe(b: BrokerProcess, admin: AdminClient) -> None:
    # Over the wire as User:ANONYMOUS on the PLAINTEXT listener (no ACLs): confluent-kafka 2.x crashes the
    # process (SIGSEGV / invalid free) on a Describe/AlterUserScramCredentials answer of
    # CLUSTER_AUTHORIZATION_FAILED, though other error codes in the same answers are handled.
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    from tests.wire import WireClient

    c = WireClient(f"127.0.0.1:{b.ports['PLAINTEXT']}")
    try:
        up = {"name": "carol", "mechanism": 1, "iterations": 4096, "salt": b"s" * 16, "salted_password": b"p" * 32}
        r = c.request(51, 0, {"deletions": [], "upsertions": [up]})
        assert [(x.user, x.error_code) for x in r.results] == [("carol", KafkaError.CLUSTER_AUTHORIZATION_FAILED)]
        r = c.request(50, 0, {"users": [{"name": "carol"}]})
        assert r.error_code == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        assert [(x.user, x.error_code) for x in r.results] == [("carol", KafkaError.CLUSTER_AUTHORIZATION_FAILED)]
    finally:
        c.close()
    upsert = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw")
    for f in admin.alter_user_scram_credentials([upsert]).values():  # the super user may
        f.result(10)


def test_gregor_acls_with_command_config(b: BrokerProcess, tmp_path: Any) -> None:
    import subprocess
    import sys

    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                     'username="admin" password="admin-pw";\n')
    r = subprocess.run([sys.executable, "-m", "gregor", "acls", "--bootstrap-server",
                        f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}", "--command-config", str(props), "--list",
                        "--principal", "User:alice"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "name=alice-, patternType=PREFIXED" in r.stdout and "name=alice-g" in r.stdout


def test_client_quotas_need_cluster_describe_and_alter_configs(b: BrokerProcess) -> None:
    from tests.wire import WireClient

    c = WireClient(f"127.0.0.1:{b.ports['PLAINTEXT']}")  # User:ANONYMOUS, no ACLs
    try:
        r = c.request(48, 1, {"components": [{"entity_type": "user", "match_type": 2, "match": None}],
                              "strict": False})
        assert r.error_code == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        entity = [{"entity_type": "user", "entity_name": "alice"}]
        r = c.request(49, 1, {"entries": [{"entity": entity, "ops": [
            {"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}], "validate_only": False})
        assert [e.error_code for e in r.entries] == [KafkaError.CLUSTER_AUTHORIZATION_FAILED]
    finally:
        c.close()


def _wire_as(b: BrokerProcess, user: str) -> Any:
    """A raw connection logged in with SASL/PLAIN as `user` (for APIs confluent-kafka does not call)."""
    from tests.wire import WireClient

    c = WireClient(f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}")
    assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0
    resp = c.request(36, 1, {"auth_bytes": f"\x00{user}\x00{PASSWORDS[user]}".encode()})
    assert resp.error_code == 0, resp.error_message
    return c


def test_describe_transactions_shows_only_describable_topics(b: BrokerProcess, admin: AdminClient) -> None:
    """Kafka filters a described transaction's partitions by the caller's DESCRIBE on each topic."""
    tx_acl = acl(ResourceType.TRANSACTIONAL_ID, "tx-open", AclOperation.DESCRIBE, "User:alice")
    for f in admin.create_acls([tx_acl]).values():
        f.result(10)
    p = Producer({**conf(b, "admin"), "transactional.id": "tx-open"})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce("alice-1", b"open")
    p.produce("bob-1", b"open")
    p.flush(15)
    try:
        c = _wire_as(b, "alice")
        try:
            deadline = time.time() + 10
            while True:
                st = c.request(65, 0, {"transactional_ids": ["tx-open"]}).transaction_states[0]
                if st.error_code == 0 and st.topics or time.time() > deadline:
                    break
                time.sleep(0.2)
            assert st.error_code == 0 and st.transaction_state == "Ongoing"
            assert [t.topic for t in st.topics] == ["alice-1"]  # bob-1 is in the transaction, hidden from alice
            denied = c.request(65, 0, {"transactional_ids": ["someone-else"]}).transaction_states[0]
            assert denied.error_code == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        finally:
            c.sock.close()
    finally:
        p.abort_transaction(15)
        for f in admin.delete_acls([AclBindingFilter(ResourceType.TRANSACTIONAL_ID, "tx-open",
                                                     ResourcePatternType.LITERAL, "User:alice", "*",
                                                     AclOperation.ANY, AclPermissionType.ANY)]).values():
            f.result(10)


def test_consumer_group_describe_hides_a_group_assigned_undescribable_topics(b: BrokerProcess) -> None:
    """KIP-848 groups: Kafka answers TOPIC_AUTHORIZATION_FAILED for a group whose assignment names a topic
    the caller may not describe, instead of showing that assignment."""
    c = Consumer({**conf(b, "admin"), "group.id": "alice-g", "group.protocol": "consumer"})
    c.subscribe(["alice-1", "bob-1"])
    try:
        deadline = time.time() + 20
        while not c.assignment() and time.time() < deadline:
            c.poll(0.2)
        assert {tp.topic for tp in c.assignment()} == {"alice-1", "bob-1"}
        w = _wire_as(b, "alice")
        try:
            g = w.request(69, 0, {"group_ids": ["alice-g"], "include_authorized_operations": False}).groups[0]
            assert g.error_code == 29 and not g.members  # TOPIC_AUTHORIZATION_FAILED: bob-1 is hidden from alice
        finally:
            w.sock.close()
        w = _wire_as(b, "admin")
        try:
            g = w.request(69, 0, {"group_ids": ["alice-g"], "include_authorized_operations": False}).groups[0]
            assert g.error_code == 0 and len(g.members) == 1
        finally:
            w.sock.close()
    finally:
        c.close()
