"""The append path: a Produce's (and a coordinator's) batches appended as leader, and the wait for them.

Kafka's ReplicaManager.appendRecords: each partition's validated batches are appended in order, a
partition's failure being its own result's error, never the others'. The answer comes at once, unless it
has to wait: for acks=all until the high watermark passed every appended batch (a DelayedProduce in the
purgatory, REQUEST_TIMED_OUT at the request's timeout), and for any acks until a flush.messages fsync the
append made due has run off the loop (flushes.PendingFlushes). Every append lets the purgatory re-check
the operations parked on its partition (a DelayedFetch may now have enough).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

from gregor.metrics.registry import BrokerMetrics
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import BatchHeader
from gregor.replication.delayed import DelayedProduce, PartitionLookup, ProducePartitionStatus
from gregor.replication.partition import AppendResult, Partition
from gregor.replication.purgatory import Purgatory, PurgatoryFullError, TopicPartition
from gregor.storage.errors import StorageError

log = logging.getLogger("gregor.replica")


class AppendEntry(NamedTuple):
    """One partition's validated record set for `append_records`."""

    topic: str
    partition: int
    records: memoryview
    headers: list[BatchHeader]
    client: bool = True  # False: a coordinator's own write (sequence numbers not checked, as Kafka's origin)


def append_error(topic: str, p: int, e: BaseException) -> AppendResult:
    """A failed append's result: Kafka's error for it, and the reason."""
    if isinstance(e, KafkaError):
        return AppendResult(e.code, message=e.message)
    if isinstance(e, StorageError):
        return AppendResult(ErrorCode[e.error], message=str(e))
    log.error("append to %s-%d failed: %s", topic, p, e)
    return AppendResult(ErrorCode.KAFKA_STORAGE_ERROR, message=str(e))


class AppendPath:
    """Appends as leader to the hosted partitions, and the DelayedProduce of acks=all."""

    def __init__(self, get_partition: Callable[[str, int], Partition], hosted: PartitionLookup, purgatory: Purgatory,
                 after_progress: Callable[[TopicPartition], None],
                 storage_failure: Callable[[str, int, BaseException], None]) -> None:
        """`get_partition(topic, p)`: the hosted partition, its log created if need be (raises KafkaError or
        StorageError); `hosted(key)`: the hosted partition now, or None; `after_progress(key)`: let what is
        parked on the partition re-check; `storage_failure(topic, p, e)`: an I/O error met on its log."""
        self._get_partition = get_partition
        self._hosted = hosted
        self.purgatory = purgatory
        self._after_progress = after_progress
        self._storage_failure = storage_failure
        self.metrics: BrokerMetrics | None = None  # the broker's, when metrics.port is set

    def append_records(self, timeout_ms: int, required_acks: int, entries: Sequence[AppendEntry]
                       ) -> list[AppendResult] | asyncio.Future[list[AppendResult]]:
        """Append each entry's validated batches as leader, in order; the results at once, or a Future of
        them while acks=all waits for the ISR or a flush.messages fsync runs (see the module doc)."""
        now_ms = int(time.time() * 1000)
        results: list[AppendResult] = []
        waiting: list[ProducePartitionStatus] = []
        flushes: list[tuple[AppendResult, asyncio.Future[None], str, int]] = []
        metrics = self.metrics
        for topic, p, records, headers, client in entries:
            key = (topic, p)
            try:
                part = self._get_partition(topic, p)
                res = part.append_records_to_leader(records, headers, required_acks, now_ms, defer_flush=True,
                                                    client=client)
            except (KafkaError, StorageError, OSError) as e:
                results.append(append_error(topic, p, e))
                if not isinstance(e, KafkaError):
                    self._storage_failure(topic, p, e)
                continue
            results.append(res)
            if client and metrics is not None:  # Kafka's BytesInPerSec / MessagesInPerSec
                metrics.record_append(topic, len(records), res.last_offset - res.base_offset + 1)
            if res.flush_due:
                flushes.append((res, part.flush_after_append(
                    res.last_offset + 1, self._after_progress,
                    metrics.log_flush.observe if metrics is not None else None), topic, p))
            self._after_progress(key)
            if required_acks == -1:
                waiting.append(ProducePartitionStatus(key, part, res.last_offset + 1, res))
        if not waiting and not flushes:
            return results
        return self._wait(timeout_ms, results, waiting, flushes)

    def _wait(self, timeout_ms: int, results: list[AppendResult], waiting: list[ProducePartitionStatus],
              flushes: list[tuple[AppendResult, asyncio.Future[None], str, int]]
              ) -> list[AppendResult] | asyncio.Future[list[AppendResult]]:
        """The results once every flush ran and, for acks=all, the DelayedProduce completed."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[list[AppendResult]] = loop.create_future()
        left = len(flushes) + (1 if waiting else 0)

        def one_done() -> None:
            nonlocal left
            left -= 1
            if left == 0 and not fut.done():
                fut.set_result(results)

        for res, flushed, topic, p in flushes:
            def on_flushed(f: asyncio.Future[None], res: AppendResult = res, topic: str = topic, p: int = p) -> None:
                if (exc := f.exception()) is not None:
                    res.error, res.message = ErrorCode.KAFKA_STORAGE_ERROR, f"flush failed: {exc}"
                    self._storage_failure(topic, p, exc)
                one_done()
            flushed.add_done_callback(on_flushed)
        if waiting:
            op = DelayedProduce(timeout_ms, waiting, self._hosted, one_done)
            try:
                self.purgatory.try_complete_else_watch(op, [s.key for s in waiting])
            except PurgatoryFullError as e:
                op.on_expiration()
                for s in waiting:
                    if s.result.error == ErrorCode.REQUEST_TIMED_OUT:
                        s.result.message = str(e)
                one_done()
        if fut.done():
            return fut.result()
        return fut
