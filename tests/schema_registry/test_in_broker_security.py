"""The registry inside a broker uses the broker's own users and authorizer: HTTP basic credentials are checked
against the broker's SASL users (PLAIN users of its listener, SCRAM users of the cluster) and subjects are
guarded by the cluster's ACLs as the broker holds them, so a new ACL applies to the next request."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from tests.broker_process import BrokerProcess
from tests.schema_registry.conftest import http
from tests.schema_registry.test_schema_checked_topics import registry_url
from tests.schema_registry.test_security import basic

pytestmark = pytest.mark.timeout(180)

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-pw" '
        'user_admin="admin-pw" user_carol="carol-pw";')
INT = Schema('"int"', "AVRO")


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, AdminClient, str]]:
    b = BrokerProcess(tmp_path_factory.mktemp("sr-in-broker-secure"), {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        # The registry reads and writes _schemas through the inter-broker listener as the broker does.
        "super.users": "User:admin;User:ANONYMOUS", "group.initial.rebalance.delay.ms": "0",
        "schema.registry.listeners": "http://127.0.0.1:0", "schema.registry.authentication.method": "BASIC",
    }).start()
    try:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}",
                             "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                             "sasl.username": "admin", "sasl.password": "admin-pw"})
        upsert = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                              b"alice-pw")
        for f in admin.alter_user_scram_credentials([upsert]).values():
            f.result(15)
        acls = [AclBinding(ResourceType.TOPIC, "_schemas:alice-", ResourcePatternType.PREFIXED, "User:alice", "*", op,
                           AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ)]
        for f in admin.create_acls(acls).values():
            f.result(15)
        yield b, admin, registry_url(b)
    finally:
        b.kill()


def test_basic_auth_with_the_brokers_own_users(secure: tuple[BrokerProcess, AdminClient, str]) -> None:
    _, _, url = secure
    r = http("GET", f"{url}/subjects")
    assert (r.status, r.json["error_code"]) == (401, 401)
    assert http("GET", f"{url}/subjects", headers=basic("alice", "wrong")).status == 401
    assert http("GET", f"{url}/subjects", headers=basic("alice", "alice-pw")).status == 200  # a SCRAM user
    assert http("GET", f"{url}/subjects", headers=basic("carol", "carol-pw")).status == 200  # a PLAIN user
    assert http("GET", f"{url}/subjects", headers=basic("carol", "alice-pw")).status == 401


def test_subjects_are_guarded_by_the_brokers_acls(secure: tuple[BrokerProcess, AdminClient, str]) -> None:
    _, admin, url = secure
    alice = SchemaRegistryClient({"url": url, "basic.auth.user.info": "alice:alice-pw"})
    carol = SchemaRegistryClient({"url": url, "basic.auth.user.info": "carol:carol-pw"})
    deadline = time.monotonic() + 30
    while True:  # the first write waits for the election
        try:
            sid = alice.register_schema("alice-orders", INT)
            break
        except SchemaRegistryError as e:
            assert e.error_code == 50004 and time.monotonic() < deadline, e
            time.sleep(0.2)
    with pytest.raises(SchemaRegistryError) as denied:
        alice.register_schema("carol-orders", INT)
    assert (denied.value.http_status_code, denied.value.error_code) == (403, 40301)
    with pytest.raises(SchemaRegistryError) as denied:
        carol.get_versions("alice-orders")
    assert denied.value.http_status_code == 403
    # An ACL added through Kafka's API applies at once: the registry asks the broker's own authorizer.
    grant = AclBinding(ResourceType.TOPIC, "_schemas:alice-orders", ResourcePatternType.LITERAL, "User:carol", "*",
                       AclOperation.READ, AclPermissionType.ALLOW)
    for f in admin.create_acls([grant]).values():
        f.result(15)
    deadline = time.monotonic() + 3  # below schema.registry.acl.refresh.ms: no copy of the ACLs is read
    while True:
        try:
            assert carol.get_versions("alice-orders") == [1]
            break
        except SchemaRegistryError:
            assert time.monotonic() < deadline, "the new ACL was not applied"
            time.sleep(0.1)
    assert carol.get_schema(sid).schema_str == '"int"'
