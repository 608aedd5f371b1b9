"""LogSegment: one `<base offset>.log` file of record batches, with its .index and .timeindex.

Batches are stored exactly as they travel on the wire. Appends are one positional write of
the whole record set; reads are one `os.pread` starting from the offset index's entry at or
before the wanted offset, and only batch headers are walked to find batch boundaries.
The owning Log serialises every call except `fsync`.

File descriptors: a segment does not hold its `.log` file open. Every use takes the descriptor
from the process-wide `OPEN_FILES` cache (opening the file if needed) and pins it for the
length of the call; the cache closes the least recently used unpinned files beyond its
capacity. So a broker with 20,000 partitions needs no more descriptors than the cache allows
(a restart with one descriptor per segment died with EMFILE), and a descriptor is never closed
while a call (an fsync on a flush thread, a pread on the loop) is using it, so its number can
never be reused under a running call.
"""

from __future__ import annotations

import logging
import os
import random
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import NamedTuple

from gregor.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    compute_crc,
    decode_records,
    read_header,
)
from gregor.storage.config import LogConfig
from gregor.storage.errors import CorruptIndexError, CorruptRecordError, KafkaStorageError
from gregor.storage.index import INT32_MAX, NO_TIMESTAMP, OffsetIndex, TimeIndex
from gregor.storage.leader_epoch import LeaderEpochFileCache

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)

MIN_BATCH_SIZE = HEADER_SIZE  # a v2 batch is at least its header
_LENGTH_AT = 8
_LAST_OFFSET_DELTA_AT = 23
_I32 = struct.Struct(">i")
_BASE_AND_LENGTH = struct.Struct(">qi")
_SCAN_CHUNK_BYTES = 64 * 1024
_RECOVERY_CHUNK_BYTES = 8 * 1024 * 1024


DEFAULT_OPEN_FILES = 1024


def default_open_files_capacity() -> int:
    """Half the soft RLIMIT_NOFILE (the rest is for sockets, indexes and checkpoints), at least 16."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return DEFAULT_OPEN_FILES
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return DEFAULT_OPEN_FILES * 64
    return max(16, soft // 2)


class SegmentFileCache:
    """A bounded LRU of open segment `.log` descriptors, shared by every segment of the process.

    `acquire` returns a descriptor pinned until `release`; pinned descriptors are never closed
    (eviction skips them and `close_segment` defers to the last release). Evicting costs the
    segment nothing but one `open` at its next use.
    """

    def __init__(self, capacity: int) -> None:
        self._lock = threading.Lock()
        self._open: OrderedDict[LogSegment, None] = OrderedDict()
        self.capacity = max(1, capacity)
        self.opened = 0  # files opened since start (a measure of churn)

    def __len__(self) -> int:
        return len(self._open)

    def set_capacity(self, capacity: int) -> None:
        with self._lock:
            self.capacity = max(1, capacity)
            self._evict()

    def register(self, seg: LogSegment, fd: int) -> None:
        """A descriptor the segment opened itself (creating its file) joins the cache."""
        with self._lock:
            seg._fd = fd
            self._open[seg] = None
            self.opened += 1
            self._evict()

    def acquire(self, seg: LogSegment) -> int:
        with self._lock:
            fd = seg._fd
            if fd < 0:
                if seg.closed:
                    raise KafkaStorageError(f"segment {seg.log_path} is closed")
                try:
                    fd = os.open(seg.log_path, os.O_RDWR)
                except OSError as e:
                    raise KafkaStorageError(f"cannot open {seg.log_path}: {e}") from e
                seg._fd = fd
                self._open[seg] = None
                self.opened += 1
                seg._pins += 1
                self._evict()
                return fd
            self._open.move_to_end(seg)
            seg._pins += 1
            return fd

    def release(self, seg: LogSegment) -> None:
        with self._lock:
            seg._pins -= 1
            if seg._pins == 0 and (seg.closed or len(self._open) > self.capacity):
                self._close(seg)

    def close_segment(self, seg: LogSegment) -> None:
        """Mark the segment closed; its descriptor closes now, or at its last release if pinned."""
        with self._lock:
            seg.closed = True
            if seg._pins == 0:
                self._close(seg)

    def _close(self, seg: LogSegment) -> None:
        fd, seg._fd = seg._fd, -1
        self._open.pop(seg, None)
        if fd >= 0:
            os.close(fd)

    def _evict(self) -> None:
        """Close the least recently used unpinned descriptors down to the capacity. Takes them from the
        front of the LRU one at a time: copying the whole LRU per eviction cost 0.4 ms at 10,000 open
        files, doubling the cost of creating a partition past that many. A pinned one (in use right now)
        is moved to the back, as if just used."""
        for _ in range(len(self._open)):
            if len(self._open) <= self.capacity:
                return
            seg = next(iter(self._open))
            if seg._pins == 0:
                self._close(seg)
            else:
                self._open.move_to_end(seg)


OPEN_FILES = SegmentFileCache(default_open_files_capacity())


def file_prefix(base_offset: int) -> str:
    """Kafka's file name stem: the base offset as 20 digits."""
    return f"{base_offset:020d}"


def parse_base_offset(file_name: str) -> int | None:
    """The base offset of a segment file name (`00000000000000000042.log`), or None."""
    stem = file_name.split(".", 1)[0]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


class SegmentInfo(NamedTuple):
    """A segment's vital numbers at one moment, for planning a clean without holding the lock."""

    segment: LogSegment
    base_offset: int
    size: int
    next_base: int  # the next segment's base offset (the LEO for the active segment)
    index_entries: int
    time_index_entries: int


class SegmentRead(NamedTuple):
    records: memoryview  # whole batches; empty when max_offset or max_bytes allowed none
    position: int  # file position of the first batch
    next_offset: int  # offset to fetch next: after the last batch returned (or of the first not returned)


def _pread(fd: int, size: int, position: int) -> bytes:
    data = os.pread(fd, size, position)
    if len(data) < size:  # only at end of file: a concurrent truncation or a damaged file
        raise CorruptRecordError(f"short read: {len(data)} of {size} bytes at position {position}")
    return data


def _pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, position)
        view = view[n:]
        position += n


class LogSegment:
    """A segment file and its indexes. `size` counts only whole, valid batches."""

    def __init__(
        self,
        dir: str,
        base_offset: int,
        size: int,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        *,
        suffix: str,
        index_interval_bytes: int,
        roll_jitter_ms: int,
        created_ms: int,
        preallocated: bool,
    ) -> None:
        self.dir = dir
        self.base_offset = base_offset
        self.suffix = suffix
        self._fd = -1  # owned by OPEN_FILES: use OPEN_FILES.acquire/release
        self._pins = 0
        self.size = size
        self.offset_index = offset_index
        self.time_index = time_index
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        self.created_ms = created_ms
        self.closed = False
        self._preallocated = preallocated
        self._bytes_since_last_index_entry = 0
        # Largest batch max timestamp and the last offset of that batch ("shallow" offset);
        # None until loaded (from the time index's last entry plus the batches after the last index entry).
        self._max_timestamp: int | None = None
        self._offset_of_max_timestamp = -1
        self._rolling_base_timestamp: int | None = None  # max timestamp of the first batch
        self._next_offset: int | None = None

    # --- construction -------------------------------------------------------------------

    @classmethod
    def create(cls, dir: str, base_offset: int, config: LogConfig, now_ms: int, suffix: str = "") -> LogSegment:
        """A new empty segment; stale files of the same name are replaced."""
        prefix = os.path.join(dir, file_prefix(base_offset))
        fd = os.open(prefix + LOG_SUFFIX + suffix, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        preallocated = False
        if config.preallocate:
            try:
                os.posix_fallocate(fd, 0, config.segment_bytes)
                preallocated = True
            except OSError as e:  # e.g. a file system without fallocate: carry on without
                logger.warning("cannot preallocate %s: %s", prefix + LOG_SUFFIX, e)
        seg = cls(
            dir, base_offset, 0,
            OffsetIndex(prefix + INDEX_SUFFIX + suffix, base_offset, config.max_index_entries, new=True),
            TimeIndex(prefix + TIME_INDEX_SUFFIX + suffix, base_offset, config.max_time_index_entries, new=True),
            suffix=suffix,
            index_interval_bytes=config.index_interval_bytes,
            roll_jitter_ms=_jitter(config),
            created_ms=now_ms,
            preallocated=preallocated,
        )
        seg._max_timestamp = NO_TIMESTAMP
        seg._next_offset = base_offset
        OPEN_FILES.register(seg, fd)
        return seg

    @classmethod
    def open(cls, dir: str, base_offset: int, config: LogConfig, now_ms: int, suffix: str = "") -> LogSegment:
        """An existing segment. Its indexes are checked lazily; call `sanity_check` to check now."""
        prefix = os.path.join(dir, file_prefix(base_offset))
        size = os.stat(prefix + LOG_SUFFIX + suffix).st_size  # no descriptor until first used
        return cls(
            dir, base_offset, size,
            OffsetIndex(prefix + INDEX_SUFFIX + suffix, base_offset, config.max_index_entries, new=False),
            TimeIndex(prefix + TIME_INDEX_SUFFIX + suffix, base_offset, config.max_time_index_entries, new=False),
            suffix=suffix,
            index_interval_bytes=config.index_interval_bytes,
            roll_jitter_ms=_jitter(config),
            created_ms=now_ms,
            preallocated=False,
        )

    @property
    def log_path(self) -> str:
        return os.path.join(self.dir, file_prefix(self.base_offset) + LOG_SUFFIX + self.suffix)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, dir={self.dir!r})"

    # --- file access (through OPEN_FILES) ------------------------------------------------

    def _pread(self, size: int, position: int) -> bytes:
        """Exactly `size` bytes at `position` (CorruptRecordError if the file is shorter)."""
        fd = OPEN_FILES.acquire(self)
        try:
            return _pread(fd, size, position)
        finally:
            OPEN_FILES.release(self)

    def _pread_some(self, size: int, position: int) -> bytes:
        fd = OPEN_FILES.acquire(self)
        try:
            return os.pread(fd, size, position)
        finally:
            OPEN_FILES.release(self)

    def _ftruncate(self, size: int) -> None:
        fd = OPEN_FILES.acquire(self)
        try:
            os.ftruncate(fd, size)
        finally:
            OPEN_FILES.release(self)

    def file_size(self) -> int:
        """The `.log` file's size on disk (may exceed `size` when preallocated or torn)."""
        fd = OPEN_FILES.acquire(self)
        try:
            return os.fstat(fd).st_size
        finally:
            OPEN_FILES.release(self)

    # --- derived state --------------------------------------------------------------------

    @property
    def next_offset(self) -> int:
        """One past the last offset stored in this segment (its base offset when empty)."""
        if self._next_offset is None:
            self._ensure_offset_index()
            _, pos = self.offset_index.last_entry()
            nxt = self.base_offset
            for h in self._iter_batches(pos if pos < self.size else 0):
                nxt = h.next_offset
            self._next_offset = nxt
        return self._next_offset

    def _load_max_timestamp(self) -> None:
        try:
            ts, offset = self.time_index.last_entry()
            _, pos = self.offset_index.last_entry()
        except CorruptIndexError as e:
            logger.warning("%s; rebuilding the indexes of %s", e, self.log_path)
            self.rebuild_indexes()
            return
        for h in self._iter_batches(pos if pos < self.size else 0):
            if h.max_timestamp > ts:
                ts, offset = h.max_timestamp, h.last_offset
        self._max_timestamp = ts
        self._offset_of_max_timestamp = offset if ts >= 0 else -1

    @property
    def max_timestamp(self) -> int:
        """The largest batch max timestamp in the segment, -1 if none."""
        if self._max_timestamp is None:
            self._load_max_timestamp()
        assert self._max_timestamp is not None
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        """Last offset of the first batch holding `max_timestamp`, -1 if none."""
        if self._max_timestamp is None:
            self._load_max_timestamp()
        return self._offset_of_max_timestamp

    @property
    def largest_timestamp(self) -> int:
        """What retention compares with retention.ms: the max timestamp, else the file's mtime."""
        ts = self.max_timestamp
        if ts >= 0:
            return ts
        fd = OPEN_FILES.acquire(self)
        try:
            return int(os.fstat(fd).st_mtime * 1000)
        finally:
            OPEN_FILES.release(self)

    @property
    def rolling_base_timestamp(self) -> int | None:
        if self._rolling_base_timestamp is None and self.size >= HEADER_SIZE:
            self._rolling_base_timestamp = read_header(self._pread(HEADER_SIZE, 0)).max_timestamp
        return self._rolling_base_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """Kafka's rule: record time since the first batch's timestamp, else wall time since creation."""
        t = self.rolling_base_timestamp
        if t is not None and t >= 0:
            return message_timestamp - t
        return now_ms - self.created_ms

    def should_roll(
        self, config: LogConfig, records_size: int, max_timestamp: int, max_offset: int, now_ms: int
    ) -> str | None:
        """Why an append of `records_size` bytes must go to a new segment, or None."""
        if self.size > 0 and self.size + records_size > config.segment_bytes:
            return "segment.bytes"
        if self.size > 0 and self.time_waited_for_roll(now_ms, max_timestamp) > config.max_segment_ms - self.roll_jitter_ms:
            return "segment.ms"
        if self.offset_index.is_full or self.time_index.is_full:
            return "index full"
        if max_offset - self.base_offset > INT32_MAX:
            return "relative offset overflow"
        return None

    # --- append -------------------------------------------------------------------------

    def append(self, records: bytes | bytearray | memoryview, headers: list[BatchHeader]) -> None:
        """Write batches whose offsets are assigned; add index entries every index_interval_bytes."""
        assert not self.closed
        first, last = headers[0], headers[-1]
        assert first.base_offset >= self.base_offset, (first.base_offset, self.base_offset)
        assert first.base_offset >= self.next_offset, (first.base_offset, self.next_offset)
        assert last.last_offset - self.base_offset <= INT32_MAX
        if self._max_timestamp is None:
            self._load_max_timestamp()
        position = self.size
        fd = OPEN_FILES.acquire(self)
        try:
            _pwrite_all(fd, records, position)
        except OSError as e:
            try:
                os.ftruncate(fd, position)
            except OSError:
                pass
            raise KafkaStorageError(f"append to {self.log_path} failed: {e}") from e
        finally:
            OPEN_FILES.release(self)
        max_ts = self._max_timestamp
        assert max_ts is not None
        offset_of_max = self._offset_of_max_timestamp
        since = self._bytes_since_last_index_entry
        interval = self.index_interval_bytes
        for h in headers:
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max = h.max_timestamp, h.last_offset
            if since > interval:
                self.offset_index.append(h.last_offset, position)
                self.time_index.maybe_append(max_ts, offset_of_max)
                since = 0
            size = h.batch_length + LOG_OVERHEAD
            position += size
            since += size
        assert position == self.size + len(records), "headers do not tile the record set"
        self._bytes_since_last_index_entry = since
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, offset_of_max
        if self.size == 0:
            self._rolling_base_timestamp = first.max_timestamp
        self.size = position
        self._next_offset = last.next_offset

    # --- reads --------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int, max_offset: int, min_one_batch: bool) -> SegmentRead | None:
        """Whole batches from the one holding `start_offset`, up to `max_bytes` and below `max_offset`.

        With `min_one_batch` the first batch is returned even if larger than `max_bytes`.
        A batch holding `max_offset` (or later offsets) is never returned. Returns None if the
        segment has no batch ending at or after `start_offset`.
        """
        size = self.size
        self._ensure_offset_index()
        if size == 0 or start_offset >= self.next_offset:
            return None
        _, pos = self.offset_index.lookup(start_offset)
        window = max_bytes + max(self.index_interval_bytes, 4096) + 4096
        buf = self._pread(min(window, size - pos), pos)
        # 1. Find the first batch ending at or after start_offset.
        i = 0
        while True:
            if pos + i >= size:
                return None
            if len(buf) - i < HEADER_SIZE:
                pos += i
                i = 0
                buf = self._pread(min(window, size - pos), pos)
                if len(buf) < HEADER_SIZE:
                    raise CorruptRecordError(f"{self.log_path}: partial batch header at {pos}")
            base, length = _BASE_AND_LENGTH.unpack_from(buf, i)
            if length < MIN_BATCH_SIZE - LOG_OVERHEAD:
                raise CorruptRecordError(f"{self.log_path}: bad batch length {length} at {pos + i}")
            last = base + _I32.unpack_from(buf, i + _LAST_OFFSET_DELTA_AT)[0]
            if last >= start_offset:
                break
            i += length + LOG_OVERHEAD
        start = pos + i
        first_size = length + LOG_OVERHEAD
        if start + first_size > size:
            raise CorruptRecordError(f"{self.log_path}: batch at {start} runs past the segment end {size}")
        if last >= max_offset or (first_size > max_bytes and not min_one_batch):
            return SegmentRead(memoryview(b""), start, start_offset)
        limit = min(size, start + max(max_bytes, first_size))
        if pos + len(buf) < limit:  # a first batch larger than the window, or a long scan
            buf = self._pread(limit - start, start)
            pos = start
        # 2. Walk batch headers up to the byte and offset limits, jumping ahead with the index.
        check_offsets = max_offset < self.next_offset
        end = start + first_size
        last_start = start
        # An indexed batch starting at or before limit - HEADER_SIZE (so its header is in `buf`)
        # and ending below max_offset: every batch before it is whole and returnable.
        hint = self.offset_index.floor_position(limit - HEADER_SIZE, max_offset if check_offsets else self.next_offset)
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
                raise CorruptRecordError(f"{self.log_path}: bad batch length {sz} at {pos + off}")
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

    def _iter_batches(self, start_position: int = 0, end_position: int | None = None) -> Iterator[BatchHeader]:
        """Batch headers (with absolute positions) from `start_position`, reading in chunks."""
        end = self.size if end_position is None else end_position
        pos = start_position
        buf = b""
        buf_pos = pos
        while pos < end:
            off = pos - buf_pos
            if off + HEADER_SIZE > len(buf):
                buf = self._pread_some(min(_SCAN_CHUNK_BYTES, end - pos), pos)
                buf_pos, off = pos, 0
                if len(buf) < HEADER_SIZE:
                    raise CorruptRecordError(f"{self.log_path}: partial batch header at {pos}")
            h = read_header(buf, off)
            if h.batch_length < MIN_BATCH_SIZE - LOG_OVERHEAD or pos + h.size > end:
                raise CorruptRecordError(f"{self.log_path}: bad batch length {h.batch_length} at {pos}")
            h.position = pos
            yield h
            pos += h.size

    def batches(self, start_position: int = 0) -> Iterator[BatchHeader]:
        return self._iter_batches(start_position)

    def read_batch(self, header: BatchHeader) -> bytes:
        """The bytes of one batch found by `batches`/`translate_offset`."""
        return self._pread(header.size, header.position)

    def translate_offset(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset is >= `offset`, or None."""
        self._ensure_offset_index()
        _, pos = self.offset_index.lookup(offset)
        for h in self._iter_batches(pos):
            if h.last_offset >= offset:
                return h
        return None

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch) of the first record at or after `starting_offset`
        with a timestamp >= `timestamp`, or None. Decodes the one batch that holds it."""
        self._ensure_offset_index()
        self._ensure_time_index()
        _, ts_offset = self.time_index.lookup(timestamp)
        _, pos = self.offset_index.lookup(max(ts_offset, starting_offset))
        for h in self._iter_batches(pos):
            if h.max_timestamp >= timestamp and h.last_offset >= starting_offset:
                for r in decode_records(self.read_batch(h)):
                    if r.timestamp >= timestamp and r.offset >= starting_offset:
                        return r.offset, r.timestamp, h.partition_leader_epoch
        return None

    # --- indexes ------------------------------------------------------------------------

    def sanity_check(self, next_offset_bound: int | None = None) -> None:
        """Cheap checks that the index files exist and agree with the log: whole entries, last
        entries inside the segment (offsets below `next_offset_bound`, the next segment's base
        offset, or this segment's next offset). Raises CorruptIndexError."""
        # An empty segment's index files may never have been written (index.py creates them lazily).
        if self.size > 0 and (not self.offset_index.exists() or not self.time_index.exists()):
            raise CorruptIndexError(f"missing index file for {self.log_path}")
        self.offset_index.sanity_check(self.size)
        bound = self.next_offset if next_offset_bound is None else next_offset_bound
        if self.offset_index.entries and self.offset_index.last_entry()[0] >= bound:
            raise CorruptIndexError(f"{self.offset_index.path}: last offset is past the segment's end {bound}")
        self.time_index.sanity_check(bound)

    def check_tail(self, next_offset_bound: int | None = None) -> int:
        """The cheap check of a segment trusted after a clean shutdown: the batches from the last
        offset-index entry to the end of the file frame exactly up to the file's end, each has
        magic 2, a matching CRC and increasing offsets below `next_offset_bound` (the next
        segment's base offset). Reads at most about index.interval.bytes plus the last batch.
        Returns the segment's next offset; raises CorruptRecordError on any mismatch."""
        file_size = self.file_size()
        if file_size != self.size:
            raise CorruptRecordError(f"{self.log_path}: file size {file_size} is not the loaded size {self.size}")
        if self.size == 0:
            return self.base_offset
        try:
            last_offset, pos = self.offset_index.last_entry()
        except CorruptIndexError:
            pos = 0
        if not 0 <= pos < self.size:
            pos = 0
        nxt = self.base_offset
        indexed_last = last_offset if pos > 0 else None  # the batch at `pos` must end there
        buf = self._pread(self.size - pos, pos) if self.size - pos <= _RECOVERY_CHUNK_BYTES else b""
        if not buf:  # a huge tail (no index entries): walk headers, CRC only the last batch
            last: BatchHeader | None = None
            for h in self._iter_batches(pos):
                if h.base_offset < nxt or (h.position == pos and indexed_last not in (None, h.last_offset)):
                    raise CorruptRecordError(f"{self.log_path}: offset {h.base_offset} after {nxt - 1} at {h.position}")
                nxt, last = h.next_offset, h
            assert last is not None
            data = self.read_batch(last)
            if data[16] != MAGIC or compute_crc(data, 0, last.size) != last.crc:
                raise CorruptRecordError(f"{self.log_path}: last batch at {last.position} fails its CRC")
        else:
            off = 0
            while off < len(buf):
                if len(buf) - off < HEADER_SIZE:
                    raise CorruptRecordError(f"{self.log_path}: partial batch header at {pos + off}")
                h = read_header(buf, off)
                if h.batch_length < MIN_BATCH_SIZE - LOG_OVERHEAD or off + h.size > len(buf):
                    raise CorruptRecordError(f"{self.log_path}: bad batch length {h.batch_length} at {pos + off}")
                if h.magic != MAGIC or compute_crc(buf, off, h.size) != h.crc:
                    raise CorruptRecordError(f"{self.log_path}: batch at {pos + off} fails its magic/CRC check")
                if h.base_offset < nxt or h.last_offset_delta < 0:
                    raise CorruptRecordError(f"{self.log_path}: offset {h.base_offset} after {nxt - 1} at {pos + off}")
                if off == 0 and indexed_last is not None and h.last_offset != indexed_last:
                    raise CorruptRecordError(
                        f"{self.log_path}: the index says the batch at {pos} ends at {indexed_last}, it ends at {h.last_offset}")
                nxt = h.next_offset
                off += h.size
        if next_offset_bound is not None and nxt > next_offset_bound:
            raise CorruptRecordError(
                f"{self.log_path}: ends at offset {nxt - 1}, past the next segment's base offset {next_offset_bound}")
        if nxt - 1 - self.base_offset > INT32_MAX:
            raise CorruptRecordError(f"{self.log_path}: offset {nxt - 1} does not fit the segment")
        self._next_offset = nxt
        return nxt

    def load_indexes(self) -> None:
        """Load both indexes into memory (the active segment appends to them)."""
        self._ensure_offset_index()
        self._ensure_time_index()

    def _ensure_offset_index(self) -> None:
        if not self.offset_index.loaded:
            try:
                self.offset_index.load()
                if self.offset_index.last_entry()[1] >= max(self.size, 1) and self.offset_index.entries:
                    raise CorruptIndexError(f"{self.offset_index.path}: points past the log end")
            except CorruptIndexError as e:
                logger.warning("%s; rebuilding the indexes of %s", e, self.log_path)
                self.rebuild_indexes()

    def _ensure_time_index(self) -> None:
        if not self.time_index.loaded:
            try:
                self.time_index.load()
                if self.time_index.entries and self.time_index.last_entry()[1] >= self.next_offset:
                    raise CorruptIndexError(f"{self.time_index.path}: points past the log end")
            except CorruptIndexError as e:
                logger.warning("%s; rebuilding the indexes of %s", e, self.log_path)
                self.rebuild_indexes()

    def rebuild_indexes(self) -> None:
        """Rebuild both indexes from the batch headers (framing only, no CRC check)."""
        self.offset_index.reset()
        self.time_index.reset()
        max_ts, offset_of_max, since = NO_TIMESTAMP, -1, 0
        for h in self._iter_batches(0):
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max = h.max_timestamp, h.last_offset
            if since > self.index_interval_bytes:
                self.offset_index.append(h.last_offset, h.position)
                self.time_index.maybe_append(max_ts, offset_of_max)
                since = 0
            since += h.size
        if max_ts >= 0:
            self.time_index.maybe_append(max_ts, offset_of_max)
        self._bytes_since_last_index_entry = since
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, offset_of_max
        self.offset_index.write_pending()
        self.time_index.write_pending()

    # --- recovery and truncation ------------------------------------------------------------

    def recover(self, leader_epoch_cache: LeaderEpochFileCache | None = None) -> int:
        """Re-validate every batch (framing, magic, CRC, increasing offsets), rebuild the indexes
        and truncate the file at the first invalid batch. Returns the number of bytes truncated.

        Batch leader epochs newer than the cache's latest are assigned to `leader_epoch_cache`.
        """
        fd = OPEN_FILES.acquire(self)
        try:
            return self._recover(fd, leader_epoch_cache)
        finally:
            OPEN_FILES.release(self)

    def _recover(self, fd: int, leader_epoch_cache: LeaderEpochFileCache | None) -> int:
        self.offset_index.reset()
        self.time_index.reset()
        file_size = os.fstat(fd).st_size
        pos = 0
        buf = b""
        buf_pos = 0
        expected_next = self.base_offset
        max_ts, offset_of_max, since = NO_TIMESTAMP, -1, 0
        rolling: int | None = None
        interval = self.index_interval_bytes
        reason = ""
        while pos < file_size:
            off = pos - buf_pos
            if off + HEADER_SIZE > len(buf):
                if file_size - pos < HEADER_SIZE:
                    reason = "partial batch header"
                    break
                buf = os.pread(fd, min(_RECOVERY_CHUNK_BYTES, file_size - pos), pos)
                buf_pos, off = pos, 0
            h = read_header(buf, off)
            size = h.size
            if h.batch_length < MIN_BATCH_SIZE - LOG_OVERHEAD or pos + size > file_size:
                reason = f"batch length {h.batch_length}"
                break
            if off + size > len(buf):
                buf = os.pread(fd, min(max(_RECOVERY_CHUNK_BYTES, size), file_size - pos), pos)
                buf_pos, off = pos, 0
            if h.magic != MAGIC:
                reason = f"magic {h.magic}"
                break
            if compute_crc(buf, off, size) != h.crc:
                reason = "CRC mismatch"
                break
            if h.base_offset < expected_next or h.last_offset_delta < 0 or h.last_offset - self.base_offset > INT32_MAX:
                reason = f"offset {h.base_offset} after {expected_next - 1}"
                break
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max = h.max_timestamp, h.last_offset
            if since > interval:
                self.offset_index.append(h.last_offset, pos)
                self.time_index.maybe_append(max_ts, offset_of_max)
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
        truncated = file_size - pos
        if truncated:
            logger.warning(
                "%s: truncating %d bytes at position %d (%s)", self.log_path, truncated, pos, reason or "end of data"
            )
            os.ftruncate(fd, pos)
        self.size = pos
        self._next_offset = expected_next
        self._bytes_since_last_index_entry = since
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, offset_of_max
        self._rolling_base_timestamp = rolling
        self._preallocated = False
        self.offset_index.write_pending()
        self.time_index.write_pending()
        return truncated

    def truncate_to(self, offset: int, now_ms: int) -> int:
        """Remove the batch holding `offset` and everything after it. Returns bytes removed."""
        h = self.translate_offset(offset)
        if h is None:
            return 0
        self._ensure_time_index()
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        removed = self.size - h.position
        self._ftruncate(h.position)
        self.size = h.position
        self._preallocated = False
        self._bytes_since_last_index_entry = 0
        self._next_offset = None
        self._max_timestamp = None
        if self.size == 0:
            self.created_ms = now_ms
            self._rolling_base_timestamp = None
        self._load_max_timestamp()
        assert self.next_offset <= max(offset, self.base_offset)
        return removed

    # --- lifecycle ----------------------------------------------------------------------

    def on_become_inactive(self) -> None:
        """The segment stops being the active one (roll or close): record its max timestamp in the
        time index, write pending index entries, and give back any preallocated space."""
        if self.time_index.loaded and self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.write_indexes()
        if self._preallocated:
            self._ftruncate(self.size)
            self._preallocated = False

    def write_indexes(self) -> None:
        # The files of an empty segment stay unwritten (index.py): creating them costs more than the rest.
        self.offset_index.write_pending(create_empty=self.size > 0)
        self.time_index.write_pending(create_empty=self.size > 0)

    def flush(self) -> None:
        """Write pending index entries and fsync (for a caller that holds the segment alone)."""
        self.write_indexes()
        self.fsync()

    def fsync(self) -> None:
        """fsync the log and index files. Safe to call from another thread; a segment closed
        meanwhile (deleted or truncated away) is skipped."""
        try:
            fd = OPEN_FILES.acquire(self)
        except KafkaStorageError:
            if self.closed:
                return
            raise
        try:
            os.fsync(fd)
            self.offset_index.fsync()
            self.time_index.fsync()
        except OSError:
            if self.closed:
                return
            raise
        finally:
            OPEN_FILES.release(self)

    def close(self, write_indexes: bool = True) -> None:
        if self.closed:
            return
        try:
            if write_indexes:
                self.on_become_inactive()
        finally:
            OPEN_FILES.close_segment(self)  # an fsync racing on another thread keeps its pin until done

    def info(self, next_base: int) -> SegmentInfo:
        return SegmentInfo(
            self, self.base_offset, self.size, next_base, self.offset_index.entries, self.time_index.entries
        )

    def dup_fd(self) -> int:
        """A new descriptor for the .log file, owned by the caller (see Log.open_segment_readers)."""
        assert not self.closed
        fd = OPEN_FILES.acquire(self)
        try:
            return os.dup(fd)
        finally:
            OPEN_FILES.release(self)

    def change_suffix(self, new_suffix: str) -> None:
        """Rename the three files, e.g. to `.deleted` before an asynchronous delete."""
        prefix = os.path.join(self.dir, file_prefix(self.base_offset))
        os.replace(prefix + LOG_SUFFIX + self.suffix, prefix + LOG_SUFFIX + new_suffix)
        self.offset_index.rename(prefix + INDEX_SUFFIX + new_suffix)
        self.time_index.rename(prefix + TIME_INDEX_SUFFIX + new_suffix)
        self.suffix = new_suffix

    def file_paths(self) -> list[str]:
        return [self.log_path, self.offset_index.path, self.time_index.path]

    def delete_files(self) -> None:
        for path in self.file_paths():
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def _jitter(config: LogConfig) -> int:
    return random.randrange(config.segment_jitter_ms) if config.segment_jitter_ms > 0 else 0
