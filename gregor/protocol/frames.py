"""Frames and headers: size-prefixed messages, request headers v1/v2, response headers v0/v1.

`FrameDecoder` turns a byte stream into complete frames, checking each size from its 4-byte
prefix and asking its owner to reserve the bytes before buffering them; `decode_request`
turns a frame into (header, body) using the API registry, with a Produce request's entries
bounded by its size; `encode_response` produces the chunks of a size-prefixed response.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gregor.protocol.primitives import DecodeError, Reader, Writer
from gregor.protocol.schema import Api, Struct

_SIZE = struct.Struct(">i")
_API_KEY = struct.Struct(">h")


class FrameTooLarge(DecodeError):
    """A frame announced a size above the configured limit (socket.request.max.bytes)."""


def _always(size: int, small: bool, api_key: int) -> bool:
    return True


class FrameDecoder:
    """Turns a byte stream into whole frames (without their 4-byte size prefix), never holding
    more than one read buffer plus the frames a `reserve` callback has agreed to.

    Bytes land first in a fixed read buffer (`read_buffer_bytes`, default 64 KiB). A frame that
    fits in it is copied out once complete. A larger frame is checked against
    `max_frame_bytes` (socket.request.max.bytes) from its 4-byte size alone, then - only once
    `reserve(size, small=False, api_key)` agrees (the API key is the body's first two bytes,
    so the caller can reserve for what the request will cost decoded) - gets a buffer of exactly its size, into which the rest
    of its body is read directly (`get_buffer`), so a 100 MiB frame costs 100 MiB, not the
    several times more that growing and slicing a stream buffer costs. Small frames are
    reserved with `small=True` when complete, so partially received small frames cost nothing
    beyond the read buffer.

    When `reserve` refuses, the decoder stops: `blocked` holds the frame size, and the caller
    stops reading until it has reserved the bytes some other way and calls `granted()`.
    The decoder is sans-IO: `get_buffer`/`buffer_updated` match asyncio.BufferedProtocol,
    and `feed` serves callers that have bytes in hand.
    """

    __slots__ = ("_buf", "_start", "_end", "_frame", "_filled", "_held", "blocked", "max_frame_bytes", "reserve",
                 "small_frame_bytes")

    def __init__(self, max_frame_bytes: int, reserve: Callable[[int, bool, int], bool] = _always,
                 read_buffer_bytes: int = 65536) -> None:
        self._buf = bytearray(max(read_buffer_bytes, 16))
        self.small_frame_bytes = len(self._buf) - 4  # frames up to this size wait in the read buffer
        self._start = 0  # first unparsed byte of _buf
        self._end = 0  # end of the bytes received into _buf
        self._frame: bytearray | None = None  # body of a large frame being received
        self._filled = 0  # bytes of _frame received
        self._held = False  # the frame at _start has its reservation
        self.blocked = 0  # size of the frame waiting for a reservation, else 0
        self.max_frame_bytes = max_frame_bytes
        self.reserve = reserve

    def get_buffer(self) -> memoryview:
        """Where the next received bytes go: the large frame's own buffer, or the read buffer."""
        if self._frame is not None:
            return memoryview(self._frame)[self._filled:]
        buf, start, end = self._buf, self._start, self._end
        if start == end:
            self._start = self._end = 0
        elif len(buf) - end < 4096 or start > len(buf) // 2:
            n = end - start
            buf[:n] = buf[start:end]
            self._start, self._end = 0, n
        if self._end == len(buf):  # only while blocked, if the transport reads after pause_reading
            buf.extend(bytes(4096))
        return memoryview(buf)[self._end:]

    def buffer_updated(self, nbytes: int) -> list[memoryview]:
        """`nbytes` were written into the last `get_buffer()`; return every frame now complete."""
        if self._frame is not None:
            self._filled += nbytes
        else:
            self._end += nbytes
        return self._parse()

    def granted(self) -> list[memoryview]:
        """The caller reserved the blocked frame's bytes: go on parsing."""
        assert self.blocked
        self.blocked = 0
        self._held = True
        return self._parse()

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Add bytes; return every frame now complete. Raises FrameTooLarge or DecodeError."""
        frames: list[memoryview] = []
        view = memoryview(data)
        while view:
            target = self.get_buffer()
            n = min(len(target), len(view))
            target[:n] = view[:n]
            view = view[n:]
            frames += self.buffer_updated(n)
            if self.blocked:
                raise DecodeError("the frame's reservation was refused; feed() cannot wait")
        return frames

    def _parse(self) -> list[memoryview]:
        frames: list[memoryview] = []
        if self._frame is not None:
            if self._filled < len(self._frame):
                return frames
            frames.append(memoryview(self._frame))
            self._frame = None
        if self.blocked:
            return frames
        buf, start, end = self._buf, self._start, self._end
        while end - start >= 4:
            (size,) = _SIZE.unpack_from(buf, start)
            if size < 0:
                raise DecodeError(f"negative frame size {size}")
            if size > self.max_frame_bytes:
                raise FrameTooLarge(f"frame of {size} bytes exceeds socket.request.max.bytes {self.max_frame_bytes}")
            have = end - start - 4
            small = size <= self.small_frame_bytes
            if small and have < size:
                break  # a small frame waits in the read buffer, unreserved, until complete
            if have < min(size, 2):
                break  # the reservation may depend on the API key, in the next two bytes
            api_key = _API_KEY.unpack_from(buf, start + 4)[0] if size >= 2 else -1
            if not self._held and not self.reserve(size, small, api_key):
                self.blocked = size
                break
            self._held = False
            if have >= size:
                # A bytearray copy: Produce patches offsets into the record batches in place.
                frames.append(memoryview(buf[start + 4 : start + 4 + size]))
                start += 4 + size
                continue
            frame = bytearray(size)
            frame[:have] = memoryview(buf)[start + 4 : end]  # no intermediate slice copy
            self._frame, self._filled = frame, have
            start = end = 0
            break
        self._start, self._end = start, end
        return frames

    def pending_bytes(self) -> int:
        """Bytes received and not yet returned as frames."""
        return self._end - self._start + (self._filled if self._frame is not None else 0)


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


class _BudgetReader(Reader):
    """A Reader that refuses more array elements in total than its budget."""

    __slots__ = ("elements_left",)

    def __init__(self, buf: memoryview, elements: int) -> None:
        super().__init__(buf)
        self.elements_left = elements

    def array_length(self, compact: bool = False, nullable: bool = False) -> int:
        n = super().array_length(compact, nullable)
        self.elements_left -= max(n, 0)
        if self.elements_left < 0:
            raise DecodeError("too many topic and partition entries for the request's size")
        return n


PRODUCE_API_KEY = 0
_DENSE_PRODUCE_BYTES = 4 * 1024 * 1024


def produce_entry_budget(frame_bytes: int) -> int:
    """Topic and partition entries a Produce request of `frame_bytes` may hold.

    Its records stay bytes, so what it costs decoded beyond its size is its entries (~420
    bytes each with their records' memoryview). A real entry carries a batch of >= 61
    bytes, so the first 4 MiB may hold one entry per 64 bytes - a client spreading single
    records over thousands of partitions fits - and the rest one per KiB, as requests that
    large come from clients sending big batches. A 100 MiB request then costs at most ~70 MB
    decoded, whatever it holds."""
    dense = min(frame_bytes, _DENSE_PRODUCE_BYTES)
    return 1000 + dense // 64 + (frame_bytes - dense) // 1024


def decode_request(frame: memoryview, api: Api) -> tuple[RequestHeader, Struct]:
    """Decode header and body of a request whose API is known and version is supported."""
    r = _BudgetReader(frame, produce_entry_budget(len(frame))) if api.key == PRODUCE_API_KEY else Reader(frame)
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
