"""The socket server: moves bytes between TCP connections and the request dispatcher.

One asyncio BufferedProtocol per connection. Requests are decoded as they arrive and handed
to the dispatcher; a handler may answer at once or later (a parked Fetch, a Produce waiting
for acks), but responses always leave in request order, as Kafka clients require. A
malformed frame closes only its own connection.

Memory is bounded whoever connects. What the broker holds for clients, and what bounds it:

- Connections: `max.connections` (broker-wide; `listener.name.<l>.max.connections` per listener), `max.connections.per.ip` and
  `max.connections.per.ip.overrides` (host:count,...); a connection over a limit is closed
  at once. `connections.max.idle.ms` closes connections with nothing in flight that sent
  nothing and were sent nothing for that long - which also ends clients that stop reading.
- A 64 KiB read buffer per connection (`READ_BUFFER_BYTES`); frames that fit it ("small")
  wait there until complete.
- Requests, broker-wide: `queued.max.request.bytes` (B), a pool from which every frame
  reserves before it is buffered or decoded - a larger frame when its size and API key
  arrive (after the `socket.request.max.bytes` check), a small one when complete - and
  releases when its response is built (not written: nothing waits on a client to free
  pool bytes, so waiting cannot deadlock). A request other than Produce reserves
  `DECODE_EXPANSION` (16) times its size, as its topics and partitions decode into Python
  objects about 13-15 times the wire size (measured); one that could never fit is refused
  from its header. A connection whose reservation is refused stops reading until bytes
  are released. A connection that already holds its share of the pool (B / max.connections,
  at least 1 MiB) waits for its own requests to finish before it may reserve more, so
  clients that park many requests (Fetches with long max.wait.ms) starve only themselves.
  Tiers keep clients who hold maximum-size frames half-sent from starving the rest: large frames (> 1 MiB) together hold at most socket.request.max.bytes of B,
  large and medium ones (producers' batches) at most B minus a quarter of the remainder,
  and small ones may use all of B; waiters are served in order within their tier. Config
  validation keeps socket.request.max.bytes <= B so every legal frame can be admitted.
- Responses: a connection processes no further request while its unwritten responses
  pass `queued.max.response.bytes.per.connection`, or while it has any and those of all
  connections pass `queued.max.response.bytes` (G); received frames wait in its backlog
  and it is not read meanwhile. Fetch sizes each read to what is left of G (and of the
  connection's own bound when it has responses queued); a connection with nothing queued
  still gets one batch beyond that (KIP-74), so consumers always progress.

The bound with default settings (max.connections 500, B 128 MiB, G 64 MiB, batches of at
most message.max.bytes, 1 MiB): B + G + 500 x (64 KiB read buffer + one response beyond G:
a batch, or a small non-Fetch answer) ~= 722 MiB, plus the Produce request being decoded
(its records stay bytes; the decoder allows it few enough entries that even a 100 MiB one
costs at most ~70 MB more, see gregor.protocol.frames.produce_entry_budget), plus fetch
sessions (at most gregor.fetch.session.cache.max.partitions partitions of ~300 bytes: ~60 MB,
see gregor.api.fetch_session), plus the interpreter and the broker's state (~70-100 MiB
with few partitions): under 1 GiB whatever clients do. It assumes responses other than Fetch stay small (Metadata grows with the
topic count) and batches no larger than the default message.max.bytes.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import struct
import time
from typing import TYPE_CHECKING, Any, Protocol

from gregor.config.broker import parse_ip_overrides
from gregor.configdef import ConfigError
from gregor.network.tls_channel import TlsChannel
from gregor.protocol.frames import FrameDecoder, FrameTooLarge, encode_response, peek_header
from gregor.protocol.primitives import DecodeError
from gregor.security.listeners import ListenerSpec
from gregor.security.principal import ANONYMOUS, KafkaPrincipal
from gregor.security.tls import ServerTls, peer_principal_name

if TYPE_CHECKING:
    from gregor.metrics.registry import BrokerMetrics

log = logging.getLogger("gregor.network")

READ_BUFFER_BYTES = 64 * 1024  # per connection; frames that fit it are "small"
MEDIUM_FRAME_BYTES = 1024 * 1024  # up to a producer's default batch size: "medium"
DECODE_EXPANSION = 16  # decoded size / frame size of requests other than Produce (measured 13-15)
PRODUCE_API_KEY = 0
_API_KEY = struct.Struct(">h")


class RequestDispatcher(Protocol):
    """What the network hands each complete request frame to (gregor.api.dispatcher.Dispatcher).

    Returns (api, response body or a Future of it), or None when no response is sent; raises
    CloseConnection when Kafka would close the connection."""

    def dispatch(self, conn: Connection, frame: memoryview, api_key: int, version: int,
                 correlation_id: int) -> tuple[Any, Any] | None: ...


class RequestMemoryPool:
    """Bytes of partially received and queued requests, broker-wide (queued.max.request.bytes).

    Frames fall in three tiers by size: small (fit the read buffer), medium (up to 1 MiB, as
    a producer's batches are) and large. Each tier has a share that frames of that tier and
    larger together may not pass: large frames `large_limit_bytes` (socket.request.max.bytes),
    medium and large ones all but a quarter of what large frames cannot take, small frames
    all of it. So however many maximum-size frames are held half-sent, producers' batches
    still have room, and small requests have room even when batches fill theirs. Refused
    reservations wait, in order within a tier, and are granted as bytes are released.
    """

    def __init__(self, capacity_bytes: int, large_limit_bytes: int, small_frame_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.small_frame_bytes = small_frame_bytes
        large = min(large_limit_bytes, capacity_bytes)
        self.limits = (capacity_bytes, capacity_bytes - (capacity_bytes - large) // 4, large)
        self.used = [0, 0, 0]  # bytes held by frames of tier >= i
        self.waiters: collections.deque[tuple[Connection, int, int]] = collections.deque()

    def tier(self, size: int) -> int:
        if size <= self.small_frame_bytes:
            return 0
        return 1 if size <= MEDIUM_FRAME_BYTES else 2

    @property
    def used_bytes(self) -> int:
        return self.used[0]

    def _fits(self, size: int, tier: int) -> bool:
        return all(self.used[k] + size <= self.limits[k] for k in range(tier + 1))

    def _take(self, size: int, tier: int) -> None:
        for k in range(tier + 1):
            self.used[k] += size

    def try_reserve(self, amount: int, tier: int) -> bool:
        """Reserve now if the bytes are free and no frame of the same tier waits (no overtaking)."""
        if self.waiters and any(w[2] == tier for w in self.waiters):
            return False
        if not self._fits(amount, tier):
            return False
        self._take(amount, tier)
        return True

    def wait(self, conn: Connection, amount: int, tier: int) -> None:
        self.waiters.append((conn, amount, tier))

    def cancel(self, conn: Connection) -> None:
        if self.waiters:
            self.waiters = collections.deque(w for w in self.waiters if w[0] is not conn)

    def release(self, size: int, tier: int) -> None:
        for k in range(tier + 1):
            self.used[k] -= size
            assert self.used[k] >= 0
        if self.waiters:
            self._grant_waiters()

    def _grant_waiters(self) -> None:
        kept: collections.deque[tuple[Connection, int, int]] = collections.deque()
        blocked: set[int] = set()
        loop = asyncio.get_running_loop()
        for conn, amount, tier in self.waiters:
            if tier not in blocked and self._fits(amount, tier):
                self._take(amount, tier)
                loop.call_soon(conn.reservation_granted, amount, tier)
            else:
                blocked.add(tier)  # keep order within a tier
                kept.append((conn, amount, tier))
        self.waiters = kept


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
    def __init__(self, server: SocketServer, listener: ListenerSpec = _PLAIN_LISTENER,
                 tls: ServerTls | None = None) -> None:
        self.server = server
        self.dispatcher = server.dispatcher
        self.listener = listener
        self.tls = tls
        # Who this connection acts for: ANONYMOUS until a SASL exchange or a client certificate says otherwise.
        self.principal: KafkaPrincipal = ANONYMOUS
        # On SASL listeners only ApiVersions and the SASL requests are served until authentication succeeds.
        self.authenticated = not listener.uses_sasl
        self.sasl: Any = None  # the SASL authenticator of this connection (gregor.security.sasl)
        self._handshaking = False
        self.decoder = FrameDecoder(server.max_request_bytes, self._reserve, READ_BUFFER_BYTES)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.ip = ""
        self.pending: collections.deque[_Slot] = collections.deque()
        self.closed = False
        self.reserved_bytes = [0, 0, 0]  # request bytes this connection holds in the pool, by tier
        self.queued_slot_bytes = 0  # responses built, waiting behind an earlier one
        self.charges: dict[int, int] = {}  # correlation id -> response bytes read, not yet built
        self.last_active = 0.0
        self.backlog: collections.deque[memoryview] = collections.deque()  # received, not yet processed
        # With metrics on (gregor.metrics.registry), when each backlog frame was received (perf_counter ns).
        self.metrics: BrokerMetrics | None = getattr(server, "metrics", None)
        self.received_ns: collections.deque[int] = collections.deque()
        self._retry: asyncio.TimerHandle | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._waiting_for_memory = False
        self._own_wait: tuple[int, int] | None = None  # a reservation over this connection's share
        # KIP-219: a throttled client's connection is not read and its requests not processed
        # until this loop time (gregor.api.throttling); _unmute is the timer that ends it.
        self.muted_until = 0.0
        self._unmute: asyncio.TimerHandle | None = None
        self.quota_client: tuple[Any, str, tuple[str, str]] | None = None  # gregor.api.throttling.client_of

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

    def tls_established(self, sslobj: Any, tls: ServerTls) -> None:
        """The TLS handshake succeeded: on an SSL listener the client certificate's subject, mapped by
        ssl.principal.mapping.rules, is the principal (SASL_SSL listeners authenticate by SASL instead)."""
        self._handshaking = False
        if not self.listener.uses_sasl:
            name = peer_principal_name(sslobj, tls.mapper)
            if name is not None:
                self.principal = KafkaPrincipal("User", name)
        self._update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._retry is not None:
            self._retry.cancel()
        if self._unmute is not None:
            self._unmute.cancel()
        self.backlog.clear()
        self.received_ns.clear()
        self._release_all()
        self.closed = True
        self.server.forget(self)
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

    # --- request memory --------------------------------------------------------------
    def _cost(self, size: int, api_key: int) -> tuple[int, int]:
        """What a frame reserves, and its tier. A request other than Produce is decoded into
        Python objects about DECODE_EXPANSION times its size (its arrays of topics and
        partitions); a Produce request's records stay bytes."""
        amount = size if api_key == PRODUCE_API_KEY else size * DECODE_EXPANSION
        return amount, self.server.pool.tier(size)

    def _reserve(self, size: int, small: bool, api_key: int) -> bool:
        pool = self.server.pool
        amount, tier = self._cost(size, api_key)
        if amount > pool.limits[tier]:
            raise FrameTooLarge(
                f"request (API key {api_key}) of {size} bytes is too large: decoded it would take {amount} bytes "
                f"of queued.max.request.bytes; requests other than Produce may be at most "
                f"1/{DECODE_EXPANSION} of its share ({pool.limits[tier] // DECODE_EXPANSION} bytes)")
        self._waiting_for_memory = True
        held = sum(self.reserved_bytes)
        if held and held + amount > self.server.connection_share_bytes:
            # Over its share: this connection waits for its own requests, not for others'.
            self._own_wait = (amount, tier)
        elif pool.try_reserve(amount, tier):
            self.reserved_bytes[tier] += amount
            self._waiting_for_memory = False
            return True
        else:
            pool.wait(self, amount, tier)
        self._update_reading()
        return False

    def reservation_granted(self, amount: int, tier: int) -> None:
        """The pool reserved `amount` for the frame this connection waits on."""
        if self.closed:
            self.server.pool.release(amount, tier)
            return
        self.reserved_bytes[tier] += amount
        self._waiting_for_memory = False
        try:
            frames = self.decoder.granted()
        except DecodeError as e:
            self.close(str(e))
            return
        self._handle_frames(frames)

    def _release(self, frame: memoryview) -> None:
        api_key = _API_KEY.unpack_from(frame)[0] if len(frame) >= 2 else -1
        amount, tier = self._cost(len(frame), api_key)
        self.reserved_bytes[tier] -= amount
        self.server.pool.release(amount, tier)
        if self._own_wait is not None:
            want, want_tier = self._own_wait
            held = sum(self.reserved_bytes)
            if not held or held + want <= self.server.connection_share_bytes:
                self._own_wait = None
                if self.server.pool.try_reserve(want, want_tier):
                    asyncio.get_running_loop().call_soon(self.reservation_granted, want, want_tier)
                else:
                    self.server.pool.wait(self, want, want_tier)

    def _release_all(self) -> None:
        """On close: frames in flight and a partially received large frame give their bytes back."""
        pool = self.server.pool
        pool.cancel(self)
        self._own_wait = None
        for tier, n in enumerate(self.reserved_bytes):
            if n:
                self.reserved_bytes[tier] = 0
                pool.release(n, tier)
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
            self._release(frame)
            self.close(f"malformed request header: {e}")
            return
        m = self.metrics
        if m is not None:  # Kafka's RequestMetrics: queue time, then the handler's (local) time
            started_ns = time.perf_counter_ns()
            queue_ns = started_ns - self.received_ns.popleft() if self.received_ns else 0
        try:
            result = self.dispatcher.dispatch(self, frame, api_key, version, correlation_id)
        except CloseConnection as e:
            self._release(frame)
            self.close(str(e))
            return
        if m is not None:
            local_end_ns = time.perf_counter_ns()
        if result is None:
            self._release(frame)  # no response expected (acks=0)
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
        self._release(frame)
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

    def _complete(self, slot: _Slot, api: Any, version: int, correlation_id: int, fut: asyncio.Future[Any]) -> None:
        if self.closed:
            return
        self.uncharge(correlation_id)
        assert slot.request is not None
        self._release(slot.request)
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
        if self._retry is not None:
            self._retry.cancel()
        if self._unmute is not None:
            self._unmute.cancel()
        self.backlog.clear()
        self.received_ns.clear()
        self._release_all()
        self.closed = True
        self.server.forget(self)
        if self.transport is not None:
            self.transport.close()


def _nbytes(chunks: list[Any]) -> int:
    return sum(len(c) if not isinstance(c, memoryview) else c.nbytes for c in chunks)


class CloseConnection(Exception):
    """Raised by the dispatcher when Kafka would close the connection (unknown API, bad request)."""


class SocketServer:
    def __init__(
        self,
        dispatcher: RequestDispatcher,
        *,
        max_request_bytes: int,
        max_queued_requests: int,
        max_connections: int,
        max_connections_per_ip: int = 2**31 - 1,
        max_connections_per_ip_overrides: list[str] | None = None,
        connections_max_idle_ms: int = 600_000,
        max_queued_request_bytes: int = 128 * 1024 * 1024,
        max_response_bytes: int = 64 * 1024 * 1024,
        max_connection_response_bytes: int = 8 * 1024 * 1024,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
    ) -> None:
        if max_request_bytes > max_queued_request_bytes:
            raise ConfigError(f"socket.request.max.bytes ({max_request_bytes}) must not exceed "
                              f"queued.max.request.bytes ({max_queued_request_bytes})")
        self.dispatcher = dispatcher
        self.max_request_bytes = max_request_bytes
        self.max_queued_requests = max_queued_requests
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.ip_overrides = parse_ip_overrides(max_connections_per_ip_overrides or [])
        self.connections_max_idle_ms = connections_max_idle_ms
        self.max_response_bytes = max_response_bytes
        self.max_connection_response_bytes = max_connection_response_bytes
        self.pool = RequestMemoryPool(max_queued_request_bytes, max_request_bytes, READ_BUFFER_BYTES - 4)
        # What one connection may hold while it has requests in flight (its first is always
        # admitted): a fair part of the pool, so parked requests starve only their sender.
        self.connection_share_bytes = max(max_queued_request_bytes // max(max_connections, 1), MEDIUM_FRAME_BYTES)
        self._max_queued_request_bytes = max_queued_request_bytes
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        self.tls_handshake_timeout_s = 10.0
        self.connections: set[Connection] = set()
        self.per_ip: collections.Counter[str] = collections.Counter()
        # listener.name.<listener>.max.connections (lower-case listener name -> limit) and the open
        # connections of each listener: a listener's own limit applies besides the broker-wide one.
        self.listener_limits: dict[str, int] = {}
        self.per_listener: collections.Counter[str] = collections.Counter()
        self.backlogged: set[Connection] = set()  # may have bytes in their transport's buffer
        self.charged_bytes = 0  # read for responses not yet built, all connections
        self.servers: list[asyncio.AbstractServer] = []
        self.metrics: BrokerMetrics | None = None  # set by the broker when metrics.port is set
        self._idle_timer: asyncio.TimerHandle | None = None
        self._refusal_logged_at = -1e9
        self._refusals_unlogged = 0
        self._loop: asyncio.AbstractEventLoop | None = None


    def set_connection_limits(self, max_connections: int, per_ip: int, per_ip_overrides: list[str]) -> None:
        """max.connections, max.connections.per.ip and its overrides as the dynamic broker configs have
        them now (Kafka's DynamicConnectionQuota): new connections are checked against them; open ones
        over a lowered limit stay open, as in Kafka."""
        self.ip_overrides = parse_ip_overrides(per_ip_overrides)
        self.max_connections = max_connections
        self.max_connections_per_ip = per_ip
        self.connection_share_bytes = max(self._max_queued_request_bytes // max(max_connections, 1), MEDIUM_FRAME_BYTES)
    def set_listener_limits(self, limits: dict[str, int]) -> None:
        """Each listener's own max.connections (static or dynamic); as for the broker-wide limit, open
        connections over a lowered limit stay open and new ones are refused."""
        self.listener_limits = dict(limits)

    def loop_time(self) -> float:
        assert self._loop is not None
        return self._loop.time()

    # --- connection accounting -------------------------------------------------------
    def admit(self, conn: Connection) -> str | None:
        """Count a new connection; a reason to close it if it is over a limit."""
        if len(self.connections) >= self.max_connections:
            return f"too many connections: max.connections is {self.max_connections}"
        listener = conn.listener.name.lower()
        own = self.listener_limits.get(listener)
        if own is not None and self.per_listener[listener] >= own:
            return f"too many connections on listener {conn.listener.name}: listener.name.{listener}.max.connections is {own}"
        limit = self.ip_overrides.get(conn.ip, self.max_connections_per_ip)
        if self.per_ip[conn.ip] >= limit:
            return f"too many connections from {conn.ip}: max.connections.per.ip is {limit}"
        self.connections.add(conn)
        self.per_ip[conn.ip] += 1
        self.per_listener[listener] += 1
        return None

    def refused(self, peer: str, reason: str) -> None:
        """Log a refused connection; further refusals within a second are counted, then summed up."""
        now = self.loop_time()
        if now - self._refusal_logged_at >= 1.0:
            more = f" (and {self._refusals_unlogged} more refused since)" if self._refusals_unlogged else ""
            log.warning("closing connection from %s: %s%s", peer, reason, more)
            self._refusal_logged_at, self._refusals_unlogged = now, 0
        else:
            self._refusals_unlogged += 1

    def forget(self, conn: Connection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            self.per_ip[conn.ip] -= 1
            if self.per_ip[conn.ip] <= 0:
                del self.per_ip[conn.ip]
            self.per_listener[conn.listener.name.lower()] -= 1
        self.backlogged.discard(conn)

    def queued_output_bytes(self) -> int:
        """Responses built or being read and not yet written, all connections."""
        total = self.charged_bytes
        drained = []
        for c in self.backlogged:
            n = c.queued_output_bytes()
            if n == 0:
                drained.append(c)
            total += n
        for c in drained:
            self.backlogged.discard(c)
        return total

    def _check_idle(self) -> None:
        assert self._loop is not None
        now = self._loop.time()
        idle_s = self.connections_max_idle_ms / 1000.0
        for c in list(self.connections):
            if not c.pending and now - c.last_active > idle_s:
                c.close(f"idle for more than connections.max.idle.ms ({self.connections_max_idle_ms})")
        self._schedule_idle_check()

    def _schedule_idle_check(self) -> None:
        if self._loop is None or self.connections_max_idle_ms < 0:
            return
        interval_s = min(max(self.connections_max_idle_ms / 10_000.0, 0.05), 30.0)
        self._idle_timer = self._loop.call_later(interval_s, self._check_idle)

    # --- lifecycle -------------------------------------------------------------------
    async def listen(self, listener: ListenerSpec, tls: ServerTls | None = None) -> int:
        """Start listening on `listener` (TLS with `tls`); returns the bound port (useful with port 0)."""
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            self._schedule_idle_check()
        def factory() -> asyncio.BaseProtocol:
            conn = Connection(self, listener, tls)
            return conn if tls is None else TlsChannel(conn, tls, self.tls_handshake_timeout_s)

        srv = await loop.create_server(factory, listener.host or None, listener.port, reuse_address=True, backlog=1024)
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
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
            self.connections_max_idle_ms = -1

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
