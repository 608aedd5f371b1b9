"""LocalLog: the segments of one partition's log on disk, and the offsets that live with them.

Kafka splits its log into UnifiedLog (offsets the replication layer cares about) and LocalLog
(the files). This is our LocalLog: the ordered segment list, appending batches whose offsets
are already assigned, reading, rolling, truncating, deleting segments (renamed `.deleted`
first, unlinked after file.delete.delay.ms), swapping cleaned segments in, and flushing.
It keeps two offsets:

    recovery_point <= log_end_offset

`log_end_offset` (LEO) is one past the last offset appended; `recovery_point` is the offset
below which everything has been fsynced. It knows nothing of the high watermark, the log start
offset, leader epochs or producers: class Log (log.py) keeps those, and calls down here.

Locking: `lock` (an RLock) guards the segment list and both offsets; Log takes the same lock
around its own state, so one acquisition covers an operation of both. `flush_lock` serialises
flushes, whose fsyncs run outside `lock` so appends are never stalled by one.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Iterator

from gregor.protocol.records import BatchHeader, ControlRecord, read_control_record
from gregor.storage.config import LogConfig
from gregor.storage.errors import KafkaStorageError
from gregor.storage.files import fsync_dir
from gregor.storage.segment import (
    DELETED_SUFFIX,
    SWAP_SUFFIX,
    LogSegment,
    SegmentFileCache,
    SegmentInfo,
    SegmentRead,
    roll_reason,
)
from gregor.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)


class LocalLog:
    """The segment files of one log. Built by `LogLoader` (log_loader.py) and owned by a `Log`."""

    def __init__(
        self, dir: str, topic: str, partition: int, config: LogConfig, segments: list[LogSegment],
        log_end_offset: int, recovery_point: int, now: int, files: SegmentFileCache | None = None,
    ) -> None:
        self.dir = dir
        # The open-files cache every segment of this log goes through (by default its first segment's).
        self.files = files if files is not None else segments[0].files
        self.topic = topic
        self.partition = partition
        self.config = config
        self._max_segment_ms = config.max_segment_ms  # LogConfig is frozen; the property is not free
        self.lock = threading.RLock()
        self.on_roll: Callable[[int], None] | None = None  # told the LEO when a non-empty segment is rolled
        self.flush_lock = threading.Lock()
        self.segments = segments
        self.bases = [s.base_offset for s in segments]
        self.log_end_offset = log_end_offset
        self.recovery_point = recovery_point
        self.last_flush_ms = now
        self.roll_flush_offset = 0  # a roll asks for the segments below this offset to be flushed
        self.truncations = 0  # bumped when the LEO goes back, so an in-flight flush does not overshoot
        self.dir_dirty = True  # files were created or renamed since the last directory fsync
        self.pending_deletes: list[tuple[int, LogSegment]] = []  # (due ms, segment renamed .deleted)
        self.closed = False
        self.check_invariants()

    def check_open(self) -> None:
        if self.closed:
            raise KafkaStorageError(f"log {self.dir} is closed")

    def check_invariants(self) -> None:
        """recovery point <= LEO; segments in strictly increasing base offset order, the active one
        starting at or below the LEO. Cheap: run after every change of the segment list or offsets."""
        assert self.recovery_point <= self.log_end_offset, (self.recovery_point, self.log_end_offset, self.dir)
        assert self.segments and self.bases == [s.base_offset for s in self.segments], self.dir
        assert all(a < b for a, b in zip(self.bases, self.bases[1:], strict=False)), self.bases
        assert self.segments[-1].base_offset <= self.log_end_offset, (self.bases[-1], self.log_end_offset)

    # --- appends and rolls --------------------------------------------------------------------

    def append(self, records: bytes | bytearray | memoryview, headers: list[BatchHeader], max_ts: int,
               now: int) -> None:
        """Write batches whose offsets are assigned (strictly above the LEO's predecessor, checked
        batch by batch by the caller) to the active segment, rolling first if it says so."""
        first, last = headers[0].base_offset, headers[-1].last_offset
        assert first >= self.log_end_offset and last >= first, (first, last, self.log_end_offset)
        seg = self.segments[-1]
        reason = roll_reason(seg, self.config, len(records), max_ts, last, now, self._max_segment_ms)
        if reason is not None:
            seg = self.roll(first, now, reason)
        seg.append(records, headers)
        self.log_end_offset = last + 1

    def roll(self, new_base: int, now: int, reason: str) -> LogSegment:
        """A new active segment at `new_base` (at least the LEO); the current one, if empty, is
        reused when it starts there and replaced otherwise (a follower's gap)."""
        active = self.segments[-1]
        new_base = max(new_base, self.log_end_offset)
        if active.size == 0:
            if active.base_offset == new_base:
                return active
            self.segments.pop()
            self.bases.pop()
            self.schedule_delete(active, now)
        else:
            active.on_become_inactive()
            self.roll_flush_offset = max(self.roll_flush_offset, new_base)
            if self.on_roll is not None:
                self.on_roll(self.log_end_offset)
        assert not self.bases or new_base > self.bases[-1], (new_base, self.bases)
        try:
            seg = LogSegment.create(self.dir, new_base, self.config, now, files=self.files)
        except OSError as e:
            raise KafkaStorageError(f"cannot create a segment in {self.dir}: {e}") from e
        self.segments.append(seg)
        self.bases.append(new_base)
        self.dir_dirty = True
        logger.debug("%s-%d: rolled a new segment at %d (%s)", self.topic, self.partition, new_base, reason)
        return seg

    # --- reads -----------------------------------------------------------------------------

    def read(self, fetch_offset: int, max_bytes: int, limit: int, min_one_batch: bool) -> SegmentRead | None:
        """Whole batches from the segment holding `fetch_offset` on (see LogSegment.read), none
        holding an offset >= `limit`; None if no segment below `limit` has any."""
        segments = self.segments
        i = self._segment_index(fetch_offset)
        try:
            while i < len(segments) and segments[i].base_offset < limit:
                r = segments[i].read(fetch_offset, max_bytes, limit, min_one_batch)
                if r is not None:
                    return r
                i += 1
        except OSError as e:
            raise KafkaStorageError(f"read from {self.dir} failed: {e}") from e
        return None

    def _segment_index(self, offset: int) -> int:
        """The index of the segment holding `offset` (the first segment for an offset below the log)."""
        return max(bisect.bisect_right(self.bases, offset) - 1, 0)

    def _segment_for(self, offset: int) -> LogSegment:
        return self.segments[self._segment_index(offset)]

    def read_control(self, h: BatchHeader) -> ControlRecord:
        """The control record of a stored control batch (producer state replay needs a marker's type)."""
        data = self._segment_for(h.base_offset).pread(h.size, h.position)
        return read_control_record(data, dataclasses.replace(h, position=0))

    def add_aborted_txn(self, entry: AbortedTxn) -> None:
        """An abort marker was appended (or replayed): its entry in the .txnindex of its segment."""
        try:
            self._segment_for(entry.last_offset).txn_index.add_if_absent(entry)
        except OSError as e:
            raise KafkaStorageError(f"cannot write the transaction index in {self.dir}: {e}") from e

    def collect_aborted_txns(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound): their markers are at or after
        `fetch_offset`, so the indexes from its segment on are searched, until one says none can follow."""
        out: list[AbortedTxn] = []
        segments = self.segments
        try:
            for i in range(self._segment_index(fetch_offset), len(segments)):
                if segments[i].txn_index.collect(fetch_offset, upper_bound, out):
                    break
        except OSError as e:
            raise KafkaStorageError(f"cannot read the transaction index in {self.dir}: {e}") from e
        return out

    def segment_infos(self) -> list[SegmentInfo]:
        segs = self.segments
        return [SegmentInfo(seg, seg.base_offset, seg.size, segs[i + 1].base_offset if i + 1 < len(segs)
                            else self.log_end_offset, seg.offset_index.entries, seg.time_index.entries)
                for i, seg in enumerate(segs)]

    # --- truncation ----------------------------------------------------------------------------

    def truncate_to(self, offset: int, now: int) -> int:
        """Remove the batch holding `offset` and everything after it; `offset` must lie at or above
        the first segment's base offset. Returns the new LEO (<= offset)."""
        assert offset >= self.bases[0], (offset, self.bases[0])
        k = bisect.bisect_right(self.bases, offset)
        doomed = self.segments[k:]
        del self.segments[k:]
        del self.bases[k:]
        for seg in doomed:
            self.schedule_delete(seg, now)
        active = self.segments[-1]
        try:
            active.truncate_to(offset, now)
            active.load_indexes()
        except OSError as e:
            raise KafkaStorageError(f"cannot truncate {active.log_path}: {e}") from e
        leo = active.next_offset
        assert leo <= offset, (leo, offset)
        self.truncations += 1
        self.log_end_offset = leo
        self.recovery_point = min(self.recovery_point, leo)
        self.roll_flush_offset = min(self.roll_flush_offset, leo)
        self.check_invariants()
        return leo

    def truncate_fully_and_start_at(self, offset: int, now: int) -> None:
        """Delete every segment and start over with one empty segment at `offset`."""
        doomed = self.segments
        self.segments, self.bases = [], []
        for seg in doomed:
            self.schedule_delete(seg, now)
        try:
            seg = LogSegment.create(self.dir, offset, self.config, now, files=self.files)
        except OSError as e:
            raise KafkaStorageError(f"cannot create a segment in {self.dir}: {e}") from e
        self.segments, self.bases = [seg], [offset]
        self.truncations += 1
        self.log_end_offset = self.recovery_point = offset
        self.roll_flush_offset = 0
        self.dir_dirty = True
        self.check_invariants()

    # --- deleting segments ---------------------------------------------------------------------

    def delete_oldest(self, doomed: list[LogSegment], now: int, reason: str) -> None:
        """Delete the oldest segments `doomed` (a prefix of the list); when that is every segment,
        an empty active segment is rolled at the LEO first (Kafka's behaviour)."""
        assert doomed and doomed == self.segments[: len(doomed)]
        if len(doomed) == len(self.segments):
            self.roll(self.log_end_offset, now, f"retention deletes every segment ({reason})")
        k = len(doomed)
        del self.segments[:k]
        del self.bases[:k]
        for seg in doomed:
            self.schedule_delete(seg, now)
        self.check_invariants()
        logger.info("%s-%d: deleted %d segments (%s), up to offset %d",
                    self.topic, self.partition, k, reason, self.bases[0])

    def schedule_delete(self, seg: LogSegment, now: int) -> None:
        """Rename the segment's files to `.deleted` now; unlink them after file.delete.delay.ms."""
        seg.close(write_indexes=False)  # first: a flush fsyncing it on another thread then ignores errors
        try:
            seg.change_suffix(DELETED_SUFFIX)
        except OSError as e:
            raise KafkaStorageError(f"cannot rename {seg.log_path}: {e}") from e
        self.dir_dirty = True
        self.pending_deletes.append((now + self.config.file_delete_delay_ms, seg))

    def delete_expired_files(self, now: int, force: bool = False) -> None:
        for seg in self.take_expired(now, force):
            seg.delete_files()

    def take_expired(self, now: int, force: bool = False) -> list[LogSegment]:
        """The deleted segments whose file.delete.delay.ms has passed, no longer pending: the caller unlinks
        their files (`delete_files`), outside the lock if it likes (they are closed and renamed, no reader
        reaches them; unlinking a large file takes a while: ~0.3 s for 1 GiB here)."""
        due_now, keep = [], []
        for due, seg in self.pending_deletes:
            (due_now if force or due <= now else keep).append((due, seg))
        self.pending_deletes = keep
        return [seg for _, seg in due_now]

    # --- log cleaner support -------------------------------------------------------------------

    def open_segment_readers(self, segments: list[LogSegment]) -> list[int] | None:
        """Duplicated read descriptors for `segments` (the caller closes them), or None if one of
        them has left the log. A duplicate stays valid when the segment is closed, renamed or
        deleted meanwhile, so the cleaner reads without holding the lock and never hits a
        descriptor number that was closed and reused."""
        if self.closed or any(seg.closed for seg in segments):
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

    def segment_timestamps(self, seg: LogSegment) -> tuple[int, int | None] | None:
        """(largest timestamp, first batch timestamp) of a segment for the compaction lags, or None
        if it is no longer part of the log. Under the lock: the values are loaded lazily from the
        files, which must not race with the event loop doing the same."""
        with self.lock:
            if self.closed or seg.closed:
                return None
            return seg.largest_timestamp, seg.rolling_base_timestamp

    def replace_segments(self, new: LogSegment, old: list[LogSegment], generation: int, now: int) -> bool:
        """Swap the cleaned segment `new` (files suffixed `.cleaned`, complete and fsynced) in for
        the consecutive, non-active segments `old`. Returns False, changing nothing, if the log
        moved on since the clean was planned: closed, truncated (`generation`), or one of `old`
        deleted by retention. The caller then deletes `new`.

        Crash safety comes from the order of renames, all under the lock (a few renames and one
        directory fsync, no data copying):
          1. `new` .cleaned -> .swap, then fsync the directory: from here a restart completes the
             replacement (LogLoader replaces the segments in [swap base, swap next offset)).
          2. each old segment -> .deleted (unlinked after file.delete.delay.ms; a restart removes it).
          3. `new` .swap -> final names (the first old segment's name, freed in step 2).
        A crash before 1 leaves `.cleaned` files, removed on load: the old segments stand.
        """
        if self.closed or generation != self.truncations or not old:
            return False
        try:
            i = next(j for j, seg in enumerate(self.segments) if seg is old[0])
        except StopIteration:
            return False
        k = len(old)
        if i + k >= len(self.segments) or any(a is not b for a, b in zip(self.segments[i : i + k], old, strict=True)):
            return False  # not all still there, or the last one is (now) the active segment
        assert new.base_offset == old[0].base_offset, (new, old[0])
        assert new.next_offset <= self.bases[i + k], (new, self.bases[i + k])
        try:
            new.change_suffix(SWAP_SUFFIX)
            fsync_dir(self.dir)
            for seg in old:
                self.schedule_delete(seg, now)
            new.change_suffix("")
        except OSError as e:
            raise KafkaStorageError(f"swapping cleaned segment {new.log_path} in failed: {e}") from e
        self.segments[i : i + k] = [new]
        self.bases[i : i + k] = [new.base_offset]
        self.dir_dirty = True
        self.check_invariants()
        return True

    # --- flushing ---------------------------------------------------------------------------------

    def flush_target(self, now: int) -> int | None:
        """The offset `maybe_flush` would flush to (flush.messages, flush.ms, a rolled segment)."""
        rp, leo = self.recovery_point, self.log_end_offset
        if leo <= rp:
            return None
        if leo - rp >= self.config.flush_messages or now - self.last_flush_ms >= self.config.flush_ms:
            # flush.messages is met in the append path; here only if an fsync there failed
            return leo
        if self.roll_flush_offset > rp:
            return self.roll_flush_offset
        return None

    def maybe_flush(self, now: int, also: Callable[[], None]) -> bool:
        """Flush up to `flush_target(now)`, if any (see `flush`). Returns whether it flushed."""
        with self.lock:
            if self.closed:
                return False
            target = self.flush_target(now)
        if target is None:
            return False
        self.flush(target, now, also)
        return True

    def flush(self, offset: int | None, now: int, also: Callable[[], None]) -> None:
        """fsync every segment holding offsets below `offset` (default: the LEO) and the directory
        if files changed, call `also` (the owner's checkpoints: leader epochs, producer state),
        then advance the recovery point. `lock` is held only around the bookkeeping."""
        with self.flush_lock:
            with self.lock:
                if self.closed:
                    return
                target = self.log_end_offset if offset is None else min(offset, self.log_end_offset)
                rp = self.recovery_point
                lo = self._segment_index(rp)
                hi = bisect.bisect_left(self.bases, target) if target > rp else lo
                to_sync = self.segments[lo:hi]
                try:
                    for seg in to_sync:
                        seg.write_indexes()
                except OSError as e:
                    raise KafkaStorageError(f"cannot write indexes in {self.dir}: {e}") from e
                truncations = self.truncations
                dir_dirty, self.dir_dirty = self.dir_dirty, False
            try:
                for seg in to_sync:
                    seg.fsync()
                if dir_dirty:
                    fsync_dir(self.dir)
                also()
            except OSError as e:
                self.dir_dirty = self.dir_dirty or dir_dirty
                raise KafkaStorageError(f"flush of {self.dir} failed: {e}") from e
            with self.lock:
                if truncations == self.truncations and target > self.recovery_point:
                    self.recovery_point = target
                self.last_flush_ms = now
                if self.roll_flush_offset <= self.recovery_point:
                    self.roll_flush_offset = 0
                self.check_invariants()

    def batches_from(self, offset: int) -> Iterator[BatchHeader]:
        """The headers of the batches from the one holding `offset` to the LEO (producer state replay)."""
        for i in range(self._segment_index(offset), len(self.segments)):
            seg = self.segments[i]
            h = seg.translate_offset(offset) if offset > seg.base_offset else None
            if offset > seg.base_offset and h is None:
                continue
            yield from seg.batches(h.position if h is not None else 0)

    # --- lifecycle -----------------------------------------------------------------------------

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        self._max_segment_ms = config.max_segment_ms
        for seg in self.segments:
            seg.index_interval_bytes = config.index_interval_bytes

    def close(self, also: Callable[[], None]) -> None:
        """Write pending index entries, close the files, call `also` (the owner's checkpoints) and
        remove the files of deleted segments. Idempotent."""
        with self.flush_lock, self.lock:
            if self.closed:
                return
            self.closed = True
            try:
                for seg in self.segments:
                    seg.close()
                also()
                self.delete_expired_files(0, force=True)
            except OSError as e:
                raise KafkaStorageError(f"closing {self.dir} failed: {e}") from e
