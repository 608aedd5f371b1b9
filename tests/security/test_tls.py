"""TLS listeners with real clients: confluent-kafka, kafka-python, aiokafka and kcat over SSL, with and
without client certificates; refused handshakes (untrusted, expired, missing certificate, TLS 1.0) fail on
the client and leave a broker log line; certificates reload without a restart."""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import ssl
import struct
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer

from gregor.security.tls import PrincipalMapper, distinguished_name
from tests.broker_process import BrokerProcess
from tests.security.certs import Pki, make_pki
from tests.server.test_metrics import metrics_url, scrape, value

N = 200
FAILED_AUTH = "kafka_server_socketserver_failedauthentication_total"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    """PLAINTEXT; SSL (client certificates requested); MTLS, an SSL listener that requires one."""
    b = BrokerProcess(tmp_path_factory.mktemp("tls-broker"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        "ssl.keystore.location": pki.keystore("broker"),
        "ssl.truststore.location": pki.ca,
        "ssl.client.auth": "requested",
        "listener.name.mtls.ssl.client.auth": "required",
        "num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        "metrics.port": "0",  # failed handshakes count in failed-authentication-total
    }).start()
    yield b
    b.kill()


def _rdkafka_conf(b: BrokerProcess, pki: Pki, listener: str, who: str | None, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": b.bootstrap_of(listener), "security.protocol": "SSL",
                            "ssl.ca.location": pki.ca, **extra}
    if who is not None:
        conf.update({"ssl.certificate.location": pki.cert(who), "ssl.key.location": pki.key(who)})
    return conf


def _values(n: int = N) -> list[bytes]:
    return [f"tls-{i}-".encode() + b"x" * 1000 for i in range(n)]


def _consume_confluent(conf: dict[str, Any], topic: str, n: int) -> list[bytes]:
    c = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


@pytest.mark.parametrize(("listener", "who"), [("SSL", None), ("MTLS", "alice")])
def test_confluent_kafka_over_tls(tls_broker: BrokerProcess, pki: Pki, listener: str, who: str | None) -> None:
    conf = _rdkafka_conf(tls_broker, pki, listener, who)
    topic = f"tls-ck-{listener.lower()}"
    p = Producer({**conf, "enable.idempotence": True})
    for v in _values():
        p.produce(topic, v)
    assert p.flush(30) == 0
    assert _consume_confluent(conf, topic, N) == _values()
    # Metadata names the brokers by the listener the client came through.
    md = AdminClient(conf).list_topics(timeout=10)
    assert {(b.host, b.port) for b in md.brokers.values()} == {("127.0.0.1", tls_broker.ports[listener])}


@pytest.mark.parametrize(("listener", "who"), [("SSL", None), ("MTLS", "bob")])
def test_kafka_python_over_tls(tls_broker: BrokerProcess, pki: Pki, listener: str, who: str | None) -> None:
    topic = f"tls-kp-{listener.lower()}"
    ssl_args: dict[str, Any] = {"security_protocol": "SSL", "ssl_cafile": pki.ca, "ssl_check_hostname": True}
    if who is not None:
        ssl_args.update({"ssl_certfile": pki.cert(who), "ssl_keyfile": pki.key(who)})
    bootstrap = tls_broker.bootstrap_of(listener)
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **ssl_args)
    for v in _values():
        p.send(topic, v)
    p.flush(30)
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=10000,
                      group_id=None, **ssl_args)
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == N:
            break
    c.close()
    assert got == _values()


@pytest.mark.parametrize(("listener", "who"), [("SSL", None), ("MTLS", "alice")])
def test_aiokafka_over_tls(tls_broker: BrokerProcess, pki: Pki, listener: str, who: str | None) -> None:
    topic = f"tls-aio-{listener.lower()}"
    bootstrap = tls_broker.bootstrap_of(listener)

    async def run() -> list[bytes]:
        ctx = create_ssl_context(cafile=pki.ca, certfile=pki.cert(who) if who else None,
                                 keyfile=pki.key(who) if who else None)
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, security_protocol="SSL", ssl_context=ctx, acks="all")
        await p.start()
        try:
            for v in _values():
                await p.send(topic, v)
            await p.flush()
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, security_protocol="SSL", ssl_context=ctx,
                             auto_offset_reset="earliest", group_id=None)
        await c.start()
        got: list[bytes] = []
        try:
            while len(got) < N:
                batch = await asyncio.wait_for(c.getmany(timeout_ms=1000), 30)
                for msgs in batch.values():
                    got.extend(m.value for m in msgs)
        finally:
            await c.stop()
        return got

    assert asyncio.run(run()) == _values()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by scripts/install.sh")
@pytest.mark.parametrize(("listener", "who"), [("SSL", None), ("MTLS", "bob")])
def test_kcat_over_tls(tls_broker: BrokerProcess, pki: Pki, listener: str, who: str | None) -> None:
    topic = f"tls-kcat-{listener.lower()}"
    args = ["-b", tls_broker.bootstrap_of(listener), "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.ca}"]
    if who is not None:
        args += ["-X", f"ssl.certificate.location={pki.cert(who)}", "-X", f"ssl.key.location={pki.key(who)}"]
    lines = b"".join(f"kcat-{i}\n".encode() for i in range(N))
    subprocess.run(["kcat", *args, "-P", "-t", topic], input=lines, check=True, timeout=60, capture_output=True)
    out = subprocess.run(["kcat", *args, "-C", "-t", topic, "-o", "beginning", "-e", "-q"], check=True, timeout=60,
                         capture_output=True).stdout
    assert out.decode().splitlines() == [f"kcat-{i}" for i in range(N)]


def _refused(conf: dict[str, Any]) -> str:
    """What a librdkafka client reports when the broker refuses its handshake (nothing is served)."""
    errors: list[str] = []
    delivered: list[Any] = []
    p = Producer({**conf, "error_cb": lambda e: errors.append(str(e)), "message.timeout.ms": 3000})
    p.produce("never-served", b"x", on_delivery=lambda err, msg: delivered.append(err))
    p.flush(6)
    assert len(delivered) == 1 and delivered[0] is not None, "the message was delivered through a refused handshake"
    return " | ".join(errors)


@pytest.mark.parametrize(("who", "client_sees", "broker_logs"), [
    ("mallory", "alert unknown ca", "certificate verify failed"),  # signed by a CA the broker does not trust
    ("expired", "certificate expired", "certificate has expired"),
    (None, "alert certificate required", "peer did not return a certificate"),  # MTLS requires one
])
def test_refused_client_certificates(tls_broker: BrokerProcess, pki: Pki, who: str | None, client_sees: str,
                                     broker_logs: str) -> None:
    since = len(tls_broker.log_lines)
    url = metrics_url(tls_broker)
    failed_before = value(scrape(url), FAILED_AUTH, listener="MTLS")
    errors = _refused(_rdkafka_conf(tls_broker, pki, "MTLS", who))
    assert client_sees in errors.lower(), errors
    # With the reason, in any case: it tells this test's refusal from an earlier test's (a client keeps
    # retrying a refused handshake, and those refusals may be logged after `since`).
    line = tls_broker.wait_for_log(re.compile(rf"TLS handshake with 127\.0\.0\.1:.*(?i:{re.escape(broker_logs)})"),
                                   since=since)
    assert "on listener MTLS failed" in line and broker_logs in line.lower(), line
    assert "before any" not in line
    refused = sum(1 for ln in tls_broker.log_lines[since:] if "TLS handshake with 127.0.0.1:" in ln)
    # Every refused handshake counts (the client retried while _refused waited); none on the other listeners.
    samples = scrape(url)
    assert value(samples, FAILED_AUTH, listener="MTLS") - failed_before >= refused >= 1
    assert value(samples, FAILED_AUTH, listener="PLAINTEXT") == 0


def test_client_refuses_a_broker_it_does_not_trust(tls_broker: BrokerProcess, pki: Pki) -> None:
    errors = _refused({**_rdkafka_conf(tls_broker, pki, "SSL", None), "ssl.ca.location": pki.path("evil-ca.crt")})
    assert "certificate verify failed" in errors.lower(), errors


def test_tls_1_0_client_is_refused_and_logged(tls_broker: BrokerProcess, pki: Pki) -> None:
    since = len(tls_broker.log_lines)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(pki.ca)
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # so the client itself may still speak TLS 1.0
    ctx.minimum_version = ssl.TLSVersion.TLSv1
    ctx.maximum_version = ssl.TLSVersion.TLSv1
    with socket.create_connection(("127.0.0.1", tls_broker.ports["SSL"]), timeout=10) as raw:
        port = raw.getsockname()[1]
        with pytest.raises(ssl.SSLError) as e:
            ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    assert "version" in str(e.value).lower() or "protocol" in str(e.value).lower(), e.value
    # This connection's line (by its port): an earlier test's refusal may be logged after `since`.
    line = tls_broker.wait_for_log(f"TLS handshake with 127.0.0.1:{port} ", since=since)
    assert "version" in line.lower() or "protocol" in line.lower(), line


def test_plaintext_bytes_on_a_tls_listener_close_only_that_connection(tls_broker: BrokerProcess, pki: Pki) -> None:
    since = len(tls_broker.log_lines)
    body = struct.pack(">hhih", 18, 0, 7, -1)
    with socket.create_connection(("127.0.0.1", tls_broker.ports["SSL"]), timeout=10) as s:
        port = s.getsockname()[1]
        s.sendall(struct.pack(">i", len(body)) + body)
        s.settimeout(5)
        try:
            data = s.recv(100)
        except ConnectionResetError:
            data = b""
        assert not data or data[:1] == b"\x15"  # nothing but a TLS alert
    tls_broker.wait_for_log(f"TLS handshake with 127.0.0.1:{port} ", since=since)
    conf = _rdkafka_conf(tls_broker, pki, "SSL", None)
    assert "tls-still" not in AdminClient(conf).list_topics(timeout=10).topics  # the listener still serves


def test_distinguished_names_and_mapping_rules() -> None:
    cert = {"subject": ((("organizationName", "gregor"),), (("organizationalUnitName", "eng"),),
                        (("commonName", "alice"),))}
    dn = distinguished_name(cert)
    assert dn == "CN=alice,OU=eng,O=gregor"
    assert PrincipalMapper.parse("DEFAULT").name(dn) == dn
    rules = PrincipalMapper.parse("RULE:^CN=(.*?),OU=ops,(.*)$/$1-ops/, RULE:^CN=(.*?),OU=(.*?),O=(.*)$/$1@$2/U, DEFAULT")
    assert rules.name(dn) == "ALICE@ENG"
    assert rules.name("CN=bob,OU=ops,O=gregor") == "bob-ops"
    assert rules.name("CN=x") == "CN=x"
    with pytest.raises(ValueError):
        PrincipalMapper.parse("RULE:nope")


def test_encrypted_and_inline_keys_and_reload_without_restart(
        start_broker: Callable[..., BrokerProcess], pki: Pki, tmp_path: Path) -> None:
    keystore = tmp_path / "keystore.pem"
    shutil.copy(pki.keystore("broker-enc"), keystore)
    b = start_broker({"listeners": "SSL://127.0.0.1:0,INLINE://127.0.0.1:0",
                      "listener.security.protocol.map": "SSL:SSL,INLINE:SSL",
                      "ssl.keystore.location": str(keystore), "ssl.key.password": "keypass",
                      "listener.name.inline.ssl.keystore.location": "",
                      "listener.name.inline.ssl.keystore.key": Path(pki.key("broker")).read_text(),
                      "listener.name.inline.ssl.keystore.certificate.chain": Path(pki.cert("broker")).read_text(),
                      "listener.name.inline.ssl.key.password": "",
                      "gregor.ssl.reload.check.interval.ms": "200"})
    for listener in ("SSL", "INLINE"):
        md = AdminClient(_rdkafka_conf(b, pki, listener, None)).list_topics(timeout=10)
        assert md.brokers
    # The key store file is replaced by one of another CA: new connections get it, without a restart.
    evil = {**_rdkafka_conf(b, pki, "SSL", None), "ssl.ca.location": pki.path("evil-ca.crt")}
    with pytest.raises(KafkaException):
        AdminClient({**evil, "socket.timeout.ms": 2000}).list_topics(timeout=3)
    since = len(b.log_lines)
    shutil.copy(pki.keystore("broker-evil"), keystore)
    b.wait_for_log("TLS key store and trust store of listener SSL reloaded", since=since)
    assert AdminClient(evil).list_topics(timeout=10).brokers
    # A key store that does not load keeps the previous one serving.
    since = len(b.log_lines)
    keystore.write_text("not a pem file\n")
    b.wait_for_log("TLS reload of listener SSL failed, keeping the previous certificates", since=since)
    assert AdminClient(evil).list_topics(timeout=10).brokers


def test_sasl_ssl_listeners_ignore_the_broker_wide_client_auth(tmp_path: Path, pki: Pki) -> None:
    """KIP-684: the broker-wide ssl.client.auth=required binds SSL listeners; a SASL_SSL listener takes only
    its own listener.name.<l>.ssl.client.auth (its clients authenticate with SASL)."""
    from gregor.config import BrokerConfig

    c = BrokerConfig({"listeners": "SSL://:0,SASL_SSL://:0,STRICT://:0",
                      "listener.security.protocol.map": "SSL:SSL,SASL_SSL:SASL_SSL,STRICT:SASL_SSL",
                      "ssl.client.auth": "required", "listener.name.strict.ssl.client.auth": "required"})
    assert c.listener_get("SSL", "ssl.client.auth") == "required"
    assert c.listener_get("SASL_SSL", "ssl.client.auth") == "none"
    assert c.listener_get("STRICT", "ssl.client.auth") == "required"
