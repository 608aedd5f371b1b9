"""Dynamic password configs encrypted in the metadata store with Kafka's PasswordEncoder scheme
(password.encoder.secret): refused without a secret; on ZooKeeper the znode holds Kafka's encoded fields and
never the password; a restart with password.encoder.old.secret re-encrypts them under the new secret and the
TLS listener still opens its encrypted key with the decoded password."""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from gregor.security.password_encoder import GCM, PasswordDecodeError, PasswordEncoder
from tests.broker_process import BrokerProcess
from tests.security.certs import _signed, make_pki
from tests.wire import WireClient

StartBroker = Callable[..., BrokerProcess]
KEY_PASSWORD = "listener.name.ssl.ssl.key.password"
KEYSTORE = "listener.name.ssl.ssl.keystore.location"


def _served_issuer(bootstrap: str, cafile: str) -> str | None:
    """The CN of the issuer of the certificate a TLS listener serves, if `cafile` verifies it."""
    host, port = bootstrap.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = False
    try:
        with socket.create_connection((host, int(port)), timeout=5) as raw, ctx.wrap_socket(raw) as tls:
            cert = tls.getpeercert()
    except (ssl.SSLError, OSError):
        return None
    return dict(x[0] for x in cert["issuer"])["commonName"]


def test_encoder_round_trip_and_wrong_secret() -> None:
    """Kafka's fields, both ciphers; another secret cannot open a value; a damaged one is refused."""
    for enc in (PasswordEncoder("s1"), PasswordEncoder("s1", GCM, 256, 1024, "PBKDF2WithHmacSHA256")):
        stored = enc.encode("pässword")
        fields = dict(x.split(":", 1) for x in stored.split(","))
        assert {"keyFactoryAlgorithm", "cipherAlgorithm", "keyLength", "salt", "iterations", "encryptedPassword",
                "passwordLength", "initializationVector"} <= set(fields)
        assert "pässword" not in stored and enc.decode(stored) == "pässword"
        with pytest.raises(PasswordDecodeError):
            PasswordEncoder("s2").decode(stored)
    with pytest.raises(PasswordDecodeError):
        PasswordEncoder("s1").decode("salt:x,encryptedPassword:y")


def test_dynamic_password_refused_without_a_secret(start_broker: StartBroker, tmp_path: Path) -> None:
    """Kafka's refusal: INVALID_REQUEST, "Password encoder secret not configured"; nothing stored."""
    pki = make_pki(tmp_path / "pki")
    b = start_broker({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "ssl.keystore.location": pki.keystore("broker")})
    c = WireClient(b.bootstrap)
    try:
        r = c.request(44, 1, {"resources": [{"resource_type": 4, "resource_name": "0", "configs": [
            {"name": KEY_PASSWORD, "config_operation": 0, "value": "keypass"}]}], "validate_only": False})
        assert r.responses[0].error_code == 42  # INVALID_REQUEST
        assert "Password encoder secret not configured" in r.responses[0].error_message
    finally:
        c.close()
    res = ConfigResource(ConfigResource.Type.BROKER, "0")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    assert KEY_PASSWORD not in admin.describe_configs([res])[res].result(30)


def test_secret_rotation_on_zookeeper(start_broker: StartBroker, zk_connect: str, tmp_path: Path) -> None:
    from kazoo.client import KazooClient

    pki = make_pki(tmp_path / "pki")
    _signed(pki.dir, "broker-rotated", "/CN=broker/O=gregor", "evil-ca", san="IP:127.0.0.1,DNS:localhost")
    conf = {"zookeeper.connect": zk_connect, "broker.id": "0", "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "ssl.keystore.location": pki.keystore("broker-rotated"), "password.encoder.secret": "first-secret"}
    b = start_broker(conf, data_dir=tmp_path / "data")
    ssl_bootstrap = b.bootstrap_of("SSL")
    assert _served_issuer(ssl_bootstrap, pki.path("evil-ca.crt")) == "evil-ca"
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry(KEYSTORE, pki.keystore("broker-enc"), incremental_operation=AlterConfigOpType.SET),
        ConfigEntry(KEY_PASSWORD, "keypass", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)

    def wait_issuer(expected: str) -> None:
        deadline = time.monotonic() + 10
        while _served_issuer(ssl_bootstrap, pki.ca) != expected:
            assert time.monotonic() < deadline, "the encrypted key store was not taken"
            time.sleep(0.1)
    wait_issuer("gregor-test-ca")

    zk = KazooClient(hosts=zk_connect)
    zk.start(10)
    try:
        def stored() -> str:
            return json.loads(zk.get("/config/brokers/0")[0])["config"][KEY_PASSWORD]
        first = stored()
        assert "keypass" not in first and "encryptedPassword:" in first
        assert PasswordEncoder("first-secret").decode(first) == "keypass"

        # Restart with a new secret and the old one: the stored password is re-encrypted, the key still opens.
        assert b.stop() == 0
        b.overrides.update({"password.encoder.secret": "second-secret", "password.encoder.old.secret": "first-secret"})
        b.restart()
        assert "re-encrypted with the new password.encoder.secret" in b.log_text()
        second = stored()
        assert second != first and PasswordEncoder("second-secret").decode(second) == "keypass"
        with pytest.raises(PasswordDecodeError):
            PasswordEncoder("first-secret").decode(second)
        wait_issuer("gregor-test-ca")
    finally:
        zk.stop()
    assert "keypass" not in b.log_text()
