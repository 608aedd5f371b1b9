"""Routes each decoded request to its handler; the only place that knows the handler table.

Kafka's rules for requests it cannot serve: an unknown API key or an unsupported version
closes the connection (the body cannot be parsed), except ApiVersions, which answers a
too-new version with a v0-format UNSUPPORTED_VERSION reply listing what is supported.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gregor.api import throttling
from gregor.network.socket_server import CloseConnection
from gregor.protocol import apis
from gregor.protocol.errors import ErrorCode
from gregor.protocol.frames import RequestHeader, decode_request
from gregor.protocol.primitives import DecodeError
from gregor.protocol.schema import Api, Struct
from gregor.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType

if TYPE_CHECKING:
    from gregor.broker.broker import Broker
    from gregor.network.socket_server import Connection
    from gregor.security.listeners import ListenerSpec
    from gregor.security.principal import KafkaPrincipal

log = logging.getLogger("gregor.dispatcher")

# A handler returns the response body, a Future of it, or None when no response is sent.
Handler = Callable[["RequestContext", Struct], "Struct | dict[str, Any] | asyncio.Future[Any] | None"]


# What a SASL listener serves before authentication (Kafka closes the connection on anything else).
PRE_AUTH_APIS = frozenset({17, 18, 36})  # SaslHandshake, ApiVersions, SaslAuthenticate


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    header: RequestHeader
    connection: Connection

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def principal(self) -> KafkaPrincipal:
        return self.connection.principal

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""

    @property
    def host(self) -> str:
        """The client's IP address (what ACL hosts match)."""
        return self.connection.ip

    @property
    def listener(self) -> ListenerSpec:
        return self.connection.listener
    # --- authorization (Kafka's AuthHelper): every handler asks here; no authorizer allows everything ---------
    @property
    def principal_text(self) -> str:
        """The connection's principal as Kafka writes it in ACLs ("User:alice"; User:ANONYMOUS unauthenticated)."""
        return str(self.connection.principal)

    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> bool:
        """May this request's principal, from its host, do `operation` on the resource? (CLUSTER by default)"""
        z = self.broker.authorizer
        if z is None:
            return True
        return z.authorize(self.principal_text, self.host, operation, resource_type, name)

    def authorize_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """May it do `operation` on some resource of the type (Kafka's authorizeByResourceType)?"""
        z = self.broker.authorizer
        return True if z is None else z.authorize_any(self.principal_text, self.host, operation, resource_type)

    def authorized_topics(self, operation: AclOperation, names: Iterable[str]) -> set[str]:
        """The names among `names` the principal may do `operation` on (batch filtering)."""
        z = self.broker.authorizer
        if z is None:
            return set(names)
        principal, host = self.principal_text, self.host
        return {n for n in names if z.authorize(principal, host, operation, ResourceType.TOPIC, n)}

    def authorized_operations(self, resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
        """KIP-430's bitfield of the operations allowed on the resource (all supported ones without an authorizer)."""
        z = self.broker.authorizer
        if z is None:
            return authorized_operations_all(resource_type)
        return z.authorized_operations(self.principal_text, self.host, resource_type, name)


def authorized_operations_all(resource_type: ResourceType) -> int:
    bits = 0
    for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
        bits |= 1 << op
    return bits


class Dispatcher:
    def __init__(self, broker: Broker, handlers: dict[int, Handler]) -> None:
        self.broker = broker
        self.quotas = broker.quotas  # client quotas: enabled only once a quota is configured
        self.handlers = handlers
        unknown = set(handlers) - set(apis.BY_KEY)
        assert not unknown, f"handlers for APIs the codec lacks: {unknown}"

    def supported(self) -> list[Api]:
        """Exactly the APIs with a handler, at the codec's version ranges."""
        return [apis.BY_KEY[k] for k in sorted(self.handlers)]

    def dispatch(
        self, conn: Connection, frame: memoryview, api_key: int, version: int, correlation_id: int
    ) -> tuple[Api, Any] | None:
        if (not conn.authenticated or conn.sasl is not None) and api_key not in PRE_AUTH_APIS:
            sasl = conn.sasl
            # KIP-368: the session's end is checked against the clock on every request, as Kafka's SocketServer
            # does, not left to the expiry timer (handlers/sasl.py): that fires late on a busy loop, and early
            # under uvloop, whose timers run on a loop time cached at the start of each iteration.
            if sasl is not None and sasl.principal_name is not None and (
                    not conn.authenticated or sasl.session_expired(int(time.time() * 1000))):
                raise CloseConnection(f"request (API key {api_key}) after the SASL session of User:"
                                      f"{sasl.principal_name} expired without re-authentication")
            if not conn.authenticated:
                raise CloseConnection(f"unexpected request (API key {api_key}) before SASL authentication on "
                                      f"listener {conn.listener.name}")
        handler = self.handlers.get(api_key)
        if handler is None:
            raise CloseConnection(f"unknown or unsupported API key {api_key}")
        api = apis.BY_KEY[api_key]
        if not api.min_version <= version <= api.max_version:
            if api_key == 18:
                conn.write_raw(self.api_versions_v0_error(correlation_id))
                return None
            raise CloseConnection(
                f"unsupported version {version} of {api.name} (supported {api.min_version}-{api.max_version})"
            )
        timed = self.quotas.enabled  # the whole cost of quotas while none is configured
        if timed:
            started_ns = time.perf_counter_ns()
        try:
            header, body = decode_request(frame, api)
        except DecodeError as e:
            raise CloseConnection(f"malformed {api.name} v{version} request: {e}") from None
        try:
            ctx = RequestContext(self.broker, header, conn)
            resp = handler(ctx, body)
            if timed:  # request_percentage: the time this request took on the loop
                resp = throttling.after_request(ctx, api_key, body, resp, time.perf_counter_ns() - started_ns)
        except Exception as e:  # a handler bug must not take the broker down
            log.exception("handler for %s v%d failed", api.name, version)
            raise CloseConnection(f"error handling {api.name}: {e!r}") from None
        if resp is None:
            return None
        return api, resp

    def api_versions_v0_error(self, correlation_id: int) -> bytes:
        """ApiVersions v0 body with UNSUPPORTED_VERSION: what a client with a too-new version can parse."""
        entries = b"".join(
            struct.pack(">hhh", a.key, a.min_version if a.advertised_min_version is None else a.advertised_min_version,
                        a.max_version)
            for a in self.supported()
        )
        body = struct.pack(">ihi", correlation_id, ErrorCode.UNSUPPORTED_VERSION, len(self.supported())) + entries
        return struct.pack(">i", len(body)) + body
