"""LogState: what a partition's Log keeps beside its segments (LocalLog): the log start offset, the
high watermark, the leader epoch cache and the producer state, with the invariant that ties the
offsets, log start <= HW <= LEO. Log (log.py) is built on it with two parts, each a class of its
own module working on this state under the log's one lock (`_lock`, which is LocalLog.lock):

    LogRetention   (log_retention.py)  DeleteRecords and retention: the log start offset moves up
    LogTruncation  (log_truncation.py) a follower's truncation: the log end offset moves back
"""

from __future__ import annotations

import os
import time

from gregor.storage.config import LogConfig
from gregor.storage.leader_epoch import LeaderEpochFileCache
from gregor.storage.local_log import LocalLog
from gregor.storage.producer_state import ProducerStateManager
from gregor.storage.segment import LogSegment, SegmentFileCache


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class LogState:
    """The offsets, leader epochs and producer state of one partition's log, over its LocalLog."""

    def __init__(self, local: LocalLog, log_start_offset: int, leader_epoch_cache: LeaderEpochFileCache,
                 producer_state: ProducerStateManager) -> None:
        self._local = local
        self.dir = local.dir
        self.log_dir = os.path.dirname(local.dir)  # the entry of log.dirs holding it
        self.topic, self.partition = local.topic, local.partition
        self._lock = local.lock
        self._log_start_offset = log_start_offset
        self._high_watermark = log_start_offset
        self._truncated_to: int | None = None  # lowest LEO after a truncation, until the cleaner looks
        self.leader_epoch_cache = leader_epoch_cache
        self.producer_state = producer_state

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self._log_start_offset}, hw={self._high_watermark}, "
            f"leo={self._local.log_end_offset}, segments={len(self._local.segments)})"
        )

    # --- accessors ------------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._local.config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._local.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._local.recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._local.last_flush_ms

    @property
    def unflushed_messages(self) -> int:
        return self._local.log_end_offset - self._local.recovery_point

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._local.segments)

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._local.segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._local.segments[-1]

    @property
    def num_segments(self) -> int:
        return len(self._local.segments)

    @property
    def closed(self) -> bool:
        return self._local.closed

    @property
    def generation(self) -> int:
        """Bumped by every truncation (see `replace_segments`)."""
        return self._local.truncations

    def segment_sizes(self) -> list[tuple[int, int]]:
        """(base offset, size) of each segment, oldest first (the clean-shutdown marker's lines)."""
        with self._lock:
            return [(seg.base_offset, seg.size) for seg in self._local.segments]

    @property
    def segment_files(self) -> SegmentFileCache:
        """The open-files cache this log's segments go through (a new segment of it must too)."""
        return self._local.files

    # --- the offsets' invariant ------------------------------------------------------------------

    def _increment_log_start_offset(self, offset: int) -> None:
        """The log start moves up to `offset` (retention, DeleteRecords): never past the HW."""
        assert offset > self._log_start_offset and offset <= self._high_watermark, (offset, self)
        self._log_start_offset = offset
        self._local.recovery_point = max(self._local.recovery_point, offset)
        self.leader_epoch_cache.truncate_from_start(offset)
        self._check_invariants()

    def _note_truncation(self, leo: int) -> None:
        """A truncation left the LEO at `leo`: the cleaner's next snapshot says so (cleaner_snapshot)."""
        if self._truncated_to is None or leo < self._truncated_to:
            self._truncated_to = leo

    def _check_invariants(self, offsets_only: bool = False) -> None:
        """log start <= HW <= LEO here; the recovery point and the segment order in LocalLog."""
        assert self._log_start_offset <= self._high_watermark <= self._local.log_end_offset, self
        if not offsets_only:
            self._local.check_invariants()

