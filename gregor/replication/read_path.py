"""The read path: a Fetch's reads of the hosted partitions, and its wait for fetch.min.bytes.

Kafka's ReplicaManager.fetchMessages and readFromLocalLog. A consumer reads below the high watermark
(read_committed: the last stable offset), a follower up to the LEO; a follower's fetch offset is its LEO,
so its fetch may move the HW (the purgatory re-checks what waits on it) and bring it into the ISR. A
consumer that sent its rack (Fetch v11+, KIP-392) may read from a follower, below the HW that follower
learnt; with `replica.selector.class` set, the leader may instead name a preferred read replica in the
consumer's rack (Kafka's RackAwareReplicaSelector). A follower's copy to a replica outside the ISR may be
paced by the leader throttle (leader.replication.throttled.*). When too little is visible the Fetch parks
as a DelayedFetch, which reads again when it completes, so an answer is never stale.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from gregor.metadata.cache import MetadataCache
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.replication.delayed import DelayedFetch, FetchPartitionStatus, PartitionLookup
from gregor.replication.isr_manager import IsrManager
from gregor.replication.partition import FETCH_LOG_END, Partition, ReadResult
from gregor.replication.purgatory import Purgatory, PurgatoryFullError, TopicPartition
from gregor.replication.quota import ReplicationQuota
from gregor.storage.errors import StorageError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class FetchPartition:
    """One partition of a Fetch request."""

    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1


@dataclass(frozen=True, slots=True)
class FetchParams:
    """A Fetch request's own parameters. `limits()` gives (bytes the response may carry, whether its
    first batch may exceed that: KIP-74), asked at each read since it depends on the connection."""

    replica_id: int  # >= 0: a follower; -1: a consumer
    max_wait_ms: int
    min_bytes: int
    isolation_level: int
    limits: Callable[[], tuple[int, bool]]
    # A consumer's Fetch v11+ (KIP-392): its client.rack ("" when unset). Such a consumer may read from a
    # follower; None (older versions, followers) reads from leaders only.
    client_rack: str | None = None


class ReadPath:
    """Fetch reads of the hosted partitions, for consumers and followers, and the DelayedFetch."""

    def __init__(self, broker_id: int, rack_aware: bool, metadata_cache: MetadataCache,
                 get_partition: Callable[[str, int], Partition], hosted: PartitionLookup, purgatory: Purgatory,
                 isr: IsrManager, leader_quota: ReplicationQuota, after_progress: Callable[[TopicPartition], None],
                 storage_failure: Callable[[str, int, BaseException], None]) -> None:
        """`rack_aware`: replica.selector.class is set (leaders name preferred read replicas, KIP-392);
        `get_partition(topic, p)`: the hosted partition, its log created if need be (raises KafkaError or
        StorageError); `hosted(key)`: the hosted partition now, or None; `after_progress(key)`: let what is
        parked on the partition re-check; `storage_failure(topic, p, e)`: an I/O error met on its log."""
        self.broker_id = broker_id
        self.rack_aware = rack_aware
        self.metadata_cache = metadata_cache
        self._get_partition = get_partition
        self._hosted = hosted
        self.purgatory = purgatory
        self.isr = isr
        self.leader_quota = leader_quota
        self._after_progress = after_progress
        self._storage_failure = storage_failure

    def fetch_messages(self, params: FetchParams, requests: Sequence[FetchPartition],
                       respond: Callable[[list[ReadResult]], T]) -> T | asyncio.Future[T]:
        """Read now; answer at once when there is enough (fetch.min.bytes), nothing to wait for, an
        error or a diverging epoch, or no wait allowed. Otherwise park a DelayedFetch: it reads again
        (and `respond`s, in a Future) when enough is visible, the partitions change hands, or at
        max wait."""
        hw_watch = params.replica_id >= 0 and self.rack_aware
        # While followers serve consumers (KIP-392) a follower must learn a new HW at once, not at its next
        # fetch's max wait: a fetch that will tell it a HW it has not been sent yet is answered now.
        told = self._high_watermarks_sent(params.replica_id, requests) if hw_watch else None
        results = self.read_from_local_log(params, requests)
        nbytes = sum(len(r.records) for r in results)
        if told is not None and any(r.high_watermark > hw for r, hw in zip(results, told, strict=True)):
            return respond(results)
        if (params.max_wait_ms <= 0 or not requests or nbytes >= params.min_bytes
                or any(r.error != ErrorCode.NONE or r.diverging_epoch is not None or r.preferred_read_replica >= 0
                       for r in results)):
            return respond(results)
        isolation = FETCH_LOG_END if params.replica_id >= 0 else params.isolation_level
        statuses = []
        for fp, r in zip(requests, results, strict=True):
            key = (fp.topic, fp.partition)
            part = self._hosted(key)
            if part is None:
                continue
            end_offset, end_bytes = part.end_offset_for(isolation)
            statuses.append(FetchPartitionStatus(key, part, part.leader_epoch, end_offset, end_bytes,
                                                 len(r.records), fp.partition_max_bytes, part.is_leader,
                                                 part.high_watermark if hw_watch else -1))
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()

        def done() -> None:
            if fut.done():
                return
            try:
                fut.set_result(respond(self.read_from_local_log(params, requests)))
            except Exception as e:  # surfaced to the connection, which logs and closes
                fut.set_exception(e)

        op = DelayedFetch(params.max_wait_ms, params.min_bytes, isolation, statuses, self._hosted, done)
        try:
            if self.purgatory.try_complete_else_watch(op, [s.key for s in statuses]):
                return fut.result()
        except PurgatoryFullError:
            return respond(results)
        return fut

    def read_from_local_log(self, params: FetchParams, requests: Sequence[FetchPartition]) -> list[ReadResult]:
        """One read of every requested partition, in order, within the response budget (`params.limits`,
        asked now: it depends on what the connection has queued). The first partition with data may
        exceed it by one batch (KIP-74), when the budget allows. A follower's fetch moves its LEO."""
        budget, may_exceed = params.limits()
        isolation = FETCH_LOG_END if params.replica_id >= 0 else params.isolation_level
        now_ms = int(time.time() * 1000)
        total = 0
        out: list[ReadResult] = []
        for fp in requests:
            part: Partition | None = None
            throttled = False
            try:
                part = self._get_partition(fp.topic, fp.partition)
                max_bytes = min(fp.partition_max_bytes, max(budget - total, 0))
                one_batch = total == 0 and may_exceed
                if params.replica_id >= 0 and self.leader_quota.active:
                    # A reassignment's copying to a replica outside the ISR, paced (leader.replication.throttled.*):
                    # past the rate it gets no records this time, its fetch state still moves.
                    throttled = (params.replica_id not in part.isr
                                 and part.log_config is not None
                                 and part.log_config.throttles(fp.partition, self.broker_id, leader_side=True))
                    if throttled and self.leader_quota.exceeded():
                        max_bytes, one_batch = 0, False
                preferred = (self._preferred_read_replica(part, fp.fetch_offset, params.client_rack)
                             if params.client_rack and self.rack_aware and part.is_leader else None)
                if preferred is not None:  # KIP-392: no records, the consumer goes to `preferred`
                    part.check_leader_epoch(fp.current_leader_epoch)
                    hw = part.high_watermark
                    res, moved = ReadResult(ErrorCode.NONE, b"", hw, part.log.last_stable_offset,
                                            part.log.log_start_offset, preferred_read_replica=preferred), False
                else:
                    res, moved = part.fetch_records(params.replica_id, fp.fetch_offset, max_bytes, isolation,
                                                    one_batch, now_ms, fp.current_leader_epoch, fp.last_fetched_epoch,
                                                    fetch_only_from_leader=params.client_rack is None)
                if throttled:
                    self.leader_quota.record(len(res.records))
            except KafkaError as e:
                res, moved = ReadResult(e.code), False
            except StorageError as e:  # its log could not be opened or created, or closed under a deletion
                res, moved = ReadResult(ErrorCode[e.error]), False
                self._storage_failure(fp.topic, fp.partition, e)
            except OSError as e:
                res, moved = ReadResult(ErrorCode.KAFKA_STORAGE_ERROR), False
                self._storage_failure(fp.topic, fp.partition, e)
            if moved:
                self._after_progress((fp.topic, fp.partition))
            if params.replica_id >= 0 and part is not None and res.error == ErrorCode.NONE:
                if params.replica_id not in part.isr:
                    self.isr.maybe_expand(part, params.replica_id)
                if (f := part.followers.get(params.replica_id)) is not None:
                    f.last_sent_high_watermark = res.high_watermark
            total += len(res.records)
            out.append(res)
        return out

    def _preferred_read_replica(self, part: Partition, fetch_offset: int, rack: str) -> int | None:
        """Kafka's RackAwareReplicaSelector (replica.selector.class): the leader itself when it is in the
        consumer's rack, else the in-sync follower in that rack furthest ahead that holds `fetch_offset`;
        None (the leader serves) when there is none. Only ISR members are offered, so the consumer is
        never sent to a replica that is falling behind."""
        me = self.metadata_cache.broker(self.broker_id)
        if me is not None and me.rack == rack:
            return None
        best: tuple[int, int] | None = None
        for r in part.replicas:
            if r == self.broker_id or r not in part.isr:
                continue
            info = self.metadata_cache.broker(r)
            f = part.followers.get(r)
            if info is None or info.rack != rack or f is None or f.log_end_offset < fetch_offset:
                continue
            if best is None or f.log_end_offset > best[1]:
                best = (r, f.log_end_offset)
        return None if best is None else best[0]

    def _high_watermarks_sent(self, replica_id: int, requests: Sequence[FetchPartition]) -> list[int]:
        """The HW each partition's last fetch response told follower `replica_id` (never told: the most)."""
        out = []
        for fp in requests:
            part = self._hosted((fp.topic, fp.partition))
            f = part.followers.get(replica_id) if part is not None else None
            out.append(f.last_sent_high_watermark if f is not None else 2**63 - 1)
        return out
