"""Sans-IO SASL: JAAS parsing, PLAIN, SCRAM (against RFC 7677's vector and our client),
OAUTHBEARER's unsecured validator, and the per-connection state machine."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from gregor.protocol.errors import ErrorCode
from gregor.security.sasl.authenticator import ListenerSasl, SaslServerAuthenticator
from gregor.security.sasl.client import PlainClient, SaslClientError, ScramClient, sasl_client
from gregor.security.sasl.jaas import JaasConfigError, parse_jaas_config, parse_single_module
from gregor.security.sasl.mechanism import SaslAuthenticationError, SaslError
from gregor.security.sasl.oauthbearer import (
    OAuthBearerServer,
    OAuthBearerValidationError,
    load_validator_factory,
    unsecured_validator,
)
from gregor.security.sasl.plain import PlainServer, users_from_jaas_options
from gregor.security.sasl.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    ScramServer,
    credential_from_password,
)

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


# --- JAAS ---------------------------------------------------------------------------------

def test_jaas_kafka_example() -> None:
    m = parse_single_module(PLAIN_JAAS)
    assert m.class_name == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert m.control_flag == "required"
    assert users_from_jaas_options(m.options) == {"admin": "admin-secret", "alice": "alice-secret"}


def test_jaas_quotes_escapes_comments_and_bare_words() -> None:
    text = """/* two modules */ a.B required k1=v1 k2='single q' // line comment
              k3="esc \\" quote;" ;
              c.D optional;"""
    mods = parse_jaas_config(text)
    assert [m.class_name for m in mods] == ["a.B", "c.D"]
    assert mods[0].options == {"k1": "v1", "k2": "single q", "k3": 'esc " quote;'}
    assert mods[1].control_flag == "optional" and mods[1].options == {}


@pytest.mark.parametrize("bad", [
    "a.B required k=v",  # no ';'
    "a.B mandatory;",  # bad flag
    "a.B required k v;",  # no '='
    'a.B required k="open;',  # unterminated quote
    "a.B required; c.D required;",  # two modules where one is wanted
    "",
])
def test_jaas_errors(bad: str) -> None:
    with pytest.raises(JaasConfigError):
        parse_single_module(bad)


# --- PLAIN --------------------------------------------------------------------------------

def test_plain_ok_and_failures() -> None:
    users = {"alice": "alice-secret"}
    s = PlainServer(users.get)
    assert s.evaluate(b"\x00alice\x00alice-secret", 0) == b"" and s.complete and s.authorization_id == "alice"
    for token in (b"\x00alice\x00wrong", b"\x00bob\x00alice-secret"):
        with pytest.raises(SaslAuthenticationError, match="^Authentication failed: Invalid username or password$"):
            PlainServer(users.get).evaluate(token, 0)
    with pytest.raises(SaslAuthenticationError, match="different from username"):
        PlainServer(users.get).evaluate(b"bob\x00alice\x00alice-secret", 0)
    with pytest.raises(SaslError, match="expected 3 tokens"):
        PlainServer(users.get).evaluate(b"alice\x00alice-secret", 0)
    with pytest.raises(SaslAuthenticationError, match="username not specified"):
        PlainServer(users.get).evaluate(b"\x00\x00x", 0)


def test_plain_client() -> None:
    c = PlainClient("alice", "alice-secret")
    s = PlainServer({"alice": "alice-secret"}.get)
    assert c.evaluate(s.evaluate(c.first_message(), 0)) is None and c.complete and s.complete


# --- SCRAM --------------------------------------------------------------------------------

def test_scram_rfc7677_vector() -> None:
    """RFC 7677 section 3: user, password pencil, fixed nonces, salt and 4096 iterations."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = credential_from_password(SCRAM_SHA_256, "pencil", salt, 4096)
    server = ScramServer(SCRAM_SHA_256, {"user": cred}.get, nonce_factory=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO", 0)
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", 0)
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.authorization_id == "user"


@pytest.mark.parametrize("mech", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_scram_with_our_client(mech: Any) -> None:
    cred = credential_from_password(mech, "alice-secret", iterations=4096)
    assert ScramCredential.from_config(cred.to_config()) == cred
    server = ScramServer(mech, {"alice": cred, "a,b=c": cred}.get)
    client = ScramClient(mech.mechanism_name, "alice", "alice-secret")
    token: bytes | None = client.first_message()
    while token is not None:
        token = client.evaluate(server.evaluate(token, 0))
    assert client.complete and server.complete and server.authorization_id == "alice"
    # A name with ',' and '=' travels as a saslname.
    server, client = ScramServer(mech, {"a,b=c": cred}.get), ScramClient(mech.mechanism_name, "a,b=c", "alice-secret")
    token = client.first_message()
    while token is not None:
        token = client.evaluate(server.evaluate(token, 0))
    assert server.authorization_id == "a,b=c"


def test_scram_failures() -> None:
    cred = credential_from_password(SCRAM_SHA_256, "alice-secret")
    creds = {"alice": cred}.get
    # Wrong password: the proof does not verify.
    server, client = ScramServer(SCRAM_SHA_256, creds), ScramClient("SCRAM-SHA-256", "alice", "wrong")
    final = client.evaluate(server.evaluate(client.first_message(), 0))
    assert final is not None
    with pytest.raises(SaslError, match="Invalid client credentials"):
        server.evaluate(final, 0)
    assert not server.complete
    # Unknown user: answered like a known one (a stable decoy salt), refused at the proof.
    server, client = ScramServer(SCRAM_SHA_256, creds), ScramClient("SCRAM-SHA-256", "bob", "alice-secret")
    first = server.evaluate(client.first_message(), 0)
    assert b",s=" in first and b",i=4096" in first
    assert ScramServer(SCRAM_SHA_256, creds).evaluate(b"n,,n=bob,r=abc", 0).split(b",")[1] == first.split(b",")[1]
    final = client.evaluate(first)
    assert final is not None
    with pytest.raises(SaslError, match="Invalid user credentials"):
        server.evaluate(final, 0)
    # A SHA-512 client against a SHA-256 credential fails too.
    server, client = ScramServer(SCRAM_SHA_256, creds), ScramClient("SCRAM-SHA-512", "alice", "alice-secret")
    with pytest.raises(SaslError):
        final = client.evaluate(server.evaluate(client.first_message(), 0))
        assert final is not None
        server.evaluate(final, 0)
    # Delegation tokens and unknown extensions are refused; channel binding is not offered.
    with pytest.raises(SaslError, match="tokenauth"):
        ScramServer(SCRAM_SHA_256, creds).evaluate(b"n,,n=alice,r=abc,tokenauth=true", 0)
    with pytest.raises(SaslError, match="Unsupported extensions"):
        ScramServer(SCRAM_SHA_256, creds).evaluate(b"n,,n=alice,r=abc,foo=bar", 0)
    with pytest.raises(SaslError, match="channel binding"):
        ScramServer(SCRAM_SHA_256, creds).evaluate(b"p=tls-unique,,n=alice,r=abc", 0)
    with pytest.raises(SaslAuthenticationError, match="authorization id"):
        ScramServer(SCRAM_SHA_256, creds).evaluate(b"n,a=bob,n=alice,r=abc", 0)
    # A tampered server nonce in the client final.
    server = ScramServer(SCRAM_SHA_256, creds)
    server.evaluate(b"n,,n=alice,r=abc", 0)
    with pytest.raises(SaslError, match="nonce"):
        server.evaluate(b"c=biws,r=abcXYZ,p=AAAA", 0)


def test_scram_client_rejects_a_server_that_does_not_know_the_credential() -> None:
    client = ScramClient("SCRAM-SHA-256", "alice", "alice-secret")
    client.first_message()
    impostor = ScramServer(SCRAM_SHA_256, {"alice": credential_from_password(SCRAM_SHA_256, "other")}.get)
    server_first = impostor.evaluate(client.first_message(), 0)
    client.evaluate(server_first)
    with pytest.raises(SaslClientError, match="server signature is invalid"):
        client.evaluate(b"v=" + base64.b64encode(b"\x00" * 32))
    with pytest.raises(ValueError):
        sasl_client("GSSAPI", "a", "b")


# --- OAUTHBEARER --------------------------------------------------------------------------

def jws(claims: dict[str, Any], alg: str = "none", signature: str = "") -> str:
    def enc(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()
    return f"{enc({'alg': alg})}.{enc(claims)}.{signature}"


def client_first(token: str, authzid: str = "", **ext: str) -> bytes:
    kv = "".join(f"{k}={v}\x01" for k, v in ext.items())
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01{kv}\x01".encode()


def test_oauthbearer_unsecured_ok() -> None:
    now = int(time.time() * 1000)
    token = jws({"sub": "alice", "iat": now / 1000, "exp": now / 1000 + 3600, "scope": "a b"})
    s = OAuthBearerServer(unsecured_validator({"unsecuredValidatorRequiredScope": "a"}))
    assert s.evaluate(client_first(token, "alice", traceId="x"), now) == b""
    assert s.complete and s.authorization_id == "alice" and s.extensions == {"traceId": "x"}
    assert s.credential_expiration_ms == now + 3600_000


@pytest.mark.parametrize("claims,options,why,status", [
    ({"sub": "alice", "exp": -1}, {}, "Expiration Time", "invalid_token"),
    ({"exp": 1e12}, {}, "Required claim missing or empty: sub", "invalid_token"),
    ({"user": "alice", "exp": 1e12}, {"unsecuredValidatorPrincipalClaimName": "uid"}, "uid", "invalid_token"),
    ({"sub": "alice", "exp": 1e12, "iat": 1e12 - 1}, {}, "Issued At", "invalid_token"),
    ({"sub": "alice"}, {}, "Required claim missing: exp", "invalid_token"),
    ({"sub": "alice", "exp": 1e12, "scope": "a"}, {"unsecuredValidatorRequiredScope": "a b"}, "missing required",
     "insufficient_scope"),
])
def test_oauthbearer_refusals(claims: dict[str, Any], options: dict[str, str], why: str, status: str) -> None:
    now = int(time.time() * 1000)
    s = OAuthBearerServer(unsecured_validator(options))
    answer = json.loads(s.evaluate(client_first(jws(claims)), now))
    assert answer["status"] == status
    assert why in (s.failure_detail or "")
    with pytest.raises(SaslAuthenticationError) as e:
        s.evaluate(b"\x01", now)
    assert json.loads(str(e.value))["status"] == status


def test_oauthbearer_clock_skew_and_signed_tokens() -> None:
    now = int(time.time() * 1000)
    expired_a_second_ago = jws({"sub": "alice", "exp": now / 1000 - 1})
    lenient = unsecured_validator({"unsecuredValidatorAllowableClockSkewMs": "5000"})
    assert lenient(expired_a_second_ago, now).principal_name == "alice"
    strict = unsecured_validator({})
    with pytest.raises(OAuthBearerValidationError):
        strict(expired_a_second_ago, now)
    with pytest.raises(OAuthBearerValidationError, match="alg"):
        strict(jws({"sub": "alice", "exp": 1e12}, alg="HS256"), now)
    with pytest.raises(OAuthBearerValidationError, match="empty signature"):
        strict(jws({"sub": "alice", "exp": 1e12}, signature="c2ln"), now)
    with pytest.raises(ValueError):
        unsecured_validator({"unsecuredValidatorAllowableClockSkewMs": "-1"})


def test_oauthbearer_framing_and_authzid() -> None:
    now = int(time.time() * 1000)
    token = jws({"sub": "alice", "exp": now / 1000 + 60})
    with pytest.raises(SaslAuthenticationError, match="authorization id"):
        OAuthBearerServer(unsecured_validator({})).evaluate(client_first(token, "bob"), now)
    for bad in (b"n,,auth=Bearer x\x01\x01", b"y,,\x01auth=Bearer x\x01\x01", b"n,,\x01host=x\x01\x01",
                b"n,,\x01auth=Basic x\x01\x01"):
        with pytest.raises(SaslError):
            OAuthBearerServer(unsecured_validator({})).evaluate(bad, now)


def custom_validator(options: dict[str, str]) -> Any:
    """A validator factory for the configurable-check test: accepts the token 'let-me-in'."""
    from gregor.security.sasl.oauthbearer import OAuthBearerToken

    def validate(token: str, now_ms: int) -> OAuthBearerToken:
        if token != options.get("secret", "let-me-in"):
            raise OAuthBearerValidationError("not the secret")
        return OAuthBearerToken(token, "robot", now_ms + 60_000)
    return validate


def test_oauthbearer_configurable_validator() -> None:
    factory = load_validator_factory("tests.unit.security.test_sasl_mechanisms:custom_validator")
    s = OAuthBearerServer(factory({}))
    s.evaluate(client_first("let-me-in"), 0)
    assert s.authorization_id == "robot"
    assert load_validator_factory(None) is unsecured_validator
    assert load_validator_factory("tests.unit.security.test_sasl_mechanisms.custom_validator") is custom_validator
    with pytest.raises(ValueError, match="cannot load"):
        load_validator_factory("no.such.module:f")


# --- the per-connection state machine -----------------------------------------------------

def listener(max_reauth_ms: int = 0) -> ListenerSasl:
    users = {"alice": "alice-secret", "bob": "bob-secret"}
    return ListenerSasl("SASL_PLAINTEXT", ("PLAIN", "SCRAM-SHA-256"),
                        {"PLAIN": lambda: PlainServer(users.get),
                         "SCRAM-SHA-256": lambda: ScramServer(SCRAM_SHA_256, lambda u: None)},
                        {"PLAIN": max_reauth_ms, "SCRAM-SHA-256": max_reauth_ms}, 100)


def test_authenticator_happy_path_and_reauthentication() -> None:
    a = SaslServerAuthenticator(listener(max_reauth_ms=10_000))
    assert a.on_handshake("PLAIN", 1).error_code == ErrorCode.NONE
    r = a.on_authenticate(b"\x00alice\x00alice-secret", 1, 1_000)
    assert r.error_code == ErrorCode.NONE and r.authenticated_name == "alice" and r.session_lifetime_ms == 10_000
    assert a.authenticated and a.session_expiration_ms == 11_000 and not a.session_expired(10_999)
    assert a.session_expired(11_000)
    # A second SaslAuthenticate without a handshake is illegal but not fatal (Kafka's KafkaApis answer).
    r = a.on_authenticate(b"x", 1, 2_000)
    assert r.error_code == ErrorCode.ILLEGAL_SASL_STATE and not r.close
    # Re-authentication: same mechanism, same principal.
    assert a.on_handshake("PLAIN", 1).error_code == ErrorCode.NONE
    r = a.on_authenticate(b"\x00alice\x00alice-secret", 1, 5_000)
    assert r.error_code == ErrorCode.NONE and a.session_expiration_ms == 15_000
    # ... but not as someone else.
    a.on_handshake("PLAIN", 1)
    r = a.on_authenticate(b"\x00bob\x00bob-secret", 1, 6_000)
    assert r.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and r.close and "Cannot change principals" in str(r.error_message)
    # ... nor with another mechanism.
    b = SaslServerAuthenticator(listener(max_reauth_ms=10_000))
    b.on_handshake("PLAIN", 1)
    b.on_authenticate(b"\x00alice\x00alice-secret", 1, 0)
    r = b.on_handshake("SCRAM-SHA-256", 1)
    assert r.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and r.close


def test_authenticator_failures() -> None:
    a = SaslServerAuthenticator(listener())
    r = a.on_handshake("GSSAPI", 1)
    assert r.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and r.close and r.failed
    a = SaslServerAuthenticator(listener())
    r = a.on_authenticate(b"x", 1, 0)
    assert r.error_code == ErrorCode.ILLEGAL_SASL_STATE and r.close
    a = SaslServerAuthenticator(listener())
    a.on_handshake("PLAIN", 1)
    r = a.on_handshake("PLAIN", 1)
    assert r.error_code == ErrorCode.ILLEGAL_SASL_STATE and r.close
    a = SaslServerAuthenticator(listener())
    a.on_handshake("PLAIN", 1)
    r = a.on_authenticate(b"\x00alice\x00nope", 1, 0)
    assert r.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert r.error_message == "Authentication failed: Invalid username or password" and r.failed and r.close
    assert not a.authenticated
    a = SaslServerAuthenticator(listener())
    a.on_handshake("SCRAM-SHA-256", 1)
    client = ScramClient("SCRAM-SHA-256", "alice", "alice-secret")  # no SCRAM credentials in this listener
    final = client.evaluate(a.on_authenticate(client.first_message(), 1, 0).auth_bytes)
    assert final is not None
    r = a.on_authenticate(final, 1, 0)
    assert r.error_message == ("Authentication failed during authentication due to invalid credentials with SASL "
                               "mechanism SCRAM-SHA-256")
    assert "Invalid user credentials" in str(r.log_detail)
    # No session lifetime when connections.max.reauth.ms is 0, nor for SaslAuthenticate v0.
    a = SaslServerAuthenticator(listener(max_reauth_ms=5000))
    a.on_handshake("PLAIN", 1)
    r = a.on_authenticate(b"\x00alice\x00alice-secret", 0, 0)
    assert r.session_lifetime_ms == 0 and a.session_expiration_ms == 5000


# --- gregor users: argument and --command-config translation ------------------------------

def test_users_add_config_syntax() -> None:
    from gregor.tools.common import UsageError
    from gregor.tools.users import parse_add_config

    assert parse_add_config("SCRAM-SHA-256=[iterations=8192,password=a],SCRAM-SHA-512=[password=x]") == {
        "SCRAM-SHA-256": ("a", 8192), "SCRAM-SHA-512": ("x", 4096)}
    assert parse_add_config("SCRAM-SHA-512=[password=x]") == {"SCRAM-SHA-512": ("x", 4096)}
    assert parse_add_config("SCRAM-SHA-256=secret") == {"SCRAM-SHA-256": ("secret", 4096)}
    for bad in ("producer_byte_rate=1024", "SCRAM-SHA-256=[iterations=4096]", "SCRAM-SHA-256=[password=x",
                "SCRAM-SHA-256=[salt=x,password=y]"):
        with pytest.raises(UsageError):
            parse_add_config(bad)


def test_command_config_translation() -> None:
    from gregor.tools.common import client_security_config

    got = client_security_config({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";',
        "ssl.truststore.location": "/ca.pem", "ssl.truststore.type": "PEM"})
    assert got == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u",
                   "sasl.password": "p", "ssl.ca.location": "/ca.pem"}
    got = client_security_config({"sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
                                  'OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="alice";'})
    assert got == {"sasl.oauthbearer.config": "principal=alice", "enable.sasl.oauthbearer.unsecure.jwt": True}


# --- per-listener SASL from broker config: what is a startup error ------------------------

def _listeners(props: dict[str, str]) -> dict[str, ListenerSasl]:
    from gregor.config import BrokerConfig
    from gregor.security.sasl.listener import build_sasl_listeners

    return build_sasl_listeners(BrokerConfig(props), lambda _t, _e: {})


def test_listener_sasl_from_config() -> None:
    got = _listeners({
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "GSSAPI,SCRAM-SHA-512",
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.internal.plain.connections.max.reauth.ms": "60000",
        "connection.failed.authentication.delay.ms": "250",
    })
    assert set(got) == {"SASL_PLAINTEXT", "INTERNAL"}
    assert got["SASL_PLAINTEXT"].mechanisms == ("SCRAM-SHA-512",)  # GSSAPI skipped (with a warning)
    internal = got["INTERNAL"]
    assert internal.mechanisms == ("PLAIN",) and internal.max_reauth_ms == {"PLAIN": 60000}
    assert internal.failed_authentication_delay_ms == 250
    server = internal.servers["PLAIN"]()
    server.evaluate(b"\x00alice\x00alice-secret", 0)
    assert server.authorization_id == "alice"


@pytest.mark.parametrize("props,why", [
    ({}, r"none of its enabled mechanisms \(GSSAPI\) is implemented"),
    ({"sasl.enabled.mechanisms": "PLAIN"}, "has no JAAS config"),
    ({"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": "x.Y required user_a=;"}, "sasl.jaas.config"),
    ({"sasl.enabled.mechanisms": "OAUTHBEARER",
      "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": "no.such:thing"}, "cannot load"),
    ({"sasl.enabled.mechanisms": "OAUTHBEARER", "sasl.jaas.config":
      'x.OAuthBearerLoginModule required unsecuredValidatorAllowableClockSkewMs="soon";'}, "AllowableClockSkewMs"),
])
def test_listener_sasl_startup_errors(props: dict[str, str], why: str) -> None:
    from gregor.configdef import ConfigError

    with pytest.raises(ConfigError, match=why):
        _listeners({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", **props})


INTER = {"listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
         "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
         "inter.broker.listener.name": "INTERNAL", "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
         "listener.name.internal.plain.sasl.jaas.config": PLAIN_JAAS}


@pytest.mark.parametrize("props,why", [
    ({}, "GSSAPI, which Gregor brokers cannot log in with"),
    ({"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"}, "is not enabled on the inter-broker listener"),
    ({"sasl.mechanism.inter.broker.protocol": "PLAIN",
      "listener.name.internal.plain.sasl.jaas.config": 'a.B required user_admin="x";'}, "no username and password"),
])
def test_inter_broker_sasl_startup_errors(props: dict[str, str], why: str) -> None:
    from gregor.configdef import ConfigError

    with pytest.raises(ConfigError, match=why):
        _listeners({**INTER, **props})


def test_inter_broker_authenticator_against_our_server() -> None:
    import asyncio

    from gregor.config import BrokerConfig
    from gregor.protocol.schema import Struct
    from gregor.security.sasl.inter_broker import inter_broker_authenticator

    props = {**INTER, "sasl.mechanism.inter.broker.protocol": "PLAIN"}
    auth = SaslServerAuthenticator(_listeners(props)["INTERNAL"])

    async def request(api: Any, version: int, body: Any) -> Struct:
        if api.key == 17:
            r = auth.on_handshake(body["mechanism"], version)
            return Struct(error_code=r.error_code, mechanisms=["PLAIN"])
        r = auth.on_authenticate(body["auth_bytes"], version, 0)
        return Struct(error_code=r.error_code, error_message=r.error_message, auth_bytes=r.auth_bytes)

    asyncio.run(inter_broker_authenticator(BrokerConfig(props), "INTERNAL")(request))
    assert auth.principal_name == "admin"


def test_mechanisms_refuse_garbage_with_sasl_errors_only() -> None:
    """Random and mangled tokens end in SaslError / SaslAuthenticationError, never another exception."""
    import random

    rnd = random.Random(7)
    cred = credential_from_password(SCRAM_SHA_256, "pw")
    seeds = [b"n,,n=alice,r=abc", b"c=biws,r=abcdef,p=AAAA", b"\x00alice\x00pw",
             client_first(jws({"sub": "a", "exp": 1e12})), b"n,a=x,\x01auth=Bearer a.b.\x01\x01"]
    for _ in range(3000):
        data = bytearray(rnd.choice(seeds))
        for _ in range(rnd.randint(0, 4)):
            op = rnd.randint(0, 2)
            pos = rnd.randint(0, len(data))
            if op == 0:
                data[pos:pos] = bytes([rnd.choice(b",=\x00\x01abcnprv/+ ")])
            elif op == 1 and data:
                del data[min(pos, len(data) - 1)]
            else:
                data[pos:pos] = rnd.randbytes(rnd.randint(1, 5))
        for server in (PlainServer({"alice": "pw"}.get), ScramServer(SCRAM_SHA_256, {"alice": cred}.get),
                       OAuthBearerServer(unsecured_validator({}))):
            try:
                server.evaluate(bytes(data), 0)
                server.evaluate(bytes(data), 0)
            except (SaslError, SaslAuthenticationError):
                pass
