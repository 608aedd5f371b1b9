"""Record batch codecs: gzip, snappy (raw and xerial framing), lz4 frames, zstd, via cramjam.

The broker passes compressed batches through untouched once validated; these decode records
(validation, compaction, tools, tests) and build batches.

Decompression is always bounded: a decompression bomb (64 KiB of zstd expanding to 2 GiB) must
never be allocated whole. `decompress` writes into a scratch buffer of `limit + 1` bytes with
cramjam's `decompress_into` (which stops when the buffer is full, releasing the GIL while it
works) and fails as soon as the output would pass `limit`; snappy's length preamble is checked
before any output is allocated. The scratch buffer is an anonymous mapping per thread, reused
(its pages stay faulted in, so a 1 MB batch costs no page faults and no 64 MiB memset); pages
written by a bomb, or past RELEASE_AFTER_BYTES, are handed back to the OS at once. So each thread
that decompresses holds at most its largest legitimate limit resident.
"""

from __future__ import annotations

import mmap
import struct
import threading

import cramjam

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4
COMPRESSION_MASK = 0x07  # the codec bits of a batch's attributes

NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
BY_NAME = {v: k for k, v in NAMES.items()}

DEFAULT_MAX_DECOMPRESSED_BYTES = 128 * 1024 * 1024
"""The limit for callers that name none (tools, internal-topic loading): the default of the
broker's gregor.batch.decompressed.max.bytes."""

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_BYTES = 16  # magic + version + compatible version
_I32 = struct.Struct(">i")
_OVERFLOW = "failed to write whole buffer"  # cramjam's message when the output buffer is full


class CorruptCompressedDataError(ValueError):
    """The compressed bytes do not decode with their codec."""


class DecompressedTooLargeError(ValueError):
    """The data expands past the caller's limit; decompression stopped there."""

    def __init__(self, codec: int, limit: int) -> None:
        super().__init__(f"{NAMES.get(codec, codec)} data expands past {limit} bytes")
        self.limit = limit


_scratch = threading.local()
_SCRATCH_KEEP_BYTES = 4 << 20  # resident part of each thread's scratch buffer (a multiple of the page size)
RELEASE_AFTER_BYTES = 64 << 20
"""After a legitimate batch the scratch pages stay resident up to this (no page faults for the next
one, no madvise on the way); a bomb's, or more than this, go back to the OS at once."""


def _scratch_view(size: int) -> memoryview:
    """This thread's scratch buffer, at least `size` bytes (an anonymous mapping: untouched pages cost nothing)."""
    view: memoryview | None = getattr(_scratch, "view", None)
    if view is None or len(view) < size:
        if view is not None:
            try:
                view.release()
                _scratch.mm.close()
            except BufferError:  # a caller still holds a view of it (copy=False): it is unmapped when dropped
                pass
        _scratch.mm = mmap.mmap(-1, max(size, _SCRATCH_KEEP_BYTES))
        view = _scratch.view = memoryview(_scratch.mm)
    return view


def _into(codec: int, fn: object, data: bytes | memoryview, limit: int, copy: bool) -> memoryview:
    view = _scratch_view(limit + 1)
    written = limit + 1  # a failure may have written anywhere up to the end
    try:
        try:
            n = fn(data, view[: limit + 1])  # type: ignore[operator]
        except cramjam.DecompressionError as e:
            if _OVERFLOW in str(e):
                raise DecompressedTooLargeError(codec, limit) from None
            raise CorruptCompressedDataError(f"{NAMES[codec]}: {e}") from None
        written = n
        if n > limit:
            raise DecompressedTooLargeError(codec, limit)
        if not copy:
            return view[:n]  # valid until this thread's next decompress or release_scratch()
        return memoryview(bytes(view[:n]))
    finally:
        _scratch.dirty = max(getattr(_scratch, "dirty", 0), written)
        if written > limit:  # a bomb: its pages go back at once
            release_scratch()


def release_scratch(min_bytes: int = _SCRATCH_KEEP_BYTES) -> None:
    """Hand the pages of this thread's scratch buffer past its first 4 MiB back to the OS if more
    than `min_bytes` were written since the last release (views from decompress(copy=False) read
    zeros there afterwards). Returning a view rather than a copy of a large output matters: the
    copy would be allocated and filled holding the GIL, tens of ms for a 60 MB batch; madvise
    holds it too, so legitimate batches release only past RELEASE_AFTER_BYTES."""
    if getattr(_scratch, "dirty", 0) > max(min_bytes, _SCRATCH_KEEP_BYTES):
        _scratch.mm.madvise(mmap.MADV_DONTNEED, _SCRATCH_KEEP_BYTES, len(_scratch.mm) - _SCRATCH_KEEP_BYTES)
    _scratch.dirty = 0


def _snappy_raw(data: bytes | memoryview, limit: int) -> bytes:
    try:
        size = cramjam.snappy.decompress_raw_len(data)
    except Exception as e:  # cramjam raises its own error types for a bad preamble
        raise CorruptCompressedDataError(f"snappy: {e}") from None
    if size > limit:
        raise DecompressedTooLargeError(SNAPPY, limit)
    try:
        return bytes(cramjam.snappy.decompress_raw(data))
    except Exception as e:
        raise CorruptCompressedDataError(f"snappy: {e}") from None


def _snappy(data: bytes | memoryview, limit: int) -> memoryview:
    """Java clients and kafka-python frame snappy in xerial blocks; librdkafka sends it raw."""
    view = memoryview(data)
    if bytes(view[:8]) != _XERIAL_MAGIC:
        return memoryview(_snappy_raw(view, limit))
    out = bytearray()
    pos = _XERIAL_HEADER_BYTES
    n = len(view)
    while pos < n:
        if n - pos < 4:
            raise CorruptCompressedDataError("snappy: truncated xerial block header")
        (size,) = _I32.unpack_from(view, pos)
        pos += 4
        if size < 0 or size > n - pos:
            raise CorruptCompressedDataError(f"snappy: xerial block of {size} bytes runs past the data")
        out += _snappy_raw(view[pos : pos + size], limit - len(out))
        pos += size
    return memoryview(out)


def decompress(codec: int, data: bytes | memoryview, limit: int = DEFAULT_MAX_DECOMPRESSED_BYTES, *,
               copy: bool = True) -> memoryview:
    """`data` decoded with `codec`, at most `limit` bytes. With copy=False the result may be a view of
    this thread's scratch buffer, valid only until the thread's next call (the validator's walk).

    Raises CorruptCompressedDataError for undecodable data, DecompressedTooLargeError when the
    output would pass `limit`, ValueError for an unknown codec."""
    if codec == NONE:
        if len(data) > limit:
            raise DecompressedTooLargeError(codec, limit)
        return memoryview(data)
    if codec == GZIP:
        return _into(codec, cramjam.gzip.decompress_into, data, limit, copy)
    if codec == SNAPPY:
        return _snappy(data, limit)
    if codec == LZ4:
        return _into(codec, cramjam.lz4.decompress_into, data, limit, copy)
    if codec == ZSTD:
        return _into(codec, cramjam.zstd.decompress_into, data, limit, copy)
    raise ValueError(f"unknown compression codec {codec}")


def compress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == LZ4:
        # Kafka's Java reader rejects LZ4 frames with linked blocks.
        c = cramjam.lz4.Compressor(block_linked=False)
        c.compress(data)
        return bytes(c.finish())
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown compression codec {codec}")
