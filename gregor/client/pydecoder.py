"""The Arrow decoder in pure Python: what gregor.client uses when its C extension is not built.

Same interface and results as gregor/client/_arrowbatch.c (see its header comment for the
semantics): one Python step per record instead of a C loop, so some fifty times slower, but correct
everywhere. The tests run both over the same batches.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable, Sequence
from typing import Any

from crc32c import crc32c

EXHAUSTED, FULL, DONE = 0, 1, 2
HEADER_SIZE = 61
_HEADER = struct.Struct(">qiibIhiqqqhii")
_CONTROL_KEY = struct.Struct(">hh")

Decompress = Callable[[int, memoryview], Any]


class CorruptRecordError(ValueError):
    """A record batch does not decode (or fails its CRC)."""


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise CorruptRecordError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint too long")


def _bitmap(valid: list[bool]) -> bytearray:
    out = bytearray((len(valid) + 7) // 8)
    for i, v in enumerate(valid):
        if v:
            out[i >> 3] |= 1 << (i & 7)
    return out


def _offsets(lengths: list[int]) -> array:
    out = array("i", [0])
    total = 0
    for n in lengths:
        total += n
        out.append(total)
    return out


class Decoder:
    def __init__(self, timestamp_scale: int = 1, key: bool = True, value: bool = True, headers: bool = True,
                 check_crcs: bool = True, read_committed: bool = False) -> None:
        if timestamp_scale < 1:
            raise ValueError("timestamp_scale must be >= 1")
        self.scale = timestamp_scale
        self.want_key, self.want_value, self.want_headers = key, value, headers
        self.check_crcs, self.read_committed = check_crcs, read_committed
        self.start, self.end = -(2**63), 2**63 - 1
        self.next_offset = -1
        self._aborted: list[tuple[int, int]] = []
        self._ab_idx = 0
        self._active: set[int] = set()
        self.stats = {"batches": 0, "control_batches": 0, "aborted_batches": 0, "compressed_batches": 0,
                      "records_seen": 0}
        self._reset()

    def _reset(self) -> None:
        self._offset: list[int] = []
        self._ts: list[int] = []
        self._tstype: list[int] = []
        self._keys: list[bytes | None] = []
        self._values: list[bytes | None] = []
        self._headers: list[list[tuple[bytes, bytes | None]]] = []
        self._data_bytes = 0

    @property
    def rows(self) -> int:
        return len(self._offset)

    @property
    def data_bytes(self) -> int:
        return self._data_bytes

    def set_range(self, start: int, end: int) -> None:
        self.start, self.end = start, end
        self.next_offset = max(self.next_offset, start)

    def set_aborted(self, aborted: Sequence[tuple[int, int]] | None) -> None:
        items = [(int(p), int(f)) for p, f in aborted or ()]
        if any(items[i][1] < items[i - 1][1] for i in range(1, len(items))):
            raise ValueError("aborted transactions must be sorted by first offset")
        self._aborted, self._ab_idx, self._active = items, 0, set()

    def feed(self, buf: Any, pos: int, decompress: Decompress, max_rows: int, max_bytes: int) -> tuple[int, int]:
        view = memoryview(buf).cast("B")
        n = len(view)
        if not 0 <= pos <= n:
            raise ValueError("position outside the record set")
        while n - pos >= HEADER_SIZE:
            (base_offset, length, _epoch, magic, crc, attrs, last_delta, base_ts, max_ts, producer_id, _pe, _seq,
             records) = _HEADER.unpack_from(view, pos)
            if length < HEADER_SIZE - 12:
                raise CorruptRecordError(f"record batch at offset {base_offset} has length {length}")
            size = length + 12
            if size > n - pos:
                break
            if magic != 2:
                raise CorruptRecordError(f"record batch at offset {base_offset} uses message format v{magic}: "
                                         f"only v2 (Kafka 0.11 and later) is read")
            last_offset = base_offset + last_delta
            if base_offset >= self.end:
                return pos, DONE
            if last_offset < self.start:
                pos += size
                self.next_offset = max(self.next_offset, last_offset + 1)
                continue
            if self.rows > 0 and (self.rows >= max_rows or self._data_bytes >= max_bytes):
                return pos, FULL
            if self.check_crcs and crc32c(view[pos + 21 : pos + size]) != crc:
                raise CorruptRecordError(f"record batch at offset {base_offset} fails its CRC32C check (check.crcs)")
            if records < 0 or last_delta < 0:
                raise CorruptRecordError(f"record batch at offset {base_offset} has {records} records, "
                                         f"last offset delta {last_delta}")
            control, transactional, codec = bool(attrs & 0x20), bool(attrs & 0x10), attrs & 0x07
            self.stats["batches"] += 1
            body = view[pos + HEADER_SIZE : pos + size]
            if codec and (not control or self.read_committed):
                if codec > 4:
                    raise CorruptRecordError(f"record batch at offset {base_offset} uses unknown compression "
                                             f"codec {codec}")
                body = memoryview(decompress(codec, body)).cast("B")
                self.stats["compressed_batches"] += 1
            skip = False
            if self.read_committed and producer_id >= 0:
                while self._ab_idx < len(self._aborted) and self._aborted[self._ab_idx][1] <= last_offset:
                    self._active.add(self._aborted[self._ab_idx][0])
                    self._ab_idx += 1
                if control:
                    if _control_type(body) == 0:
                        self._active.discard(producer_id)
                elif transactional and producer_id in self._active:
                    skip = True
                    self.stats["aborted_batches"] += 1
            if control:
                skip = True
                self.stats["control_batches"] += 1
            if not skip and records > 0:
                if records > len(body) // 7:
                    raise CorruptRecordError(f"record batch at offset {base_offset} claims {records} records in "
                                             f"{len(body)} bytes")
                self._walk(body, base_offset, base_ts, max_ts, records, bool(attrs & 0x08))
            pos += size
            self.next_offset = max(self.next_offset, last_offset + 1)
            if self.next_offset >= self.end:
                return pos, DONE
        return pos, EXHAUSTED

    def _walk(self, body: memoryview, base_offset: int, base_ts: int, max_ts: int, records: int,
              log_append: bool) -> None:
        p, end = 0, len(body)
        where = f"of the batch at offset {base_offset}"
        for i in range(records):
            length, p = _varint(body, p, end)
            if length < 1 or length > end - p:
                raise CorruptRecordError(f"record {i} {where}: bad record length")
            rend = p + length
            p += 1
            ts_delta, p = _varint(body, p, rend)
            off_delta, p = _varint(body, p, rend)
            key, p = self._bytes(body, p, rend, f"record {i} {where}: bad key length")
            value, p = self._bytes(body, p, rend, f"record {i} {where}: bad value length")
            nh, p = _varint(body, p, rend)
            if nh < 0 or nh > rend - p:
                raise CorruptRecordError(f"record {i} {where}: bad header count")
            headers = []
            for _ in range(nh):
                hk, p = self._bytes(body, p, rend, f"record {i} {where}: bad header key length", nullable=False)
                hv, p = self._bytes(body, p, rend, f"record {i} {where}: bad header value length")
                headers.append((hk, hv))
            if p != rend:
                raise CorruptRecordError(f"record {i} {where}: its length does not match its fields")
            offset = base_offset + off_delta
            self.stats["records_seen"] += 1
            if not self.start <= offset < self.end:
                continue
            self._offset.append(offset)
            self._ts.append((max_ts if log_append else base_ts + ts_delta) * self.scale)
            self._tstype.append(int(log_append))
            self._keys.append(key)
            self._values.append(value)
            self._headers.append(headers)
            self._data_bytes += ((len(key or b"") if self.want_key else 0) + (len(value or b"") if self.want_value else 0)
                                 + (sum(len(k) + len(v or b"") for k, v in headers) if self.want_headers else 0))
        if p != end:
            raise CorruptRecordError(f"the batch at offset {base_offset} has bytes after its last record")

    @staticmethod
    def _bytes(body: memoryview, p: int, end: int, error: str, nullable: bool = True) -> tuple[bytes | None, int]:
        n, p = _varint(body, p, end)
        if n < (-1 if nullable else 0) or n > end - p:
            raise CorruptRecordError(error)
        if n < 0:
            return None, p
        return bytes(body[p : p + n]), p + n

    def take(self) -> tuple[Any, ...] | None:
        """The same tuple as the C Decoder's take()."""
        rows = self.rows
        if rows == 0:
            self._reset()
            return None
        key: tuple[Any, ...] = (None,) * 4
        value: tuple[Any, ...] = (None,) * 4
        if self.want_key:
            key = _binary(self._keys)
        if self.want_value:
            value = _binary(self._values)
        hl: tuple[Any, ...] = (None,) * 3
        hk: tuple[Any, ...] = (None,) * 2
        hv: tuple[Any, ...] = (None,) * 4
        bad_utf8 = 0
        count = 0
        if self.want_headers:
            flat = [h for hs in self._headers for h in hs]
            count = len(flat)
            hl = (sum(1 for hs in self._headers if not hs), _bitmap([bool(hs) for hs in self._headers]),
                  _offsets([len(hs) for hs in self._headers]))
            hk = (_offsets([len(k) for k, _ in flat]), bytearray(b"".join(k for k, _ in flat)))
            hv = _binary([v for _, v in flat])
            for k, _ in flat:
                try:
                    k.decode("utf-8")
                except UnicodeDecodeError:
                    bad_utf8 = 1
        out = (rows, array("q", self._offset), array("q", self._ts), array("i", self._tstype), *key, *value,
               hl[0], hl[1], hl[2], count, *hk, *hv, bad_utf8)
        self._reset()
        return out


def _binary(items: list[bytes | None]) -> tuple[int, bytearray, array, bytearray]:
    """(null count, validity bitmap, int32 offsets, data) of a binary column."""
    return (sum(1 for x in items if x is None), _bitmap([x is not None for x in items]),
            _offsets([len(x) if x is not None else 0 for x in items]), bytearray(b"".join(x for x in items if x)))


def _control_type(body: memoryview) -> int:
    """The control type of a control batch's record (0 abort, 1 commit), or -1 when its key is not one."""
    try:
        length, p = _varint(body, 0, len(body))
        if length <= 0 or length > len(body) - p:
            return -1
        end = p + length
        p += 1
        _, p = _varint(body, p, end)
        _, p = _varint(body, p, end)
        klen, p = _varint(body, p, end)
    except CorruptRecordError:
        return -1
    if klen < 4 or klen > end - p:
        return -1
    return _CONTROL_KEY.unpack_from(body, p)[1]


def scan(record_set: Any) -> tuple[int, int]:
    """(next offset after the complete batches or -1, their bytes): as the C module's scan()."""
    view = memoryview(record_set).cast("B")
    pos, n, nxt = 0, len(view), -1
    while n - pos >= HEADER_SIZE:
        base, length = struct.unpack_from(">qi", view, pos)
        if length < HEADER_SIZE - 12 or length + 12 > n - pos:
            break
        nxt = max(nxt, base + struct.unpack_from(">i", view, pos + 23)[0] + 1)
        pos += length + 12
    return nxt, pos
