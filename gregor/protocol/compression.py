"""Record batch codecs: gzip, snappy (raw and xerial framing), lz4 frames, zstd, via cramjam.

The broker passes compressed batches through untouched; these are for decoding records
(compaction, tools, tests) and for building batches.
"""

from __future__ import annotations

import struct

import cramjam

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
BY_NAME = {v: k for k, v in NAMES.items()}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _snappy_decompress(data: bytes | memoryview) -> bytes:
    """Java clients and kafka-python frame snappy in xerial blocks; librdkafka sends it raw."""
    if bytes(data[:8]) == _XERIAL_MAGIC:
        out = bytearray()
        pos = 16  # magic + version + compatible version
        n = len(data)
        while pos + 4 <= n:
            (size,) = struct.unpack_from(">i", data, pos)
            pos += 4
            out += bytes(cramjam.snappy.decompress_raw(bytes(data[pos : pos + size])))
            pos += size
        return bytes(out)
    return bytes(cramjam.snappy.decompress_raw(bytes(data)))


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.decompress(bytes(data)))
    if codec == SNAPPY:
        return _snappy_decompress(data)
    if codec == LZ4:
        return bytes(cramjam.lz4.decompress(bytes(data)))
    if codec == ZSTD:
        return bytes(cramjam.zstd.decompress(bytes(data)))
    raise ValueError(f"unknown compression codec {codec}")


def compress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
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
