"""The batch walks of Log's two append paths, as pure functions (Kafka's LogValidator and
analyzeAndValidateRecords have the same place): Log calls them under its lock, then hands the
batches to LocalLog.append.

    assign_offsets             leader appends: offsets from the LEO on, the leader epoch and
                               (LogAppendTime topics) the append time patched into each header
    check_follower_offsets     follower appends: offsets the leader assigned, strictly increasing
                               from the LEO on (gaps allowed), refused otherwise
    validate_follower_batches  follower appends without headers: the record validator's
                               follower rules

Both walks also check that the headers tile the record set exactly, so a caller's mistake
cannot write a batch the headers do not describe.
"""

from __future__ import annotations

from gregor.protocol.records import LOG_OVERHEAD, TIMESTAMP_TYPE_BIT, BatchHeader, patch_batch
from gregor.protocol.validator import (
    DEFAULT_DECOMPRESSION_MAX_BYTES,
    DEFAULT_DECOMPRESSION_RATIO,
    BatchValidationError,
    ValidationRules,
    validate_batches,
)
from gregor.storage.errors import CorruptRecordError, RecordTooLargeError, UnexpectedAppendOffsetError
from gregor.storage.index import NO_TIMESTAMP

AppendSummary = tuple[int, int, int, int, int]
"""(first offset, next offset = the LEO after the append, max timestamp, offset of the max
timestamp, records count): a plain tuple, as this is on every Produce's path."""


def assign_offsets(records: bytearray | memoryview, headers: list[BatchHeader], first_offset: int,
                   leader_epoch: int, log_append_time: int | None, max_batch_bytes: int) -> AppendSummary:
    """Give the batches consecutive offsets from `first_offset` and the leader epoch, patching
    `records` and `headers` in place (with `log_append_time`, also their timestamps: LogAppendTime).
    Raises RecordTooLargeError for a batch over max.message.bytes (`max_batch_bytes`)."""
    offset = first_offset
    max_ts, offset_of_max = NO_TIMESTAMP, -1
    position = count = 0
    for h in headers:
        size = h.batch_length + LOG_OVERHEAD
        if h.position != position:
            raise ValueError(f"batch header at {h.position} where {position} was expected")
        if size > max_batch_bytes:
            raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes {max_batch_bytes}")
        if h.last_offset_delta < 0:
            raise ValueError(f"batch at {position} has a negative last offset delta {h.last_offset_delta}")
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
    if position != len(records):
        raise ValueError(f"headers cover {position} of {len(records)} bytes")
    if log_append_time is not None:
        offset_of_max = first_offset
    return first_offset, offset, max_ts, offset_of_max, count


def check_follower_offsets(headers: list[BatchHeader], size: int, log_end_offset: int) -> AppendSummary:
    """The leader's offsets must start at or after `log_end_offset` and strictly increase from
    batch to batch (gaps allowed: compaction leaves them); else UnexpectedAppendOffsetError."""
    first = headers[0].base_offset
    expected = log_end_offset
    max_ts, offset_of_max = NO_TIMESTAMP, -1
    position = count = 0
    for h in headers:
        if h.position != position:
            raise ValueError(f"batch header at {h.position} where {position} was expected")
        if h.base_offset < expected or h.last_offset_delta < 0:
            raise UnexpectedAppendOffsetError(
                f"batch at offset {h.base_offset} does not follow offset {expected - 1}", first, log_end_offset)
        if h.max_timestamp > max_ts:
            max_ts, offset_of_max = h.max_timestamp, h.last_offset
        expected = h.next_offset
        position += h.batch_length + LOG_OVERHEAD
        count += h.records_count
    if position != size:
        raise ValueError(f"headers cover {position} of {size} bytes")
    return first, expected, max_ts, offset_of_max, count


def validate_follower_batches(records: bytes | bytearray | memoryview, max_message_bytes: int, now: int,
                              name: str) -> list[BatchHeader]:
    """The headers of `records` after the validator's follower rules (framing, CRC, size, the
    record walk; not timestamps or keys, which the leader judged). Raises RecordTooLargeError or
    CorruptRecordError, whose `error` is the validator's Kafka error name; `name` is the
    partition, for the message."""
    rules = ValidationRules.for_follower(
        max_message_bytes=max_message_bytes, decompression_ratio=DEFAULT_DECOMPRESSION_RATIO,
        decompression_max_bytes=DEFAULT_DECOMPRESSION_MAX_BYTES)
    try:
        return validate_batches(memoryview(records), rules, now).headers
    except BatchValidationError as e:
        err = (RecordTooLargeError if e.error == "MESSAGE_TOO_LARGE" else CorruptRecordError)(
            f"{name}: follower batch {e.batch_index} refused: {e}")
        err.error = e.error
        raise err from e
