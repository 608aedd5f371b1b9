"""One blocking connection from the Arrow reader to a broker: TCP, TLS and SASL as the reader's settings say,
the broker's API versions, and requests answered in order.

Blocking sockets, not asyncio: the reader is called from plain Python (pandas, Polars, DuckDB, a Spark
task), and a response is read with recv_into straight into one buffer the connection keeps, so the
megabytes of a Fetch response are copied once, by the kernel. The records of a decoded response are
views into that buffer: they are valid until the connection's next `receive`.

Requests may be pipelined (`send` several, then `receive` each): Kafka answers a connection's
requests in order. Any failure closes the connection and raises BrokerUnavailableError (retriable:
the caller reconnects) or AuthenticationError (not retriable).

`receive_later()` starts reading the next response on a helper thread (recv_into releases the GIL),
into the other of two buffers, so the reader decodes one response while the next one arrives; the
next `receive` returns it. Socket operations never overlap (the next request is sent only after the
previous response is in), so this is safe over TLS too.
"""

from __future__ import annotations

import collections
import socket
import ssl
import struct
import threading
from concurrent.futures import Future
from typing import Any

from gregor.client.decoder import receive_buffer
from gregor.client.errors import AuthenticationError, BrokerUnavailableError
from gregor.client.reader_config import ReaderConfig
from gregor.protocol.apis import BY_KEY
from gregor.protocol.errors import ErrorCode
from gregor.protocol.frames import decode_response, encode_request
from gregor.protocol.primitives import DecodeError
from gregor.protocol.schema import Api, Struct
from gregor.security.sasl.client import SaslClientError, sasl_client

_SIZE = struct.Struct(">i")
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = BY_KEY[18], BY_KEY[17], BY_KEY[36]
_FIRST_BUFFER_BYTES = 1 << 20


def tls_context(cfg: ReaderConfig) -> ssl.SSLContext:
    """A client context from librdkafka's ssl.* settings. Raises AuthenticationError naming a file that fails."""
    try:
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_location or None)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = cfg.ssl_endpoint_identification_algorithm == "https"
        if cfg.ssl_certificate_location:
            ctx.load_cert_chain(cfg.ssl_certificate_location, cfg.ssl_key_location,
                                password=cfg.ssl_key_password or None)
    except (OSError, ssl.SSLError) as e:
        raise AuthenticationError(f"cannot load the TLS files (ssl.ca.location, ssl.certificate.location, "
                                  f"ssl.key.location): {e}") from None
    return ctx


class Connection:
    """A connection to broker `node_id` (negative for a bootstrap server not yet known by id)."""

    def __init__(self, host: str, port: int, node_id: int, cfg: ReaderConfig,
                 tls: ssl.SSLContext | None = None) -> None:
        self.host, self.port, self.node_id = host, port, node_id
        self.cfg = cfg
        self._tls = tls
        self._sock: socket.socket | None = None
        self._bufs = [receive_buffer(_FIRST_BUFFER_BYTES), receive_buffer(_FIRST_BUFFER_BYTES)]
        self._next_buf = 0
        self._pending: collections.deque[tuple[int, Api, int]] = collections.deque()
        self._early: Future[Struct] | None = None  # the oldest response, being read by the helper thread
        self._cid = 0
        self.versions: dict[int, tuple[int, int]] = {}

    def __repr__(self) -> str:
        return f"broker {self.node_id} at {self.host}:{self.port}" if self.node_id >= 0 else \
            f"bootstrap server {self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._sock is not None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def answered(self) -> bool:
        """The helper thread has the oldest response in (receive() returns at once)."""
        return self._early is not None and self._early.done()

    def open(self) -> None:
        if self._sock is not None:
            return
        cfg = self.cfg
        try:
            sock = socket.create_connection((self.host, self.port), cfg.socket_connection_setup_timeout_ms / 1000)
        except OSError as e:
            raise BrokerUnavailableError(f"cannot connect to {self}: {e}") from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                try:
                    sock = self._tls.wrap_socket(sock, server_hostname=self.host)
                except ssl.SSLCertVerificationError as e:
                    raise AuthenticationError(f"TLS handshake with {self} failed: {e}") from None
                except (ssl.SSLError, OSError) as e:
                    raise BrokerUnavailableError(f"TLS handshake with {self} failed: {e}") from None
            self._sock = sock
            self._handshake()
        except BaseException:
            self.close()
            sock.close()
            raise
        sock.settimeout(cfg.socket_timeout_ms / 1000)

    def _handshake(self) -> None:
        """ApiVersions (v0: every broker answers it), then SASL if configured."""
        assert self._sock is not None
        self._sock.settimeout(self.cfg.socket_connection_setup_timeout_ms / 1000)
        resp = self.request(API_VERSIONS, 0, {})
        if resp.error_code != ErrorCode.NONE:
            raise BrokerUnavailableError(f"{self} refused ApiVersions: {ErrorCode(resp.error_code).name}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        if self.cfg.sasl:
            self._authenticate()

    def _authenticate(self) -> None:
        """SaslHandshake v1, then SaslAuthenticate rounds (KIP-152), as Kafka's clients do."""
        mech = self.cfg.sasl_mechanism
        resp = self.request(SASL_HANDSHAKE, 1, {"mechanism": mech})
        if resp.error_code != ErrorCode.NONE:
            raise AuthenticationError(f"{self} does not enable SASL mechanism {mech} (it enables "
                                      f"{', '.join(resp.mechanisms) or 'none'})", ErrorCode(resp.error_code))
        client = sasl_client(mech, self.cfg.sasl_username, self.cfg.sasl_password)
        version = self.version(SASL_AUTHENTICATE, 0, 2)
        token: bytes | None = client.first_message()
        try:
            while token is not None:
                r = self.request(SASL_AUTHENTICATE, version, {"auth_bytes": token})
                if r.error_code != ErrorCode.NONE:
                    raise AuthenticationError(f"SASL {mech} authentication with {self} failed: "
                                              f"{ErrorCode(r.error_code).name}: {r.error_message}",
                                              ErrorCode(r.error_code))
                token = client.evaluate(bytes(r.auth_bytes or b""))
        except SaslClientError as e:
            raise AuthenticationError(f"SASL {mech} authentication with {self} failed: {e}") from None

    def version(self, api: Api, low: int, high: int) -> int:
        """The highest version of `api` in [low, high] the broker serves; BrokerUnavailableError if none."""
        have = self.versions.get(api.key)
        if have is None or have[1] < low or have[0] > high:
            served = f"{have[0]}-{have[1]}" if have else "none"
            raise BrokerUnavailableError(f"{self} serves {api.name} versions {served}; this reader needs {low}-{high}")
        return min(high, have[1])

    def send(self, api: Api, version: int, body: Any) -> None:
        if self._sock is None:
            raise BrokerUnavailableError(f"connection to {self} is closed")
        self._cid = (self._cid + 1) & 0x7FFFFFFF
        self._pending.append((self._cid, api, version))
        try:
            self._sock.sendall(encode_request(api, version, self._cid, self.cfg.client_id, body))
        except OSError as e:
            self.close()
            raise BrokerUnavailableError(f"sending {api.name} to {self} failed: {e}") from None

    def receive(self) -> Struct:
        """The answer to the oldest request sent. Its byte fields are views of one of this connection's two
        buffers, valid until the receive after next."""
        early, self._early = self._early, None
        if early is not None:
            return early.result()
        return self._receive()

    def receive_later(self) -> None:
        """Start reading the answer to the oldest request sent on a helper thread; `receive` returns it."""
        if self._early is not None or not self._pending or self._sock is None:
            return
        fut: Future[Struct] = Future()

        def run() -> None:
            try:
                fut.set_result(self._receive())
            except BaseException as e:  # handed to the caller by receive()
                fut.set_exception(e)

        self._early = fut
        threading.Thread(target=run, name=f"gregor-reader-{self.node_id}", daemon=True).start()

    def _receive(self) -> Struct:
        if self._sock is None or not self._pending:
            raise BrokerUnavailableError(f"nothing to receive from {self}")
        cid, api, version = self._pending.popleft()
        i = self._next_buf
        self._next_buf = 1 - i
        try:
            buf = self._bufs[i]
            self._read_into(memoryview(buf)[:4])
            (size,) = _SIZE.unpack_from(buf, 0)
            if size < 4 or size > self.cfg.receive_message_max_bytes:
                raise BrokerUnavailableError(f"{self} sent a response of {size} bytes (receive.message.max.bytes "
                                             f"is {self.cfg.receive_message_max_bytes})")
            if size > len(buf):
                # A new buffer rather than a resize: views of an earlier response may still exist.
                buf = self._bufs[i] = receive_buffer(max(size, min(2 * len(buf), self.cfg.receive_message_max_bytes)))
            frame = memoryview(buf)[:size]
            self._read_into(frame)
            got, body = decode_response(frame, api, version)
        except (OSError, EOFError) as e:
            self.close()
            raise BrokerUnavailableError(f"reading {api.name} response from {self} failed: {e!r}") from None
        except DecodeError as e:
            self.close()
            raise BrokerUnavailableError(f"{self} sent a {api.name} response that does not decode: {e}") from None
        except BrokerUnavailableError:
            self.close()
            raise
        if got != cid:
            self.close()
            raise BrokerUnavailableError(f"{self} answered correlation id {got}, expected {cid}")
        return body

    def _read_into(self, view: memoryview) -> None:
        sock = self._sock
        assert sock is not None
        got, n = 0, len(view)
        while got < n:
            k = sock.recv_into(view[got:], n - got)
            if k == 0:
                raise EOFError(f"{self} closed the connection")
            got += k

    def request(self, api: Api, version: int, body: Any) -> Struct:
        self.send(api, version, body)
        return self.receive()

    def close(self) -> None:
        sock, self._sock = self._sock, None
        self._pending.clear()
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
