"""The registry's security: HTTP basic authentication with the cluster's own SASL users (SCRAM, checked by
logging in to the cluster) or a JAAS list of users, subject permissions from the cluster's Kafka ACLs,
and an https listener with a PEM key store."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator
from pathlib import Path

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
from tests.schema_registry.conftest import RegistryProcess, http
from tests.security.certs import Pki, make_pki

pytestmark = pytest.mark.timeout(180)

ADMIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-pw" '
              'user_admin="admin-pw";')
ADMIN_LOGIN = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-pw";'
PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw", "ops": "ops-pw"}
INT = Schema('"int"', "AVRO")


def basic(user: str, password: str | None = None) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password or PASSWORDS[user]}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def topic_acl(name: str, op: AclOperation, principal: str,
              pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, pattern, principal, "*", op, AclPermissionType.ALLOW)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, AdminClient, RegistryProcess]]:
    d = tmp_path_factory.mktemp("sr-secure")
    b = BrokerProcess(d / "broker", {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": ADMIN_JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin", "group.initial.rebalance.delay.ms": "0",
    }).start()
    sasl = f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}"
    admin = AdminClient({"bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "admin", "sasl.password": "admin-pw"})
    reg: RegistryProcess | None = None
    try:
        upserts = [UserScramCredentialUpsertion(u, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), p.encode())
                   for u, p in PASSWORDS.items() if u != "admin"]
        for f in admin.alter_user_scram_credentials(upserts).values():
            f.result(15)
        acls = [topic_acl("_schemas:alice-", AclOperation.WRITE, "User:alice", ResourcePatternType.PREFIXED),
                topic_acl("_schemas:alice-", AclOperation.READ, "User:alice", ResourcePatternType.PREFIXED),
                topic_acl("_schemas:alice-orders", AclOperation.READ, "User:bob")]
        for f in admin.create_acls(acls).values():
            f.result(15)
        client_props = d / "registry-client.properties"
        client_props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                                f"sasl.jaas.config={ADMIN_LOGIN}\n")
        reg = RegistryProcess(sasl, {
            "schema.registry.authentication.method": "BASIC",
            "schema.registry.basic.auth.sasl.mechanism": "SCRAM-SHA-256",
            "schema.registry.basic.auth.principal.mapping": "ops=User:admin",
            "schema.registry.authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "schema.registry.super.users": "User:admin", "schema.registry.acl.refresh.ms": "300",
        }, command_config=client_props).start()
        yield b, admin, reg
    finally:
        if reg is not None:
            reg.kill()
        b.kill()


def test_basic_auth_with_the_clusters_scram_users(secure: tuple[BrokerProcess, AdminClient, RegistryProcess]) -> None:
    _, _, reg = secure
    r = http("GET", f"{reg.url}/subjects")
    assert (r.status, r.json["error_code"]) == (401, 401)
    assert r.headers["www-authenticate"] == 'Basic realm="SchemaRegistry"'
    assert http("GET", f"{reg.url}/subjects", headers=basic("alice", "wrong")).status == 401
    assert http("GET", f"{reg.url}/subjects", headers={"Authorization": "Basic !!!"}).status == 401
    assert http("GET", f"{reg.url}/subjects", headers=basic("alice")).status == 200  # a SCRAM login to the cluster
    # the registry's own login (admin, PLAIN) is no SCRAM user: it cannot call the API with it
    assert http("GET", f"{reg.url}/subjects", headers=basic("admin")).status == 401


def test_subject_permissions_from_kafka_acls(secure: tuple[BrokerProcess, AdminClient, RegistryProcess]) -> None:
    _, admin, reg = secure
    alice = SchemaRegistryClient({"url": reg.url, "basic.auth.user.info": "alice:alice-pw"})
    bob = SchemaRegistryClient({"url": reg.url, "basic.auth.user.info": "bob:bob-pw"})
    deadline = time.monotonic() + 30
    while True:  # the first write waits for the election
        try:
            sid = alice.register_schema("alice-orders", INT)
            break
        except SchemaRegistryError as e:
            assert e.error_code == 50004 and time.monotonic() < deadline, e
            time.sleep(0.2)
    with pytest.raises(SchemaRegistryError) as denied:
        alice.register_schema("bob-orders", INT)
    assert (denied.value.http_status_code, denied.value.error_code) == (403, 40301)
    assert bob.get_versions("alice-orders") == [1]
    assert bob.get_schema(sid).schema_str == '"int"'
    with pytest.raises(SchemaRegistryError) as denied:
        bob.register_schema("alice-orders", Schema('"long"', "AVRO"))
    assert denied.value.http_status_code == 403
    assert http("GET", f"{reg.url}/subjects", headers=basic("bob")).json == ["alice-orders"]
    r = http("PUT", f"{reg.url}/config", {"compatibility": "FULL"}, headers=basic("alice"))
    assert (r.status, r.json["error_code"]) == (403, 40301)  # the global level is the cluster's ALTER_CONFIGS
    # A basic-auth user mapped to the super user's principal (schema.registry.basic.auth.principal.mapping) may.
    ops = SchemaRegistryClient({"url": reg.url, "basic.auth.user.info": "ops:ops-pw"})
    assert ops.set_compatibility(level="FULL") == {"compatibility": "FULL"}
    assert ops.get_versions("alice-orders") == [1]
    ops.set_compatibility(level="BACKWARD")
    # An ACL granted in the cluster reaches the registry within its refresh interval.
    for f in admin.create_acls([topic_acl("_schemas:alice-orders", AclOperation.WRITE, "User:bob")]).values():
        f.result(15)
    deadline = time.monotonic() + 20
    while True:
        try:
            bob.register_schema("alice-orders", Schema('"long"', "AVRO"))
            break
        except SchemaRegistryError as e:
            assert e.http_status_code == 403 and time.monotonic() < deadline
            time.sleep(0.3)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("sr-pki"))


def test_https_listener_and_jaas_users(start_registry: Callable[..., RegistryProcess], pki: Pki, tmp_path: Path) -> None:
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_carol="carol-pw" '
            'user_dave="dave-pw";')
    reg = start_registry({"schema.registry.ssl.keystore.location": pki.keystore("broker"),
                          "schema.registry.authentication.method": "BASIC",
                          "schema.registry.basic.auth.jaas.config": jaas}, listeners="https://127.0.0.1:0")
    assert reg.url.startswith("https://")
    client = SchemaRegistryClient({"url": reg.url, "ssl.ca.location": pki.ca, "basic.auth.user.info": "carol:carol-pw"})
    deadline = time.monotonic() + 30
    while True:
        try:
            sid = client.register_schema("tls-subject", INT)
            break
        except SchemaRegistryError as e:
            assert e.error_code == 50004 and time.monotonic() < deadline, e
            time.sleep(0.2)
    assert client.get_schema(sid).schema_str == '"int"'
    wrong = SchemaRegistryClient({"url": reg.url, "ssl.ca.location": pki.ca, "basic.auth.user.info": "carol:nope"})
    with pytest.raises(SchemaRegistryError) as e:
        wrong.get_subjects()
    assert e.value.http_status_code == 401
    untrusted = SchemaRegistryClient({"url": reg.url, "basic.auth.user.info": "carol:carol-pw"})
    with pytest.raises(Exception, match="(?i)certificate"):
        untrusted.get_subjects()
