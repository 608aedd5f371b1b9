"""LogSegment: one `<base offset>.log` file of record batches, with its .index, .timeindex and .txnindex.

Batches are stored exactly as they travel on the wire. Appends are one positional write of
the whole record set; reads are one `os.pread` starting from the offset index's entry at or
before the wanted offset, and only batch headers are walked to find batch boundaries.
The owning Log serialises every call except `fsync`.

File descriptors: a segment does not hold its `.log` file open. Every use takes the descriptor
from its `files` cache (segment_files.SegmentFileCache, one per broker, owned by the LogManager),
opening the file if needed, and pins it for the length of the call; the cache closes the least
recently used unpinned files beyond its capacity. So a broker with 20,000 partitions needs no more descriptors than the cache allows
(a restart with one descriptor per segment died with EMFILE), and a descriptor is never closed
while a call (an fsync on a flush thread, a pread on the loop) is using it, so its number can
never be reused under a running call.

Parts: the descriptor cache is segment_files.py; the walks over a segment's file (the fetch
read, header iteration, the clean-shutdown tail check, crash recovery) are segment_scan.py,
which reads and returns what it found; this class keeps the segment's state and applies it.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Iterator
from typing import NamedTuple

from gregor.protocol.records import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, read_header
from gregor.protocol.validator import ValidationRules
from gregor.storage.config import LogConfig
from gregor.storage.errors import CorruptIndexError, KafkaStorageError
from gregor.storage.files import unlink_if_exists
from gregor.storage.index import INT32_MAX, NO_TIMESTAMP, OffsetIndex, TimeIndex
from gregor.storage.leader_epoch import LeaderEpochFileCache
from gregor.storage.segment_files import (  # noqa: F401 - the cache and its helpers are imported from here
    DEFAULT_OPEN_FILES,
    LOG_SUFFIX,
    SegmentFile,
    SegmentFileCache,
    default_open_files_capacity,
    file_prefix,
    pwrite_all,
)
from gregor.storage.segment_scan import (  # noqa: F401 - SegmentRead is imported from here
    MIN_BATCH_SIZE,
    SegmentRead,
    check_indexes,
    check_tail,
    find_offset_by_timestamp,
    index_batches,
    iter_batches,
    read_batches,
    scan_for_recovery,
)
from gregor.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

logger = logging.getLogger(__name__)

INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


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


class LogSegment(SegmentFile):
    """A segment file and its indexes. `size` counts only whole, valid batches."""

    def __init__(
        self,
        dir: str,
        base_offset: int,
        size: int,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        txn_index: TransactionIndex,
        *,
        suffix: str,
        index_interval_bytes: int,
        roll_jitter_ms: int,
        created_ms: int,
        preallocated: bool,
        files: SegmentFileCache,
    ) -> None:
        super().__init__(dir, base_offset, suffix, files)
        self.size = size
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_index = txn_index  # aborted transactions whose markers are here (txn_index.py)
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        self.created_ms = created_ms
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
    def create(cls, dir: str, base_offset: int, config: LogConfig, now_ms: int, suffix: str = "",
               files: SegmentFileCache | None = None) -> LogSegment:
        """A new empty segment; stale files of the same name are replaced. `files`: the cache its
        descriptor goes through (its log's; by default one of its own)."""
        path = os.path.join(dir, file_prefix(base_offset) + LOG_SUFFIX + suffix)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        preallocated = False
        if config.preallocate:
            try:
                os.posix_fallocate(fd, 0, config.segment_bytes)
                preallocated = True
            except OSError as e:  # e.g. a file system without fallocate: carry on without
                logger.warning("cannot preallocate %s: %s", path, e)
        seg = cls._new(dir, base_offset, 0, config, now_ms, suffix, new=True, preallocated=preallocated,
                       files=files if files is not None else SegmentFileCache())
        seg._max_timestamp = NO_TIMESTAMP
        seg._next_offset = base_offset
        seg.files.register(seg, fd)
        return seg

    @classmethod
    def open(cls, dir: str, base_offset: int, config: LogConfig, now_ms: int, suffix: str = "",
             files: SegmentFileCache | None = None) -> LogSegment:
        """An existing segment. Its indexes are checked lazily; call `sanity_check` to check now."""
        size = os.stat(os.path.join(dir, file_prefix(base_offset) + LOG_SUFFIX + suffix)).st_size  # no descriptor yet
        return cls._new(dir, base_offset, size, config, now_ms, suffix, new=False, preallocated=False,
                        files=files if files is not None else SegmentFileCache())

    @classmethod
    def _new(cls, dir: str, base_offset: int, size: int, config: LogConfig, now_ms: int, suffix: str, *,
             new: bool, preallocated: bool, files: SegmentFileCache) -> LogSegment:
        prefix = os.path.join(dir, file_prefix(base_offset))
        return cls(
            dir, base_offset, size,
            OffsetIndex(prefix + INDEX_SUFFIX + suffix, base_offset, config.max_index_entries, new=new),
            TimeIndex(prefix + TIME_INDEX_SUFFIX + suffix, base_offset, config.max_time_index_entries, new=new),
            TransactionIndex(prefix + TXN_INDEX_SUFFIX + suffix, new=new),
            suffix=suffix, index_interval_bytes=config.index_interval_bytes, roll_jitter_ms=_jitter(config),
            created_ms=now_ms, preallocated=preallocated, files=files,
        )

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, dir={self.dir!r})"

    # --- derived state --------------------------------------------------------------------

    @property
    def next_offset(self) -> int:
        """One past the last offset stored in this segment (its base offset when empty)."""
        if self._next_offset is None:
            self._ensure_offset_index()
            _, pos = self.offset_index.last_entry()
            nxt = self.base_offset
            for h in self.batches(pos if pos < self.size else 0):
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
        for h in self.batches(pos if pos < self.size else 0):
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
        return self.file_mtime_ms()

    @property
    def rolling_base_timestamp(self) -> int | None:
        if self._rolling_base_timestamp is None and self.size >= HEADER_SIZE:
            self._rolling_base_timestamp = read_header(self.pread(HEADER_SIZE, 0)).max_timestamp
        return self._rolling_base_timestamp

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
        files = self.files
        fd = files.acquire(self)  # inline, not SegmentFile.pwrite: one call less per Produce
        try:
            pwrite_all(fd, records, position)
        except OSError as e:
            try:
                os.ftruncate(fd, position)
            except OSError:
                pass
            raise KafkaStorageError(f"append to {self.log_path} failed: {e}") from e
        finally:
            files.release(self)
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
        segment has no batch ending at or after `start_offset`. One pread (segment_scan.read_batches).
        """
        self._ensure_offset_index()
        return read_batches(self, start_offset, max_bytes, max_offset, min_one_batch)

    def batches(self, start_position: int = 0) -> Iterator[BatchHeader]:
        """Batch headers (with absolute positions) from `start_position`, reading in chunks."""
        return iter_batches(self, start_position)

    def read_batch(self, header: BatchHeader) -> bytes:
        """The bytes of one batch found by `batches`/`translate_offset`."""
        return self.pread(header.size, header.position)

    def translate_offset(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset is >= `offset`, or None."""
        self._ensure_offset_index()
        _, pos = self.offset_index.lookup(offset)
        for h in self.batches(pos):
            if h.last_offset >= offset:
                return h
        return None

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int,
                                 rules: ValidationRules | None = None) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch) of the first record at or after `starting_offset`
        with a timestamp >= `timestamp`, or None (segment_scan.find_offset_by_timestamp)."""
        self.load_indexes()
        return find_offset_by_timestamp(self, timestamp, starting_offset, rules)

    # --- indexes ------------------------------------------------------------------------

    def sanity_check(self, next_offset_bound: int | None = None) -> None:
        """Cheap checks that the index files exist and agree with the log (segment_scan.check_indexes)."""
        check_indexes(self, next_offset_bound)

    def check_tail(self, next_offset_bound: int | None = None) -> int:
        """The cheap check of a segment trusted after a clean shutdown (segment_scan.check_tail):
        returns its next offset; raises CorruptRecordError on any mismatch."""
        nxt = check_tail(self, next_offset_bound)
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
        max_ts, offset_of_max, since = index_batches(self.batches(0), self.index_interval_bytes,
                                                     self.offset_index, self.time_index)
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
        fd = self.files.acquire(self)
        try:
            self.offset_index.reset()
            self.time_index.reset()
            file_size = os.fstat(fd).st_size
            scan = scan_for_recovery(fd, self.log_path, self.base_offset, file_size, self.index_interval_bytes,
                                     self.offset_index, self.time_index, leader_epoch_cache)
            truncated = file_size - scan.valid_bytes
            if truncated:
                os.ftruncate(fd, scan.valid_bytes)
        finally:
            self.files.release(self)
        self.size = scan.valid_bytes
        self._next_offset = scan.next_offset
        self._bytes_since_last_index_entry = scan.bytes_since_last_index_entry
        self._max_timestamp, self._offset_of_max_timestamp = scan.max_timestamp, scan.offset_of_max_timestamp
        self._rolling_base_timestamp = scan.rolling_base_timestamp
        self._preallocated = False
        self.offset_index.write_pending()
        self.time_index.write_pending()
        self.txn_index.truncate_to(scan.next_offset)  # markers lost with a torn tail; replay re-adds the rest
        return truncated

    def truncate_to(self, offset: int, now_ms: int) -> int:
        """Remove the batch holding `offset` and everything after it. Returns bytes removed."""
        h = self.translate_offset(offset)
        if h is None:
            return 0
        self._ensure_time_index()
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(h.base_offset)
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
            fd = self.files.acquire(self)
        except KafkaStorageError:
            if self.closed:
                return
            raise
        try:
            os.fsync(fd)
            self.offset_index.fsync()
            self.time_index.fsync()
            self.txn_index.fsync()
        except OSError:
            if self.closed:
                return
            raise
        finally:
            self.files.release(self)

    def close(self, write_indexes: bool = True) -> None:
        if self.closed:
            return
        try:
            if write_indexes:
                self.on_become_inactive()
        finally:
            self.files.close_segment(self)  # an fsync racing on another thread keeps its pin until done

    def change_suffix(self, new_suffix: str) -> None:
        """Rename the files, e.g. to `.deleted` before an asynchronous delete."""
        prefix = os.path.join(self.dir, file_prefix(self.base_offset))
        os.replace(prefix + LOG_SUFFIX + self.suffix, prefix + LOG_SUFFIX + new_suffix)
        self.offset_index.rename(prefix + INDEX_SUFFIX + new_suffix)
        self.time_index.rename(prefix + TIME_INDEX_SUFFIX + new_suffix)
        self.txn_index.rename(prefix + TXN_INDEX_SUFFIX + new_suffix)
        self.suffix = new_suffix

    def file_paths(self) -> list[str]:
        return [self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path]

    def delete_files(self) -> None:
        for path in self.file_paths():
            unlink_if_exists(path)


def _jitter(config: LogConfig) -> int:
    return random.randrange(config.segment_jitter_ms) if config.segment_jitter_ms > 0 else 0


def roll_reason(seg: LogSegment, config: LogConfig, records_size: int, max_timestamp: int, max_offset: int,
                now_ms: int, max_segment_ms: int | None = None) -> str | None:
    """Why an append of `records_size` bytes must go to a new segment rather than the active `seg`,
    or None (Kafka's LogSegment.shouldRoll). `max_segment_ms` is `config.max_segment_ms` if the caller
    has it at hand (LocalLog caches it: the property parses cleanup.policy, a cost on every append)."""
    size = seg.size
    if size > 0 and size + records_size > config.segment_bytes:
        return "segment.bytes"
    if max_segment_ms is None:
        max_segment_ms = config.max_segment_ms
    if size > 0 and time_waited_for_roll(seg, now_ms, max_timestamp) > max_segment_ms - seg.roll_jitter_ms:
        return "segment.ms"
    if seg.offset_index.is_full or seg.time_index.is_full:
        return "index full"
    if max_offset - seg.base_offset > INT32_MAX:
        return "relative offset overflow"
    return None


def time_waited_for_roll(seg: LogSegment, now_ms: int, message_timestamp: int) -> int:
    """Kafka's rule: record time since the segment's first batch timestamp, else wall time since its creation."""
    t = seg.rolling_base_timestamp
    if t is not None and t >= 0:
        return message_timestamp - t
    return now_ms - seg.created_ms
