"""Which segments retention may delete: pure functions over a segment list, used by Log.

Kafka's rules (UnifiedLog.deleteOldSegments): only whole segments go, oldest first, and only
those lying entirely below the high watermark; the active segment counts only if it is not
empty. Three reasons, checked in this order by `Log.delete_old_segments`:

  log start offset   the next segment starts at or below the log start offset (DeleteRecords)
  retention.bytes    the log is larger than retention.bytes: oldest segments until it is not
  retention.ms       the segment's largest timestamp is older than retention.ms
"""

from __future__ import annotations

from collections.abc import Callable

from gregor.storage.segment import LogSegment

Predicate = Callable[[LogSegment, LogSegment | None], bool]
"""(segment, the segment after it or None for the active one) -> whether retention wants it gone."""


def deletable_segments(segments: list[LogSegment], high_watermark: int, log_end_offset: int,
                       predicate: Predicate) -> list[LogSegment]:
    """The oldest segments, in order, for which `predicate` holds and that lie below the HW."""
    out: list[LogSegment] = []
    for i, seg in enumerate(segments):
        nxt = segments[i + 1] if i + 1 < len(segments) else None
        upper = nxt.base_offset if nxt is not None else log_end_offset
        if nxt is None and seg.size == 0:
            break
        if not (high_watermark >= upper and predicate(seg, nxt)):
            break
        out.append(seg)
    return out


def below_log_start(log_start_offset: int) -> Predicate:
    """Segments whose every offset is below the log start offset."""
    return lambda seg, nxt: nxt is not None and nxt.base_offset <= log_start_offset


def older_than(retention_ms: int, now: int) -> Predicate:
    """Segments whose largest timestamp is more than retention.ms before `now`."""
    return lambda seg, nxt: now - seg.largest_timestamp > retention_ms


def over_size(segments: list[LogSegment], retention_bytes: int) -> Predicate | None:
    """The oldest segments whose removal keeps the log at or above retention.bytes; None if the
    log is within it (or retention.bytes is -1)."""
    size = sum(s.size for s in segments)
    if retention_bytes < 0 or size < retention_bytes:
        return None
    excess = size - retention_bytes

    def over(seg: LogSegment, nxt: LogSegment | None) -> bool:
        nonlocal excess
        if excess - seg.size >= 0:
            excess -= seg.size
            return True
        return False

    return over
