"""The per-connection SASL state machine (Kafka's SaslServerAuthenticator), without any I/O.

One `SaslServerAuthenticator` lives on each connection of a SASL listener (`conn.sasl`). The
SaslHandshake and SaslAuthenticate handlers feed it requests and send what it answers; it says
when the connection is authenticated, as whom, until when, and when it must be closed.

    handshake --SaslHandshake(enabled mech)--> authenticate --SaslAuthenticate...--> complete
        |                                           |                                  |
        | other mechanism: UNSUPPORTED_SASL_MECHANISM   | bad credentials:            | SaslHandshake (KIP-368
        v                                           v SASL_AUTHENTICATION_FAILED       v re-authentication)
      failed (closed after connection.failed.authentication.delay.ms)             authenticate (same
                                                                                  mechanism, same principal)

A request out of turn (SaslAuthenticate before a handshake, a second handshake mid-exchange)
answers ILLEGAL_SASL_STATE and the connection is closed, as Kafka does. Before `complete` the
dispatcher lets only ApiVersions and the two SASL APIs through (Kafka closes on anything else).

Re-authentication (KIP-368): with `connections.max.reauth.ms` > 0 each successful SaslAuthenticate
(v1+) answers the session lifetime: that bound, or less if the credential expires earlier (an
OAUTHBEARER token's exp). The client must authenticate again on the same connection, with the
same mechanism and as the same principal, before the session expires; after that, its next
request other than SaslHandshake/SaslAuthenticate closes the connection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gregor.protocol.errors import ErrorCode
from gregor.security.sasl.mechanism import SaslAuthenticationError, SaslError, SaslServer

# Mechanisms Gregor can serve; GSSAPI (Kafka's default) is not among them.
IMPLEMENTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


@dataclass(frozen=True)
class ListenerSasl:
    """What one SASL listener serves: its enabled mechanisms, how to start an exchange of each,
    and the bounds that apply to its connections."""

    listener_name: str
    mechanisms: tuple[str, ...]  # enabled and implemented, in the configured order
    servers: dict[str, Callable[[], SaslServer]]  # mechanism -> a fresh exchange
    max_reauth_ms: dict[str, int]  # connections.max.reauth.ms by mechanism (0: no re-authentication)
    failed_authentication_delay_ms: int


@dataclass
class SaslReply:
    """What the handler answers, and what it must do to the connection afterwards."""

    error_code: ErrorCode
    error_message: str | None = None
    auth_bytes: bytes = b""
    session_lifetime_ms: int = 0
    close: bool = False  # close the connection once this answer is sent (after the failure delay if failed)
    failed: bool = False  # an authentication failure: delay the answer, log it
    log_detail: str | None = None  # why it failed, for the broker log (never sent)
    authenticated_name: str | None = None  # set when this answer completes (re-)authentication


class SaslServerAuthenticator:
    """The state of SASL on one connection (see the module docstring)."""

    def __init__(self, listener: ListenerSasl) -> None:
        self.listener = listener
        self.state = "handshake"
        self.mechanism: str | None = None
        self.handshake_version = -1
        self.principal_name: str | None = None  # once authenticated; fixed across re-authentications
        self.reauthenticating = False
        self.session_expiration_ms: int | None = None  # wall-clock ms; None: the session never expires
        self._server: SaslServer | None = None

    @property
    def authenticated(self) -> bool:
        return self.principal_name is not None

    def session_expired(self, now_ms: int) -> bool:
        return self.session_expiration_ms is not None and now_ms >= self.session_expiration_ms

    def on_handshake(self, mechanism: str, version: int) -> SaslReply:
        enabled = list(self.listener.mechanisms)
        if self.state == "complete":
            self.state = "authenticate"
            self.reauthenticating = True
            if mechanism != self.mechanism:
                self.state = "failed"
                return SaslReply(ErrorCode.UNSUPPORTED_SASL_MECHANISM, close=True, failed=True,
                                 log_detail=f"SASL mechanism '{mechanism}' requested by client is not supported for "
                                            f"re-authentication of mechanism '{self.mechanism}'")
            self._server = self.listener.servers[mechanism]()
            self.handshake_version = version
            return SaslReply(ErrorCode.NONE)
        if self.state != "handshake":
            return self._illegal(f"Unexpected SaslHandshake request in state {self.state}")
        if mechanism not in self.listener.servers:
            self.state = "failed"
            return SaslReply(ErrorCode.UNSUPPORTED_SASL_MECHANISM, close=True, failed=True,
                             log_detail=f"Unsupported SASL mechanism {mechanism} (enabled: {', '.join(enabled)})")
        self.mechanism = mechanism
        self.handshake_version = version
        self._server = self.listener.servers[mechanism]()
        self.state = "authenticate"
        return SaslReply(ErrorCode.NONE)

    def on_authenticate(self, token: bytes, version: int, now_ms: int) -> SaslReply:
        if self.state == "complete":
            # Kafka's request handler answers this one without closing.
            return SaslReply(ErrorCode.ILLEGAL_SASL_STATE,
                             "SaslAuthenticate request received after successful authentication")
        if self.state != "authenticate":
            return self._illegal(f"Unexpected SaslAuthenticate request in state {self.state}")
        server = self._server
        assert server is not None and self.mechanism is not None
        try:
            answer = server.evaluate(token, now_ms)
        except SaslAuthenticationError as e:
            why = getattr(server, "failure_detail", None)  # OAUTHBEARER: why the token was refused
            return self._fail(str(e), f"{e} ({why})" if why else str(e))
        except SaslError as e:
            what = "re-authentication" if self.reauthenticating else "authentication"
            return self._fail(f"Authentication failed during {what} due to invalid credentials with SASL mechanism "
                              f"{self.mechanism}", str(e))
        if not server.complete:
            detail = getattr(server, "failure_detail", None)  # OAUTHBEARER's refused token, answered in JSON
            return SaslReply(ErrorCode.NONE, auth_bytes=answer, log_detail=detail)
        name = server.authorization_id
        if self.reauthenticating and name != self.principal_name:
            return self._fail(f"Cannot change principals during re-authentication from User:{self.principal_name}: "
                              f"User:{name}", "principal changed on re-authentication")
        lifetime_ms = self._session_lifetime_ms(server, now_ms)
        self.session_expiration_ms = now_ms + lifetime_ms if lifetime_ms > 0 else None
        self.principal_name = name
        self.state = "complete"
        self.reauthenticating = False
        self._server = None
        return SaslReply(ErrorCode.NONE, auth_bytes=answer,
                         session_lifetime_ms=lifetime_ms if version >= 1 else 0, authenticated_name=name)

    def _session_lifetime_ms(self, server: SaslServer, now_ms: int) -> int:
        """connections.max.reauth.ms, shortened to the credential's own expiry (KIP-368); 0 = unbounded."""
        assert self.mechanism is not None
        max_ms = self.listener.max_reauth_ms.get(self.mechanism, 0)
        if max_ms <= 0:
            return 0
        expires = server.credential_expiration_ms
        if expires is not None:
            return max(min(max_ms, expires - now_ms), 1)
        return max_ms

    def _fail(self, client_message: str, detail: str) -> SaslReply:
        self.state = "failed"
        self._server = None
        return SaslReply(ErrorCode.SASL_AUTHENTICATION_FAILED, client_message, close=True, failed=True,
                         log_detail=detail)

    def _illegal(self, message: str) -> SaslReply:
        self.state = "failed"
        self._server = None
        return SaslReply(ErrorCode.ILLEGAL_SASL_STATE, message, close=True, log_detail=message)
