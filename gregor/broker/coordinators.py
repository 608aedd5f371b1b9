"""The broker's group and transaction coordinators, with their internal topics and the leadership they follow.

The coordinator of a group is the leader of its __consumer_offsets partition, as in Kafka; of a
transactional id, the leader of its __transaction_state partition. Each topic is created on first use;
until the logs are loaded the coordinators answer COORDINATOR_LOAD_IN_PROGRESS, so clients retry. This
is what the request handlers reach as `BrokerServices.coordinators` (gregor.api.context.Coordinators).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

from gregor.admin.topic_admin import TopicAdmin
from gregor.broker.txn_wiring import build_txn_coordinator
from gregor.config import BrokerConfig
from gregor.configdef import Settings, setting
from gregor.coordinator.group.consumer_protocol import ConsumerGroupSettings
from gregor.coordinator.group.coordinator import (
    OFFSETS_TOPIC,
    GroupCoordinator,
    GroupCoordinatorSettings,
    GroupMetadataSettings,
    append_via,
)
from gregor.coordinator.group.group_configs import store_name
from gregor.coordinator.internal_topic import InternalTopic
from gregor.coordinator.transaction.coordinator import TransactionCoordinator
from gregor.coordinator.transaction.producer_ids import ProducerIdManager
from gregor.coordinator.transaction.state_manager import TRANSACTION_STATE_TOPIC
from gregor.metadata.cache import MetadataCache
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.replication.replica_manager import ReplicaManager
from gregor.security.inter_broker import ClientSecurity
from gregor.storage.log_manager import LogManager


@dataclass(frozen=True, slots=True)
class CoordinatorSettings(Settings):
    offsets_partitions: int = setting("offsets.topic.num.partitions")
    offsets_replication_factor: int = setting("offsets.topic.replication.factor")
    offsets_segment_bytes: int = setting("offsets.topic.segment.bytes")
    offsets_commit_required_acks: int = setting("offsets.commit.required.acks")
    offsets_commit_timeout_ms: int = setting("offsets.commit.timeout.ms")
    txn_partitions: int = setting("transaction.state.log.num.partitions")
    txn_replication_factor: int = setting("transaction.state.log.replication.factor")
    txn_segment_bytes: int = setting("transaction.state.log.segment.bytes")
    txn_min_isr: int = setting("transaction.state.log.min.isr")


class BrokerCoordinators:
    """The coordinators of one broker and their internal topics (see the module's docstring)."""

    def __init__(self, config: BrokerConfig, replica_manager: ReplicaManager, log_manager: LogManager,
                 topic_admin: TopicAdmin, metadata_cache: MetadataCache, producer_ids: ProducerIdManager,
                 security: ClientSecurity) -> None:
        s = CoordinatorSettings.from_config(config)
        self._replica_manager = replica_manager
        self._log_manager = log_manager
        self._cache = metadata_cache
        self.offsets_topic = InternalTopic(
            OFFSETS_TOPIC, topic_admin, metadata_cache, s.offsets_partitions, s.offsets_replication_factor,
            {"cleanup.policy": "compact", "segment.bytes": str(s.offsets_segment_bytes)})
        self.txn_topic = InternalTopic(
            TRANSACTION_STATE_TOPIC, topic_admin, metadata_cache, s.txn_partitions, s.txn_replication_factor,
            {"cleanup.policy": "compact", "segment.bytes": str(s.txn_segment_bytes)}, min_isr=s.txn_min_isr)
        commits = append_via(replica_manager, s.offsets_commit_required_acks, s.offsets_commit_timeout_ms)
        self.group_coordinator = GroupCoordinator(
            GroupCoordinatorSettings.from_config(config), GroupMetadataSettings.from_config(config),
            ConsumerGroupSettings.from_config(config), commits, self._read_offsets_partition)
        self.txn_coordinator = build_txn_coordinator(config, metadata_cache, replica_manager, self.group_coordinator,
                                                     producer_ids, security, self._read_txn_partition)
        self._loaded = False  # the coordinators replayed what they lead, after the logs loaded
        self._stopped = False

    def start(self) -> None:
        """At the broker's start: the KIP-848 group configs (GROUP resources) are read from the metadata
        cache at each heartbeat and session timer."""
        self.group_coordinator.consumer.group_configs = (
            lambda group_id: self._cache.entity_configs("groups", store_name(group_id)))

    def on_logs_loaded(self) -> None:
        """Replay what this broker leads, and follow the leadership from now on."""
        self._loaded = True
        self.group_coordinator.load(self._offsets_partitions_led())
        self.txn_coordinator.follow_leadership(self.txn_topic.led(self._replica_manager))

    def stop_following(self) -> None:
        """The broker is shutting down: leadership changes from now on are its leaving, not work to take."""
        self._stopped = True

    def shutdown(self) -> None:
        self._stopped = True
        self.group_coordinator.shutdown()
        self.txn_coordinator.shutdown()

    def follow_leadership(self, kind: str, topic: str) -> None:
        """A cache listener (after the replica manager's, so each Partition knows whether it leads)."""
        if not self._loaded or self._stopped:
            return
        if topic in (OFFSETS_TOPIC, "", "lost", "restored"):
            self.group_coordinator.follow_leadership(self._offsets_partitions_led())
        if topic in (TRANSACTION_STATE_TOPIC, "", "lost", "restored"):
            self.txn_coordinator.follow_leadership(self.txn_topic.led(self._replica_manager))

    def _offsets_partitions_led(self) -> set[int]:
        return set(self.offsets_topic.led(self._replica_manager))

    def _read_offsets_partition(self, p: int) -> Iterator[memoryview]:
        return self.offsets_topic.read_partition(self._replica_manager, self._log_manager, p)

    def _read_txn_partition(self, p: int) -> Iterator[memoryview]:
        return self.txn_topic.read_partition(self._replica_manager, self._log_manager, p)

    # --- what the request handlers reach (gregor.api.context.Coordinators) ----------------------------
    @property
    def loading(self) -> bool:
        return self._log_manager.loading

    def group_coordinator_ready(self) -> GroupCoordinator:
        """The coordinator, once __consumer_offsets exists (created on first use, as Kafka does) and the
        logs are loaded (until then COORDINATOR_LOAD_IN_PROGRESS: clients retry). The offsets topic's logs
        are created in the background; the one a group writes to first is created then (one log, not fifty)."""
        if self._log_manager.loading:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "the broker is loading its logs")
        self.offsets_topic.ensure()
        return self.group_coordinator

    def txn_coordinator_ready(self) -> TransactionCoordinator:
        """The transaction coordinator, once __transaction_state exists (created on first use) and the
        logs are loaded."""
        if self._log_manager.loading:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "the broker is loading its logs")
        self.txn_topic.ensure()
        return self.txn_coordinator

    def offsets_topic_creation(self) -> asyncio.Future[None] | None:
        """None while the logs load or once __consumer_offsets exists; else a future done when the creation
        under way (started now if none is) ends, whether it succeeded or not. FindCoordinator waits on it
        rather than failing."""
        return None if self._log_manager.loading else self.offsets_topic.creation()

    def txn_topic_creation(self) -> asyncio.Future[None] | None:
        return None if self._log_manager.loading else self.txn_topic.creation()
