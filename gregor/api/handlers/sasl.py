"""SaslHandshake (17) and SaslAuthenticate (36): the I/O side of gregor.security.sasl.

The per-connection state machine (`conn.sasl`, a SaslServerAuthenticator) decides; this module
applies its decisions to the connection:

- success: `conn.principal` becomes User:<name> and `conn.authenticated` True, so the dispatcher
  serves every API from then on;
- failure: answered after `connection.failed.authentication.delay.ms` (Kafka's default 100 ms),
  then the connection is closed, and a WARNING names the client address, listener and mechanism.
  The delay slows password guessing from one connection; clients reconnect with backoff anyway;
- KIP-368: when the session lifetime passes without a re-authentication, the connection stops
  being authenticated (logged), so its next request other than ApiVersions/SASL closes it, as
  Kafka's SocketServer does for an expired session.

On a listener without SASL a SaslHandshake is answered ILLEGAL_SASL_STATE, as Kafka's request
handler does once a connection is past authentication.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from gregor.api.context import RequestContext
from gregor.network.connection import Connection
from gregor.protocol.errors import ErrorCode
from gregor.protocol.schema import Struct
from gregor.security.principal import KafkaPrincipal
from gregor.security.sasl.authenticator import ListenerSasl, SaslReply, SaslServerAuthenticator

log = logging.getLogger("gregor.sasl")

CLOSE_GRACE_S = 0.5  # how long a refused connection stays open after its answer is written


def _listener_sasl(ctx: RequestContext) -> ListenerSasl | None:
    return ctx.services.sasl_listeners.get(ctx.connection.listener.name)


def _now_ms() -> int:
    return int(time.time() * 1000)


def handle_sasl_handshake(ctx: RequestContext, req: Struct) -> dict[str, Any] | asyncio.Future[Any]:
    conn = ctx.connection
    listener = _listener_sasl(ctx)
    if listener is None:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
    auth = conn.sasl
    if auth is None:
        auth = conn.sasl = SaslServerAuthenticator(listener)
    if auth.state == "failed":
        return _never(ctx)
    reply = auth.on_handshake(req.mechanism, ctx.version)
    body = {"error_code": reply.error_code, "mechanisms": list(listener.mechanisms)}
    return _finish(ctx, auth, reply, body, req.mechanism)


def handle_sasl_authenticate(ctx: RequestContext, req: Struct) -> dict[str, Any] | asyncio.Future[Any]:
    conn = ctx.connection
    auth: SaslServerAuthenticator | None = conn.sasl
    if auth is None:
        message = ("SaslAuthenticate request received before SaslHandshake" if _listener_sasl(ctx) is not None
                   else "SaslAuthenticate request received on a listener without SASL")
        reply = SaslReply(ErrorCode.ILLEGAL_SASL_STATE, message, close=_listener_sasl(ctx) is not None,
                          log_detail=message)
        return _finish(ctx, None, reply, _authenticate_body(reply), None)
    if auth.state == "failed":
        return _never(ctx)
    reply = auth.on_authenticate(bytes(req.auth_bytes or b""), ctx.version, _now_ms())
    return _finish(ctx, auth, reply, _authenticate_body(reply), auth.mechanism)


def _authenticate_body(reply: SaslReply) -> dict[str, Any]:
    return {"error_code": reply.error_code, "error_message": reply.error_message, "auth_bytes": reply.auth_bytes,
            "session_lifetime_ms": reply.session_lifetime_ms}


def _never(ctx: RequestContext) -> asyncio.Future[Any]:
    """No answer: the connection failed authentication and is closed once its (delayed) failure answer
    is out. Answering sooner would tell a pipelining client the outcome before the delay."""
    return asyncio.get_running_loop().create_future()


def _finish(ctx: RequestContext, auth: SaslServerAuthenticator | None, reply: SaslReply, body: dict[str, Any],
            mechanism: str | None) -> dict[str, Any] | asyncio.Future[Any]:
    conn = ctx.connection
    if reply.authenticated_name is not None:
        assert auth is not None
        _authenticated(ctx, auth, reply.authenticated_name)
    elif reply.log_detail and not reply.close:
        log.info("SASL %s from %s on listener %s: %s", mechanism, conn.peer, conn.listener.name, reply.log_detail)
    if not reply.close:
        return body
    delay_s = 0.0
    if reply.failed:
        log.warning("Failed authentication with %s (listener %s, SASL mechanism %s): %s", conn.peer,
                    conn.listener.name, mechanism, reply.log_detail or reply.error_message)
        metrics = ctx.services.metrics
        if metrics is not None:
            metrics.record_failed_authentication(conn.listener.name)
        if auth is not None:
            delay_s = auth.listener.failed_authentication_delay_ms / 1000.0
    reason = f"SASL {'authentication failed' if reply.failed else 'state error'}: {reply.log_detail or reply.error_message}"
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[Any] = loop.create_future()

    def send_and_close() -> None:
        if not answer.done():
            answer.set_result(body)
        # Closed a moment after the answer is written, unless the client closes first: a client that reads the
        # answer and the end of the stream in one go may drop the answer (kafka-python 3.0 does) and report a
        # bare disconnection instead of the reason. Nothing more is served meanwhile (see _never and the gate).
        loop.call_later(CLOSE_GRACE_S, conn.close, reason)

    if delay_s > 0:
        loop.call_later(delay_s, send_and_close)
    else:
        loop.call_soon(send_and_close)
    return answer


def _authenticated(ctx: RequestContext, auth: SaslServerAuthenticator, name: str) -> None:
    conn = ctx.connection
    first = not conn.authenticated or conn.principal.name != name
    conn.principal = KafkaPrincipal("User", name)
    conn.authenticated = True
    timer = getattr(auth, "expiry_timer", None)
    if timer is not None:
        timer.cancel()
    auth.expiry_timer = None  # type: ignore[attr-defined]
    expires = auth.session_expiration_ms
    if expires is not None:
        delay_s = max(expires - _now_ms(), 0) / 1000.0
        auth.expiry_timer = asyncio.get_running_loop().call_later(delay_s, _session_expired, conn, auth)  # type: ignore[attr-defined]
    if first:
        log.debug("%s authenticated as User:%s with SASL %s on listener %s", conn.peer, name, auth.mechanism,
                  conn.listener.name)


def _session_expired(conn: Connection, auth: SaslServerAuthenticator) -> None:
    """KIP-368: the session lifetime passed without a completed re-authentication."""
    auth.expiry_timer = None  # type: ignore[attr-defined]
    if conn.closed or conn.sasl is not auth or auth.session_expiration_ms is None:
        return
    left_ms = auth.session_expiration_ms - _now_ms()
    if left_ms > 0:  # early: uvloop measures timers on a loop time cached at the start of its iteration
        auth.expiry_timer = asyncio.get_running_loop().call_later(left_ms / 1000.0, _session_expired, conn, auth)  # type: ignore[attr-defined]
        return
    conn.authenticated = False
    max_ms = auth.listener.max_reauth_ms.get(auth.mechanism or "", 0)
    log.info("SASL session of User:%s from %s (listener %s, %s) expired without re-authentication "
             "(connections.max.reauth.ms=%d): its next request other than SASL closes the connection",
             auth.principal_name, conn.peer, conn.listener.name, auth.mechanism, max_ms)
