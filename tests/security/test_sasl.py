"""SASL end to end: one broker with a SASL_PLAINTEXT listener (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER),
a PLAINTEXT one and a SASL listener with connections.max.reauth.ms; real clients, real sockets.

SCRAM users are created through AlterUserScramCredentials (confluent-kafka's AdminClient and
`gregor users`) before they log in; PLAIN users come from the listener's JAAS config."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from gregor.protocol.errors import ErrorCode
from gregor.security.sasl.client import sasl_client
from tests.broker_process import BrokerProcess
from tests.security.certs import Pki, make_pki
from tests.wire import WireClient

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
OAUTH_JAAS = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
              'unsecuredValidatorAllowableClockSkewMs="1000";')
REAUTH_MS = 2000
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
USERS = {"PLAIN": ("alice", "alice-secret"), "SCRAM-SHA-256": ("scram256", "s256-secret"),
         "SCRAM-SHA-512": ("scram512", "s512-secret")}
TIMEOUT_S = 30


def _start(data_dir: Path, pki: Pki) -> BrokerProcess:
    return BrokerProcess(data_dir, {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0,REAUTH://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT,REAUTH:SASL_PLAINTEXT,"
                                          "SASL_SSL:SASL_SSL",
        "ssl.keystore.location": pki.keystore("broker"),
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
        "sasl.jaas.config": PLAIN_JAAS,  # the REAUTH listener finds its PLAIN users here (the fallback)
        "listener.name.reauth.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,OAUTHBEARER",
        # The OAUTHBEARER check is configurable: here a test factory that accepts one fixed token.
        "listener.name.reauth.oauthbearer.sasl.server.callback.handler.class":
            "tests.unit.security.test_sasl_mechanisms:custom_validator",
        "listener.name.reauth.connections.max.reauth.ms": str(REAUTH_MS),
    }).start()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    b = _start(tmp_path_factory.mktemp("sasl-broker"), pki)
    admin = AdminClient({"bootstrap.servers": addr(b, "PLAINTEXT")})
    ups = [UserScramCredentialUpsertion(user, ScramCredentialInfo(getattr(ScramMechanism, mech.replace("-", "_")), 8192),
                                        password.encode())
           for mech, (user, password) in USERS.items() if mech != "PLAIN"]
    for fut in admin.alter_user_scram_credentials(ups, request_timeout=TIMEOUT_S).values():
        fut.result()
    yield b
    b.kill()


def addr(b: BrokerProcess, listener: str = "SASL_PLAINTEXT") -> str:
    return f"127.0.0.1:{b.ports[listener]}"


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def rdkafka_conf(b: BrokerProcess, mech: str, user: str, password: str, listener: str = "SASL_PLAINTEXT",
                 ca: str | None = None) -> dict[str, Any]:
    conf = {"bootstrap.servers": addr(b, listener), "security.protocol": "SASL_SSL" if ca else "SASL_PLAINTEXT",
            "sasl.mechanism": mech, "sasl.username": user, "sasl.password": password}
    if ca:
        conf["ssl.ca.location"] = ca
    return conf


# --- produce and consume with each client and mechanism -------------------------------------

def confluent_roundtrip(conf: dict[str, Any], topic: str, n: int = 20) -> list[bytes]:
    p = Producer({**conf, "acks": "all"})
    for i in range(n):
        p.produce(topic, value=f"m{i}".encode())
    assert p.flush(TIMEOUT_S) == 0
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    return got


def kafka_python_roundtrip(b: BrokerProcess, mech: str, user: str, password: str, topic: str, n: int = 20,
                           ca: str | None = None) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    sec: dict[str, Any] = {"bootstrap_servers": addr(b, "SASL_SSL" if ca else "SASL_PLAINTEXT"),
                           "security_protocol": "SASL_SSL" if ca else "SASL_PLAINTEXT", "sasl_mechanism": mech,
                           "sasl_plain_username": user, "sasl_plain_password": password}
    if ca:
        sec["ssl_cafile"] = ca
    p = KafkaProducer(acks="all", **sec)
    for i in range(n):
        p.send(topic, f"m{i}".encode())
    p.flush(TIMEOUT_S)
    p.close()
    c = KafkaConsumer(group_id=None, enable_auto_commit=False, auto_offset_reset="earliest", **sec)
    c.assign([KTP(topic, 0)])
    c.seek_to_beginning()
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < n and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=500).values():
            got += [r.value for r in records]
    c.close()
    return got


async def aiokafka_roundtrip(b: BrokerProcess, mech: str, user: str, password: str, topic: str, n: int = 20,
                             ca: str | None = None) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATP
    from aiokafka.helpers import create_ssl_context

    sec: dict[str, Any] = {"bootstrap_servers": addr(b, "SASL_SSL" if ca else "SASL_PLAINTEXT"),
                           "security_protocol": "SASL_SSL" if ca else "SASL_PLAINTEXT", "sasl_mechanism": mech,
                           "sasl_plain_username": user, "sasl_plain_password": password}
    if ca:
        sec["ssl_context"] = create_ssl_context(cafile=ca)
    p = AIOKafkaProducer(acks="all", **sec)
    await p.start()
    try:
        for i in range(n):
            await p.send_and_wait(topic, f"m{i}".encode())
    finally:
        await p.stop()
    c = AIOKafkaConsumer(group_id=None, enable_auto_commit=False, auto_offset_reset="earliest", **sec)
    await c.start()
    got: list[bytes] = []
    try:
        c.assign([ATP(topic, 0)])
        await c.seek_to_beginning(ATP(topic, 0))
        async with asyncio.timeout(TIMEOUT_S):
            while len(got) < n:
                for records in (await c.getmany(timeout_ms=500)).values():
                    got += [r.value for r in records]
    finally:
        await c.stop()
    return got


def kcat_args(b: BrokerProcess, mech: str, user: str, password: str, ca: str | None = None) -> list[str]:
    tls = ["-X", f"ssl.ca.location={ca}"] if ca else []
    return ["kcat", "-b", addr(b, "SASL_SSL" if ca else "SASL_PLAINTEXT"),
            "-X", f"security.protocol={'SASL_SSL' if ca else 'SASL_PLAINTEXT'}", "-X", f"sasl.mechanism={mech}",
            "-X", f"sasl.username={user}", "-X", f"sasl.password={password}", *tls]


def kcat_roundtrip(b: BrokerProcess, mech: str, user: str, password: str, topic: str, n: int = 20,
                   ca: str | None = None) -> list[bytes]:
    base = kcat_args(b, mech, user, password, ca)
    lines = "".join(f"m{i}\n" for i in range(n)).encode()
    r = subprocess.run([*base, "-P", "-t", topic, "-p", "0"], input=lines, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    r = subprocess.run([*base, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q"], capture_output=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout.splitlines()


CLIENTS = ["confluent-kafka", "kafka-python", "aiokafka", "kcat"]


def roundtrip(b: BrokerProcess, client: str, mech: str, ca: str | None = None) -> None:
    if client == "kcat" and shutil.which("kcat") is None:
        pytest.skip("kcat is installed by scripts/install.sh")
    user, password = USERS[mech]
    topic = topic_name(f"{client}-{mech}")
    if client == "confluent-kafka":
        got = confluent_roundtrip(rdkafka_conf(b, mech, user, password, "SASL_SSL" if ca else "SASL_PLAINTEXT", ca),
                                  topic)
    elif client == "kafka-python":
        got = kafka_python_roundtrip(b, mech, user, password, topic, ca=ca)
    elif client == "aiokafka":
        got = asyncio.run(aiokafka_roundtrip(b, mech, user, password, topic, ca=ca))
    else:
        got = kcat_roundtrip(b, mech, user, password, topic, ca=ca)
    assert got == [f"m{i}".encode() for i in range(20)]


@pytest.mark.parametrize("mech", MECHANISMS)
@pytest.mark.parametrize("client", CLIENTS)
def test_produce_and_consume(sasl_broker: BrokerProcess, client: str, mech: str) -> None:
    roundtrip(sasl_broker, client, mech)


@pytest.mark.parametrize("mech", MECHANISMS)
@pytest.mark.parametrize("client", CLIENTS)
def test_sasl_ssl_produce_and_consume(sasl_broker: BrokerProcess, pki: Pki, client: str, mech: str) -> None:
    roundtrip(sasl_broker, client, mech, ca=pki.ca)


def refused(conf: dict[str, Any], topic: str) -> list[KafkaError]:
    """Produce with `conf` until the client reports the refused login (error_cb); its authentication errors."""
    errors: list[KafkaError] = []
    p = Producer({**conf, "error_cb": errors.append, "message.timeout.ms": 5000})
    p.produce(topic, b"never")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        p.poll(0.1)
    p.purge()
    p.flush(0)
    return [e for e in errors if e.code() == KafkaError._AUTHENTICATION]


def test_sasl_ssl_wrong_password(sasl_broker: BrokerProcess, pki: Pki) -> None:
    auth = refused(rdkafka_conf(sasl_broker, "SCRAM-SHA-512", "scram512", "wrong", "SASL_SSL", pki.ca),
                   topic_name("refused-ssl"))
    assert auth and EXPECTED_MESSAGE["SCRAM-SHA-512"] in auth[0].str(), auth
    sasl_broker.wait_for_log("(listener SASL_SSL, SASL mechanism SCRAM-SHA-512)")


# --- refused logins ------------------------------------------------------------------------

BAD_LOGINS = [("PLAIN", "alice", "wrong"), ("PLAIN", "nobody", "x"), ("SCRAM-SHA-256", "scram256", "wrong"),
              ("SCRAM-SHA-512", "nobody", "x")]
EXPECTED_MESSAGE = {
    "PLAIN": "Authentication failed: Invalid username or password",
    "SCRAM-SHA-256": "Authentication failed during authentication due to invalid credentials with SASL mechanism "
                     "SCRAM-SHA-256",
    "SCRAM-SHA-512": "Authentication failed during authentication due to invalid credentials with SASL mechanism "
                     "SCRAM-SHA-512",
}


@pytest.mark.parametrize("mech,user,password", BAD_LOGINS)
def test_confluent_bad_login_fails_clearly(sasl_broker: BrokerProcess, mech: str, user: str, password: str) -> None:
    topic = topic_name("refused")
    auth = refused(rdkafka_conf(sasl_broker, mech, user, password), topic)
    assert auth
    assert EXPECTED_MESSAGE[mech] in auth[0].str()
    line = sasl_broker.wait_for_log(f"SASL mechanism {mech}): ")
    assert "Failed authentication with 127.0.0.1:" in line
    # Nothing was served: the topic was not even auto-created.
    md = AdminClient({"bootstrap.servers": addr(sasl_broker, "PLAINTEXT")}).list_topics(timeout=TIMEOUT_S)
    assert topic not in md.topics


def test_kafka_python_bad_login(sasl_broker: BrokerProcess, caplog: pytest.LogCaptureFixture) -> None:
    """kafka-python gives up bootstrapping; what it logs for each attempt is the broker's reason."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as KPError

    with pytest.raises(KPError):
        KafkaProducer(bootstrap_servers=addr(sasl_broker), security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                      sasl_plain_username="alice", sasl_plain_password="wrong", request_timeout_ms=3000,
                      bootstrap_timeout_ms=2000)
    assert "SaslAuthenticationFailedError: Authentication failed: Invalid username or password" in caplog.text


def test_aiokafka_bad_login(sasl_broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError as AKError

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=addr(sasl_broker), security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="scram256",
                             sasl_plain_password="wrong", request_timeout_ms=5000)
        try:
            await p.start()
        finally:
            await p.stop()

    with pytest.raises(AKError) as e:
        asyncio.run(run())
    assert "SCRAM-SHA-256" in str(e.value) or "Authentication" in str(e.value) or "Unable to bootstrap" in str(e.value)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by scripts/install.sh")
def test_kcat_bad_login(sasl_broker: BrokerProcess) -> None:
    r = subprocess.run([*kcat_args(sasl_broker, "SCRAM-SHA-512", "scram512", "wrong"), "-L", "-m", "2"],
                       capture_output=True, timeout=60)
    assert r.returncode != 0
    assert b"SCRAM-SHA-512" in r.stderr and b"uthentication" in r.stderr


# --- the wire: what may come before authentication ----------------------------------------

def handshake(c: WireClient, mech: str, version: int = 1) -> Any:
    return c.request(17, version, {"mechanism": mech})


def authenticate(c: WireClient, mech: str, user: str, password: str, version: int = 2) -> Any:
    client = sasl_client(mech, user, password)
    token: bytes | None = client.first_message()
    resp = None
    while token is not None:
        resp = c.request(36, version, {"auth_bytes": token})
        if resp.error_code != ErrorCode.NONE:
            return resp
        token = client.evaluate(bytes(resp.auth_bytes))
    assert client.complete
    return resp


def test_only_api_versions_and_sasl_before_authentication(sasl_broker: BrokerProcess) -> None:
    c = WireClient(addr(sasl_broker))
    assert c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code == 0
    c.send(3, 12, {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    assert c.closed_by_peer()
    c.close()
    # The same Metadata after a successful SCRAM login is served.
    c = WireClient(addr(sasl_broker))
    assert handshake(c, "SCRAM-SHA-256").error_code == 0
    resp = authenticate(c, "SCRAM-SHA-256", *USERS["SCRAM-SHA-256"])
    assert resp.error_code == 0 and resp.session_lifetime_ms == 0
    md = c.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                           "include_topic_authorized_operations": False})
    assert md.brokers
    c.close()


def test_handshake_errors(sasl_broker: BrokerProcess) -> None:
    c = WireClient(addr(sasl_broker))
    resp = handshake(c, "GSSAPI")
    assert resp.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert resp.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
    assert c.closed_by_peer()
    c = WireClient(addr(sasl_broker))
    resp = c.request(36, 1, {"auth_bytes": b"\x00alice\x00alice-secret"})
    assert resp.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert c.closed_by_peer()
    # On a listener without SASL the handshake is simply refused.
    c = WireClient(addr(sasl_broker, "PLAINTEXT"))
    assert handshake(c, "PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE
    c.close()


def test_failed_authentication_is_delayed(sasl_broker: BrokerProcess) -> None:
    c = WireClient(addr(sasl_broker))
    assert handshake(c, "PLAIN", version=1).error_code == 0
    t0 = time.monotonic()
    resp = c.request(36, 0, {"auth_bytes": b"\x00alice\x00nope"})
    elapsed = time.monotonic() - t0
    assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert resp.error_message == "Authentication failed: Invalid username or password"
    assert elapsed >= 0.09  # connection.failed.authentication.delay.ms, Kafka's default 100
    assert c.closed_by_peer()


# --- OAUTHBEARER --------------------------------------------------------------------------

def test_oauthbearer_unsecured_jws(sasl_broker: BrokerProcess) -> None:
    conf = {"bootstrap.servers": addr(sasl_broker), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
            "sasl.oauthbearer.config": "principal=alice"}
    topic = topic_name("oauth")
    assert confluent_roundtrip(conf, topic) == [f"m{i}".encode() for i in range(20)]


def _jws(claims: dict[str, Any], alg: str = "none", signature: str = "") -> str:
    def enc(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()
    return f"{enc({'alg': alg})}.{enc(claims)}.{signature}"


@pytest.mark.parametrize("case", ["expired", "signed"])
def test_oauthbearer_bad_tokens(sasl_broker: BrokerProcess, case: str) -> None:
    now = time.time()
    if case == "expired":
        token = _jws({"sub": "alice", "iat": now - 120, "exp": now - 60})
    else:
        token = _jws({"sub": "alice", "iat": now, "exp": now + 600}, alg="HS256", signature="c2lnbmF0dXJl")
    topic = topic_name("oauth-bad")

    def oauth_cb(_config: str) -> tuple[str, float]:
        return token, now + 600  # the client believes the token is good; the broker decides

    auth = refused({"bootstrap.servers": addr(sasl_broker), "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb}, topic)
    assert auth and "invalid_token" in auth[0].str(), auth
    sasl_broker.wait_for_log("SASL mechanism OAUTHBEARER): {\"status\":\"invalid_token\"}")
    detail = "Expiration Time" if case == "expired" else "empty signature"
    sasl_broker.wait_for_log(detail)


def test_oauthbearer_configured_validator(sasl_broker: BrokerProcess) -> None:
    """The REAUTH listener validates OAUTHBEARER tokens with a configured factory (the test's own)."""
    def oauth_cb(_config: str) -> tuple[str, float]:
        return "let-me-in", time.time() + 600

    conf = {"bootstrap.servers": addr(sasl_broker, "REAUTH"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb}
    assert confluent_roundtrip(conf, topic_name("oauth-custom"), n=3) == [b"m0", b"m1", b"m2"]


# --- KIP-368 re-authentication ------------------------------------------------------------

def test_librdkafka_reauthenticates_and_keeps_consuming(sasl_broker: BrokerProcess) -> None:
    """Over three session lifetimes a producer and a consumer keep working on their connections, re-authenticating."""
    topic = topic_name("reauth")
    conf = rdkafka_conf(sasl_broker, "SCRAM-SHA-256", *USERS["SCRAM-SHA-256"], listener="REAUTH")
    p = Producer(conf)
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    sent, got = 0, 0
    end = time.monotonic() + 3 * REAUTH_MS / 1000 + 1
    while time.monotonic() < end:
        p.produce(topic, f"m{sent}".encode())
        sent += 1
        p.poll(0)
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got += 1
    p.flush(TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    while got < sent and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got += 1
    c.close()
    assert got == sent
    # Its connections outlived several session lifetimes, so they re-authenticated: an expired session's
    # next request would have closed them. (An idle connection may expire unused: that is only logged.)
    assert "before SASL authentication on listener REAUTH" not in sasl_broker.log_text()


def test_expired_session_closes_the_connection(sasl_broker: BrokerProcess) -> None:
    c = WireClient(addr(sasl_broker, "REAUTH"))
    assert handshake(c, "PLAIN").error_code == 0
    resp = authenticate(c, "PLAIN", "alice", "alice-secret", version=1)
    assert resp.session_lifetime_ms == REAUTH_MS
    md_req = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    assert c.request(3, 12, md_req).brokers
    # Re-authenticate on the same connection (same principal): the session is extended.
    assert handshake(c, "PLAIN").error_code == 0
    assert authenticate(c, "PLAIN", "alice", "alice-secret", version=1).error_code == 0
    # Another principal may not take over the connection.
    c2 = WireClient(addr(sasl_broker, "REAUTH"))
    assert handshake(c2, "PLAIN").error_code == 0
    assert authenticate(c2, "PLAIN", "alice", "alice-secret", version=1).error_code == 0
    assert handshake(c2, "PLAIN").error_code == 0
    resp = authenticate(c2, "PLAIN", "admin", "admin-secret", version=1)
    assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and "Cannot change principals" in resp.error_message
    assert c2.closed_by_peer()
    # Past the lifetime without re-authentication, the next request closes the connection.
    time.sleep(REAUTH_MS / 1000 + 0.3)
    c.send(3, 12, md_req)
    assert c.closed_by_peer()
    sasl_broker.wait_for_log("expired without re-authentication")


# --- SCRAM credential administration ------------------------------------------------------

def test_describe_and_alter_errors(sasl_broker: BrokerProcess) -> None:
    c = WireClient(addr(sasl_broker, "PLAINTEXT"))
    d = c.request(50, 0, {"users": [{"name": "scram256"}, {"name": "ghost"}, {"name": "dup"}, {"name": "dup"}]})
    by_user = {r.user: r for r in d.results}
    assert [(i.mechanism, i.iterations) for i in by_user["scram256"].credential_infos] == [(1, 8192)]
    assert by_user["ghost"].error_code == ErrorCode.RESOURCE_NOT_FOUND
    assert by_user["dup"].error_code == ErrorCode.DUPLICATE_RESOURCE
    alter = c.request(51, 0, {
        "deletions": [{"name": "ghost", "mechanism": 1}, {"name": "twice", "mechanism": 2}],
        "upsertions": [
            {"name": "weak", "mechanism": 1, "iterations": 100, "salt": b"s", "salted_password": b"p" * 32},
            {"name": "strong", "mechanism": 2, "iterations": 20000, "salt": b"s", "salted_password": b"p" * 64},
            {"name": "unknown-mech", "mechanism": 7, "iterations": 4096, "salt": b"s", "salted_password": b"p"},
            {"name": "twice", "mechanism": 2, "iterations": 4096, "salt": b"s", "salted_password": b"p" * 64},
            {"name": "", "mechanism": 1, "iterations": 4096, "salt": b"s", "salted_password": b"p" * 32},
        ]})
    codes = {r.user: (r.error_code, r.error_message) for r in alter.results}
    assert codes["ghost"] == (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
    assert codes["weak"] == (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    assert codes["strong"] == (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    assert codes["unknown-mech"] == (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    assert codes["twice"][0] == ErrorCode.DUPLICATE_RESOURCE
    assert codes[""][0] == ErrorCode.UNACCEPTABLE_CREDENTIAL
    c.close()


def gregor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gregor", *args], capture_output=True, text=True, timeout=60)


def test_gregor_users_cli(sasl_broker: BrokerProcess, tmp_path: Path) -> None:
    """`gregor users` over the SASL listener itself, with a Kafka-style --command-config."""
    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
                     'username="admin" password="admin-secret";\n')
    bs = ["--bootstrap-server", addr(sasl_broker), "--command-config", str(props)]
    r = gregor("users", *bs, "--alter", "--entity-name", "carol", "--add-config",
               "SCRAM-SHA-256=[iterations=8192,password=carol-secret],SCRAM-SHA-512=[password=carol-secret]")
    assert r.returncode == 0, r.stderr
    assert "Completed updating config for user carol." in r.stdout
    r = gregor("users", *bs, "--describe", "--entity-name", "carol")
    assert r.stdout.strip() == ("SCRAM credential configs for user-principal 'carol' are "
                                "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096"), r.stderr
    assert confluent_roundtrip(rdkafka_conf(sasl_broker, "SCRAM-SHA-512", "carol", "carol-secret"),
                               topic_name("carol"), n=3) == [b"m0", b"m1", b"m2"]
    r = gregor("users", *bs, "--alter", "--entity-name", "carol", "--delete-config", "SCRAM-SHA-512")
    assert r.returncode == 0, r.stderr
    r = gregor("users", *bs, "--describe")
    assert "user-principal 'carol' are SCRAM-SHA-256=iterations=8192\n" in r.stdout
    assert "user-principal 'scram512' are SCRAM-SHA-512=iterations=8192" in r.stdout
    r = gregor("users", *bs, "--alter", "--entity-name", "carol", "--delete-config", "SCRAM-SHA-512")
    assert r.returncode == 1 and "does not exist" in r.stderr
    r = gregor("users", *bs, "--alter", "--entity-name", "carol", "--add-config", "SCRAM-SHA-256=[iterations=10]")
    assert r.returncode == 2 and "password is required" in r.stderr
    # A wrong admin password in the command config is a one-line authentication error.
    props.write_text(props.read_text().replace('password="admin-secret"', 'password="nope"'))
    r = gregor("users", *bs, "--describe", "--request-timeout-ms", "5000")
    assert r.returncode == 1 and "Authentication failed" in r.stderr, r.stderr


# --- last: credentials survive a restart --------------------------------------------------

def test_credentials_survive_restart(sasl_broker: BrokerProcess) -> None:
    sasl_broker.stop()
    sasl_broker.log_lines.clear()
    sasl_broker.start()
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        got = confluent_roundtrip(rdkafka_conf(sasl_broker, mech, *USERS[mech]), topic_name(f"restart-{mech}"), n=3)
        assert got == [b"m0", b"m1", b"m2"]
