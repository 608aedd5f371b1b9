"""A client connection: an asyncio protocol that turns bytes into request frames and responses into bytes.

Requests are decoded as they arrive and handed to the dispatcher; a handler may answer at once or
later (a parked Fetch, a Produce waiting for acks), but responses always leave in request order, as
Kafka clients require (the output queue of `_Slot`s). A malformed frame closes only its own
connection. The limits it applies are its server's (gregor.network.socket_server describes the
memory bound they make); its share of the request pool is gregor.network.memory_pool's.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import ssl
import time
from typing import TYPE_CHECKING, Any, Protocol

from gregor.network.memory_pool import READ_BUFFER_BYTES, ConnectionReservations, RequestMemoryPool
from gregor.protocol.frames import FrameDecoder, encode_response, peek_header
from gregor.protocol.primitives import DecodeError
from gregor.protocol.schema import Api, Struct
from gregor.security.listeners import ListenerSpec
from gregor.security.principal import ANONYMOUS, KafkaPrincipal
from gregor.security.sasl.authenticator import SaslServerAuthenticator
from gregor.security.tls import ServerTls, peer_principal_name

if TYPE_CHECKING:
    from gregor.metrics.registry import BrokerMetrics

log = logging.getLogger("gregor.network")

# What a handler answers: the response body, or a Future of it.
ResponseBody = Struct | dict[str, Any] | asyncio.Future[Any]


class CloseConnection(Exception):
    """Raised by the dispatcher when Kafka would close the connection (unknown API, bad request)."""


class RequestDispatcher(Protocol):
    """What the network hands each complete request frame to (gregor.api.dispatcher.Dispatcher).

    Returns (api, response body or a Future of it), or None when no response is sent; raises
    CloseConnection when Kafka would close the connection."""

    def dispatch(self, conn: Connection, frame: memoryview, api_key: int, version: int,
                 correlation_id: int) -> tuple[Api, ResponseBody] | None: ...


class ConnectionServer(Protocol):
    """What a connection needs of its server (gregor.network.socket_server.SocketServer): the limits,
    the shared pool and counters, and the admission of connections."""

    dispatcher: RequestDispatcher
    metrics: BrokerMetrics | None
    pool: RequestMemoryPool
    max_request_bytes: int
    max_queued_requests: int
    max_response_bytes: int
    max_connection_response_bytes: int
    charged_bytes: int  # read for responses not yet built, all connections
    backlogged: set[Connection]  # may have bytes in their transport's buffer

    def admit(self, conn: Connection) -> str | None: ...
    def refused(self, peer: str, reason: str) -> None: ...
    def forget(self, conn: Connection) -> None: ...
    def loop_time(self) -> float: ...
    def queued_output_bytes(self) -> int: ...


class _Slot:
    """A response position in a connection's ordered output queue."""

    __slots__ = ("chunks", "done", "nbytes", "request", "timing")

    def __init__(self) -> None:
        self.chunks: list[Any] | None = None
        self.done = False
        self.nbytes = 0  # of the response, once built
        self.request: memoryview | None = None  # the request frame, until its response is built
        # With metrics on: [api key, response body, queue ns, local ns, remote ns, built at ns] (_Timing)
        self.timing: list[Any] | None = None


_PLAIN_LISTENER = ListenerSpec("PLAINTEXT", "PLAINTEXT", "", 0)


class Connection(asyncio.BufferedProtocol):
    """One client connection: frames in, requests to the dispatcher, responses out in request order.

    It reads only while it may: not while its backlog waits, its transport's buffer is full, the
    pool has no room for its next frame, it is muted by a quota, or queued.max.requests of its
    requests are in flight."""

    def __init__(self, server: ConnectionServer, listener: ListenerSpec = _PLAIN_LISTENER,
                 tls: ServerTls | None = None) -> None:
        self.server = server
        self.dispatcher = server.dispatcher
        self.listener = listener
        self.tls = tls
        # Who this connection acts for: ANONYMOUS until a SASL exchange or a client certificate says otherwise.
        self.principal: KafkaPrincipal = ANONYMOUS
        # On SASL listeners only ApiVersions and the SASL requests are served until authentication succeeds.
        self.authenticated = not listener.uses_sasl
        self.sasl: SaslServerAuthenticator | None = None  # its SASL state (gregor.api.handlers.sasl)
        self._handshaking = False
        self.decoder = FrameDecoder(server.max_request_bytes, self._reserve, READ_BUFFER_BYTES)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.ip = ""
        self.pending: collections.deque[_Slot] = collections.deque()
        self.closed = False
        self.reservations = ConnectionReservations(server.pool, self)
        self.queued_slot_bytes = 0  # responses built, waiting behind an earlier one
        self.charges: dict[int, int] = {}  # correlation id -> response bytes read, not yet built
        self.last_active = 0.0
        self.backlog: collections.deque[memoryview] = collections.deque()  # received, not yet processed
        # With metrics on (gregor.metrics.registry), when each backlog frame was received (perf_counter ns).
        self.metrics: BrokerMetrics | None = server.metrics
        self.received_ns: collections.deque[int] = collections.deque()
        self._retry: asyncio.TimerHandle | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._waiting_for_memory = False
        # KIP-219: a throttled client's connection is not read and its requests not processed
        # until this loop time (gregor.api.throttling); _unmute is the timer that ends it.
        self.muted_until = 0.0
        self._unmute: asyncio.TimerHandle | None = None
        self.quota_client: tuple[KafkaPrincipal, str, tuple[str, str]] | None = None  # gregor.api.throttling

    # --- asyncio callbacks -----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport subclasses
        self.last_active = asyncio.get_running_loop().time()
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.ip = str(peer[0]) if isinstance(peer, tuple) else self.peer
        if self.ip.startswith("::ffff:") and "." in self.ip:
            self.ip = self.ip[7:]  # an IPv4 client on a dual-stack listener counts as its IPv4 address
        refusal = self.server.admit(self)
        if refusal is not None:
            self.closed = True  # reported by the server, at most once a second: a flood must not flood the log
            self.server.refused(self.peer, refusal)
            transport.close()
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.transport.set_write_buffer_limits(high=self.server.max_connection_response_bytes)
        if self.tls is not None:
            self._handshaking = True  # TlsChannel calls tls_established once the client is verified

    def tls_established(self, sslobj: ssl.SSLObject, tls: ServerTls) -> None:
        """The TLS handshake succeeded: on an SSL listener the client certificate's subject, mapped by
        ssl.principal.mapping.rules, is the principal (SASL_SSL listeners authenticate by SASL instead)."""
        self._handshaking = False
        if not self.listener.uses_sasl:
            name = peer_principal_name(sslobj, tls.mapper)
            if name is not None:
                self.principal = KafkaPrincipal("User", name)
        self._update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._teardown()
        self.pending.clear()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self.last_active = asyncio.get_running_loop().time()
        self._dispatch_backlog()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self.closed:
            return
        self.last_active = self.server.loop_time()
        try:
            frames = self.decoder.buffer_updated(nbytes)
        except DecodeError as e:
            self.close(str(e))
            return
        self._handle_frames(frames)

    def eof_received(self) -> bool | None:
        return None  # close our side too

    # --- request memory (gregor.network.memory_pool) ----------------------------------
    def _reserve(self, size: int, small: bool, api_key: int) -> bool:
        """The decoder asks before it buffers a frame: True when the pool reserved for it now."""
        if self.reservations.reserve(size, api_key):
            self._waiting_for_memory = False
            return True
        self._waiting_for_memory = True
        self._update_reading()
        return False

    def reservation_granted(self, amount: int, tier: int) -> None:
        """The pool reserved `amount` for the frame this connection waits on."""
        if self.closed:
            self.server.pool.release(amount, tier)
            return
        self.reservations.held[tier] += amount
        self._waiting_for_memory = False
        try:
            frames = self.decoder.granted()
        except DecodeError as e:
            self.close(str(e))
            return
        self._handle_frames(frames)

    def _release_all(self) -> None:
        """On close: the pool's bytes and the responses' charges go back."""
        self.reservations.release_all()
        for n in self.charges.values():
            self.server.charged_bytes -= n
        self.charges.clear()

    # --- requests --------------------------------------------------------------------
    def _handle_frames(self, frames: list[memoryview]) -> None:
        if frames:
            self.backlog.extend(frames)
            if self.metrics is not None:
                now_ns = time.perf_counter_ns()
                if len(frames) == 1:
                    self.received_ns.append(now_ns)
                else:
                    self.received_ns.extend([now_ns] * len(frames))
        self._dispatch_backlog()

    def _may_dispatch(self) -> bool:
        """Whether to process another request now. Not while queued.max.requests are in
        flight; not while this connection's unwritten responses pass its bound, or while it
        has any and the broker-wide ones pass queued.max.response.bytes. A connection with
        nothing queued is always served, so clients that read their responses progress."""
        if self._writing_paused or self._unmute is not None or len(self.pending) >= self.server.max_queued_requests:
            return False
        own = self.queued_output_bytes()
        if own == 0:
            return True
        return (own <= self.server.max_connection_response_bytes
                and self.server.queued_output_bytes() <= self.server.max_response_bytes)

    def _dispatch_backlog(self) -> None:
        backlog = self.backlog
        while backlog and not self.closed and self._may_dispatch():
            self._handle_frame(backlog.popleft())
        if backlog and not self.closed and not self._writing_paused and self._retry is None \
                and self._unmute is None and len(self.pending) < self.server.max_queued_requests:
            # Held back by bytes that drain without a callback: look again shortly.
            self._retry = asyncio.get_running_loop().call_later(0.01, self._retry_backlog)
        self._update_reading()

    def _retry_backlog(self) -> None:
        self._retry = None
        if not self.closed:
            self._dispatch_backlog()

    def _handle_frame(self, frame: memoryview) -> None:
        try:
            api_key, version, correlation_id = peek_header(frame)
        except DecodeError as e:
            self.reservations.release(frame)
            self.close(f"malformed request header: {e}")
            return
        m = self.metrics
        if m is not None:  # Kafka's RequestMetrics: queue time, then the handler's (local) time
            started_ns = time.perf_counter_ns()
            queue_ns = started_ns - self.received_ns.popleft() if self.received_ns else 0
        try:
            result = self.dispatcher.dispatch(self, frame, api_key, version, correlation_id)
        except CloseConnection as e:
            self.reservations.release(frame)
            self.close(str(e))
            return
        if m is not None:
            local_end_ns = time.perf_counter_ns()
        if result is None:
            self.reservations.release(frame)  # no response expected (acks=0)
            if m is not None:
                m.record_request(api_key, None, queue_ns, local_end_ns - started_ns, 0, 0)
            return
        api, body = result
        if isinstance(body, asyncio.Future):
            slot = _Slot()
            slot.request = frame
            if m is not None:
                slot.timing = [api_key, None, queue_ns, local_end_ns - started_ns, 0, local_end_ns]
            self.pending.append(slot)
            body.add_done_callback(lambda fut: self._complete(slot, api, version, correlation_id, fut))
            return
        chunks = encode_response(api, version, correlation_id, body)
        self.uncharge(correlation_id)
        self.reservations.release(frame)
        if not self.pending:
            self._write(chunks)
            if m is not None:  # the common case: no list of timings, the counters at once
                m.record_request(api_key, body, queue_ns, local_end_ns - started_ns, 0,
                                 time.perf_counter_ns() - local_end_ns)
        else:
            slot = _Slot()
            slot.chunks = chunks
            slot.done = True
            slot.nbytes = _nbytes(chunks)
            if m is not None:
                slot.timing = [api_key, body, queue_ns, local_end_ns - started_ns, 0, local_end_ns]
            self.queued_slot_bytes += slot.nbytes
            self.pending.append(slot)

    def _record(self, timing: list[Any]) -> None:
        """A response was handed to the socket: its RequestMetrics (send time: since it was built)."""
        assert self.metrics is not None
        self.metrics.record_request(timing[0], timing[1], timing[2], timing[3], timing[4],
                                    time.perf_counter_ns() - timing[5])

    def _complete(self, slot: _Slot, api: Api, version: int, correlation_id: int, fut: asyncio.Future[Any]) -> None:
        if self.closed:
            return
        self.uncharge(correlation_id)
        assert slot.request is not None
        self.reservations.release(slot.request)
        slot.request = None
        if fut.cancelled():
            self.close("request cancelled")
            return
        exc = fut.exception()
        if exc is not None:
            log.error("request from %s failed: %r", self.peer, exc, exc_info=exc)
            self.close(f"internal error: {exc!r}")
            return
        timing = slot.timing
        if timing is not None:  # the remote time: parked in the purgatory (or an executor) until now
            now_ns = time.perf_counter_ns()
            timing[1] = fut.result()
            timing[4] = now_ns - timing[5]
            timing[5] = now_ns
        slot.chunks = encode_response(api, version, correlation_id, fut.result())
        slot.done = True
        slot.nbytes = _nbytes(slot.chunks)
        self.queued_slot_bytes += slot.nbytes
        while self.pending and self.pending[0].done:
            head = self.pending.popleft()
            assert head.chunks is not None
            self.queued_slot_bytes -= head.nbytes
            self._write(head.chunks)
            if head.timing is not None:
                self._record(head.timing)
        self._dispatch_backlog()

    def _write(self, chunks: list[Any]) -> None:
        if self.transport is not None and not self.closed:
            self.transport.writelines(chunks)
            self.last_active = self.server.loop_time()
            if self.transport.get_write_buffer_size():
                self.server.backlogged.add(self)

    def _update_reading(self) -> None:
        if self.transport is None or self.closed or self._handshaking:
            return
        should_pause = (bool(self.backlog) or self._writing_paused or self._waiting_for_memory
                        or self._unmute is not None or len(self.pending) >= self.server.max_queued_requests)
        if should_pause and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        elif not should_pause and self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()

    # --- throttling (KIP-219) ----------------------------------------------------------
    def throttle(self, delay_ms: int) -> None:
        """Mute this connection for `delay_ms`: its responses still go out, but nothing more is
        read from it or processed until then (a longer throttle extends a shorter one)."""
        if delay_ms <= 0 or self.closed or self.transport is None:
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + delay_ms / 1000.0
        if until <= self.muted_until:
            return
        self.muted_until = until
        if self._unmute is not None:
            self._unmute.cancel()
        self._unmute = loop.call_at(until, self._unmuted)
        self._update_reading()

    def _unmuted(self) -> None:
        self._unmute = None
        if not self.closed:
            self._dispatch_backlog()

    # --- response memory -------------------------------------------------------------
    def queued_output_bytes(self) -> int:
        """Responses built for this connection and not yet written to its socket."""
        buffered = self.transport.get_write_buffer_size() if self.transport is not None and not self.closed else 0
        return buffered + self.queued_slot_bytes + (sum(self.charges.values()) if self.charges else 0)

    def response_room(self) -> tuple[int, bool]:
        """How many bytes a response built now may carry, and whether it may still carry one
        batch beyond that (KIP-74). The broker-wide queued.max.response.bytes always counts;
        a connection that already has responses waiting also gets only what is left of its
        own bound, and no extra batch, so a client that does not read gets ever smaller
        answers while others keep progressing."""
        own = self.queued_output_bytes()
        room = self.server.max_response_bytes - self.server.queued_output_bytes()
        if own:
            room = min(room, self.server.max_connection_response_bytes - own)
        return max(room, 0), own == 0

    def charge_response(self, correlation_id: int, nbytes: int) -> None:
        """A handler read `nbytes` for the response to `correlation_id` (counted until built)."""
        if nbytes and not self.closed:
            self.charges[correlation_id] = self.charges.get(correlation_id, 0) + nbytes
            self.server.charged_bytes += nbytes

    def uncharge(self, correlation_id: int) -> None:
        """Forget what was read for `correlation_id` (its response was built, or the read dropped)."""
        if self.charges:
            n = self.charges.pop(correlation_id, 0)
            self.server.charged_bytes -= n

    def write_raw(self, data: bytes) -> None:
        """Send pre-encoded bytes now (the ApiVersions v0 error reply), keeping order."""
        if not self.pending:
            self._write([data])
        else:
            slot = _Slot()
            slot.chunks = [data]
            slot.done = True
            slot.nbytes = len(data)
            self.queued_slot_bytes += slot.nbytes
            self.pending.append(slot)

    def close(self, reason: str) -> None:
        if self.closed:
            return
        log.warning("closing connection from %s: %s", self.peer, reason)
        self.close_quietly()

    def close_quietly(self) -> None:
        """Close without a log line (the caller logged why)."""
        if self.closed:
            return
        self._teardown()
        if self.transport is not None:
            self.transport.close()

    def _teardown(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
        if self._unmute is not None:
            self._unmute.cancel()
        self.backlog.clear()
        self.received_ns.clear()
        self._release_all()
        self.closed = True
        self.server.forget(self)


def _nbytes(chunks: list[Any]) -> int:
    return sum(len(c) if not isinstance(c, memoryview) else c.nbytes for c in chunks)

