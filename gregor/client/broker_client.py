"""One asyncio connection from this broker to another (Kafka's NetworkClient, for inter-broker traffic).

The replica fetchers and the controlled-shutdown request use it. Requests are pipelined: each gets
a correlation id and a future, answered in order (a Kafka broker answers a connection's requests in
the order it received them). Bounded: at most `max_in_flight` requests wait for answers (further
`request` calls wait for room) and a response frame may not exceed `max_response_bytes`. Any I/O
error, a malformed frame or `close()` fails every pending request with `BrokerConnectionError` and
closes the connection; callers reconnect (with their own backoff) by making a new client.
"""

from __future__ import annotations

import asyncio
import collections
import struct
from typing import Any

from gregor.protocol.frames import decode_response, encode_request
from gregor.protocol.schema import Api, Struct
from gregor.security.inter_broker import ClientSecurity

_SIZE = struct.Struct(">i")


class BrokerConnectionError(ConnectionError):
    """The connection failed, was closed, or the peer sent something we cannot read."""


class BrokerClient:
    def __init__(self, host: str, port: int, client_id: str, *, max_in_flight: int = 5,
                 max_response_bytes: int = 256 << 20, connect_timeout_s: float = 10.0,
                 security: ClientSecurity | None = None) -> None:
        self.host = host
        self.port = port
        self.security = security
        self.client_id = client_id
        self.max_response_bytes = max_response_bytes
        self.connect_timeout_s = connect_timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: collections.deque[tuple[int, Api, int, asyncio.Future[Struct]]] = collections.deque()
        self._room = asyncio.Semaphore(max_in_flight)
        self._correlation_id = 0
        self._recv_task: asyncio.Task[None] | None = None
        self._closed: BaseException | None = None
        self._connect_lock = asyncio.Lock()

    @property
    def closed(self) -> bool:
        return self._closed is not None

    async def connect(self) -> None:
        async with self._connect_lock:
            if self._writer is not None:
                return
            if self._closed is not None:
                raise BrokerConnectionError(f"connection to {self.host}:{self.port} is closed: {self._closed}")
            sec = self.security
            ctx = sec.ssl_context if sec is not None else None
            try:
                self._reader, self._writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port, ssl=ctx,
                                            server_hostname=self.host if ctx is not None else None),
                    self.connect_timeout_s)
            except (TimeoutError, OSError) as e:
                self._closed = e
                raise BrokerConnectionError(f"cannot connect to {self.host}:{self.port}: {e!r}") from e
            self._recv_task = asyncio.ensure_future(self._receive())
            if sec is not None and sec.authenticate is not None:
                try:
                    await asyncio.wait_for(sec.authenticate(self._send), self.connect_timeout_s)
                except Exception as e:
                    self.close(e)
                    raise BrokerConnectionError(f"SASL authentication with {self.host}:{self.port} failed: {e}") from e

    async def request(self, api: Api, version: int, body: Any, timeout_s: float | None = None) -> Struct:
        """Send one request and wait for its response (raises BrokerConnectionError, or TimeoutError
        after `timeout_s`: the connection is closed then, as its answers would be out of step)."""
        await self.connect()
        return await self._send(api, version, body, timeout_s)

    async def _send(self, api: Api, version: int, body: Any, timeout_s: float | None = None) -> Struct:
        async with self._room:
            if self._closed is not None or self._writer is None:
                raise BrokerConnectionError(f"connection to {self.host}:{self.port} is closed: {self._closed}")
            self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
            cid = self._correlation_id
            fut: asyncio.Future[Struct] = asyncio.get_running_loop().create_future()
            self._pending.append((cid, api, version, fut))
            self._writer.write(encode_request(api, version, cid, self.client_id, body))
            try:
                return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
            except TimeoutError:
                self.close(TimeoutError(f"no answer from {self.host}:{self.port} within {timeout_s} s"))
                raise
            except asyncio.CancelledError:
                self.close(asyncio.CancelledError())
                raise

    async def _receive(self) -> None:
        assert self._reader is not None
        try:
            while True:
                size = _SIZE.unpack(await self._reader.readexactly(4))[0]
                if size < 4 or size > self.max_response_bytes:
                    raise BrokerConnectionError(f"response of {size} bytes from {self.host}:{self.port} "
                                                f"(the limit is {self.max_response_bytes})")
                frame = await self._reader.readexactly(size)
                if not self._pending:
                    raise BrokerConnectionError(f"unsolicited response from {self.host}:{self.port}")
                cid, api, version, fut = self._pending.popleft()
                got, body = decode_response(memoryview(frame), api, version)
                if got != cid:
                    raise BrokerConnectionError(f"correlation id {got} from {self.host}:{self.port}, expected {cid}")
                if not fut.done():
                    fut.set_result(body)
        except asyncio.CancelledError:
            self.close(asyncio.CancelledError())
        except Exception as e:  # I/O, EOF, a frame we cannot decode: fail everything pending
            self.close(e)

    def close(self, why: BaseException | None = None) -> None:
        if self._closed is None:
            self._closed = why or BrokerConnectionError("closed")
        err = BrokerConnectionError(f"connection to {self.host}:{self.port} closed: {self._closed!r}")
        while self._pending:
            fut = self._pending.popleft()[3]
            if not fut.done():
                fut.set_exception(err)
                fut.exception()  # retrieved: a caller that gave up must not produce a warning
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        task, self._recv_task = self._recv_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
