"""The wiring of the transaction coordinator: its state log, marker sender and local marker writes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

from gregor.coordinator.group.coordinator import append_via
from gregor.coordinator.transaction.coordinator import TransactionCoordinator, TransactionSettings
from gregor.coordinator.transaction.marker_writer import append_markers
from gregor.coordinator.transaction.markers import TxnMarkerSender
from gregor.coordinator.transaction.state_manager import TransactionStateManager
from gregor.protocol.errors import ErrorCode
from gregor.security.inter_broker import client_security

TopicPartition = tuple[str, int]


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
        got = append_markers(broker.replica_manager, broker.group_coordinator, pid, epoch, commit, coordinator_epoch, tps, timeout_ms)
        return await got if isinstance(got, asyncio.Future) else got

    markers = TxnMarkerSender(config.broker_id, leader_of, address_of, lambda t: cache.topic(t) is not None,
                              write_local, request_timeout_ms=timeout_ms, security=client_security(config))
    return TransactionCoordinator(TransactionSettings.from_config(config), state, broker.producer_ids, markers,
                                  partition_exists)
