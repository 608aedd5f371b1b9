"""ListOffsets by timestamp over a log's segments: pure functions Log calls under its lock.

Both read the one batch that holds the answer through the record validator (`record_timestamps`
with `ValidationRules.for_stored`): the storage layer keeps no record decoder of its own. A
stored batch that does not validate is answered from its header, with a warning naming the
partition and offset: a bad record must never fail the request.
"""

from __future__ import annotations

import logging

from gregor.protocol.validator import BatchValidationError, ValidationRules, record_timestamps
from gregor.storage.segment import LogSegment

logger = logging.getLogger(__name__)


def offset_for_timestamp(segments: list[LogSegment], log_start_offset: int, timestamp: int,
                         rules: ValidationRules) -> tuple[int, int, int | None] | None:
    """(offset, timestamp, leader epoch or None) of the first record at or after the log start
    offset whose timestamp is >= `timestamp` (the time index narrows the search, then one batch
    is read); None if there is none."""
    for seg in segments:
        if seg.next_offset <= log_start_offset or seg.max_timestamp < timestamp:
            continue
        r = seg.find_offset_by_timestamp(timestamp, log_start_offset, rules)
        if r is not None:
            return r[0], r[1], r[2] if r[2] >= 0 else None
    return None


def max_timestamp_offset(segments: list[LogSegment], log_start_offset: int, rules: ValidationRules,
                         name: str) -> tuple[int, int, int | None] | None:
    """ListOffsets -3: (offset, timestamp, leader epoch or None) of the first record with the
    largest timestamp at or after the log start offset; `name` (topic-partition) is for warnings."""
    best: LogSegment | None = None
    for seg in segments:
        if seg.next_offset <= log_start_offset:
            continue
        if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
            best = seg
    if best is None:
        return None
    ts = best.max_timestamp
    h0 = best.translate_offset(best.offset_of_max_timestamp)
    for h in best.batches(h0.position if h0 is not None else 0):
        if h.max_timestamp != ts:
            continue
        epoch = h.partition_leader_epoch if h.partition_leader_epoch >= 0 else None
        try:
            pairs = record_timestamps(best.read_batch(h), rules)
        except BatchValidationError as e:
            logger.warning("%s: the stored batch at offset %d does not validate (%s); ListOffsets "
                           "answers its last offset for the max timestamp", name, h.base_offset, e)
            return h.last_offset, ts, epoch
        for offset, record_ts in pairs:
            if record_ts == ts:
                return offset, ts, epoch
        return h.last_offset, ts, epoch  # the header disagrees with its records
    return None
