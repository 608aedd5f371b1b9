"""Routes each decoded request to its handler; the only place that knows the handler table.

Kafka's rules for requests it cannot serve: an unknown API key or an unsupported version
closes the connection (the body cannot be parsed), except ApiVersions, which answers a
too-new version with a v0-format UNSUPPORTED_VERSION reply listing what is supported.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gregor.api import throttling
from gregor.api.context import BrokerServices, Handler, RequestContext
from gregor.network.connection import CloseConnection, ResponseBody
from gregor.protocol import apis
from gregor.protocol.errors import ErrorCode
from gregor.protocol.frames import decode_request
from gregor.protocol.primitives import DecodeError
from gregor.protocol.schema import Api

if TYPE_CHECKING:
    from gregor.network.connection import Connection

log = logging.getLogger("gregor.dispatcher")

# What a SASL listener serves before authentication (Kafka closes the connection on anything else).
PRE_AUTH_APIS = frozenset({17, 18, 36})  # SaslHandshake, ApiVersions, SaslAuthenticate


def supported_apis(handlers: Mapping[int, Handler]) -> tuple[Api, ...]:
    """Exactly the APIs with a handler, at the codec's version ranges (what ApiVersions advertises)."""
    unknown = set(handlers) - set(apis.BY_KEY)
    assert not unknown, f"handlers for APIs the codec lacks: {unknown}"
    return tuple(apis.BY_KEY[k] for k in sorted(handlers))


class Dispatcher:
    def __init__(self, services: BrokerServices, handlers: Mapping[int, Handler]) -> None:
        self.services = services
        self.quotas = services.quotas  # client quotas: enabled only once a quota is configured
        self.handlers = dict(handlers)
        assert services.supported_apis == supported_apis(handlers), "ApiVersions must advertise the handler table"

    def supported(self) -> tuple[Api, ...]:
        return self.services.supported_apis

    def dispatch(
        self, conn: Connection, frame: memoryview, api_key: int, version: int, correlation_id: int
    ) -> tuple[Api, ResponseBody] | None:
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
            ctx = RequestContext(self.services, header, conn)
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
        supported = self.supported()
        entries = b"".join(
            struct.pack(">hhh", a.key, a.min_version if a.advertised_min_version is None else a.advertised_min_version,
                        a.max_version)
            for a in supported
        )
        body = struct.pack(">ihi", correlation_id, ErrorCode.UNSUPPORTED_VERSION, len(supported)) + entries
        return struct.pack(">i", len(body)) + body
