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
(client certificates required or not by its `ssl.client.auth`); not SASL (see docs/kraft.md).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from gregor.protocol.errors import ErrorCode
from gregor.protocol.frames import decode_request, encode_response, peek_header
from gregor.protocol.messages.api_versions import API_VERSIONS
from gregor.protocol.primitives import DecodeError
from gregor.protocol.schema import Api, Struct
from gregor.raft.wire import QUORUM_APIS

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
                 extra_apis: dict[int, Api] | None = None) -> None:
        """`extra_apis`: more APIs the owner answers through `dispatch` (a controller's: the brokers' requests)."""
        self._dispatch = dispatch
        self.max_request_bytes = max_request_bytes
        self.max_connections = max_connections
        self.extra_apis = dict(extra_apis or {})
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
        try:
            while True:
                size = _SIZE.unpack(await reader.readexactly(4))[0]
                if size < 8 or size > self.max_request_bytes:
                    raise DecodeError(f"request of {size} bytes (socket.request.max.bytes is {self.max_request_bytes})")
                frame = memoryview(await reader.readexactly(size))
                chunks = await self._answer(frame)
                writer.writelines(bytes(c) for c in chunks)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        except DecodeError as e:
            log.warning("quorum listener: closing the connection from %s: %s", peer, e)
        finally:
            self._conns.discard(task)
            writer.close()

    async def _answer(self, frame: memoryview) -> list[Any]:
        key, version, correlation_id = peek_header(frame)
        api: Api | None = (API_VERSIONS if key == API_VERSIONS.key
                           else QUORUM_APIS.get(key) or self.extra_apis.get(key))
        if api is None:
            raise DecodeError(f"API key {key} is not served on the quorum listener")
        if not api.min_version <= version <= api.max_version:
            if key == API_VERSIONS.key:  # Kafka answers a too-new ApiVersions in v0 with UNSUPPORTED_VERSION
                body = dict(api_versions_body(0, self.extra_apis), error_code=ErrorCode.UNSUPPORTED_VERSION)
                return encode_response(API_VERSIONS, 0, correlation_id, body)
            raise DecodeError(f"{api.name} v{version} is not supported ({api.min_version}-{api.max_version})")
        header, body = decode_request(frame, api)
        if key == API_VERSIONS.key:
            return encode_response(api, version, correlation_id, api_versions_body(version, self.extra_apis))
        response = await self._dispatch(key, version, body)
        return encode_response(api, version, header.correlation_id, response)
