"""Transaction markers on the leader's side: what a partition leader does for WriteTxnMarkers.

The request comes from a coordinator on another broker, or this broker's own coordinator calls it
directly: append the producer's commit or abort marker to each partition as leader, with acks=all (a
marker must survive a failover, or the LSO would never pass the transaction), and, for
`__consumer_offsets` partitions, hand the outcome to the group coordinator once replicated, so the
transaction's offsets become the group's or are dropped.
"""

from __future__ import annotations

import asyncio
import time

from gregor.coordinator.group.coordinator import OFFSETS_TOPIC, GroupCoordinator
from gregor.futures import then
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import build_marker_batch, iter_headers
from gregor.replication.partition import AppendResult
from gregor.replication.replica_manager import AppendEntry, ReplicaManager

TopicPartition = tuple[str, int]


def append_markers(replica_manager: ReplicaManager, group_coordinator: GroupCoordinator, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                   tps: list[TopicPartition], timeout_ms: int
                   ) -> dict[TopicPartition, ErrorCode] | asyncio.Future[dict[TopicPartition, ErrorCode]]:
    """An error per partition, or a Future of them while acks=all waits for the ISR."""
    now = int(time.time() * 1000)
    entries = []
    for t, p in tps:
        buf = memoryview(bytearray(build_marker_batch(producer_id, producer_epoch, commit, coordinator_epoch, now)))
        entries.append(AppendEntry(t, p, buf, list(iter_headers(buf)), False))

    def finish(results: list[AppendResult]) -> dict[TopicPartition, ErrorCode]:
        out = {tp: r.error for tp, r in zip(tps, results, strict=True)}
        offsets_parts = {p for (t, p), code in out.items() if t == OFFSETS_TOPIC and code == ErrorCode.NONE}
        if offsets_parts:
            group_coordinator.metadata.complete_txn(producer_id, offsets_parts, commit)
        return out

    return then(replica_manager.append_records(timeout_ms, -1, entries), finish)
