"""The two delayed operations of the data path, parked in the ReplicaManager's one purgatory.

DelayedProduce (acks=all): done when, for every partition of the request that appended, the high
watermark reached the batch's last offset + 1 (or its leadership moved, or the partition went
away); at its deadline the partitions not done get REQUEST_TIMED_OUT.

DelayedFetch (fetch.min.bytes / fetch.max.wait.ms): done when the bytes visible past what the fetch
had (below the HW for consumers, the LEO for followers) reach min bytes, when a partition's leadership
or log changes under it, or at max wait. Completion reads again, so the answer is always fresh.

Both are tried and re-tried on the event loop only: whoever moves a partition's HW (or appends to it)
calls the purgatory's check_and_complete for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from gregor.protocol.errors import ErrorCode
from gregor.replication.partition import AppendResult, Partition
from gregor.replication.purgatory import DelayedOperation, TopicPartition

log = logging.getLogger("gregor.delayed")

PartitionLookup = Callable[[TopicPartition], "Partition | None"]


@dataclass(slots=True)
class ProducePartitionStatus:
    """One partition of a delayed Produce: the offset the HW must reach and its answer so far."""

    key: TopicPartition
    partition: Partition
    required_offset: int  # the last appended offset + 1
    result: AppendResult
    acks_pending: bool = True


class DelayedProduce(DelayedOperation):
    def __init__(self, delay_ms: int, statuses: list[ProducePartitionStatus], lookup: PartitionLookup,
                 on_done: Callable[[], None]) -> None:
        super().__init__(delay_ms)
        self.statuses = statuses
        self._lookup = lookup
        self._on_done = on_done

    def try_complete(self) -> bool:
        for s in self.statuses:
            if not s.acks_pending:
                continue
            current = self._lookup(s.key)
            if current is not s.partition:  # deleted (perhaps re-created): this append's log is gone
                done, error = True, (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if current is None
                                     else ErrorCode.NOT_LEADER_OR_FOLLOWER)
            else:
                done, error = s.partition.check_enough_replicas_reach_offset(s.required_offset)
            if error != ErrorCode.NONE:
                s.acks_pending = False
                s.result.error = error
                s.result.message = None
            elif done:
                s.acks_pending = False
        if any(s.acks_pending for s in self.statuses):
            return False
        return self.force_complete()

    def on_expiration(self) -> None:
        for s in self.statuses:
            if s.acks_pending:
                s.acks_pending = False
                s.result.error = ErrorCode.REQUEST_TIMED_OUT
                s.result.message = (f"the high watermark of {s.key[0]}-{s.key[1]} did not reach offset "
                                    f"{s.required_offset} within the request's timeout")

    def on_complete(self) -> None:
        self._on_done()


@dataclass(slots=True)
class FetchPartitionStatus:
    """One partition of a delayed Fetch: where the visible end was when it parked."""

    key: TopicPartition
    partition: Partition | None  # None: it errored, nothing to watch
    leader_epoch: int
    end_offset: int  # HW (consumer) or LEO (follower) when parked
    end_bytes: int  # bytes appended up to end_offset
    read_bytes: int  # bytes the read before parking returned
    partition_max_bytes: int
    was_leader: bool = True  # a consumer may read from a follower (KIP-392): a change of role answers it
    # A follower's fetch while followers serve consumers (KIP-392): the HW when it parked. A HW move then
    # answers it, so the follower, and the consumers reading from it, learn the new HW at once.
    hw_at_park: int = -1


class DelayedFetch(DelayedOperation):
    def __init__(self, delay_ms: int, min_bytes: int, isolation: int, statuses: list[FetchPartitionStatus],
                 lookup: PartitionLookup, on_done: Callable[[], None]) -> None:
        super().__init__(delay_ms)
        self.min_bytes = min_bytes
        self.isolation = isolation
        self.statuses = statuses
        self._lookup = lookup
        self._on_done = on_done

    def try_complete(self) -> bool:
        accumulated = 0
        for s in self.statuses:
            if s.partition is None:
                continue
            current = self._lookup(s.key)
            if current is not s.partition or current.is_leader != s.was_leader or current.leader_epoch != s.leader_epoch:
                return self.force_complete()  # removed, re-created or a new leader: answer with the news
            if 0 <= s.hw_at_park < current.high_watermark:
                return self.force_complete()
            end_offset, end_bytes = current.end_offset_for(self.isolation)
            if end_offset < s.end_offset:  # the log was truncated or its start moved past: answer now
                return self.force_complete()
            if end_bytes < 0 or s.end_bytes < 0:  # read_committed below the HW: any move of the LSO answers
                if end_offset > s.end_offset:
                    return self.force_complete()
                continue
            available = end_bytes - s.end_bytes + s.read_bytes
            accumulated += min(available, s.partition_max_bytes)
        if accumulated >= self.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self._on_done()
