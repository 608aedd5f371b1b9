"""KIP-368 without timing luck: a request on a SASL session past its lifetime closes the connection whether
or not the expiry timer has fired, and a timer that fires early waits for the real end of the session.

(tests/security/test_sasl.py's test_expired_session_closes_the_connection shows the same through a real
broker; there the timer fired early in a few runs in a hundred under uvloop, and the session was then served
for ever.) No sockets, no processes: the dispatcher and the handler's timer are driven directly.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from gregor.api.dispatcher import Dispatcher, supported_apis
from gregor.api.handlers.sasl import _session_expired
from gregor.network.connection import CloseConnection
from gregor.protocol import apis
from gregor.protocol.frames import encode_request
from gregor.security.sasl.authenticator import SaslServerAuthenticator

METADATA, API_VERSIONS, SASL_HANDSHAKE = 3, 18, 17
BODIES = {METADATA: (12, {"topics": None, "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False}),
          API_VERSIONS: (3, {"client_software_name": "t", "client_software_version": "1"}),
          SASL_HANDSHAKE: (1, {"mechanism": "PLAIN"})}


def now_ms() -> int:
    return int(time.time() * 1000)


def session(expires_in_ms: int | None, authenticated: bool = True) -> Any:
    listener = SimpleNamespace(name="REAUTH", max_reauth_ms={"PLAIN": 2000})
    auth = SaslServerAuthenticator(listener)  # type: ignore[arg-type]
    auth.mechanism, auth.state, auth.principal_name = "PLAIN", "complete", "alice"
    auth.session_expiration_ms = None if expires_in_ms is None else now_ms() + expires_in_ms
    return SimpleNamespace(authenticated=authenticated, sasl=auth, listener=listener, closed=False,
                           peer="127.0.0.1:5555")


def dispatch(conn: Any, api_key: int) -> str:
    served: list[int] = []
    handlers = {k: (lambda ctx, req, k=k: served.append(k) or {"error_code": 0}) for k in BODIES}
    services = SimpleNamespace(quotas=SimpleNamespace(enabled=False), supported_apis=supported_apis(handlers))
    version, body = BODIES[api_key]
    frame = memoryview(encode_request(apis.BY_KEY[api_key], version, 7, "t", body))[4:]
    try:
        Dispatcher(services, handlers).dispatch(conn, frame, api_key, version, 7)  # type: ignore[arg-type]
    except CloseConnection as e:
        return f"closed: {e}"
    assert served == [api_key]
    return "served"


def test_expired_session_is_closed_even_before_its_timer_fires() -> None:
    conn = session(expires_in_ms=-1)  # the lifetime has passed; conn.authenticated still says yes
    assert dispatch(conn, METADATA) == ("closed: request (API key 3) after the SASL session of User:alice "
                                        "expired without re-authentication")


@pytest.mark.parametrize("api_key", [API_VERSIONS, SASL_HANDSHAKE])
def test_expired_session_may_still_reauthenticate(api_key: int) -> None:
    assert dispatch(session(expires_in_ms=-1), api_key) == "served"


def test_live_session_and_connections_without_sasl_are_served() -> None:
    assert dispatch(session(expires_in_ms=60_000), METADATA) == "served"
    assert dispatch(session(expires_in_ms=None), METADATA) == "served"  # connections.max.reauth.ms=0
    plain = SimpleNamespace(authenticated=True, sasl=None, listener=SimpleNamespace(name="PLAINTEXT"))
    assert dispatch(plain, METADATA) == "served"


def test_expiry_timer_fired_early_waits_for_the_end() -> None:
    conn = session(expires_in_ms=150)
    auth = conn.sasl

    async def run() -> tuple[bool, bool]:
        _session_expired(conn, auth)  # as an early timer would: the session has 150 ms left
        early = conn.authenticated
        await asyncio.sleep(0.4)
        return early, conn.authenticated

    assert asyncio.run(run()) == (True, False)
