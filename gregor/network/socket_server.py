"""The socket server: listens, admits connections under their limits, and closes idle ones.

One asyncio BufferedProtocol per connection (gregor.network.connection), behind a TLS channel on
TLS listeners (gregor.network.tls_channel); the request pool is gregor.network.memory_pool's.

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
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gregor.config.broker import parse_ip_overrides
from gregor.configdef import ConfigError, Settings, setting
from gregor.network.connection import Connection, RequestDispatcher
from gregor.network.memory_pool import READ_BUFFER_BYTES, RequestMemoryPool
from gregor.network.tls_channel import TlsChannel
from gregor.security.listeners import ListenerSpec
from gregor.security.tls import ServerTls

if TYPE_CHECKING:
    from gregor.metrics.registry import BrokerMetrics

log = logging.getLogger("gregor.network")


@dataclass(frozen=True, slots=True)
class SocketServerSettings(Settings):
    """The socket server's limits, read at start."""

    max_request_bytes: int = setting("socket.request.max.bytes")
    max_queued_requests: int = setting("queued.max.requests")
    connections_max_idle_ms: int = setting("connections.max.idle.ms")
    max_queued_request_bytes: int = setting("queued.max.request.bytes")
    max_response_bytes: int = setting("queued.max.response.bytes")
    max_connection_response_bytes: int = setting("queued.max.response.bytes.per.connection")
    send_buffer_bytes: int = setting("socket.send.buffer.bytes")
    receive_buffer_bytes: int = setting("socket.receive.buffer.bytes")


@dataclass(frozen=True, slots=True)
class ConnectionLimits(Settings):
    """The connection limits the dynamic broker configs may change (built from DynamicBrokerConfig)."""

    max_connections: int = setting("max.connections")
    max_connections_per_ip: int = setting("max.connections.per.ip")
    max_connections_per_ip_overrides: list[str] = setting("max.connections.per.ip.overrides")


class SocketServer:
    """The listeners and the connections they accepted, with the limits on both."""

    def __init__(self, dispatcher: RequestDispatcher, settings: SocketServerSettings, limits: ConnectionLimits,
                 metrics: BrokerMetrics | None = None) -> None:
        s = settings
        if s.max_request_bytes > s.max_queued_request_bytes:
            raise ConfigError(f"socket.request.max.bytes ({s.max_request_bytes}) must not exceed "
                              f"queued.max.request.bytes ({s.max_queued_request_bytes})")
        self.dispatcher = dispatcher
        self.metrics = metrics  # the Prometheus endpoint's counters; None when metrics.port is unset
        self.max_request_bytes = s.max_request_bytes
        self.max_queued_requests = s.max_queued_requests
        self.connections_max_idle_ms = s.connections_max_idle_ms
        self.max_response_bytes = s.max_response_bytes
        self.max_connection_response_bytes = s.max_connection_response_bytes
        self.send_buffer_bytes = s.send_buffer_bytes
        self.receive_buffer_bytes = s.receive_buffer_bytes
        self.pool = RequestMemoryPool(s.max_queued_request_bytes, s.max_request_bytes, READ_BUFFER_BYTES - 4,
                                      limits.max_connections)
        self.max_connections = limits.max_connections
        self.max_connections_per_ip = limits.max_connections_per_ip
        self.ip_overrides = parse_ip_overrides(limits.max_connections_per_ip_overrides)
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
        self._idle_timer: asyncio.TimerHandle | None = None
        self._refusal_logged_at = -1e9
        self._refusals_unlogged = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    def set_connection_limits(self, limits: ConnectionLimits) -> None:
        """max.connections, max.connections.per.ip and its overrides as the dynamic broker configs have
        them now (Kafka's DynamicConnectionQuota): new connections are checked against them; open ones
        over a lowered limit stay open, as in Kafka."""
        self.ip_overrides = parse_ip_overrides(limits.max_connections_per_ip_overrides)
        self.max_connections = limits.max_connections
        self.max_connections_per_ip = limits.max_connections_per_ip
        self.pool.set_max_connections(limits.max_connections)

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
