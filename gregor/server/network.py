"""The socket server: moves bytes between TCP connections and the request dispatcher.

One asyncio Protocol per connection. Requests are decoded as they arrive and handed to
the dispatcher; a handler may answer at once or later (a parked Fetch, a Produce waiting
for acks), but responses always leave in request order, as Kafka clients require. Limits:
frame size (socket.request.max.bytes), requests in flight per connection
(queued.max.requests, reads pause beyond it), and the transport's write buffer (reads
pause while it is full). A malformed frame closes only its own connection.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
from typing import TYPE_CHECKING, Any

from gregor.protocol.frames import FrameDecoder, encode_response, peek_header
from gregor.protocol.primitives import DecodeError

if TYPE_CHECKING:
    from gregor.server.dispatcher import Dispatcher

log = logging.getLogger("gregor.network")


class _Slot:
    """A response position in a connection's ordered output queue."""

    __slots__ = ("chunks", "done")

    def __init__(self) -> None:
        self.chunks: list[Any] | None = None
        self.done = False


class Connection(asyncio.Protocol):
    def __init__(self, server: SocketServer) -> None:
        self.server = server
        self.dispatcher = server.dispatcher
        self.decoder = FrameDecoder(server.max_request_bytes)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.pending: collections.deque[_Slot] = collections.deque()
        self.closed = False
        self._reading_paused = False
        self._writing_paused = False

    # --- asyncio callbacks -----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport subclasses
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        transport.set_write_buffer_limits(high=8 * 1024 * 1024)
        self.server.connections.add(self)
        if len(self.server.connections) > self.server.max_connections:
            self.close("too many connections (max.connections)")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        self.pending.clear()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            frames = self.decoder.feed(data)
        except DecodeError as e:
            self.close(str(e))
            return
        for frame in frames:
            if self.closed:
                return
            self._handle_frame(frame)

    # --- requests --------------------------------------------------------------------
    def _handle_frame(self, frame: memoryview) -> None:
        try:
            api_key, version, correlation_id = peek_header(frame)
        except DecodeError as e:
            self.close(f"malformed request header: {e}")
            return
        try:
            result = self.dispatcher.dispatch(self, frame, api_key, version, correlation_id)
        except CloseConnection as e:
            self.close(str(e))
            return
        if result is None:
            return  # no response expected (acks=0)
        api, body = result
        if isinstance(body, asyncio.Future):
            slot = _Slot()
            self.pending.append(slot)
            body.add_done_callback(lambda fut: self._complete(slot, api, version, correlation_id, fut))
            self._update_reading()
            return
        chunks = encode_response(api, version, correlation_id, body)
        if not self.pending:
            self._write(chunks)
        else:
            slot = _Slot()
            slot.chunks = chunks
            slot.done = True
            self.pending.append(slot)

    def _complete(self, slot: _Slot, api: Any, version: int, correlation_id: int, fut: asyncio.Future[Any]) -> None:
        if self.closed:
            return
        if fut.cancelled():
            self.close("request cancelled")
            return
        exc = fut.exception()
        if exc is not None:
            log.error("request from %s failed: %r", self.peer, exc, exc_info=exc)
            self.close(f"internal error: {exc!r}")
            return
        slot.chunks = encode_response(api, version, correlation_id, fut.result())
        slot.done = True
        while self.pending and self.pending[0].done:
            head = self.pending.popleft()
            assert head.chunks is not None
            self._write(head.chunks)
        self._update_reading()

    def _write(self, chunks: list[Any]) -> None:
        if self.transport is not None and not self.closed:
            self.transport.writelines(chunks)

    def _update_reading(self) -> None:
        if self.transport is None or self.closed:
            return
        should_pause = self._writing_paused or len(self.pending) >= self.server.max_queued_requests
        if should_pause and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        elif not should_pause and self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()

    def write_raw(self, data: bytes) -> None:
        """Send pre-encoded bytes now (the ApiVersions v0 error reply), keeping order."""
        if not self.pending:
            self._write([data])
        else:
            slot = _Slot()
            slot.chunks = [data]
            slot.done = True
            self.pending.append(slot)

    def close(self, reason: str) -> None:
        if self.closed:
            return
        log.warning("closing connection from %s: %s", self.peer, reason)
        self.closed = True
        self.server.connections.discard(self)
        if self.transport is not None:
            self.transport.close()


class CloseConnection(Exception):
    """Raised by the dispatcher when Kafka would close the connection (unknown API, bad request)."""


class SocketServer:
    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        max_request_bytes: int,
        max_queued_requests: int,
        max_connections: int,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
    ) -> None:
        self.dispatcher = dispatcher
        self.max_request_bytes = max_request_bytes
        self.max_queued_requests = max_queued_requests
        self.max_connections = max_connections
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        self.connections: set[Connection] = set()
        self.servers: list[asyncio.AbstractServer] = []

    async def listen(self, host: str, port: int) -> int:
        """Start listening; returns the bound port (useful with port 0)."""
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(lambda: Connection(self), host or None, port, reuse_address=True, backlog=1024)
        for sock in srv.sockets:
            if self.receive_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
            if self.send_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
        self.servers.append(srv)
        return srv.sockets[0].getsockname()[1]

    def stop_accepting(self) -> None:
        for srv in self.servers:
            srv.close()

    async def drain(self, timeout_s: float) -> None:
        """Wait (bounded) for in-flight responses to be written, then close every connection."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while any(c.pending for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for c in list(self.connections):
            if c.transport is not None:
                c.transport.close()
        for srv in self.servers:
            await srv.wait_closed()
