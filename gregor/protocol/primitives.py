"""Kafka wire primitives: fixed-width ints, varints, strings, bytes, uuids, tagged fields.

The reader works over a memoryview and never copies byte fields: a Produce request's
record batches come out as views into the receive buffer. The writer collects small
fields in one bytearray and keeps large blobs (record sets) as separate chunks, so a
Fetch response can be sent with ``writelines`` without joining megabytes in Python.
"""

from __future__ import annotations

import struct
import uuid as _uuid
from typing import Any

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

ZERO_UUID = _uuid.UUID(int=0)

# Blobs at least this large are kept as their own output chunk instead of being copied.
LARGE_CHUNK_BYTES = 4096


# Kafka's strings have an int16 length, compact ones included: no string may exceed this.
MAX_STRING_BYTES = 32767


class DecodeError(ValueError):
    """The bytes are not a valid encoding of what was expected (truncated, negative length...)."""


class Reader:
    """Sequential decoder over a buffer. All read errors surface as DecodeError."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.buf = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf
        self.pos = pos
        self.end = len(self.buf) if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def _take(self, n: int) -> int:
        p = self.pos
        if n < 0 or p + n > self.end:
            raise DecodeError(f"need {n} bytes at offset {p}, have {self.end - p}")
        self.pos = p + n
        return p

    def int8(self) -> int:
        return _I8.unpack_from(self.buf, self._take(1))[0]

    def boolean(self) -> bool:
        return self.buf[self._take(1)] != 0

    def int16(self) -> int:
        return _I16.unpack_from(self.buf, self._take(2))[0]

    def uint16(self) -> int:
        return _U16.unpack_from(self.buf, self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack_from(self.buf, self._take(4))[0]

    def uint32(self) -> int:
        return _U32.unpack_from(self.buf, self._take(4))[0]

    def int64(self) -> int:
        return _I64.unpack_from(self.buf, self._take(8))[0]

    def float64(self) -> float:
        return _F64.unpack_from(self.buf, self._take(8))[0]

    def uuid(self) -> _uuid.UUID:
        p = self._take(16)
        return _uuid.UUID(bytes=bytes(self.buf[p : p + 16]))

    def unsigned_varint(self) -> int:
        result = 0
        shift = 0
        buf = self.buf
        while True:
            if self.pos >= self.end:
                raise DecodeError("truncated varint")
            b = buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise DecodeError("varint too long")

    def varint(self) -> int:
        v = self.unsigned_varint()
        return (v >> 1) ^ -(v & 1)

    def raw(self, n: int) -> memoryview:
        p = self._take(n)
        return self.buf[p : p + n]

    # Length-prefixed values. `compact` selects the flexible-version encoding (uvarint N+1).
    def _length(self, compact: bool) -> int:
        if compact:
            return self.unsigned_varint() - 1
        return self.int32()

    def string(self, compact: bool = False, nullable: bool = False) -> str | None:
        n = self.unsigned_varint() - 1 if compact else self.int16()
        if n < 0:
            if nullable:
                return None
            raise DecodeError("null string in a non-nullable field")
        if n > MAX_STRING_BYTES:  # a compact length can say more; Kafka refuses it while parsing, as we do
            raise DecodeError(f"string of {n} bytes is longer than the {MAX_STRING_BYTES} a Kafka string holds")
        p = self._take(n)
        try:
            return str(self.buf[p : p + n], "utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"invalid utf-8 string: {e}") from None

    def bytes_(self, compact: bool = False, nullable: bool = False) -> memoryview | None:
        n = self._length(compact)
        if n < 0:
            if nullable:
                return None
            raise DecodeError("null bytes in a non-nullable field")
        return self.raw(n)

    def array_length(self, compact: bool = False, nullable: bool = False) -> int:
        n = self._length(compact)
        if n < 0:
            if nullable:
                return -1
            raise DecodeError("null array in a non-nullable field")
        # Every element takes at least one byte: a cheap bound against absurd lengths.
        if n > self.remaining():
            raise DecodeError(f"array length {n} exceeds remaining {self.remaining()} bytes")
        return n

    def skip_tagged_fields(self) -> dict[int, memoryview]:
        """Read a tagged-field section, returning raw values by tag (unknown tags are kept, not fatal)."""
        count = self.unsigned_varint()
        if count > self.remaining():
            raise DecodeError("tagged field count exceeds buffer")
        out: dict[int, memoryview] = {}
        for _ in range(count):
            tag = self.unsigned_varint()
            size = self.unsigned_varint()
            out[tag] = self.raw(size)
        return out


class Writer:
    """Encoder that accumulates small writes and keeps big blobs as separate chunks."""

    __slots__ = ("buf", "chunks", "size")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.chunks: list[Any] = []
        self.size = 0  # bytes already moved to self.chunks

    def __len__(self) -> int:
        return self.size + len(self.buf)

    def int8(self, v: int) -> None:
        self.buf += _I8.pack(v)

    def boolean(self, v: bool) -> None:
        self.buf.append(1 if v else 0)

    def int16(self, v: int) -> None:
        self.buf += _I16.pack(v)

    def uint16(self, v: int) -> None:
        self.buf += _U16.pack(v)

    def int32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def uint32(self, v: int) -> None:
        self.buf += _U32.pack(v)

    def int64(self, v: int) -> None:
        self.buf += _I64.pack(v)

    def float64(self, v: float) -> None:
        self.buf += _F64.pack(v)

    def uuid(self, v: _uuid.UUID | None) -> None:
        self.buf += (v or ZERO_UUID).bytes

    def unsigned_varint(self, v: int) -> None:
        buf = self.buf
        while v >= 0x80:
            buf.append((v & 0x7F) | 0x80)
            v >>= 7
        buf.append(v)

    def varint(self, v: int) -> None:
        self.unsigned_varint((v << 1) ^ (v >> 63))

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        n = len(data)
        if n >= LARGE_CHUNK_BYTES:
            if self.buf:
                self.chunks.append(self.buf)
                self.size += len(self.buf)
                self.buf = bytearray()
            self.chunks.append(data)
            self.size += n
        else:
            self.buf += data

    def _length(self, n: int, compact: bool) -> None:
        if compact:
            self.unsigned_varint(n + 1)
        else:
            self.int32(n)

    def string(self, v: str | None, compact: bool = False) -> None:
        if v is None:
            if compact:
                self.buf.append(0)
            else:
                self.int16(-1)
            return
        data = v.encode("utf-8")
        if len(data) > MAX_STRING_BYTES:
            # Only an error message quoting over-long input gets here (names that long are refused when
            # decoded): cut it at a character boundary rather than fail the whole response.
            data = data[:MAX_STRING_BYTES].decode("utf-8", "ignore").encode("utf-8")
        if compact:
            self.unsigned_varint(len(data) + 1)
        else:
            self.int16(len(data))
        self.buf += data

    def bytes_(self, v: bytes | bytearray | memoryview | None, compact: bool = False) -> None:
        if v is None:
            self._length(-1, compact)
            return
        self._length(len(v), compact)
        self.raw(v)

    def array_length(self, n: int | None, compact: bool = False) -> None:
        self._length(-1 if n is None else n, compact)

    def getvalue_chunks(self) -> list[Any]:
        """The encoded output as a list of buffers (small fields joined, blobs by reference)."""
        if self.buf:
            self.chunks.append(self.buf)
            self.size += len(self.buf)
            self.buf = bytearray()
        return self.chunks

    def getvalue(self) -> bytes:
        return b"".join(self.getvalue_chunks())

