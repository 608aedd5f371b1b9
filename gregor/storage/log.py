"""Log: one partition's log, an ordered list of segments in `<log.dirs>/<topic>-<partition>/`.

Offsets, from low to high:

    log_start_offset <= high_watermark <= log_end_offset      and    recovery_point <= log_end_offset

`log_end_offset` (LEO) is where the next append goes. `high_watermark` is set by the replication
layer (a lone broker sets it to the LEO after each append); consumers read below it.
`recovery_point` is the offset below which everything has been fsynced: after a crash only
segments at or after it are re-validated.

Threads: appends and reads come from the event-loop thread; `flush`/`maybe_flush` and
`delete_old_segments` may come from a worker thread, and the log cleaner (cleaner.py) from its
own thread. A per-log lock guards the segment list and offsets (reads hold it for their one
pread and return a copy of the bytes); fsync runs outside it, so a flush never stalls appends
for the length of an fsync. The cleaner reads old segments through duplicated descriptors
without the lock and takes it only to swap cleaned segments in (`replace_segments`).
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from gregor.protocol.primitives import DecodeError
from gregor.protocol.records import LOG_OVERHEAD, TIMESTAMP_TYPE_BIT, BatchHeader, patch_batch
from gregor.protocol.validator import BatchValidationError, ValidationRules, record_timestamps
from gregor.storage.checkpoint import LEADER_EPOCH_CHECKPOINT, fsync_dir
from gregor.storage.config import LogConfig
from gregor.storage.errors import (
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    RecordTooLargeError,
    StorageError,
    UnexpectedAppendOffsetError,
)
from gregor.storage.index import NO_TIMESTAMP
from gregor.storage.leader_epoch import LeaderEpochFileCache
from gregor.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    SegmentInfo,
    file_prefix,
    parse_base_offset,
)

logger = logging.getLogger(__name__)

# ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4

_EMPTY = memoryview(b"")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def parse_topic_partition(dir_name: str) -> tuple[str, int]:
    """`my.topic-name-3` -> ("my.topic-name", 3): the partition follows the last '-'."""
    topic, sep, partition = os.path.basename(dir_name.rstrip(os.sep)).rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{dir_name!r} is not a <topic>-<partition> directory name")
    return topic, int(partition)


@dataclass(frozen=True, slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 for CreateTime
    log_start_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int  # for CreateTime the last offset of the batch holding it
    records_count: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    records: memoryview  # whole batches, possibly empty
    fetch_offset: int
    next_offset: int  # where the next fetch should start (fetch_offset when nothing was returned)
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class CleanerSnapshot:
    """What the log cleaner needs to plan a clean, taken in one go under the log's lock."""

    generation: int  # bumped by every truncation: a clean planned on an older one is abandoned
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    segments: list[SegmentInfo]  # the active segment last
    truncated_to: int | None  # lowest LEO a truncation left since the previous snapshot, if any


class TimestampAndOffset(NamedTuple):
    offset: int
    timestamp: int  # -1 for the latest/earliest lookups
    leader_epoch: int | None


class Log:
    """One partition's log. Create with `Log.open`."""

    def __init__(self, dir: str, config: LogConfig, now: int) -> None:
        self.dir = os.path.abspath(dir)
        self.topic, self.partition = parse_topic_partition(self.dir)
        self.config = config
        self._lock = threading.RLock()
        self._flush_lock = threading.Lock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._log_start_offset = 0
        self._log_end_offset = 0
        self._high_watermark = 0
        self._recovery_point = 0
        self._last_flush_ms = now
        self._roll_flush_offset = 0  # a roll asks for the segments below this offset to be flushed
        self._truncations = 0  # bumped when the LEO goes back, so an in-flight flush does not overshoot
        self._truncated_to: int | None = None  # lowest LEO after a truncation, until the cleaner looks
        self._dir_dirty = True  # files were created or renamed since the last directory fsync
        self._pending_deletes: list[tuple[int, LogSegment]] = []  # (due ms, segment renamed .deleted)
        self._closed = False
        self.leader_epoch_cache = LeaderEpochFileCache(os.path.join(self.dir, LEADER_EPOCH_CHECKPOINT))

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self._log_start_offset}, hw={self._high_watermark}, "
            f"leo={self._log_end_offset}, segments={len(self._segments)})"
        )

    # --- opening and recovery -------------------------------------------------------------

    @classmethod
    def open(
        cls,
        dir: str,
        config: LogConfig,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        now_ms: int | None = None,
        clean_shutdown: bool = False,
        segment_sizes: Mapping[int, int] | None = None,
    ) -> Log:
        """Load (or create) the log in `dir`.

        After an unclean shutdown every segment holding offsets at or after `recovery_point` is
        re-validated batch by batch and a torn or corrupt tail is truncated (with every later
        segment). After a clean shutdown the segments are not re-read, but each gets cheap sanity
        checks: its size against `segment_sizes` (base offset -> size recorded at shutdown, if
        known), its index files, and the framing and CRC of its batches after the last index
        entry (`LogSegment.check_tail`); the last segment must end at `recovery_point` (the LEO
        at shutdown). A segment failing any of them is recovered as after a crash. Whatever is
        truncated is logged as an error naming the partition, segment, offsets and bytes.
        Stray `.deleted`/`.cleaned` files are removed and interrupted `.swap` replacements completed.
        """
        now = _now() if now_ms is None else now_ms
        os.makedirs(dir, exist_ok=True)
        log = cls(dir, config, now)
        try:
            log._load(recovery_point, log_start_offset, now, clean_shutdown, segment_sizes)
        except BaseException:
            for seg in log._segments:
                seg.close()
            raise
        return log

    @classmethod
    def create_new(cls, dir: str, config: LogConfig, now_ms: int | None = None) -> Log:
        """A new empty log in `dir`, which must not exist yet (FileExistsError): the bulk creation
        path (LogManager), skipping the listing and recovery `open` does, which cost about a third
        of creating a log. The caller fsyncs the parent directory."""
        now = _now() if now_ms is None else now_ms
        os.mkdir(dir)
        log = cls(dir, config, now)
        seg = LogSegment.create(log.dir, 0, config, now)
        log._segments = [seg]
        log._bases = [0]
        log._check_invariants()
        return log

    def _load(
        self, recovery_point: int, log_start_offset: int, now: int, clean_shutdown: bool,
        segment_sizes: Mapping[int, int] | None = None,
    ) -> None:
        config = self.config
        logs: set[int] = set()
        swaps: list[int] = []
        index_files: list[tuple[int, str]] = []
        names = sorted(os.listdir(self.dir))
        for name in names:
            path = os.path.join(self.dir, name)
            if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
                logger.info("removing stray file %s", path)
                os.unlink(path)
                continue
            base = parse_base_offset(name)
            if base is None:
                continue
            if name.endswith(SWAP_SUFFIX):
                if name == file_prefix(base) + LOG_SUFFIX + SWAP_SUFFIX:
                    swaps.append(base)
                else:  # index swap files are rebuilt from the log
                    os.unlink(path)
            elif name == file_prefix(base) + LOG_SUFFIX:
                logs.add(base)
            elif name in (file_prefix(base) + INDEX_SUFFIX, file_prefix(base) + TIME_INDEX_SUFFIX):
                index_files.append((base, path))
        for base, path in index_files:
            if base not in logs and base not in swaps:
                logger.info("removing orphan index %s", path)
                os.unlink(path)

        opened: dict[int, LogSegment] = {}
        for base in sorted(swaps):  # an interrupted replacement (log cleaner): finish it
            seg = LogSegment.open(self.dir, base, config, now, suffix=SWAP_SUFFIX)
            seg.recover()
            end = seg.next_offset
            for old in sorted(logs):
                if base <= old < max(end, base + 1):
                    logger.info("swap %s replaces segment %d", seg.log_path, old)
                    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                        _unlink(os.path.join(self.dir, file_prefix(old) + suffix))
                    logs.discard(old)
                    if old in opened:
                        opened.pop(old).close()
            seg.change_suffix("")
            opened[base] = seg
            logs.add(base)

        segments = [opened.get(base) or LogSegment.open(self.dir, base, config, now) for base in sorted(logs)]
        self._segments = segments  # closed on failure by `open`
        any_recovered = bool(opened)
        if clean_shutdown and segment_sizes is not None:
            missing = sorted(set(segment_sizes) - {seg.base_offset for seg in segments})
            if missing:
                logger.error("%s-%d: segments %s present at the last clean shutdown are missing from %s",
                             self.topic, self.partition, missing, self.dir)
        i = 0
        first_unflushed = True
        while i < len(segments):
            seg = segments[i]
            if seg.base_offset in opened:
                i += 1
                continue
            last = i == len(segments) - 1
            next_base = None if last else segments[i + 1].base_offset
            unflushed = not clean_shutdown and (last or segments[i + 1].base_offset > recovery_point)
            reason = ""
            if unflushed:
                if first_unflushed:  # epochs from here on are rebuilt from the batches
                    self.leader_epoch_cache.truncate_from_end(seg.base_offset)
                    first_unflushed = False
            else:
                reason = self._sanity_check(seg, next_base, last, clean_shutdown, recovery_point, segment_sizes)
            if unflushed or reason:
                if reason:
                    logger.error("%s-%d: segment %s fails its sanity check after a %s shutdown (%s); recovering it",
                                 self.topic, self.partition, seg.log_path, "clean" if clean_shutdown else "unclean",
                                 reason)
                any_recovered = True
                self._recover_segment(segments, i, recovery_point, flushed=bool(reason))
            i += 1
        for seg in segments[:-1]:  # recovered segments that are not the active one: final index entries
            if seg.time_index.loaded:
                seg.on_become_inactive()

        if not segments:
            segments.append(LogSegment.create(self.dir, log_start_offset, config, now))
        leo = segments[-1].next_offset
        if leo < log_start_offset:
            logger.warning("%s: log end offset %d is below the log start offset %d; starting over there",
                           self.dir, leo, log_start_offset)
            for seg in segments:
                seg.close()
                seg.delete_files()
            segments[:] = [LogSegment.create(self.dir, log_start_offset, config, now)]
            leo = log_start_offset
            any_recovered = True
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._log_end_offset = leo
        self._log_start_offset = max(log_start_offset, segments[0].base_offset)
        self._high_watermark = self._log_start_offset
        self._recovery_point = leo if clean_shutdown and not any_recovered else min(recovery_point, leo)
        self.leader_epoch_cache.truncate_from_end(leo)
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        segments[-1].load_indexes()
        self._mark_dir_synced_after_clean_load(clean_shutdown, any_recovered, names)
        self._check_invariants()
        logger.debug("loaded %r", self)

    def _mark_dir_synced_after_clean_load(self, clean_shutdown: bool, any_recovered: bool, names: list[str]) -> None:
        """After a clean shutdown, which fsynced the directory of every log holding data, a load that
        changed no file leaves such a directory clean: the next flush or clean shutdown then needs no
        directory fsync for it (10,000 of them cost seconds at shutdown). A log of one empty segment
        stays dirty: its directory may never have been fsynced, and its first data will need that."""
        if (clean_shutdown and not any_recovered and not self._pending_deletes
                and (len(self._segments) > 1 or self._segments[0].size > 0) and sorted(os.listdir(self.dir)) == names):
            self._dir_dirty = False

    def _sanity_check(
        self, seg: LogSegment, next_base: int | None, last: bool, clean_shutdown: bool, recovery_point: int,
        segment_sizes: Mapping[int, int] | None,
    ) -> str:
        """Why a segment that is not re-validated (below the recovery point, or after a clean
        shutdown) cannot be trusted as it is, or "" if it passes the cheap checks."""
        try:
            if clean_shutdown and segment_sizes is not None:
                expected = segment_sizes.get(seg.base_offset)
                if expected is None:
                    return "it did not exist at the last clean shutdown"
                if expected != seg.size:
                    return f"its size is {seg.size} bytes, {expected} at the last clean shutdown"
            seg.sanity_check(next_base)
            if clean_shutdown:
                nxt = seg.check_tail(next_base)
                if last and nxt != recovery_point and recovery_point > 0:
                    return f"it ends at offset {nxt}, the log ended at {recovery_point} at the last clean shutdown"
            return ""
        except (StorageError, OSError, ValueError, DecodeError, struct.error) as e:
            return str(e) or type(e).__name__

    def _recover_segment(self, segments: list[LogSegment], i: int, recovery_point: int, flushed: bool) -> None:
        """Re-validate segment `i` batch by batch; if it had to be truncated, delete every later
        segment too (the log must stay contiguous), logging what was dropped."""
        seg = segments[i]
        try:
            old_size = seg.file_size()
        except StorageError:
            old_size = seg.size
        truncated = seg.recover(self.leader_epoch_cache)
        later = segments[i + 1 :] if truncated else []
        if not truncated and (not flushed or i < len(segments) - 1 or seg.next_offset >= recovery_point):
            return
        later_bytes = sum(s.size for s in later)
        dropped_to = max([recovery_point] + [s.base_offset for s in later])
        level = logging.ERROR if flushed or seg.next_offset < recovery_point else logging.WARNING
        logger.log(
            level,
            "%s-%d: recovered segment %s: %d of its %d bytes dropped at position %d, and %d later segments "
            "(%d bytes) deleted: the log now ends at offset %d%s",
            self.topic, self.partition, seg.log_path, truncated, old_size, seg.size, len(later), later_bytes,
            seg.next_offset,
            f"; offsets {seg.next_offset} to at least {dropped_to - 1} were lost" if dropped_to > seg.next_offset else "",
        )
        for s in later:
            s.close()
            s.delete_files()
        if later:
            del segments[i + 1 :]

    # --- accessors ------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    def unflushed_messages(self) -> int:
        return self._log_end_offset - self._recovery_point

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def generation(self) -> int:
        """Bumped by every truncation (see `replace_segments`)."""
        return self._truncations

    # --- appends ----------------------------------------------------------------------------

    def append_as_leader(
        self, records: bytearray | memoryview, headers: list[BatchHeader], leader_epoch: int, now_ms: int
    ) -> AppendInfo:
        """Assign offsets to validated batches (patching their headers in `records` in place) and
        append them. `headers` are `validate_record_set(records, ...)`'s, positions relative to
        `records`; they are updated to the assigned offsets too. No fsync unless flush.messages
        says so (`_flush_if_messages_due`); flush.ms and rolled segments are `maybe_flush`'s.
        """
        if not headers:
            raise ValueError("nothing to append")
        n = len(records)
        with self._lock:
            self._check_open()
            config = self.config
            if n > config.segment_bytes:
                raise RecordListTooLargeError(f"record set of {n} bytes exceeds segment.bytes {config.segment_bytes}")
            log_append_time = now_ms if config.log_append_time else None
            first = offset = self._log_end_offset
            max_ts, offset_of_max = NO_TIMESTAMP, -1
            position = count = 0
            max_batch = config.max_message_bytes
            for h in headers:
                size = h.batch_length + LOG_OVERHEAD
                if h.position != position:
                    raise ValueError(f"batch header at {h.position} where {position} was expected")
                if size > max_batch:
                    raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes {max_batch}")
                patch_batch(records, position, offset, leader_epoch, log_append_time)
                h.base_offset = offset
                h.partition_leader_epoch = leader_epoch
                if log_append_time is not None:
                    h.max_timestamp = log_append_time
                    h.attributes |= TIMESTAMP_TYPE_BIT
                if h.max_timestamp > max_ts:
                    max_ts, offset_of_max = h.max_timestamp, offset + h.last_offset_delta
                offset += h.last_offset_delta + 1
                position += size
                count += h.records_count
            if position != n:
                raise ValueError(f"headers cover {position} of {n} bytes")
            if log_append_time is not None:
                offset_of_max = first
            self._append(records, headers, max_ts, now_ms)
            assert self._log_end_offset == offset > first
            if leader_epoch >= 0:
                latest = self.leader_epoch_cache.latest_epoch
                if latest is None or leader_epoch > latest:
                    self.leader_epoch_cache.assign(leader_epoch, first)
            info = AppendInfo(
                first, offset - 1, log_append_time if log_append_time is not None else -1,
                self._log_start_offset, max_ts, offset_of_max, count, n,
            )
        self._flush_if_messages_due(now_ms)
        return info

    def append_as_follower(
        self, records: bytes | bytearray | memoryview, headers: list[BatchHeader], now_ms: int | None = None
    ) -> AppendInfo:
        """Append batches whose offsets the leader assigned: they must start at or after the LEO and
        increase (gaps are allowed: compaction leaves them). The caller has validated the CRCs."""
        if not headers:
            raise ValueError("nothing to append")
        now = _now() if now_ms is None else now_ms
        n = len(records)
        with self._lock:
            self._check_open()
            if n > self.config.segment_bytes:
                raise RecordListTooLargeError(f"record set of {n} bytes exceeds segment.bytes")
            first = headers[0].base_offset
            expected = self._log_end_offset
            max_ts, offset_of_max = NO_TIMESTAMP, -1
            position = count = 0
            for h in headers:
                if h.position != position:
                    raise ValueError(f"batch header at {h.position} where {position} was expected")
                if h.base_offset < expected or h.last_offset_delta < 0:
                    raise UnexpectedAppendOffsetError(
                        f"batch at offset {h.base_offset} does not follow offset {expected - 1}",
                        first, self._log_end_offset,
                    )
                if h.max_timestamp > max_ts:
                    max_ts, offset_of_max = h.max_timestamp, h.last_offset
                expected = h.next_offset
                position += h.batch_length + LOG_OVERHEAD
                count += h.records_count
            if position != n:
                raise ValueError(f"headers cover {position} of {n} bytes")
            self._append(records, headers, max_ts, now)
            cache = self.leader_epoch_cache
            for h in headers:
                latest = cache.latest_epoch
                if h.partition_leader_epoch >= 0 and (latest is None or h.partition_leader_epoch > latest):
                    cache.assign(h.partition_leader_epoch, h.base_offset)
            info = AppendInfo(first, expected - 1, -1, self._log_start_offset, max_ts, offset_of_max, count, n)
        self._flush_if_messages_due(now)
        return info

    def _flush_if_messages_due(self, now: int) -> None:
        """flush.messages, as Kafka applies it: once an append leaves that many messages (offsets)
        unflushed, the log is fsynced in the append path, before the append returns and so
        before the Produce is acknowledged. With flush.messages=1 every append pays an fsync
        (about 1-10 ms on a disk, on the caller's thread, the event loop for a Produce)."""
        if self._log_end_offset - self._recovery_point >= self.config.flush_messages:
            self.flush(now_ms=now)

    def _append(
        self, records: bytes | bytearray | memoryview, headers: list[BatchHeader], max_ts: int, now: int
    ) -> None:
        first, last = headers[0].base_offset, headers[-1].last_offset
        assert first >= self._log_end_offset and last >= first, (first, last, self._log_end_offset)
        seg = self._segments[-1]
        reason = seg.should_roll(self.config, len(records), max_ts, last, now)
        if reason is not None:
            seg = self._roll(first, now, reason)
        seg.append(records, headers)
        self._log_end_offset = last + 1

    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the LEO (a no-op if the active segment is empty)."""
        with self._lock:
            self._check_open()
            return self._roll(self._log_end_offset, _now() if now_ms is None else now_ms, "requested")

    def _roll(self, new_base: int, now: int, reason: str) -> LogSegment:
        active = self._segments[-1]
        new_base = max(new_base, self._log_end_offset)
        if active.size == 0:
            if active.base_offset == new_base:
                return active
            self._segments.pop()  # an empty active segment below a follower's gap: replace it
            self._bases.pop()
            self._schedule_delete(active, now)
        else:
            active.on_become_inactive()
            self._roll_flush_offset = max(self._roll_flush_offset, new_base)
        assert not self._bases or new_base > self._bases[-1]
        try:
            seg = LogSegment.create(self.dir, new_base, self.config, now)
        except OSError as e:
            raise KafkaStorageError(f"cannot create a segment in {self.dir}: {e}") from e
        self._segments.append(seg)
        self._bases.append(new_base)
        self._dir_dirty = True
        logger.debug("%s-%d: rolled a new segment at %d (%s)", self.topic, self.partition, new_base, reason)
        return seg

    # --- reads ------------------------------------------------------------------------------

    def read(
        self, fetch_offset: int, max_bytes: int, max_offset: int | None = None, min_one_batch: bool = True
    ) -> FetchDataInfo:
        """Whole batches from the one holding `fetch_offset`, at most `max_bytes` (but with
        `min_one_batch` at least one batch, however large: KIP-74), none holding an offset
        >= `max_offset` (e.g. the high watermark; default the LEO). One pread per call.

        Raises OffsetOutOfRangeError if `fetch_offset` is outside [log_start_offset, LEO].
        """
        max_bytes = max(max_bytes, 0)
        with self._lock:
            self._check_open()
            leo, lso, hw = self._log_end_offset, self._log_start_offset, self._high_watermark
            if fetch_offset < lso or fetch_offset > leo:
                raise OffsetOutOfRangeError(f"fetch offset {fetch_offset} is out of range", lso, leo)
            limit = leo if max_offset is None else min(max_offset, leo)
            if fetch_offset < limit:
                segments = self._segments
                i = max(bisect.bisect_right(self._bases, fetch_offset) - 1, 0)
                try:
                    while i < len(segments) and segments[i].base_offset < limit:
                        r = segments[i].read(fetch_offset, max_bytes, limit, min_one_batch)
                        if r is not None:
                            return FetchDataInfo(r.records, fetch_offset, r.next_offset, hw, lso, leo)
                        i += 1
                except OSError as e:
                    raise KafkaStorageError(f"read from {self.dir} failed: {e}") from e
            return FetchDataInfo(_EMPTY, fetch_offset, fetch_offset, hw, lso, leo)

    # --- offsets by timestamp ---------------------------------------------------------------------

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets: -1 latest (LEO), -2 earliest, -3 the record with the max timestamp,
        -4 earliest local (= earliest here), else the first record with a timestamp >= `timestamp`."""
        with self._lock:
            cache = self.leader_epoch_cache
            if timestamp == LATEST_TIMESTAMP:
                return TimestampAndOffset(self._log_end_offset, NO_TIMESTAMP, cache.latest_epoch)
            if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                lso = self._log_start_offset
                return TimestampAndOffset(lso, NO_TIMESTAMP, cache.epoch_for_offset(lso))
            if timestamp == MAX_TIMESTAMP:
                return self.max_timestamp_offset()
            if timestamp < 0:
                raise ValueError(f"unsupported special timestamp {timestamp}")
            return self.offset_for_timestamp(timestamp)

    def latest_offset(self) -> int:
        return self._log_end_offset

    def earliest_offset(self) -> int:
        return self._log_start_offset

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """The first record at or after the log start offset whose timestamp is >= `timestamp`
        (the time index narrows the search, then one batch is decoded); None if there is none."""
        with self._lock:
            lso = self._log_start_offset
            for seg in self._segments:
                if seg.next_offset <= lso or seg.max_timestamp < timestamp:
                    continue
                r = seg.find_offset_by_timestamp(timestamp, lso)
                if r is not None:
                    return TimestampAndOffset(r[0], r[1], r[2] if r[2] >= 0 else None)
            return None

    def max_timestamp_offset(self) -> TimestampAndOffset | None:
        """ListOffsets -3: the offset and timestamp of the (first) record with the largest timestamp."""
        with self._lock:
            lso = self._log_start_offset
            best: LogSegment | None = None
            for seg in self._segments:
                if seg.next_offset <= lso:
                    continue
                if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                    best = seg
            if best is None:
                return None
            return self._max_timestamp_in(best)

    def _max_timestamp_in(self, seg: LogSegment) -> TimestampAndOffset | None:
        """The first record with `seg`'s max timestamp, read with the record validator's checks. A
        stored batch that does not validate is answered from its header (its last offset), with a
        warning: a bad record must never fail the request."""
        ts = seg.max_timestamp
        if ts < 0:
            return None
        h0 = seg.translate_offset(seg.offset_of_max_timestamp)
        for h in seg.batches(h0.position if h0 is not None else 0):
            if h.max_timestamp != ts:
                continue
            epoch = h.partition_leader_epoch if h.partition_leader_epoch >= 0 else None
            try:
                pairs = record_timestamps(seg.read_batch(h), ValidationRules.for_stored(self.config.max_message_bytes))
            except BatchValidationError as e:
                logger.warning("%s-%d: the stored batch at offset %d does not validate (%s); ListOffsets "
                               "answers its last offset for the max timestamp", self.topic, self.partition,
                               h.base_offset, e)
                return TimestampAndOffset(h.last_offset, ts, epoch)
            for offset, record_ts in pairs:
                if record_ts == ts:
                    return TimestampAndOffset(offset, ts, epoch)
            return TimestampAndOffset(h.last_offset, ts, epoch)  # the header disagrees with its records
        return None

    # --- high watermark -------------------------------------------------------------------------

    def update_high_watermark(self, high_watermark: int) -> int:
        """Set the HW, clamped to [log_start_offset, LEO]. Returns the value set."""
        with self._lock:
            hw = min(max(high_watermark, self._log_start_offset), self._log_end_offset)
            self._high_watermark = hw
            return hw

    def maybe_increment_high_watermark(self, high_watermark: int) -> bool:
        """Raise the HW if `high_watermark` is above it (never beyond the LEO). Returns whether it moved."""
        with self._lock:
            if high_watermark > self._log_end_offset:
                raise ValueError(f"high watermark {high_watermark} above the log end offset {self._log_end_offset}")
            if high_watermark <= self._high_watermark:
                return False
            self._high_watermark = high_watermark
            return True

    # --- deletion: DeleteRecords and retention -------------------------------------------------

    def delete_records(self, offset: int, now_ms: int | None = None) -> int:
        """Move the log start offset up to `offset` (never back, never past the HW) and delete the
        segments wholly below it. Returns the new log start offset (the low watermark)."""
        now = _now() if now_ms is None else now_ms
        with self._lock:
            self._check_open()
            if offset < 0:
                raise ValueError(f"negative offset {offset}")
            if offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records up to {offset}, beyond the high watermark {self._high_watermark}",
                    self._log_start_offset, self._log_end_offset,
                )
            if offset > self._log_start_offset:
                self._increment_log_start_offset(offset)
            self._delete_log_start_offset_breached_segments(now)
            return self._log_start_offset

    def delete_old_segments(self, now_ms: int) -> int:
        """Retention: delete segments wholly below the log start offset and, if cleanup.policy has
        "delete", those past retention.bytes (oldest first) or retention.ms (by their largest
        timestamp). Only segments entirely below the HW go. When every segment, the active one
        included, is due, a new empty active segment is rolled first (Kafka's behaviour).
        Returns the number of segments deleted."""
        with self._lock:
            if self._closed:
                return 0
            deleted = self._delete_log_start_offset_breached_segments(now_ms)
            if self.config.delete:
                deleted += self._delete_retention_size_breached_segments(now_ms)
                deleted += self._delete_retention_ms_breached_segments(now_ms)
            self._delete_expired_files(now_ms)
            return deleted

    def _delete_log_start_offset_breached_segments(self, now: int) -> int:
        lso = self._log_start_offset
        return self._delete_segments(
            self._deletable_segments(lambda seg, nxt: nxt is not None and nxt.base_offset <= lso), now, "log start offset"
        )

    def _delete_retention_ms_breached_segments(self, now: int) -> int:
        retention_ms = self.config.retention_ms
        if retention_ms < 0:
            return 0
        return self._delete_segments(
            self._deletable_segments(lambda seg, nxt: now - seg.largest_timestamp > retention_ms), now, "retention.ms"
        )

    def _delete_retention_size_breached_segments(self, now: int) -> int:
        retention_bytes = self.config.retention_bytes
        size = sum(s.size for s in self._segments)
        if retention_bytes < 0 or size < retention_bytes:
            return 0
        excess = size - retention_bytes

        def over(seg: LogSegment, nxt: LogSegment | None) -> bool:
            nonlocal excess
            if excess - seg.size >= 0:
                excess -= seg.size
                return True
            return False

        return self._delete_segments(self._deletable_segments(over), now, "retention.bytes")

    def _deletable_segments(self, predicate: Callable[[LogSegment, LogSegment | None], bool]) -> list[LogSegment]:
        """The oldest segments, in order, for which `predicate` holds and that lie below the HW."""
        out: list[LogSegment] = []
        segments = self._segments
        for i, seg in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            upper = nxt.base_offset if nxt is not None else self._log_end_offset
            if nxt is None and seg.size == 0:
                break
            if not (self._high_watermark >= upper and predicate(seg, nxt)):
                break
            out.append(seg)
        return out

    def _delete_segments(self, doomed: list[LogSegment], now: int, reason: str) -> int:
        if not doomed:
            return 0
        assert doomed == self._segments[: len(doomed)]
        if len(doomed) == len(self._segments):
            self._roll(self._log_end_offset, now, f"retention deletes every segment ({reason})")
        k = len(doomed)
        del self._segments[:k]
        del self._bases[:k]
        for seg in doomed:
            self._schedule_delete(seg, now)
        logger.info(
            "%s-%d: deleted %d segments (%s), up to offset %d",
            self.topic, self.partition, k, reason, self._segments[0].base_offset,
        )
        if self._segments[0].base_offset > self._log_start_offset:
            self._increment_log_start_offset(self._segments[0].base_offset)
        return k

    def _increment_log_start_offset(self, offset: int) -> None:
        assert offset > self._log_start_offset and offset <= self._high_watermark <= self._log_end_offset
        self._log_start_offset = offset
        self._recovery_point = max(self._recovery_point, offset)
        self.leader_epoch_cache.truncate_from_start(offset)
        self._check_invariants()

    def _schedule_delete(self, seg: LogSegment, now: int) -> None:
        """Rename the segment's files to `.deleted` now; unlink them after file.delete.delay.ms."""
        seg.close(write_indexes=False)  # first: a flush fsyncing it on another thread then ignores errors
        try:
            seg.change_suffix(DELETED_SUFFIX)
        except OSError as e:
            raise KafkaStorageError(f"cannot rename {seg.log_path}: {e}") from e
        self._dir_dirty = True
        self._pending_deletes.append((now + self.config.file_delete_delay_ms, seg))

    def _delete_expired_files(self, now: int, force: bool = False) -> None:
        keep = []
        for due, seg in self._pending_deletes:
            if force or due <= now:
                seg.delete_files()
            else:
                keep.append((due, seg))
        self._pending_deletes = keep

    # --- log cleaner support -----------------------------------------------------------------

    def cleaner_snapshot(self) -> CleanerSnapshot:
        """The segments with their sizes and index entry counts, the offsets and the truncation
        generation, consistent with each other. Cheap: no file is read (index sizes come from
        stat). Also hands over (and resets) the lowest LEO a truncation left since the last call,
        so the cleaner can pull its checkpoint back below truncated-and-rewritten offsets."""
        with self._lock:
            self._check_open()
            segs = self._segments
            infos = [
                seg.info(segs[i + 1].base_offset if i + 1 < len(segs) else self._log_end_offset)
                for i, seg in enumerate(segs)
            ]
            truncated_to, self._truncated_to = self._truncated_to, None
            return CleanerSnapshot(
                self._truncations, self._log_start_offset, self._log_end_offset, self._high_watermark,
                infos, truncated_to,
            )

    def segment_timestamps(self, seg: LogSegment) -> tuple[int, int | None] | None:
        """(largest timestamp, first batch timestamp) of a segment for the compaction lags, or None
        if it is no longer part of the log. Under the lock: the values are loaded lazily from the
        files, which must not race with the event loop doing the same."""
        with self._lock:
            if self._closed or seg.closed:
                return None
            return seg.largest_timestamp, seg.rolling_base_timestamp

    def open_segment_readers(self, segments: list[LogSegment]) -> list[int] | None:
        """Duplicated read descriptors for `segments` (the caller closes them), or None if one of
        them has left the log. A duplicate stays valid when the segment is closed, renamed or
        deleted meanwhile, so the cleaner reads without holding the lock and never hits a
        descriptor number that was closed and reused."""
        with self._lock:
            if self._closed or any(seg.closed for seg in segments):
                return None
            fds: list[int] = []
            try:
                for seg in segments:
                    fds.append(seg.dup_fd())
            except OSError:
                for fd in fds:
                    os.close(fd)
                raise
            return fds

    def replace_segments(self, new: LogSegment, old: list[LogSegment], generation: int, now_ms: int) -> bool:
        """Swap the cleaned segment `new` (files suffixed `.cleaned`, complete and fsynced) in for
        the consecutive, non-active segments `old`. Returns False, changing nothing, if the log
        moved on since the clean was planned: closed, truncated (`generation`), or one of `old`
        deleted by retention. The caller then deletes `new`.

        Crash safety comes from the order of renames, all under the lock (a few renames and one
        directory fsync, no data copying):
          1. `new` .cleaned -> .swap, then fsync the directory: from here a restart completes the
             replacement (Log._load replaces the segments in [swap base, swap next offset)).
          2. each old segment -> .deleted (unlinked after file.delete.delay.ms; a restart removes it).
          3. `new` .swap -> final names (the first old segment's name, freed in step 2).
        A crash before 1 leaves `.cleaned` files, removed on load: the old segments stand.
        """
        with self._lock:
            if self._closed or generation != self._truncations or not old:
                return False
            try:
                i = next(j for j, seg in enumerate(self._segments) if seg is old[0])
            except StopIteration:
                return False
            k = len(old)
            if i + k >= len(self._segments) or any(a is not b for a, b in zip(self._segments[i : i + k], old, strict=True)):
                return False  # not all still there, or the last one is (now) the active segment
            assert new.base_offset == old[0].base_offset, (new, old[0])
            assert new.next_offset <= self._bases[i + k], (new, self._bases[i + k])
            try:
                new.change_suffix(SWAP_SUFFIX)
                fsync_dir(self.dir)
                for seg in old:
                    self._schedule_delete(seg, now_ms)
                new.change_suffix("")
            except OSError as e:
                raise KafkaStorageError(f"swapping cleaned segment {new.log_path} in failed: {e}") from e
            self._segments[i : i + k] = [new]
            self._bases[i : i + k] = [new.base_offset]
            self._dir_dirty = True
            self._check_invariants()
            return True

    def _note_truncation(self, leo: int) -> None:
        if self._truncated_to is None or leo < self._truncated_to:
            self._truncated_to = leo

    # --- truncation (replication) -----------------------------------------------------------

    def truncate_to(self, offset: int, now_ms: int | None = None) -> bool:
        """Remove everything at and after `offset` (a follower diverged from its leader).
        Returns False if the LEO is already at or below `offset`."""
        now = _now() if now_ms is None else now_ms
        with self._lock:
            self._check_open()
            if offset < 0:
                raise ValueError(f"negative offset {offset}")
            if offset >= self._log_end_offset:
                return False
            if offset < self._segments[0].base_offset:
                self._truncate_fully_and_start_at(offset, now)
                return True
            k = bisect.bisect_right(self._bases, offset)
            doomed = self._segments[k:]
            del self._segments[k:]
            del self._bases[k:]
            for seg in doomed:
                self._schedule_delete(seg, now)
            active = self._segments[-1]
            try:
                active.truncate_to(offset, now)
                active.load_indexes()
            except OSError as e:
                raise KafkaStorageError(f"cannot truncate {active.log_path}: {e}") from e
            leo = active.next_offset
            assert leo <= offset
            self._truncations += 1
            self._note_truncation(leo)
            self._log_end_offset = leo
            self._log_start_offset = min(self._log_start_offset, leo)
            self._high_watermark = min(self._high_watermark, leo)
            self._recovery_point = min(self._recovery_point, leo)
            self._roll_flush_offset = min(self._roll_flush_offset, leo)
            self.leader_epoch_cache.truncate_from_end(leo)
            self._check_invariants()
            logger.info("%s-%d: truncated to offset %d", self.topic, self.partition, leo)
            return True

    def truncate_fully_and_start_at(self, offset: int, now_ms: int | None = None) -> None:
        """Delete every segment and start empty at `offset` (log start = HW = LEO = offset)."""
        with self._lock:
            self._check_open()
            self._truncate_fully_and_start_at(offset, _now() if now_ms is None else now_ms)

    def _truncate_fully_and_start_at(self, offset: int, now: int) -> None:
        if offset < 0:
            raise ValueError(f"negative offset {offset}")
        doomed = self._segments
        self._segments, self._bases = [], []
        for seg in doomed:
            self._schedule_delete(seg, now)
        try:
            seg = LogSegment.create(self.dir, offset, self.config, now)
        except OSError as e:
            raise KafkaStorageError(f"cannot create a segment in {self.dir}: {e}") from e
        self._segments, self._bases = [seg], [offset]
        self._truncations += 1
        self._note_truncation(offset)
        self._log_end_offset = self._log_start_offset = self._high_watermark = self._recovery_point = offset
        self._roll_flush_offset = 0
        self._dir_dirty = True
        self.leader_epoch_cache.clear()
        logger.info("%s-%d: truncated fully, starting at offset %d", self.topic, self.partition, offset)

    # --- flushing ------------------------------------------------------------------------------

    def flush_due(self, now_ms: int) -> bool:
        """Whether `maybe_flush(now_ms)` would fsync (flush.messages, flush.ms, or a rolled segment)."""
        return self._flush_target(now_ms) is not None

    def _flush_target(self, now: int) -> int | None:
        rp, leo = self._recovery_point, self._log_end_offset
        if leo <= rp:
            return None
        if leo - rp >= self.config.flush_messages or now - self._last_flush_ms >= self.config.flush_ms:
            # flush.messages is met in the append path; here only if an fsync there failed
            return leo
        if self._roll_flush_offset > rp:
            return self._roll_flush_offset
        return None

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush if flush.messages or flush.ms says so, or up to the last roll (Kafka flushes a
        segment once it is rolled). fsyncs: call it off the event loop. Returns whether it flushed."""
        with self._lock:
            if self._closed:
                return False
            target = self._flush_target(now_ms)
        if target is None:
            return False
        self.flush(target, now_ms)
        return True

    def flush(self, offset: int | None = None, now_ms: int | None = None) -> None:
        """fsync every segment holding offsets below `offset` (default: the LEO) and the leader
        epoch checkpoint, then advance the recovery point. Appends are not blocked meanwhile."""
        now = _now() if now_ms is None else now_ms
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return
                target = self._log_end_offset if offset is None else min(offset, self._log_end_offset)
                rp = self._recovery_point
                lo = max(bisect.bisect_right(self._bases, rp) - 1, 0)
                hi = bisect.bisect_left(self._bases, target) if target > rp else lo
                to_sync = self._segments[lo:hi]
                try:
                    for seg in to_sync:
                        seg.write_indexes()
                except OSError as e:
                    raise KafkaStorageError(f"cannot write indexes in {self.dir}: {e}") from e
                truncations = self._truncations
                dir_dirty, self._dir_dirty = self._dir_dirty, False
            try:
                for seg in to_sync:
                    seg.fsync()
                if dir_dirty:
                    fsync_dir(self.dir)
                self.leader_epoch_cache.flush()
            except OSError as e:
                self._dir_dirty = self._dir_dirty or dir_dirty
                raise KafkaStorageError(f"flush of {self.dir} failed: {e}") from e
            with self._lock:
                if truncations == self._truncations and target > self._recovery_point:
                    self._recovery_point = target
                self._last_flush_ms = now
                if self._roll_flush_offset <= self._recovery_point:
                    self._roll_flush_offset = 0
                self._check_invariants()

    # --- configuration and lifecycle ---------------------------------------------------------------

    def needs_flush_at_shutdown(self) -> bool:
        """Whether a clean shutdown must `flush()` this log: data past the recovery point, a leader
        epoch checkpoint to write, or directory entries to make durable while the log holds data. A log
        of one empty segment (most of a freshly created 10,000) has nothing a lost directory entry could
        lose: its next open recreates the segment, so it is skipped."""
        with self._lock:
            if self._closed:
                return False
            if self._log_end_offset > self._recovery_point or self.leader_epoch_cache.dirty:
                return True
            if not self._dir_dirty:
                return False
            return not (len(self._segments) == 1 and self._segments[0].size == 0 and not self._pending_deletes)

    def update_config(self, config: LogConfig) -> None:
        """New settings apply from now on (index sizes from the next segment)."""
        with self._lock:
            self.config = config
            for seg in self._segments:
                seg.index_interval_bytes = config.index_interval_bytes

    def close(self) -> None:
        """Write pending index entries and the leader epoch checkpoint, close the files. No fsync
        of the log: call `flush()` first for a clean shutdown."""
        with self._flush_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                for seg in self._segments:
                    seg.close()
                self.leader_epoch_cache.flush()
                self._delete_expired_files(0, force=True)
            except OSError as e:
                raise KafkaStorageError(f"closing {self.dir} failed: {e}") from e

    def delete(self) -> None:
        """Close the log and remove its directory."""
        self.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log {self.dir} is closed")

    def _check_invariants(self) -> None:
        assert self._log_start_offset <= self._high_watermark <= self._log_end_offset, self
        assert self._recovery_point <= self._log_end_offset, (self._recovery_point, self)
        assert self._segments and self._bases == [s.base_offset for s in self._segments]
        assert all(a < b for a, b in zip(self._bases, self._bases[1:], strict=False)), self._bases
        assert self._segments[-1].base_offset <= self._log_end_offset, self


def _now() -> int:
    return now_ms()


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass

