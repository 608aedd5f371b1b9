"""Decompression of fetched record batches into one reused buffer (the decoder copies out of it at once).

The decoder hands each compressed batch body to a `Decompressor`, which writes its records into a
scratch bytearray it keeps between batches (cramjam's *_into functions, which release the GIL while
they work), so a stream of compressed batches costs no allocation per batch. The buffer grows as
larger batches come, never past `limit` bytes (`batch.decompressed.max.bytes`): a batch that would
expand further fails with DecompressedTooLargeError rather than exhausting memory.

Codecs as Kafka writes them: gzip; snappy raw (librdkafka) or in xerial framing (the Java client,
kafka-python); lz4 frames; zstd frames with or without their content size (librdkafka omits it).
"""

from __future__ import annotations

import struct

import cramjam

from gregor.protocol.compression import (
    GZIP,
    LZ4,
    NAMES,
    SNAPPY,
    ZSTD,
    CorruptCompressedDataError,
    DecompressedTooLargeError,
)

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_BYTES = 16  # magic + version + compatible version
_I32 = struct.Struct(">i")
_OVERFLOW = "failed to write whole buffer"  # cramjam's message when the output buffer is full
_FIRST_BYTES = 1 << 20
_GROWTH = 4  # output buffer per compressed byte to try first; it grows on overflow


class Decompressor:
    """Callable as `decompress(codec, data) -> memoryview`, valid until its next call."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the decompression limit must be positive")
        self.limit = limit
        self._buf = bytearray(min(_FIRST_BYTES, limit + 1))
        self.batches = 0

    def _room(self, size: int) -> memoryview:
        """The scratch buffer, at least `size` bytes (a new bytearray if it must grow: a caller may still
        hold a view of the old one, which then stays valid)."""
        if len(self._buf) < size:
            self._buf = bytearray(min(max(size, 2 * len(self._buf)), self.limit + 1))
        return memoryview(self._buf)

    def __call__(self, codec: int, data: memoryview | bytes) -> memoryview:
        self.batches += 1
        if codec == SNAPPY:
            return self._snappy(data)
        fn = {GZIP: cramjam.gzip.decompress_into, LZ4: cramjam.lz4.decompress_into,
              ZSTD: cramjam.zstd.decompress_into}.get(codec)
        if fn is None:
            raise CorruptCompressedDataError(f"unknown compression codec {codec}")
        want = min(len(data) * _GROWTH, self.limit + 1)
        while True:
            out = self._room(want)
            try:
                n = fn(data, out)
            except cramjam.DecompressionError as e:
                if _OVERFLOW not in str(e):
                    raise CorruptCompressedDataError(f"{NAMES[codec]}: {e}") from None
                if len(out) > self.limit:
                    raise DecompressedTooLargeError(codec, self.limit) from None
                want = min(len(out) * _GROWTH, self.limit + 1)
                continue
            if n > self.limit:
                raise DecompressedTooLargeError(codec, self.limit)
            return out[:n]

    def _snappy_len(self, block: memoryview | bytes) -> int:
        try:
            return int(cramjam.snappy.decompress_raw_len(block))
        except Exception as e:  # cramjam raises its own error types for a bad preamble
            raise CorruptCompressedDataError(f"snappy: {e}") from None

    def _snappy(self, data: memoryview | bytes) -> memoryview:
        view = memoryview(data)
        if bytes(view[:8]) != _XERIAL_MAGIC:
            blocks = [view]
        else:
            blocks = []
            pos, n = _XERIAL_HEADER_BYTES, len(view)
            while pos < n:
                if n - pos < 4:
                    raise CorruptCompressedDataError("snappy: truncated xerial block header")
                (size,) = _I32.unpack_from(view, pos)
                pos += 4
                if size < 0 or size > n - pos:
                    raise CorruptCompressedDataError(f"snappy: xerial block of {size} bytes runs past the data")
                blocks.append(view[pos : pos + size])
                pos += size
        sizes = [self._snappy_len(b) for b in blocks]
        total = sum(sizes)
        if total > self.limit:
            raise DecompressedTooLargeError(SNAPPY, self.limit)
        out = self._room(total)
        pos = 0
        for block, size in zip(blocks, sizes, strict=True):
            try:
                got = cramjam.snappy.decompress_raw_into(block, out[pos : pos + size])
            except Exception as e:
                raise CorruptCompressedDataError(f"snappy: {e}") from None
            if got != size:
                raise CorruptCompressedDataError(f"snappy: a block decoded to {got} bytes, its preamble says {size}")
            pos += size
        return out[:total]
