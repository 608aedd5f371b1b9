"""TLS between a client's TCP transport and its Connection, with the ssl module's memory BIOs.

Why not `create_server(ssl=...)` or `loop.start_tls`: with those the event loop performs the handshake and
drops a failed one silently (asyncio and uvloop log it only in debug mode), and with uvloop a client's
ClientHello can reach the connection before `start_tls` takes the transport over. Kafka operators expect
a log line naming the client for an untrusted certificate or a TLS 1.0 client, so the broker runs the
handshake itself: bytes from the socket go into an `ssl.MemoryBIO`, `SSLObject` decrypts them into the
Connection's own receive buffer (no extra copy), and responses are encrypted into the socket's transport.
The channel is the Connection's transport: it forwards flow control both ways, so the Connection's limits
(paused reads, queued response bytes) apply unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gregor.metrics.registry import BrokerMetrics
    from gregor.security.listeners import ListenerSpec
    from gregor.security.tls import ServerTls

log = logging.getLogger("gregor.network")


class TlsApp(Protocol):
    """What the channel drives: the connection above it (gregor.network.connection.Connection), which
    sees the channel as its transport and receives the decrypted bytes into its own buffer."""

    closed: bool
    peer: str
    listener: ListenerSpec
    metrics: BrokerMetrics | None

    def connection_made(self, transport: Any) -> None: ...
    def connection_lost(self, exc: Exception | None) -> None: ...
    def pause_writing(self) -> None: ...
    def resume_writing(self) -> None: ...
    def get_buffer(self, sizehint: int) -> memoryview: ...
    def buffer_updated(self, nbytes: int) -> None: ...
    def tls_established(self, sslobj: ssl.SSLObject, tls: ServerTls) -> None: ...
    def close_quietly(self) -> None: ...


def _reason(e: BaseException) -> str:
    """OpenSSL's reason in words ("certificate verify failed: certificate has expired")."""
    reason = str(getattr(e, "reason", None) or type(e).__name__).replace("_", " ").lower()
    detail = getattr(e, "verify_message", None)
    return f"{reason}: {detail}" if detail else reason


class TlsChannel(asyncio.Protocol):
    """The socket's protocol on a TLS listener, and the transport its connection writes to."""

    def __init__(self, app: TlsApp, tls: ServerTls, handshake_timeout_s: float) -> None:
        self.app = app
        self.tls = tls
        self.handshake_timeout_s = handshake_timeout_s
        self.raw: asyncio.Transport | None = None
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.sslobj: ssl.SSLObject | None = None
        self.established = False
        self.read_paused = False
        self.closing = False
        self._timer: asyncio.TimerHandle | None = None

    # --- the socket's side -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.raw = transport  # type: ignore[assignment]
        # The newest context: a reload since the listener started applies to this connection.
        self.sslobj = self.tls.current.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.app.connection_made(self)  # admission (max.connections) counts handshaking clients too
        if self.app.closed:
            return
        self._timer = asyncio.get_running_loop().call_later(self.handshake_timeout_s, self._handshake_timed_out)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.incoming.write(data)
        if not self.established and not self._handshake():
            return
        self._deliver()

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self._timer is not None:
            self._timer.cancel()
        self.app.connection_lost(exc)

    def pause_writing(self) -> None:
        self.app.pause_writing()

    def resume_writing(self) -> None:
        self.app.resume_writing()

    # --- the handshake ---------------------------------------------------------------------
    def _handshake(self) -> bool:
        assert self.sslobj is not None
        try:
            self.sslobj.do_handshake()
        except ssl.SSLWantReadError:
            self._flush()
            return False
        except (ssl.SSLError, ValueError) as e:
            self._flush()  # the alert, so the client learns why
            self._fail(f"TLS handshake with {self.app.peer} on listener {self.app.listener.name} failed: {_reason(e)}")
            return False
        self._flush()
        self.established = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.app.tls_established(self.sslobj, self.tls)
        return True

    def _handshake_timed_out(self) -> None:
        self._timer = None
        if not self.established and not self.closing:
            self._fail(f"TLS handshake with {self.app.peer} on listener {self.app.listener.name} did not complete "
                       f"within {self.handshake_timeout_s:.0f} s")

    def _fail(self, why: str) -> None:
        log.warning("%s", why)
        metrics = self.app.metrics
        if metrics is not None:  # a failed or unfinished handshake: Kafka's failed-authentication-total
            metrics.record_failed_authentication(self.app.listener.name)
        self.closing = True
        self.app.close_quietly()
        if self.raw is not None:
            self.raw.close()

    # --- decrypted bytes to the Connection -------------------------------------------------------
    def _deliver(self) -> None:
        sslobj = self.sslobj
        assert sslobj is not None
        app = self.app
        while not self.read_paused and not self.closing and not app.closed:
            buf = app.get_buffer(-1)
            if not len(buf):  # the decoder has no room now; it pauses reading until it has
                break
            try:
                n = sslobj.read(len(buf), buf)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:  # the client's close_notify
                self.close()
                break
            except ssl.SSLError as e:
                self._fail(f"TLS error on the connection from {app.peer}: {_reason(e)}")
                break
            if n == 0:  # no data would raise SSLWantReadError: 0 is the client's close_notify
                self.close()
                break
            app.buffer_updated(n)
        if self.outgoing.pending:  # TLS 1.3 key updates and the like
            self._flush()

    def _flush(self) -> None:
        if self.outgoing.pending and self.raw is not None and not self.raw.is_closing():
            self.raw.write(self.outgoing.read())

    # --- the transport the Connection sees -------------------------------------------------------
    def write(self, data: Any) -> None:
        if self.closing or self.sslobj is None:
            return
        self.sslobj.write(data)
        self._flush()

    def writelines(self, chunks: Any) -> None:
        if self.closing or self.sslobj is None:
            return
        write = self.sslobj.write
        for c in chunks:
            if len(c):
                write(c)
        self._flush()

    def get_write_buffer_size(self) -> int:
        return self.raw.get_write_buffer_size() if self.raw is not None else 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if self.raw is not None:
            self.raw.set_write_buffer_limits(high, low)

    def pause_reading(self) -> None:
        self.read_paused = True
        if self.raw is not None:
            self.raw.pause_reading()

    def resume_reading(self) -> None:
        self.read_paused = False
        if self.raw is not None:
            self.raw.resume_reading()
            # Bytes already decrypted or buffered in the BIO arrive without another socket read.
            if self.established and (self.incoming.pending or (self.sslobj is not None and self.sslobj.pending())):
                asyncio.get_running_loop().call_soon(self._resume_deliver)

    def _resume_deliver(self) -> None:
        if not self.closing and not self.read_paused:
            self._deliver()

    def is_closing(self) -> bool:
        return self.closing or (self.raw is not None and self.raw.is_closing())

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        if self.raw is None:
            return
        if self.established and self.sslobj is not None:
            try:
                self.sslobj.unwrap()  # queue close_notify
            except (ssl.SSLError, ValueError):
                pass
            self._flush()
        self.raw.close()

    def abort(self) -> None:
        self.closing = True
        if self.raw is not None:
            self.raw.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self.sslobj
        if name == "peercert":
            return self.sslobj.getpeercert() if self.sslobj is not None and self.established else default
        return self.raw.get_extra_info(name, default) if self.raw is not None else default
