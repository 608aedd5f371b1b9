"""Frames and headers: size-prefixed messages, request headers v1/v2, response headers v0/v1.

`FrameDecoder` turns a byte stream into complete frames; `decode_request` turns a frame
into (header, body) using the API registry; `encode_response` produces the chunks of a
size-prefixed response.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from gregor.protocol.primitives import DecodeError, Reader, Writer
from gregor.protocol.schema import Api, Struct

_SIZE = struct.Struct(">i")


class FrameTooLarge(DecodeError):
    """A frame announced a size above the configured limit (socket.request.max.bytes)."""


class FrameDecoder:
    """Accumulates stream bytes and yields whole frames (without their 4-byte size prefix)."""

    __slots__ = ("_buf", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int) -> None:
        self._buf = bytearray()
        self.max_frame_bytes = max_frame_bytes

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Add bytes; return every frame now complete. Raises FrameTooLarge or DecodeError."""
        buf = self._buf
        buf += data
        frames: list[memoryview] = []
        pos = 0
        n = len(buf)
        while n - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0:
                raise DecodeError(f"negative frame size {size}")
            if size > self.max_frame_bytes:
                raise FrameTooLarge(f"frame of {size} bytes exceeds socket.request.max.bytes {self.max_frame_bytes}")
            if n - pos - 4 < size:
                break
            # A bytearray copy: Produce patches offsets into the record batches in place.
            frames.append(memoryview(buf[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return frames

    def pending_bytes(self) -> int:
        return len(self._buf)


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int


def peek_header(frame: memoryview) -> tuple[int, int, int]:
    """api_key, api_version, correlation_id: readable from any request, known API or not."""
    if len(frame) < 8:
        raise DecodeError("request shorter than its header")
    return struct.unpack_from(">hhi", frame, 0)


def decode_request(frame: memoryview, api: Api) -> tuple[RequestHeader, Struct]:
    """Decode header and body of a request whose API is known and version is supported."""
    r = Reader(frame)
    api_key = r.int16()
    api_version = r.int16()
    correlation_id = r.int32()
    client_id = r.string(False, True)  # client id is never compact, even in header v2
    hv = api.request_header_version(api_version)
    if hv >= 2:
        r.skip_tagged_fields()
    body = api.request.decode(r, api_version)
    return RequestHeader(api_key, api_version, correlation_id, client_id, hv), body


def encode_request(api: Api, version: int, correlation_id: int, client_id: str | None, body: Any) -> bytes:
    """A whole size-prefixed request (used by tests and tools that talk to a broker)."""
    w = Writer()
    w.int16(api.key)
    w.int16(version)
    w.int32(correlation_id)
    w.string(client_id)
    if api.request_header_version(version) >= 2:
        w.unsigned_varint(0)
    api.request.encode(w, body, version)
    data = w.getvalue()
    return _SIZE.pack(len(data)) + data


def encode_response(api: Api, version: int, correlation_id: int, body: Any) -> list[Any]:
    """A size-prefixed response as a list of buffers (record sets stay separate chunks)."""
    w = Writer()
    w.int32(0)  # size placeholder, patched below
    w.int32(correlation_id)
    if api.response_header_version(version) >= 1:
        w.unsigned_varint(0)
    api.response.encode(w, body, version)
    total = len(w) - 4
    chunks = w.getvalue_chunks()
    first = chunks[0]
    _SIZE.pack_into(first, 0, total)
    return chunks


def decode_response(frame: memoryview | bytes, api: Api, version: int) -> tuple[int, Struct]:
    """correlation id and body of a response frame (without its size prefix)."""
    r = Reader(frame)
    correlation_id = r.int32()
    if api.response_header_version(version) >= 1:
        r.skip_tagged_fields()
    return correlation_id, api.response.decode(r, version)
