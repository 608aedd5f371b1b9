"""QuorumServer: a small asyncio listener for the quorum's own requests (the controller listener).

It speaks the Kafka framing: size-prefixed requests, answered in order on each connection. It serves
ApiVersions itself and hands Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch (13-17 on the metadata
topic id), FetchSnapshot and DescribeQuorum to its owner, which answers each with a future (a Fetch
may wait for data). An unknown API key, an unsupported version or a malformed request closes the
connection, as a Kafka broker does; a frame over `max_request_bytes` too. Bounded: at most
`max_connections` connections, one request of each connection in hand at a time.

It is apart from the broker's listener (gregor.network): a KRaft controller serves it on its controller
listener (`controller.listener.names`) from before its broker part exists, as the quorum must elect a leader
before any broker can register; the controller's own APIs (the brokers' registrations, heartbeats and
writes) come in as `extra_apis`. Plaintext, or TLS with the controller listener's key and trust stores
(client certificates required or not by its `ssl.client.auth`), with or without SASL: on a SASL listener
a connection must authenticate (SaslHandshake, SaslAuthenticate, through the same server-side state
machine as the broker's listeners, gregor.security.sasl) before any request but ApiVersions, else it is
closed; a failed authentication is answered after `connection.failed.authentication.delay.ms` and closed;
an expired session (`connections.max.reauth.ms`) is closed at its next request.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gregor.protocol.errors import ErrorCode
from gregor.protocol.frames import decode_request, encode_response, peek_header
from gregor.protocol.messages.api_versions import API_VERSIONS
from gregor.protocol.messages.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE
from gregor.protocol.primitives import DecodeError
from gregor.protocol.schema import Api, Struct
from gregor.raft.wire import QUORUM_APIS
from gregor.security.sasl.authenticator import ListenerSasl, SaslReply, SaslServerAuthenticator

log = logging.getLogger("gregor.raft.server")

_SIZE = struct.Struct(">i")

# (api key, version, decoded body) -> the response body, when the node has answered
Dispatch = Callable[[int, int, Struct], Awaitable[dict[str, Any]]]


def api_versions_body(version: int, extra: dict[int, Api] | None = None) -> dict[str, Any]:
    keys = [{"api_key": a.key, "min_version": a.min_version, "max_version": a.max_version}
            for a in sorted([*QUORUM_APIS.values(), *(extra or {}).values(), API_VERSIONS], key=lambda a: a.key)]
    return {"error_code": ErrorCode.NONE, "api_keys": keys, "throttle_time_ms": 0}


class QuorumServer:
    def __init__(self, dispatch: Dispatch, max_request_bytes: int, max_connections: int,
                 extra_apis: dict[int, Api] | None = None, sasl: ListenerSasl | None = None) -> None:
        """`extra_apis`: more APIs the owner answers through `dispatch` (a controller's: the brokers' requests).
        `sasl`: what a SASL listener serves (None: no SASL)."""
        self._dispatch = dispatch
        self.max_request_bytes = max_request_bytes
        self.max_connections = max_connections
        self.extra_apis = dict(extra_apis or {})
        self.sasl = sasl
        if sasl is not None:  # answered here, and advertised
            self.extra_apis.update({SASL_HANDSHAKE.key: SASL_HANDSHAKE, SASL_AUTHENTICATE.key: SASL_AUTHENTICATE})
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> None:
        self._server = await asyncio.start_server(self._serve, host, port, reuse_address=True, ssl=ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._conns):
            t.cancel()
        if self._conns:
            await asyncio.gather(*self._conns, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._conns) >= self.max_connections:
            log.warning("quorum listener: %d connections already, closing a new one", len(self._conns))
            writer.close()
            return
        self._conns.add(task)
        peer = writer.get_extra_info("peername")
        auth = SaslServerAuthenticator(self.sasl) if self.sasl is not None else None
        try:
            while True:
                size = _SIZE.unpack(await reader.readexactly(4))[0]
                if size < 8 or size > self.max_request_bytes:
                    raise DecodeError(f"request of {size} bytes (socket.request.max.bytes is {self.max_request_bytes})")
                frame = memoryview(await reader.readexactly(size))
                chunks, close = await self._answer(frame, auth, peer)
                writer.writelines(bytes(c) for c in chunks)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        except DecodeError as e:
            log.warning("quorum listener: closing the connection from %s: %s", peer, e)
        finally:
            self._conns.discard(task)
            writer.close()

    async def _answer(self, frame: memoryview, auth: SaslServerAuthenticator | None, peer: Any
                      ) -> tuple[list[Any], bool]:
        """The response's chunks, and whether to close the connection once it is written."""
        key, version, correlation_id = peek_header(frame)
        api: Api | None = (API_VERSIONS if key == API_VERSIONS.key
                           else QUORUM_APIS.get(key) or self.extra_apis.get(key))
        if api is None:
            raise DecodeError(f"API key {key} is not served on the quorum listener")
        if not api.min_version <= version <= api.max_version:
            if key == API_VERSIONS.key:  # Kafka answers a too-new ApiVersions in v0 with UNSUPPORTED_VERSION
                body = dict(api_versions_body(0, self.extra_apis), error_code=ErrorCode.UNSUPPORTED_VERSION)
                return encode_response(API_VERSIONS, 0, correlation_id, body), False
            raise DecodeError(f"{api.name} v{version} is not supported ({api.min_version}-{api.max_version})")
        header, body = decode_request(frame, api)
        if key == API_VERSIONS.key:
            return encode_response(api, version, correlation_id, api_versions_body(version, self.extra_apis)), False
        if auth is not None:
            now_ms = int(time.time() * 1000)
            if key in (SASL_HANDSHAKE.key, SASL_AUTHENTICATE.key):
                return await self._sasl(api, version, header.correlation_id, body, auth, now_ms, peer)
            if not auth.authenticated:
                raise DecodeError(f"{api.name} before SASL authentication on the quorum listener")
            if auth.session_expired(now_ms):
                raise DecodeError(f"{api.name} after the SASL session of User:{auth.principal_name} expired "
                                  "(connections.max.reauth.ms)")
        response = await self._dispatch(key, version, body)
        return encode_response(api, version, header.correlation_id, response), False

    async def _sasl(self, api: Api, version: int, correlation_id: int, body: Struct, auth: SaslServerAuthenticator,
                    now_ms: int, peer: Any) -> tuple[list[Any], bool]:
        """SaslHandshake / SaslAuthenticate through the listener's state machine; a failure is answered after
        connection.failed.authentication.delay.ms and closes the connection."""
        assert self.sasl is not None
        if api.key == SASL_HANDSHAKE.key:
            reply: SaslReply = auth.on_handshake(body.mechanism, version)
            response: dict[str, Any] = {"error_code": reply.error_code, "mechanisms": list(self.sasl.mechanisms)}
        else:
            reply = auth.on_authenticate(bytes(body.auth_bytes or b""), version, now_ms)
            response = {"error_code": reply.error_code, "error_message": reply.error_message,
                        "auth_bytes": reply.auth_bytes, "session_lifetime_ms": reply.session_lifetime_ms}
        if reply.failed:
            log.warning("quorum listener: SASL authentication of %s failed (%s): %s", peer, auth.mechanism,
                        reply.log_detail or reply.error_message)
            await asyncio.sleep(self.sasl.failed_authentication_delay_ms / 1000)
        return encode_response(api, version, correlation_id, response), reply.close
