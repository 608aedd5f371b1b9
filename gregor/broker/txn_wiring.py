"""The wiring of the transaction coordinator: its state log, marker sender and local marker writes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gregor.config import BrokerConfig
from gregor.configdef import Settings, setting
from gregor.coordinator.group.coordinator import GroupCoordinator, append_via
from gregor.coordinator.transaction.coordinator import TransactionCoordinator, TransactionSettings
from gregor.coordinator.transaction.marker_writer import append_markers
from gregor.coordinator.transaction.markers import TxnMarkerSender
from gregor.coordinator.transaction.producer_ids import ProducerIdManager
from gregor.coordinator.transaction.state_manager import TransactionStateManager
from gregor.metadata.cache import MetadataCache
from gregor.protocol.errors import ErrorCode
from gregor.replication.replica_manager import ReplicaManager
from gregor.security.inter_broker import ClientSecurity

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TxnWiringSettings(Settings):
    broker_id: int = setting("broker.id")
    request_timeout_ms: int = setting("request.timeout.ms")
    state_partitions: int = setting("transaction.state.log.num.partitions")


def build_txn_coordinator(config: BrokerConfig, cache: MetadataCache, replica_manager: ReplicaManager,
                          group_coordinator: GroupCoordinator, producer_ids: ProducerIdManager,
                          security: ClientSecurity, read_partition: Callable[[int], Iterator[memoryview]]
                          ) -> TransactionCoordinator:
    s = TxnWiringSettings.from_config(config)
    timeout_ms = s.request_timeout_ms
    writes = append_via(replica_manager, -1, timeout_ms)
    state = TransactionStateManager(s.state_partitions, writes, read_partition)

    def leader_of(topic: str, p: int) -> int | None:
        st = cache.partition_state(topic, p)
        return None if st is None else st.leader

    def address_of(broker_id: int) -> tuple[str, int] | None:
        b = cache.broker(broker_id)
        return None if b is None else (b.host, b.port)

    def partition_exists(topic: str, p: int) -> bool:
        t = cache.topic(topic)
        return t is not None and p in t.partitions

    async def write_local(pid: int, epoch: int, commit: bool, coordinator_epoch: int,
                          tps: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        got = append_markers(replica_manager, group_coordinator, pid, epoch, commit, coordinator_epoch, tps, timeout_ms)
        return await got if isinstance(got, asyncio.Future) else got

    markers = TxnMarkerSender(s.broker_id, leader_of, address_of, lambda t: cache.topic(t) is not None,
                              write_local, request_timeout_ms=timeout_ms, security=security)
    return TransactionCoordinator(TransactionSettings.from_config(config), state, producer_ids, markers, partition_exists)
