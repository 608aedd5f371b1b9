"""LogTruncation: the part of a partition's Log that moves its end back, when a follower's log
diverged from its leader's (after a leader change, as the leader epochs tell) or must start over at
an offset of the leader's (a follower too far behind the leader's log start). The high watermark
and log start offset are clamped to the new end, the leader epoch cache forgets the epochs begun
after it, and the producer state is rebuilt from the batches that are left.
"""

from __future__ import annotations

import logging

from gregor.storage.log_state import LogState
from gregor.storage.log_state import now_ms as _now

logger = logging.getLogger("gregor.storage.log")


class LogTruncation(LogState):
    """A follower's truncation of one partition's log."""

    def truncate_to(self, offset: int, now_ms: int | None = None) -> bool:
        """Remove everything at and after `offset` (a follower diverged from its leader): the
        batch holding `offset` goes whole, the HW and log start offset are clamped to the new
        LEO and the leader epoch cache forgets epochs starting at or after it.
        Returns False if the LEO is already at or below `offset`."""
        now = _now() if now_ms is None else now_ms
        with self._lock:
            local = self._local
            local.check_open()
            if offset < 0:
                raise ValueError(f"negative offset {offset}")
            if offset >= local.log_end_offset:
                # Nothing to remove, but an epoch begun at the LEO with nothing appended in it (a leader
                # for a moment: makeLeader assigns its epoch there) is not ours any more: without this the
                # follower would name it as its last fetched epoch and diverge again and again (Kafka too).
                self.leader_epoch_cache.truncate_from_end(offset)
                return False
            if offset < local.bases[0]:
                self._truncate_fully_and_start_at(offset, now)
                return True
            leo = local.truncate_to(offset, now)
            self._note_truncation(leo)
            self._log_start_offset = min(self._log_start_offset, leo)
            self._high_watermark = min(self._high_watermark, leo)
            self.leader_epoch_cache.truncate_from_end(leo)
            self.producer_state.load(self._log_start_offset, leo, leo, False, local.batches_from,
                                     read_control=local.read_control)
            self._check_invariants()
            logger.info("%s-%d: truncated to offset %d", self.topic, self.partition, leo)
            return True

    def truncate_fully_and_start_at(self, offset: int, now_ms: int | None = None) -> None:
        """Delete every segment and start empty at `offset` (log start = HW = LEO = offset)."""
        with self._lock:
            self._local.check_open()
            self._truncate_fully_and_start_at(offset, _now() if now_ms is None else now_ms)

    def _truncate_fully_and_start_at(self, offset: int, now: int) -> None:
        if offset < 0:
            raise ValueError(f"negative offset {offset}")
        self._local.truncate_fully_and_start_at(offset, now)
        self._note_truncation(offset)
        self._log_start_offset = self._high_watermark = offset
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_fully(offset)
        self._check_invariants()
        logger.info("%s-%d: truncated fully, starting at offset %d", self.topic, self.partition, offset)

