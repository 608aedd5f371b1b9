"""Offset-range planning: rate limits per trigger and splitting ranges into Spark tasks.

Pure functions on {(topic, partition): offset} maps, following Spark's KafkaMicroBatchStream
(rateLimit, delayBatch) and KafkaOffsetRangeCalculator, so the two connectors plan the same batches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gregor.spark.errors import report_data_loss
from gregor.spark.options import TopicPartitionKey

OffsetMap = Mapping[TopicPartitionKey, int]


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets [from_offset, until_offset) of one topic-partition: what one Spark task reads."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


def rate_limit(limit: int, start: OffsetMap, latest: OffsetMap, earliest_of_new: Callable[[list[TopicPartitionKey]],
               OffsetMap]) -> dict[TopicPartitionKey, int]:
    """Cap a micro-batch at `limit` offsets, split across partitions in proportion to their backlog.

    A partition with any backlog gets at least one offset (no partition starves); partitions new
    since `start` count from their earliest offset.
    """
    new = [tp for tp in latest if tp not in start]
    from_new = earliest_of_new(new) if new else {}
    sizes: dict[TopicPartitionKey, int] = {}
    for tp, end in latest.items():
        begin = start.get(tp, from_new.get(tp))
        if begin is not None and end - begin > 0:
            sizes[tp] = end - begin
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(latest)
    out: dict[TopicPartitionKey, int] = {}
    for tp, end in latest.items():
        size = sizes.get(tp)
        if size is None:
            out[tp] = end
            continue
        begin = start.get(tp, from_new.get(tp, 0))
        prorate = limit * (size / total)
        n = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, begin + n)
    return out


def backlog(start: OffsetMap, latest: OffsetMap) -> int:
    """Offsets available past `start` (a partition new since `start` counts from 0, as Spark does)."""
    return sum(max(0, off - start.get(tp, 0)) for tp, off in latest.items())


def plan_ranges(start: OffsetMap, end: OffsetMap, earliest_of_new: Callable[[list[TopicPartitionKey]], OffsetMap],
                fail_on_data_loss: bool) -> list[OffsetRange]:
    """The ranges a micro-batch reads from `start` to `end`, reporting data loss as Spark does.

    Partitions in `end` but not `start` appeared during the query and are read from their earliest
    offset; partitions in `start` but not `end` were deleted; an end below its start means the
    partition was truncated or recreated.
    """
    new = sorted(tp for tp in end if tp not in start)
    from_new = dict(earliest_of_new(new)) if new else {}
    for tp in new:
        if tp not in from_new:
            report_data_loss(fail_on_data_loss, f"Cannot find earliest offsets of {tp[0]}-{tp[1]}")
        elif from_new[tp] != 0:
            report_data_loss(fail_on_data_loss,
                             f"Added partition {tp[0]}-{tp[1]} starts from {from_new[tp]} instead of 0")
    gone = sorted(tp for tp in start if tp not in end)
    if gone:
        report_data_loss(fail_on_data_loss, f"{', '.join(f'{t}-{p}' for t, p in gone)} are gone")
    ranges = []
    for tp in sorted(end):
        begin = start.get(tp, from_new.get(tp))
        if begin is None:
            continue
        until = end[tp]
        if until < begin:
            report_data_loss(fail_on_data_loss, f"Partition {tp[0]}-{tp[1]}'s offset was changed from {begin} to "
                                                f"{until}")
        ranges.append(OffsetRange(tp[0], tp[1], begin, until))
    return ranges


def _divide(rng: OffsetRange, parts: int) -> list[OffsetRange]:
    """Cut a range into `parts` nearly equal pieces, the last one taking the rounding."""
    out = []
    remaining = rng.size
    begin = rng.from_offset
    for i in range(parts):
        this = remaining // (parts - i)
        remaining -= this
        end = min(begin + this, rng.until_offset)
        if end > begin:
            out.append(OffsetRange(rng.topic, rng.partition, begin, end))
        begin = end
    return out


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None,
                 max_records_per_partition: int | None) -> list[OffsetRange]:
    """Spark tasks for these ranges: one per non-empty range unless `maxRecordsPerPartition` caps a
    task's size or `minPartitions` asks for more tasks than there are ranges (then large ranges are
    split in proportion to their size)."""
    out = sorted(r for r in ranges if r.size > 0)
    if max_records_per_partition is not None:
        out = [piece for r in out for piece in _divide(r, math.ceil(r.size / max_records_per_partition))]
    if min_partitions is not None and min_partitions > len(out):
        total = sum(r.size for r in out)
        ideal = total / min_partitions
        out = [piece for r in out for piece in _divide(r, max(math.ceil(r.size / ideal), 1))]
    return out
