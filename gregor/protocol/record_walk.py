"""The record walk: the framing pass over the records of one (decompressed) batch body, without Python
work per record.

`walk` checks every record's length varint and fields (see gregor.protocol.validator, which applies it)
and returns (status, index, min_ts_delta, max_ts_delta, keyless_count, first_keyless). `walk_ids` is the
same pass for schema-checked topics: it also reads each checked key's and value's Confluent wire-format
prefix (magic byte 0, 4-byte big-endian schema id) and returns the batch's distinct ids, or the first
record without the prefix, so checking ids against the registry costs a few lookups per batch.

Both are C (`_recordwalk.c`); `_walk_py` / `_walk_ids_py` are the reference implementations and the
fallback when the extension is not built. Tests check that both agree on generated and mutated batches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

logger = logging.getLogger("gregor.protocol.validator")

LONG_MAX = 2**63 - 1

# Walk statuses (the C extension uses the same numbers).
OK = 0
TRUNCATED = 1
RECORD_LENGTH = 2
VARINT_TOO_LONG = 3
BAD_LENGTH = 4
BAD_HEADER_COUNT = 5
NULL_HEADER_KEY = 6
SIZE_MISMATCH = 7
OFFSET_DELTA = 8
TRAILING_BYTES = 9

WALK_MESSAGES = {
    TRUNCATED: "record {i} is truncated (a field runs past its record or the batch)",
    RECORD_LENGTH: "record {i}: length out of range (runs past the batch; the header may claim more records than it holds)",
    VARINT_TOO_LONG: "record {i}: varint too long",
    BAD_LENGTH: "record {i}: negative key, value or header value length",
    BAD_HEADER_COUNT: "record {i}: negative header count",
    NULL_HEADER_KEY: "record {i}: null header key",
    SIZE_MISMATCH: "record {i}: its fields do not fill its length",
    OFFSET_DELTA: "record {i}: offset delta out of sequence",
    TRAILING_BYTES: "bytes after the last of the {i} records the header claims",
}

WalkResult = tuple[int, int, int, int, int, int]


def _uvar(buf: memoryview | bytes, pos: int, end: int, max_bytes: int) -> tuple[int, int, int]:
    """(status, value, new pos) of an unsigned LEB128 of at most `max_bytes` bytes before `end`."""
    v = 0
    shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            return TRUNCATED, 0, pos
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return OK, v, pos
        shift += 7
    return VARINT_TOO_LONG, 0, pos


def _varint(buf: memoryview | bytes, pos: int, end: int) -> tuple[int, int, int]:
    st, u, pos = _uvar(buf, pos, end, 5)
    u &= 0xFFFFFFFF
    v = (u >> 1) ^ -(u & 1)
    return st, v, pos


def _varlong(buf: memoryview | bytes, pos: int, end: int) -> tuple[int, int, int]:
    st, u, pos = _uvar(buf, pos, end, 10)
    u &= 0xFFFFFFFFFFFFFFFF
    v = (u >> 1) ^ -(u & 1)
    return st, v, pos


# Schema-id statuses of walk_ids (the C extension uses the same numbers), and its fields.
ID_OK = 0
ID_BAD_MAGIC = 1
ID_NO_SCHEMA_ID = 2
ID_TOO_MANY = 3
KEY_FIELD = 1
VALUE_FIELD = 2
MAX_DISTINCT_IDS = 64
"""Distinct schema ids per field the C walk collects in one batch; a batch with more is walked again in
Python (`MAX_DISTINCT_IDS` bounds the C walk's fixed table, not what a batch may hold)."""

IdWalkResult = tuple[int, int, int, int, int, int, int, int, int, int, tuple[int, ...], tuple[int, ...]]


class _Ids:
    """walk_ids' collection of wire-format prefixes (see the C source): stops at the first failure."""

    __slots__ = ("fields", "max_distinct", "status", "index", "field", "detail", "sets")

    def __init__(self, fields: int, max_distinct: int | None) -> None:
        self.fields = fields
        self.max_distinct = max_distinct
        self.status, self.index, self.field, self.detail = ID_OK, -1, 0, 0
        self.sets: tuple[dict[int, None], dict[int, None]] = ({}, {})  # insertion-ordered

    def scan(self, field: int, buf: memoryview | bytes, pos: int, length: int, i: int) -> None:
        if self.status:
            return
        if length == 0 or buf[pos] != 0:
            self.status, self.detail = ID_BAD_MAGIC, -1 if length == 0 else buf[pos]
        elif length < 5:
            self.status, self.detail = ID_NO_SCHEMA_ID, length
        else:
            schema_id = int.from_bytes(buf[pos + 1 : pos + 5], "big")
            seen = self.sets[field]
            if schema_id in seen:
                return
            if self.max_distinct is not None and len(seen) == self.max_distinct:
                self.status, self.detail = ID_TOO_MANY, 0
            else:
                seen[schema_id] = None
                return
        self.index, self.field = i, field


def _walk_py(body: bytes | bytearray | memoryview, count: int, strict: bool, last_offset_delta: int) -> WalkResult:
    """The reference walk (and the fallback without the C extension); see the module docstring."""
    return _walk_impl(body, count, strict, last_offset_delta, None)[:6]  # type: ignore[return-value]


def _walk_ids_py(body: bytes | bytearray | memoryview, count: int, strict: bool, last_offset_delta: int, fields: int,
                 max_distinct: int | None = MAX_DISTINCT_IDS) -> IdWalkResult:
    """The reference of the C walk_ids (and its fallback); with max_distinct None, every distinct id."""
    return _walk_impl(body, count, strict, last_offset_delta, _Ids(fields, max_distinct))


def _walk_impl(body: bytes | bytearray | memoryview, count: int, strict: bool, last_offset_delta: int,
               ids: _Ids | None) -> IdWalkResult:
    buf = memoryview(body).cast("B") if not isinstance(body, bytes) else body
    n = len(buf)
    pos = 0
    prev = -1
    min_ts, max_ts = LONG_MAX, -LONG_MAX - 1
    keyless, first_keyless = 0, -1
    scan_key = ids is not None and ids.fields & KEY_FIELD
    scan_value = ids is not None and ids.fields & VALUE_FIELD

    def fail(status: int, i: int) -> IdWalkResult:
        return status, i, 0, 0, 0, -1, ID_OK, -1, 0, 0, (), ()

    for i in range(max(count, 0)):
        st, length, pos = _varint(buf, pos, n)
        if st:
            return fail(st, i)
        if length < 0 or length > n - pos:
            return fail(RECORD_LENGTH, i)
        end = pos + length
        if pos >= end:
            return fail(TRUNCATED, i)
        pos += 1  # attributes
        st, ts, pos = _varlong(buf, pos, end)
        if st:
            return fail(st, i)
        st, od, pos = _varint(buf, pos, end)
        if st:
            return fail(st, i)
        if (od != i) if strict else (od <= prev or od > last_offset_delta):
            return fail(OFFSET_DELTA, i)
        prev = od
        st, kl, pos = _varint(buf, pos, end)
        if st:
            return fail(st, i)
        if kl < -1:
            return fail(BAD_LENGTH, i)
        if kl >= 0:
            if kl > end - pos:
                return fail(TRUNCATED, i)
            if scan_key:
                ids.scan(0, buf, pos, kl, i)  # type: ignore[union-attr]
            pos += kl
        st, vl, pos = _varint(buf, pos, end)
        if st:
            return fail(st, i)
        if vl < -1:
            return fail(BAD_LENGTH, i)
        if vl >= 0:
            if vl > end - pos:
                return fail(TRUNCATED, i)
            if scan_value:
                ids.scan(1, buf, pos, vl, i)  # type: ignore[union-attr]
            pos += vl
        st, hc, pos = _varint(buf, pos, end)
        if st:
            return fail(st, i)
        if hc < 0:
            return fail(BAD_HEADER_COUNT, i)
        for _ in range(hc):
            st, hk, pos = _varint(buf, pos, end)
            if st:
                return fail(st, i)
            if hk < 0:
                return fail(NULL_HEADER_KEY, i)
            if hk > end - pos:
                return fail(TRUNCATED, i)
            pos += hk
            st, hv, pos = _varint(buf, pos, end)
            if st:
                return fail(st, i)
            if hv < -1:
                return fail(BAD_LENGTH, i)
            if hv >= 0:
                if hv > end - pos:
                    return fail(TRUNCATED, i)
                pos += hv
        if pos != end:
            return fail(SIZE_MISMATCH, i)
        if ts < min_ts:
            min_ts = ts
        if ts > max_ts:
            max_ts = ts
        if kl < 0:
            if keyless == 0:
                first_keyless = i
            keyless += 1
    if pos != n:
        return fail(TRAILING_BYTES, max(count, 0))
    if count <= 0:
        min_ts = max_ts = 0
    if ids is None:
        return OK, 0, min_ts, max_ts, keyless, first_keyless, ID_OK, -1, 0, 0, (), ()
    return (OK, 0, min_ts, max_ts, keyless, first_keyless, ids.status, ids.index, ids.field, ids.detail,
            tuple(ids.sets[0]), tuple(ids.sets[1]))


walk_py: Callable[[bytes | bytearray | memoryview, int, bool, int], WalkResult] = _walk_py
walk_ids_py: Callable[[bytes | bytearray | memoryview, int, bool, int, int], IdWalkResult] = _walk_ids_py
try:
    from gregor.protocol._recordwalk import walk as walk_c  # type: ignore[import-not-found]
    from gregor.protocol._recordwalk import walk_ids as walk_ids_c  # type: ignore[import-not-found]
except ImportError:  # not built (no compiler at install time): the same rules, in Python
    walk_c = walk_ids_c = None
    logger.warning("gregor.protocol._recordwalk is not built; record validation runs in pure Python (slower)")

walk: Callable[[bytes | bytearray | memoryview, int, bool, int], WalkResult] = walk_c or _walk_py
walk_ids: Callable[[bytes | bytearray | memoryview, int, bool, int, int], IdWalkResult] = walk_ids_c or _walk_ids_py
