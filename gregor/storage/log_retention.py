"""LogRetention: the part of a partition's Log that deletes from its start: DeleteRecords (the log
start offset moved up to an offset the client names) and retention (retention.bytes and
retention.ms of a log whose cleanup.policy has "delete"; retention.py says which segments), as
Kafka's UnifiedLog does. Only whole segments below the high watermark go, renamed `.deleted`
first (LocalLog.delete_oldest); the producer state snapshots below the new start go with them.
"""

from __future__ import annotations

from gregor.storage import retention
from gregor.storage.errors import OffsetOutOfRangeError
from gregor.storage.log_state import LogState
from gregor.storage.log_state import now_ms as _now
from gregor.storage.segment import LogSegment


class LogRetention(LogState):
    """DeleteRecords and retention of one partition's log."""

    def delete_records(self, offset: int, now_ms: int | None = None) -> int:
        """Move the log start offset up to `offset` (never back, never past the HW) and delete the
        segments wholly below it. Returns the new log start offset (the low watermark)."""
        now = _now() if now_ms is None else now_ms
        with self._lock:
            self._local.check_open()
            if offset < 0:
                raise ValueError(f"negative offset {offset}")
            if offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records up to {offset}, beyond the high watermark {self._high_watermark}",
                    self._log_start_offset, self._local.log_end_offset,
                )
            if offset > self._log_start_offset:
                self._increment_log_start_offset(offset)
            self._delete_segments(retention.below_log_start(self._log_start_offset), now, "log start offset")
            return self._log_start_offset

    def delete_old_segments(self, now_ms: int, unlink_expired: bool = True) -> int:
        """Retention: delete segments wholly below the log start offset and, if cleanup.policy has
        "delete", those past retention.bytes (oldest first) or retention.ms (by their largest
        timestamp). Only segments entirely below the HW go. When every segment, the active one
        included, is due, a new empty active segment is rolled first (Kafka's behaviour). The files of
        segments deleted file.delete.delay.ms ago are unlinked too, unless `unlink_expired` is false (the
        caller then unlinks them off its thread: take_expired_segments). Returns the number of segments deleted."""
        with self._lock:
            local = self._local
            if local.closed:
                return 0
            config = local.config
            deleted = self._delete_segments(retention.below_log_start(self._log_start_offset), now_ms,
                                            "log start offset")
            if config.delete:
                over = retention.over_size(local.segments, config.retention_bytes)
                if over is not None:
                    deleted += self._delete_segments(over, now_ms, "retention.bytes")
                if config.retention_ms >= 0:
                    deleted += self._delete_segments(retention.older_than(config.retention_ms, now_ms), now_ms,
                                                     "retention.ms")
            if unlink_expired:
                local.delete_expired_files(now_ms)
            return deleted

    def take_expired_segments(self, now_ms: int) -> list[LogSegment]:
        """The deleted segments whose files are due to be unlinked (LocalLog.take_expired): the caller unlinks
        them, without this log's lock."""
        with self._lock:
            return self._local.take_expired(now_ms)

    def _delete_segments(self, predicate: retention.Predicate, now: int, reason: str) -> int:
        local = self._local
        doomed = retention.deletable_segments(local.segments, self._high_watermark, local.log_end_offset, predicate)
        if not doomed:
            return 0
        local.delete_oldest(doomed, now, reason)
        first_base = local.bases[0]  # producer state snapshots below the log go with its segments
        self.producer_state.delete_snapshots(lambda off: off >= first_base)
        if local.bases[0] > self._log_start_offset:
            self._increment_log_start_offset(local.bases[0])
        return len(doomed)

