"""Log: one partition's log, an ordered list of segments in `<log.dirs>/<topic>-<partition>/`.

Offsets, from low to high:

    log_start_offset <= high_watermark <= log_end_offset      and    recovery_point <= log_end_offset

`log_end_offset` (LEO) is where the next append goes. `high_watermark` is set by the replication
layer (a lone broker sets it to the LEO after each append); consumers read below it.
`recovery_point` is the offset below which everything has been fsynced: after a crash only
segments at or after it are re-validated.

Kafka's parts, in our code (dependencies point down the list):

    Log          (this module, Kafka's UnifiedLog) offsets assignment, appends as leader and
                 follower, reads, the high watermark, timestamp lookups, flushing, the log
                 cleaner's hooks; built on
      LogRetention   (log_retention.py) DeleteRecords and retention
      LogTruncation  (log_truncation.py) a follower's truncation
      LogState       (log_state.py) the log start offset, HW, leader epoch cache and producer
                     state over the LocalLog, and their invariant
    LogLoader    (log_loader.py) loading a directory, recovery after a crash, sanity checks
    LocalLog     (local_log.py) the segment list, appends of offset-assigned batches, reads,
                 rolls, truncation of files, deletion of segments, flushing, the recovery point
    retention    (retention.py) which segments retention.ms/bytes and the log start offset delete
    LogSegment   (segment.py) one `.log` file with its indexes

Each invariant is asserted where it is kept: offsets strictly increasing on append (here, for
leader and follower batches, and in LogSegment.append), log start <= HW <= LEO (LogState),
recovery point <= LEO and segment order (LocalLog), leader epochs and their start offsets
strictly increasing (LeaderEpochFileCache).

Threads: appends and reads come from the event-loop thread; `flush`/`maybe_flush` and
`delete_old_segments` may come from a worker thread, and the log cleaner (cleaner.py) from its
own thread. A per-log lock (LocalLog.lock, also `Log._lock`) guards the segment list and offsets
(reads hold it for their one pread and return a copy of the bytes); fsync runs outside it, so a
flush never stalls appends for the length of an fsync. The cleaner reads old segments through
duplicated descriptors without the lock and takes it only to swap cleaned segments in
(`replace_segments`).
"""

from __future__ import annotations

import copy
import logging
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from gregor.protocol.records import BatchHeader, read_control_record
from gregor.protocol.validator import ValidationRules
from gregor.storage import log_timestamps
from gregor.storage.checkpoint import LEADER_EPOCH_CHECKPOINT
from gregor.storage.config import LogConfig
from gregor.storage.errors import OffsetOutOfRangeError, RecordListTooLargeError
from gregor.storage.index import NO_TIMESTAMP
from gregor.storage.leader_epoch import LeaderEpochFileCache
from gregor.storage.local_log import LocalLog
from gregor.storage.log_append import assign_offsets, check_follower_offsets, validate_follower_batches
from gregor.storage.log_loader import LogLoader
from gregor.storage.log_retention import LogRetention
from gregor.storage.log_state import now_ms
from gregor.storage.log_truncation import LogTruncation
from gregor.storage.producer_state import ProducerStateEntry, ProducerStateManager
from gregor.storage.segment import LogSegment, SegmentFileCache, SegmentInfo
from gregor.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)

# ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4

_EMPTY = memoryview(b"")


_MOVING_DIR = re.compile(r"^(.+)\.[0-9a-f]{32}-(?:future|moved)$")


def parse_topic_partition(dir_name: str) -> tuple[str, int]:
    """`my.topic-name-3` -> ("my.topic-name", 3): the partition follows the last '-'. A replica being
    moved to another log dir (`<topic>-<p>.<uuid>-future`, `-moved`; log_mover.py) names its partition too."""
    name = os.path.basename(dir_name.rstrip(os.sep))
    if (m := _MOVING_DIR.match(name)) is not None:
        name = m.group(1)
    topic, sep, partition = name.rpartition("-")
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
    duplicate: bool = False  # an idempotent producer's retry: nothing appended, the original's offsets


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
    last_stable_offset: int = -1  # open transactions are not cleaned (their outcome is unknown)


class TimestampAndOffset(NamedTuple):
    offset: int
    timestamp: int  # -1 for the latest/earliest lookups
    leader_epoch: int | None


class Log(LogRetention, LogTruncation):
    """One partition's log. Create with `Log.open` (or `Log.create_new`). Its state and the offsets'
    invariant are LogState's; deleting from its start is LogRetention's, truncating its end LogTruncation's."""

    def __init__(self, local: LocalLog, log_start_offset: int, leader_epoch_cache: LeaderEpochFileCache,
                 producer_state: ProducerStateManager | None = None) -> None:
        # Not `or`: an empty manager is falsy (it has a length), and a new one would list the directory again.
        if producer_state is None:
            producer_state = ProducerStateManager(local.dir, f"{local.topic}-{local.partition}")
        super().__init__(local, log_start_offset, leader_epoch_cache, producer_state)
        local.on_roll = producer_state.snapshot_at_roll  # a snapshot at every roll, for fast restarts
        producer_state.aborted_sink = local.add_aborted_txn
        self._check_invariants()

    @classmethod
    def open(cls, dir: str, config: LogConfig, recovery_point: int = 0, log_start_offset: int = 0,
             now_ms: int | None = None, clean_shutdown: bool = False,
             segment_sizes: Mapping[int, int] | None = None, files: SegmentFileCache | None = None) -> Log:
        """Load (or create) the log in `dir`: after an unclean shutdown the segments from
        `recovery_point` on are re-validated, after a clean one (`clean_shutdown`, with the
        segment sizes recorded then) every segment gets cheap sanity checks. See log_loader.py.
        `files`: the open-files cache its segments go through (the LogManager's; by default one
        of the log's own)."""
        now = _now() if now_ms is None else now_ms
        os.makedirs(dir, exist_ok=True)
        dir = os.path.abspath(dir)
        topic, partition = parse_topic_partition(dir)
        cache = LeaderEpochFileCache(os.path.join(dir, LEADER_EPOCH_CHECKPOINT))
        files = files if files is not None else SegmentFileCache()
        loader = LogLoader(dir, topic, partition, config, cache, now, files)
        loaded = loader.load(recovery_point, log_start_offset, clean_shutdown, segment_sizes)
        local = loaded.local
        log = cls(local, loaded.log_start_offset, cache)
        try:
            log.producer_state.load(loaded.log_start_offset, local.log_end_offset, local.recovery_point,
                                    clean_shutdown, local.batches_from, loader.snapshot_offsets, local.read_control)
        except BaseException:
            local.close(lambda: None)
            raise
        logger.debug("loaded %r", log)
        return log

    @classmethod
    def create_new(cls, dir: str, config: LogConfig, now_ms: int | None = None,
                   files: SegmentFileCache | None = None) -> Log:
        """A new empty log in `dir`, which must not exist yet (FileExistsError): the bulk creation
        path (LogManager), skipping the listing and recovery `open` does, which cost about a third
        of creating a log. The caller fsyncs the parent directory. `files` as for `open`."""
        now = _now() if now_ms is None else now_ms
        os.mkdir(dir)
        dir = os.path.abspath(dir)
        topic, partition = parse_topic_partition(dir)
        files = files if files is not None else SegmentFileCache()
        seg = LogSegment.create(dir, 0, config, now, files=files)
        local = LocalLog(dir, topic, partition, config, [seg], 0, 0, now, files)
        producer_state = ProducerStateManager(dir, f"{topic}-{partition}")
        producer_state.load(0, 0, 0, True, local.batches_from, [])
        return cls(local, 0, LeaderEpochFileCache(os.path.join(dir, LEADER_EPOCH_CHECKPOINT)), producer_state)

    # --- appends ----------------------------------------------------------------------------

    def append_as_leader(
        self, records: bytearray | memoryview, headers: list[BatchHeader], leader_epoch: int, now_ms: int,
        defer_flush: bool = False, client: bool = True,
    ) -> AppendInfo:
        """Assign offsets to validated batches (patching their headers in `records` in place) and
        append them. `headers` are `validate_record_set(records, ...)`'s, positions relative to
        `records`; they are updated to the assigned offsets too. No fsync unless flush.messages
        says so (`_flush_if_messages_due`); flush.ms and rolled segments are `maybe_flush`'s.
        With `defer_flush` the caller runs the flush.messages fsync itself (off the event loop:
        `unflushed_messages >= config.flush_messages` says it is due). A coordinator's own batches
        (not `client`: transactional offset commits) have their producer's epoch checked, not sequences.
        """
        if not headers:
            raise ValueError("nothing to append")
        n = len(records)
        local = self._local
        with self._lock:
            local.check_open()
            config = local.config
            if n > config.segment_bytes:
                raise RecordListTooLargeError(f"record set of {n} bytes exceeds segment.bytes {config.segment_bytes}")
            log_append_time = now_ms if config.log_append_time else None
            if headers[0].is_control:  # a transaction marker from the coordinator (clients cannot send these)
                self.producer_state.check_marker(headers[0].producer_id, headers[0].producer_epoch,
                                                 read_control_record(records, headers[0]).coordinator_epoch)
                dup = None
            else:
                dup = self.producer_state.check(headers, client)
            if dup is not None:  # a retry of a batch in the log: answered with the original's offsets
                return AppendInfo(dup.first_offset, dup.last_offset, dup.timestamp if log_append_time else -1,
                                  self._log_start_offset, dup.timestamp, dup.last_offset, 0, 0, duplicate=True)
            first, nxt, max_ts, offset_of_max, count = assign_offsets(
                records, headers, local.log_end_offset, leader_epoch, log_append_time, config.max_message_bytes)
            local.append(records, headers, max_ts, now_ms)
            self.producer_state.update(headers, lambda h: read_control_record(records, h))
            assert local.log_end_offset == nxt > first, (local.log_end_offset, nxt, first)
            if leader_epoch >= 0:
                latest = self.leader_epoch_cache.latest_epoch
                if latest is None or leader_epoch > latest:
                    self.leader_epoch_cache.assign(leader_epoch, first)
            info = AppendInfo(
                first, nxt - 1, log_append_time if log_append_time is not None else -1,
                self._log_start_offset, max_ts, offset_of_max, count, n,
            )
        if not defer_flush:
            self._flush_if_messages_due(now_ms)
        return info

    def append_as_follower(
        self, records: bytes | bytearray | memoryview, headers: list[BatchHeader] | None = None,
        now_ms: int | None = None,
    ) -> AppendInfo:
        """Append batches whose offsets the leader assigned: they must start at or after the LEO and
        strictly increase (gaps are allowed: compaction leaves them), else UnexpectedAppendOffsetError.

        Without `headers` the batches are validated first with the follower rules
        (`log_append.validate_follower_batches`: CorruptRecordError or RecordTooLargeError); a
        caller that has validated them already passes their headers. Each batch's leader epoch
        newer than the cache's latest is recorded at the batch's base offset."""
        now = _now() if now_ms is None else now_ms
        local = self._local
        if headers is None:
            headers = validate_follower_batches(records, self.config.max_message_bytes, now,
                                                f"{self.topic}-{self.partition}")
        if not headers:
            raise ValueError("nothing to append")
        n = len(records)
        with self._lock:
            local.check_open()
            if n > local.config.segment_bytes:
                raise RecordListTooLargeError(f"record set of {n} bytes exceeds segment.bytes")
            first, nxt, max_ts, offset_of_max, count = check_follower_offsets(headers, n, local.log_end_offset)
            local.append(records, headers, max_ts, now)
            # A follower takes the leader's word: no checks.
            self.producer_state.update(headers, lambda h: read_control_record(records, h))
            cache = self.leader_epoch_cache
            for h in headers:
                latest = cache.latest_epoch
                if h.partition_leader_epoch >= 0 and (latest is None or h.partition_leader_epoch > latest):
                    cache.assign(h.partition_leader_epoch, h.base_offset)
            info = AppendInfo(first, nxt - 1, -1, self._log_start_offset, max_ts, offset_of_max, count, n)
        self._flush_if_messages_due(now)
        return info

    def assign_leader_epoch(self, epoch: int) -> bool:
        """A new leader's epoch begins at the current LEO (Kafka's makeLeader), recorded before any
        append in it, so OffsetForLeaderEpoch and diverging-epoch answers give followers the exact start
        of this epoch at once. Returns whether the cache changed (never for an epoch not newer)."""
        with self._lock:
            self._local.check_open()
            latest = self.leader_epoch_cache.latest_epoch
            if epoch < 0 or (latest is not None and epoch <= latest):
                return False
            return self.leader_epoch_cache.assign(epoch, self._local.log_end_offset)

    def _flush_if_messages_due(self, now: int) -> None:
        """flush.messages, as Kafka applies it: once an append leaves that many messages (offsets)
        unflushed, the log is fsynced in the append path, before the append returns and so
        before the Produce is acknowledged. With flush.messages=1 every append pays an fsync
        (about 1-10 ms on a disk, on the caller's thread, the event loop for a Produce)."""
        local = self._local
        if local.log_end_offset - local.recovery_point >= local.config.flush_messages:
            self.flush(now_ms=now)

    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the LEO (a no-op if the active segment is empty)."""
        with self._lock:
            self._local.check_open()
            return self._local.roll(self._local.log_end_offset, _now() if now_ms is None else now_ms, "requested")

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
        local = self._local
        with self._lock:
            local.check_open()
            leo, start, hw = local.log_end_offset, self._log_start_offset, self._high_watermark
            if fetch_offset < start or fetch_offset > leo:
                raise OffsetOutOfRangeError(f"fetch offset {fetch_offset} is out of range", start, leo)
            limit = leo if max_offset is None else min(max_offset, leo)
            if fetch_offset < limit:
                r = local.read(fetch_offset, max_bytes, limit, min_one_batch)
                if r is not None:
                    return FetchDataInfo(r.records, fetch_offset, r.next_offset, hw, start, leo)
            return FetchDataInfo(_EMPTY, fetch_offset, fetch_offset, hw, start, leo)

    # --- offsets by timestamp ---------------------------------------------------------------------

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets: -1 latest (LEO), -2 earliest, -3 the record with the max timestamp,
        -4 earliest local (= earliest here), else the first record with a timestamp >= `timestamp`."""
        with self._lock:
            cache = self.leader_epoch_cache
            if timestamp == LATEST_TIMESTAMP:
                return TimestampAndOffset(self._local.log_end_offset, NO_TIMESTAMP, cache.latest_epoch)
            if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                start = self._log_start_offset
                return TimestampAndOffset(start, NO_TIMESTAMP, cache.epoch_for_offset(start))
            if timestamp == MAX_TIMESTAMP:
                return self.max_timestamp_offset()
            if timestamp < 0:
                raise ValueError(f"unsupported special timestamp {timestamp}")
            return self.offset_for_timestamp(timestamp)

    def latest_offset(self) -> int:
        return self._local.log_end_offset

    def earliest_offset(self) -> int:
        return self._log_start_offset

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """The first record at or after the log start offset whose timestamp is >= `timestamp`
        (log_timestamps.py); None if there is none."""
        with self._lock:
            r = log_timestamps.offset_for_timestamp(
                self._local.segments, self._log_start_offset, timestamp,
                ValidationRules.for_stored(self.config.max_message_bytes))
            return TimestampAndOffset(*r) if r is not None else None

    def max_timestamp_offset(self) -> TimestampAndOffset | None:
        """ListOffsets -3: the offset and timestamp of the (first) record with the largest timestamp."""
        with self._lock:
            r = log_timestamps.max_timestamp_offset(
                self._local.segments, self._log_start_offset,
                ValidationRules.for_stored(self.config.max_message_bytes), f"{self.topic}-{self.partition}")
            return TimestampAndOffset(*r) if r is not None else None

    # --- high watermark -------------------------------------------------------------------------

    def update_high_watermark(self, high_watermark: int) -> int:
        """Set the HW, clamped to [log_start_offset, LEO]. Returns the value set."""
        with self._lock:
            hw = min(max(high_watermark, self._log_start_offset), self._local.log_end_offset)
            self._high_watermark = hw
            self.producer_state.on_high_watermark(hw)
            self._check_invariants(offsets_only=True)
            return hw

    def maybe_increment_high_watermark(self, high_watermark: int) -> bool:
        """Raise the HW if `high_watermark` is above it (never beyond the LEO). Returns whether it moved."""
        with self._lock:
            if high_watermark > self._local.log_end_offset:
                raise ValueError(
                    f"high watermark {high_watermark} above the log end offset {self._local.log_end_offset}")
            if high_watermark <= self._high_watermark:
                return False
            self._high_watermark = high_watermark
            self.producer_state.on_high_watermark(high_watermark)
            self._check_invariants(offsets_only=True)
            return True

    @property
    def last_stable_offset(self) -> int:
        """Where read_committed reads stop: the HW, or the first offset of the oldest transaction not yet
        decided (or whose marker the HW has not passed), whichever is lower."""
        with self._lock:
            first = self.producer_state.first_unstable_offset()
            hw = self._high_watermark
            return hw if first is None or first > hw else max(first, self._log_start_offset)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound), from the .txnindex files
        (LocalLog.collect_aborted_txns): what a read_committed Fetch returns with its records."""
        with self._lock:
            return self._local.collect_aborted_txns(fetch_offset, upper_bound)

    # --- log cleaner support -----------------------------------------------------------------

    def cleaner_snapshot(self) -> CleanerSnapshot:
        """The segments with their sizes and index entry counts, the offsets and the truncation
        generation, consistent with each other. Cheap: no file is read (index sizes come from
        stat). Also hands over (and resets) the lowest LEO a truncation left since the last call,
        so the cleaner can pull its checkpoint back below truncated-and-rewritten offsets."""
        with self._lock:
            local = self._local
            local.check_open()
            truncated_to, self._truncated_to = self._truncated_to, None
            return CleanerSnapshot(
                local.truncations, self._log_start_offset, local.log_end_offset, self._high_watermark,
                local.segment_infos(), truncated_to, self.last_stable_offset,
            )

    def segment_timestamps(self, seg: LogSegment) -> tuple[int, int | None] | None:
        """(largest timestamp, first batch timestamp) of a segment, or None (LocalLog's)."""
        return self._local.segment_timestamps(seg)

    def open_segment_readers(self, segments: list[LogSegment]) -> list[int] | None:
        """Read descriptors for the cleaner, or None if a segment left the log (LocalLog's)."""
        with self._lock:
            return self._local.open_segment_readers(segments)

    def replace_segments(self, new: LogSegment, old: list[LogSegment], generation: int, now_ms: int) -> bool:
        """Swap the cleaned segment `new` (files `.cleaned`, complete and fsynced) in for the
        consecutive, non-active segments `old`; False, changing nothing, if the log moved on since
        the clean was planned (see LocalLog.replace_segments, whose order of renames makes it
        crash safe). The caller then deletes `new`."""
        with self._lock:
            return self._local.replace_segments(new, old, generation, now_ms)

    # --- flushing ------------------------------------------------------------------------------

    def flush_due(self, now_ms: int) -> bool:
        """Whether `maybe_flush(now_ms)` would fsync (flush.messages, flush.ms, or a rolled segment)."""
        return self._local.flush_target(now_ms) is not None

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush if flush.messages or flush.ms says so, or up to the last roll (Kafka flushes a
        segment once it is rolled). fsyncs: call it off the event loop. Returns whether it flushed."""
        return self._local.maybe_flush(now_ms, self._flush_checkpoints)

    def flush(self, offset: int | None = None, now_ms: int | None = None) -> None:
        """fsync every segment holding offsets below `offset` (default: the LEO) and the leader
        epoch checkpoint, then advance the recovery point. Appends are not blocked meanwhile."""
        self._local.flush(offset, _now() if now_ms is None else now_ms, self._flush_checkpoints)

    def _flush_checkpoints(self) -> None:
        """The per-log checkpoint files, written by every flush and by close."""
        self.leader_epoch_cache.flush(self._local.log_end_offset)

    # --- configuration and lifecycle ---------------------------------------------------------------

    def needs_flush_at_shutdown(self) -> bool:
        """Whether a clean shutdown must `flush()` this log: data past the recovery point, a leader
        epoch checkpoint to write, or directory entries to make durable while the log holds data. A log
        of one empty segment (most of a freshly created 10,000) has nothing a lost directory entry could
        lose: its next open recreates the segment, so it is skipped."""
        with self._lock:
            local = self._local
            if local.closed:
                return False
            if (local.log_end_offset > local.recovery_point
                    or self.leader_epoch_cache.needs_flush(local.log_end_offset)):
                return True
            if not local.dir_dirty:
                return False
            return not (len(local.segments) == 1 and local.segments[0].size == 0 and not local.pending_deletes)

    def update_config(self, config: LogConfig) -> None:
        """New settings apply from now on (index sizes from the next segment)."""
        with self._lock:
            self._local.update_config(config)

    def close(self) -> None:
        """Write pending index entries and the leader epoch checkpoint, close the files. No fsync
        of the log: call `flush()` first for a clean shutdown."""
        with self._lock:
            if not self._local.closed:
                self.producer_state.close(self._local.log_end_offset)
        self._local.close(self._flush_checkpoints)

    def delete(self) -> None:
        """Close the log and remove its directory."""
        with self._lock:
            self.producer_state.truncate_fully(self._local.log_end_offset)  # so close writes no snapshot
        self.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- producer state ---------------------------------------------------------------------------

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """producer.id.expiration.ms: forget producers idle that long. Returns how many."""
        with self._lock:
            return self.producer_state.remove_expired(now_ms, expiration_ms)

    def active_producers(self) -> list[ProducerStateEntry]:
        """DescribeProducers: a copy of every producer's entry."""
        with self._lock:
            return [copy.copy(e) for e in self.producer_state.producers.values()]


def _now() -> int:
    return now_ms()
