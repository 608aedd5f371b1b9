"""A minimal raw Kafka client over a socket, built on our codec: for protocol-level tests."""

from __future__ import annotations

import socket
import struct
from typing import Any

from gregor.protocol import apis
from gregor.protocol.frames import decode_response, encode_request
from gregor.protocol.schema import Struct


class WireClient:
    def __init__(self, bootstrap: str, timeout_s: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.correlation_id = 0

    @classmethod
    def over(cls, sock: socket.socket) -> WireClient:
        """A client on a socket the caller connected (e.g. wrapped in TLS)."""
        c = cls.__new__(cls)
        c.sock, c.correlation_id = sock, 0
        return c

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._recv_exact(4))[0]
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by broker")
            buf += chunk
        return bytes(buf)

    def send(self, api_key: int, version: int, body: Any) -> int:
        self.correlation_id += 1
        self.send_raw(encode_request(apis.BY_KEY[api_key], version, self.correlation_id, "wire-test", body))
        return self.correlation_id

    def request(self, api_key: int, version: int, body: Any) -> Struct:
        cid = self.send(api_key, version, body)
        got, resp = decode_response(self.recv_frame(), apis.BY_KEY[api_key], version)
        assert got == cid
        return resp

    def closed_by_peer(self) -> bool:
        """True when the broker has closed this connection."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, TimeoutError):
            return True

    def close(self) -> None:
        self.sock.close()
