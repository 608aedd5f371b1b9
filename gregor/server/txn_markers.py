"""Transaction markers on the leader's side, and the wiring of the transaction coordinator.

`append_markers` is what a partition leader does for WriteTxnMarkers (from a coordinator on another
broker, or from this broker's own coordinator directly): append the producer's commit or abort marker
to each partition as leader, with acks=all (a marker must survive a failover, or the LSO would
never pass the transaction), and, for `__consumer_offsets` partitions, hand the outcome to the group
coordinator once replicated, so the transaction's offsets become the group's or are dropped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

from gregor.coordinator.group.coordinator import OFFSETS_TOPIC, append_via
from gregor.coordinator.transaction.coordinator import TransactionCoordinator
from gregor.coordinator.transaction.markers import TxnMarkerSender
from gregor.coordinator.transaction.state_manager import TransactionStateManager
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import build_marker_batch, iter_headers
from gregor.security.inter_broker import client_security
from gregor.server.futures import then
from gregor.server.partition import AppendResult
from gregor.server.replica_manager import AppendEntry

TopicPartition = tuple[str, int]


def append_markers(broker: Any, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
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
            broker.group_coordinator.metadata.complete_txn(producer_id, offsets_parts, commit)
        return out

    return then(broker.replica_manager.append_records(timeout_ms, -1, entries), finish)


def build_txn_coordinator(broker: Any, read_partition: Callable[[int], Iterator[memoryview]]) -> TransactionCoordinator:
    config = broker.config
    cache = broker.metadata_cache
    timeout_ms = config.get("request.timeout.ms")
    writes = append_via(broker.replica_manager, -1, timeout_ms)
    state = TransactionStateManager(config.get("transaction.state.log.num.partitions"), writes, read_partition)

    def leader_of(topic: str, p: int) -> int | None:
        s = cache.partition_state(topic, p)
        return None if s is None else s.leader

    def address_of(broker_id: int) -> tuple[str, int] | None:
        b = cache.broker(broker_id)
        return None if b is None else (b.host, b.port)

    def partition_exists(topic: str, p: int) -> bool:
        t = cache.topic(topic)
        return t is not None and p in t.partitions

    async def write_local(pid: int, epoch: int, commit: bool, coordinator_epoch: int,
                          tps: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        got = append_markers(broker, pid, epoch, commit, coordinator_epoch, tps, timeout_ms)
        return await got if isinstance(got, asyncio.Future) else got

    markers = TxnMarkerSender(config.broker_id, leader_of, address_of, lambda t: cache.topic(t) is not None,
                              write_local, request_timeout_ms=timeout_ms, security=client_security(config))
    return TransactionCoordinator(config, state, broker.producer_ids, markers, partition_exists)
