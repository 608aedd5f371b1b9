"""Walks over a segment's `.log` file, kept out of LogSegment (which keeps the segment's state):

    iter_batches         batch headers from a position, framing checked, in 64 KiB reads
    read_batches         the fetch path: whole batches from an offset, one pread, headers only
    check_indexes        the cheap index checks of a segment that is not re-validated
    check_tail           the cheap check after a clean shutdown: CRCs after the last index entry
    index_batches        index entries for batch headers (an index rebuild)
    find_offset_by_timestamp  ListOffsets by timestamp within one segment
    scan_for_recovery    re-validate every batch after a crash (CRC, magic, framing, offsets)

Only batch headers are parsed here; records are read only through the record validator
(gregor.protocol.validator), by find_offset_by_timestamp. Each function reads through the segment's `pread`/`pread_some`
(the open-files cache), or a descriptor its caller pinned, and changes no segment state: the
LogSegment method that calls it applies what it returns. What the walks read of a segment is the
`ScannedSegment` protocol, which LogSegment (segment.py, above this module) satisfies.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator
from typing import NamedTuple, Protocol

from gregor.protocol.records import HEADER_SIZE, LOG_OVERHEAD, MAGIC, BatchHeader, compute_crc, read_header
from gregor.protocol.validator import BatchValidationError, ValidationRules, record_timestamps
from gregor.storage.errors import CorruptIndexError, CorruptRecordError
from gregor.storage.index import INT32_MAX, NO_TIMESTAMP, OffsetIndex, TimeIndex
from gregor.storage.leader_epoch import LeaderEpochFileCache

logger = logging.getLogger(__name__)

MIN_BATCH_SIZE = HEADER_SIZE  # a v2 batch is at least its header
_LENGTH_AT = 8
_LAST_OFFSET_DELTA_AT = 23
_I32 = struct.Struct(">i")
_BASE_AND_LENGTH = struct.Struct(">qi")
_SCAN_CHUNK_BYTES = 64 * 1024
RECOVERY_CHUNK_BYTES = 8 * 1024 * 1024


class ScannedSegment(Protocol):
    """What the walks read of a segment (LogSegment): its file, size and indexes."""

    base_offset: int
    size: int  # bytes of whole, valid batches
    index_interval_bytes: int
    offset_index: OffsetIndex
    time_index: TimeIndex

    @property
    def log_path(self) -> str: ...

    @property
    def next_offset(self) -> int: ...

    def pread(self, size: int, position: int) -> bytes: ...

    def pread_some(self, size: int, position: int) -> bytes: ...

    def file_size(self) -> int: ...

    def read_batch(self, header: BatchHeader) -> bytes: ...


class SegmentRead(NamedTuple):
    records: memoryview  # whole batches; empty when max_offset or max_bytes allowed none
    position: int  # file position of the first batch
    next_offset: int  # offset to fetch next: after the last batch returned (or of the first not returned)


def iter_batches(seg: ScannedSegment, start_position: int = 0, end_position: int | None = None) -> Iterator[BatchHeader]:
    """Batch headers (with absolute positions) from `start_position`, reading in chunks."""
    end = seg.size if end_position is None else end_position
    pos = start_position
    buf = b""
    buf_pos = pos
    while pos < end:
        off = pos - buf_pos
        if off + HEADER_SIZE > len(buf):
            buf = seg.pread_some(min(_SCAN_CHUNK_BYTES, end - pos), pos)
            buf_pos, off = pos, 0
            if len(buf) < HEADER_SIZE:
                raise CorruptRecordError(f"{seg.log_path}: partial batch header at {pos}")
        h = read_header(buf, off)
        if h.batch_length < MIN_BATCH_SIZE - LOG_OVERHEAD or pos + h.size > end:
            raise CorruptRecordError(f"{seg.log_path}: bad batch length {h.batch_length} at {pos}")
        h.position = pos
        yield h
        pos += h.size


def read_batches(seg: ScannedSegment, start_offset: int, max_bytes: int, max_offset: int,
                 min_one_batch: bool) -> SegmentRead | None:
    """LogSegment.read (see there); the segment's offset index must be loaded."""
    size = seg.size
    if size == 0 or start_offset >= seg.next_offset:
        return None
    _, pos = seg.offset_index.lookup(start_offset)
    window = max_bytes + max(seg.index_interval_bytes, 4096) + 4096
    buf = seg.pread(min(window, size - pos), pos)
    # 1. Find the first batch ending at or after start_offset.
    i = 0
    while True:
        if pos + i >= size:
            return None
        if len(buf) - i < HEADER_SIZE:
            pos += i
            i = 0
            buf = seg.pread(min(window, size - pos), pos)
            if len(buf) < HEADER_SIZE:
                raise CorruptRecordError(f"{seg.log_path}: partial batch header at {pos}")
        base, length = _BASE_AND_LENGTH.unpack_from(buf, i)
        if length < MIN_BATCH_SIZE - LOG_OVERHEAD:
            raise CorruptRecordError(f"{seg.log_path}: bad batch length {length} at {pos + i}")
        last = base + _I32.unpack_from(buf, i + _LAST_OFFSET_DELTA_AT)[0]
        if last >= start_offset:
            break
        i += length + LOG_OVERHEAD
    start = pos + i
    first_size = length + LOG_OVERHEAD
    if start + first_size > size:
        raise CorruptRecordError(f"{seg.log_path}: batch at {start} runs past the segment end {size}")
    if last >= max_offset or (first_size > max_bytes and not min_one_batch):
        return SegmentRead(memoryview(b""), start, start_offset)
    limit = min(size, start + max(max_bytes, first_size))
    if pos + len(buf) < limit:  # a first batch larger than the window, or a long scan
        buf = seg.pread(limit - start, start)
        pos = start
    # 2. Walk batch headers up to the byte and offset limits, jumping ahead with the index.
    seg_next = seg.next_offset
    check_offsets = max_offset < seg_next
    end = start + first_size
    last_start = start
    # An indexed batch starting at or before limit - HEADER_SIZE (so its header is in `buf`)
    # and ending below max_offset: every batch before it is whole and returnable.
    hint = seg.offset_index.floor_position(limit - HEADER_SIZE, max_offset if check_offsets else seg_next)
    if hint > end:
        end = hint
        sz = _I32.unpack_from(buf, hint - pos + _LENGTH_AT)[0] + LOG_OVERHEAD
        if hint + sz <= limit:
            last_start = hint
            end = hint + sz
        else:
            last_start = -1  # the batch at `hint` is not returned: the next fetch starts there
    unpack_i32 = _I32.unpack_from
    off, lim = end - pos, limit - pos
    while off + LOG_OVERHEAD <= lim:
        sz = unpack_i32(buf, off + _LENGTH_AT)[0] + LOG_OVERHEAD
        if sz < MIN_BATCH_SIZE:
            raise CorruptRecordError(f"{seg.log_path}: bad batch length {sz} at {pos + off}")
        if off + sz > lim:
            break
        if check_offsets:
            b, _ = _BASE_AND_LENGTH.unpack_from(buf, off)
            if b + unpack_i32(buf, off + _LAST_OFFSET_DELTA_AT)[0] >= max_offset:
                break
        last_start = pos + off
        off += sz
    end = pos + off
    if last_start < 0:
        next_offset = _BASE_AND_LENGTH.unpack_from(buf, end - pos)[0]
    else:
        j = last_start - pos
        next_offset = _BASE_AND_LENGTH.unpack_from(buf, j)[0] + unpack_i32(buf, j + _LAST_OFFSET_DELTA_AT)[0] + 1
    return SegmentRead(memoryview(buf)[start - pos : end - pos], start, next_offset)


def check_indexes(seg: ScannedSegment, next_offset_bound: int | None) -> None:
    """The index files exist and agree with the log: whole entries, last entries inside the
    segment (offsets below `next_offset_bound`, the next segment's base offset, or the segment's
    next offset). Raises CorruptIndexError."""
    # An empty segment's index files may never have been written (index.py creates them lazily).
    if seg.size > 0 and (not seg.offset_index.exists() or not seg.time_index.exists()):
        raise CorruptIndexError(f"missing index file for {seg.log_path}")
    seg.offset_index.sanity_check(seg.size)
    bound = seg.next_offset if next_offset_bound is None else next_offset_bound
    if seg.offset_index.entries and seg.offset_index.last_entry()[0] >= bound:
        raise CorruptIndexError(f"{seg.offset_index.path}: last offset is past the segment's end {bound}")
    seg.time_index.sanity_check(bound)


def index_batches(headers: Iterator[BatchHeader], interval: int, offset_index: OffsetIndex,
                  time_index: TimeIndex) -> tuple[int, int, int]:
    """Append an entry to both (reset) indexes every `interval` bytes of batches. Returns (max
    timestamp, last offset of the batch holding it, bytes since the last index entry)."""
    max_ts, offset_of_max, since = NO_TIMESTAMP, -1, 0
    for h in headers:
        if h.max_timestamp > max_ts:
            max_ts, offset_of_max = h.max_timestamp, h.last_offset
        if since > interval:
            offset_index.append(h.last_offset, h.position)
            time_index.maybe_append(max_ts, offset_of_max)
            since = 0
        since += h.size
    return max_ts, offset_of_max, since


def find_offset_by_timestamp(seg: ScannedSegment, timestamp: int, starting_offset: int,
                             rules: ValidationRules | None) -> tuple[int, int, int] | None:
    """(offset, timestamp, leader epoch) of the first record at or after `starting_offset` with a
    timestamp >= `timestamp`, or None; the segment's indexes must be loaded. Reads the one batch
    that holds it through the record validator (`rules`, default `ValidationRules.for_stored`
    with no size bound); a stored batch that does not validate is answered from its header, with
    a warning: a bad record must never fail a ListOffsets."""
    _, ts_offset = seg.time_index.lookup(timestamp)
    _, pos = seg.offset_index.lookup(max(ts_offset, starting_offset))
    for h in iter_batches(seg, pos):
        if h.max_timestamp >= timestamp and h.last_offset >= starting_offset:
            try:
                pairs = record_timestamps(seg.read_batch(h), rules or ValidationRules.for_stored(INT32_MAX))
            except BatchValidationError as e:
                logger.warning("%s: the stored batch at offset %d does not validate (%s); answering the "
                               "timestamp lookup from its header", seg.log_path, h.base_offset, e)
                return max(h.base_offset, starting_offset), h.max_timestamp, h.partition_leader_epoch
            for offset, ts in pairs:
                if ts >= timestamp and offset >= starting_offset:
                    return offset, ts, h.partition_leader_epoch
    return None


def check_tail(seg: ScannedSegment, next_offset_bound: int | None) -> int:
    """The cheap check of a segment trusted after a clean shutdown: the batches from the last
    offset-index entry to the end of the file frame exactly up to the file's end, each has magic 2,
    a matching CRC and increasing offsets below `next_offset_bound` (the next segment's base
    offset). Reads at most about index.interval.bytes plus the last batch. Returns the segment's
    next offset; raises CorruptRecordError on any mismatch."""
    file_size = seg.file_size()
    if file_size != seg.size:
        raise CorruptRecordError(f"{seg.log_path}: file size {file_size} is not the loaded size {seg.size}")
    if seg.size == 0:
        return seg.base_offset
    try:
        last_offset, pos = seg.offset_index.last_entry()
    except CorruptIndexError:
        pos = 0
    if not 0 <= pos < seg.size:
        pos = 0
    nxt = seg.base_offset
    indexed_last = last_offset if pos > 0 else None  # the batch at `pos` must end there
    buf = seg.pread(seg.size - pos, pos) if seg.size - pos <= RECOVERY_CHUNK_BYTES else b""
    if not buf:  # a huge tail (no index entries): walk headers, CRC only the last batch
        last: BatchHeader | None = None
        for h in iter_batches(seg, pos):
            if h.base_offset < nxt or (h.position == pos and indexed_last not in (None, h.last_offset)):
                raise CorruptRecordError(f"{seg.log_path}: offset {h.base_offset} after {nxt - 1} at {h.position}")
            nxt, last = h.next_offset, h
        assert last is not None
        data = seg.read_batch(last)
        if data[16] != MAGIC or compute_crc(data, 0, last.size) != last.crc:
            raise CorruptRecordError(f"{seg.log_path}: last batch at {last.position} fails its CRC")
    else:
        off = 0
        while off < len(buf):
            if len(buf) - off < HEADER_SIZE:
                raise CorruptRecordError(f"{seg.log_path}: partial batch header at {pos + off}")
            h = read_header(buf, off)
            if h.batch_length < MIN_BATCH_SIZE - LOG_OVERHEAD or off + h.size > len(buf):
                raise CorruptRecordError(f"{seg.log_path}: bad batch length {h.batch_length} at {pos + off}")
            if h.magic != MAGIC or compute_crc(buf, off, h.size) != h.crc:
                raise CorruptRecordError(f"{seg.log_path}: batch at {pos + off} fails its magic/CRC check")
            if h.base_offset < nxt or h.last_offset_delta < 0:
                raise CorruptRecordError(f"{seg.log_path}: offset {h.base_offset} after {nxt - 1} at {pos + off}")
            if off == 0 and indexed_last is not None and h.last_offset != indexed_last:
                raise CorruptRecordError(
                    f"{seg.log_path}: the index says the batch at {pos} ends at {indexed_last}, it ends at {h.last_offset}")
            nxt = h.next_offset
            off += h.size
    if next_offset_bound is not None and nxt > next_offset_bound:
        raise CorruptRecordError(
            f"{seg.log_path}: ends at offset {nxt - 1}, past the next segment's base offset {next_offset_bound}")
    if nxt - 1 - seg.base_offset > INT32_MAX:
        raise CorruptRecordError(f"{seg.log_path}: offset {nxt - 1} does not fit the segment")
    return nxt


class RecoveryScan(NamedTuple):
    """What `scan_for_recovery` found: the valid prefix of the file and the segment state after it."""

    valid_bytes: int
    next_offset: int
    bytes_since_last_index_entry: int
    max_timestamp: int
    offset_of_max_timestamp: int
    rolling_base_timestamp: int | None
    reason: str  # why the scan stopped before the end of the file ("" if it did not)


def scan_for_recovery(
    fd: int, path: str, base_offset: int, file_size: int, index_interval_bytes: int,
    offset_index: OffsetIndex, time_index: TimeIndex, leader_epoch_cache: LeaderEpochFileCache | None,
) -> RecoveryScan:
    """Validate the batches of the file behind `fd` one by one (framing, magic, CRC, offsets
    strictly increasing and within an int32 of `base_offset`) up to the first invalid one,
    appending index entries to the (reset) indexes every `index_interval_bytes` and batch
    leader epochs newer than the cache's latest to `leader_epoch_cache`."""
    pos = 0
    buf = b""
    buf_pos = 0
    expected_next = base_offset
    max_ts, offset_of_max, since = NO_TIMESTAMP, -1, 0
    rolling: int | None = None
    reason = ""
    while pos < file_size:
        off = pos - buf_pos
        if off + HEADER_SIZE > len(buf):
            if file_size - pos < HEADER_SIZE:
                reason = "partial batch header"
                break
            buf = os.pread(fd, min(RECOVERY_CHUNK_BYTES, file_size - pos), pos)
            buf_pos, off = pos, 0
        h = read_header(buf, off)
        size = h.size
        if h.batch_length < MIN_BATCH_SIZE - LOG_OVERHEAD or pos + size > file_size:
            reason = f"batch length {h.batch_length}"
            break
        if off + size > len(buf):
            buf = os.pread(fd, min(max(RECOVERY_CHUNK_BYTES, size), file_size - pos), pos)
            buf_pos, off = pos, 0
        if h.magic != MAGIC:
            reason = f"magic {h.magic}"
            break
        if compute_crc(buf, off, size) != h.crc:
            reason = "CRC mismatch"
            break
        if h.base_offset < expected_next or h.last_offset_delta < 0 or h.last_offset - base_offset > INT32_MAX:
            reason = f"offset {h.base_offset} after {expected_next - 1}"
            break
        if h.max_timestamp > max_ts:
            max_ts, offset_of_max = h.max_timestamp, h.last_offset
        if since > index_interval_bytes:
            offset_index.append(h.last_offset, pos)
            time_index.maybe_append(max_ts, offset_of_max)
            since = 0
        since += size
        if rolling is None:
            rolling = h.max_timestamp
        epoch = h.partition_leader_epoch
        if leader_epoch_cache is not None and epoch >= 0:
            latest = leader_epoch_cache.latest_epoch
            if latest is None or epoch > latest:
                leader_epoch_cache.assign(epoch, h.base_offset)
        expected_next = h.next_offset
        pos += size
    if pos < file_size:
        logger.warning("%s: truncating %d bytes at position %d (%s)", path, file_size - pos, pos,
                       reason or "end of data")
    return RecoveryScan(pos, expected_next, since, max_ts, offset_of_max, rolling, reason)
