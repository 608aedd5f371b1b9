"""The one metadata interface: brokers, controller, topics, partition state, topic configs.

Everything the broker knows about the cluster goes through `MetadataStore`. A lone broker
uses `EmbeddedMetadataStore` (gregor.metadata.embedded); a cluster will use a ZooKeeper
store with the same methods and Kafka's znode layout (/brokers/ids, /controller,
/brokers/topics/<t>, /brokers/topics/<t>/partitions/<p>/state, /config/topics/<t>), where
every partition-state update is conditional on the version read, as here.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field


class MetadataError(Exception):
    """Base for store errors."""


class TopicExistsError(MetadataError):
    pass


class NoSuchTopicError(MetadataError):
    pass


class BadVersionError(MetadataError):
    """A conditional update lost a race: the znode (or record) changed since it was read."""


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass
class PartitionState:
    """Kafka's /brokers/topics/<t>/partitions/<p>/state, plus the assignment."""

    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    controller_epoch: int = 0
    version: int = 0  # bumped on every write; updates are conditional on it


@dataclass
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionState]
    configs: dict[str, str] = field(default_factory=dict)  # topic-level overrides, as strings
    internal: bool = False


# Callbacks fire after a change is durable: (event, topic name).
Listener = Callable[[str, str], None]


class MetadataStore(ABC):
    """Cluster metadata. Implementations persist changes before they return."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def add_listener(self, fn: Listener) -> None:
        self._listeners.append(fn)

    def _notify(self, event: str, topic: str) -> None:
        for fn in list(self._listeners):
            fn(event, topic)

    @property
    @abstractmethod
    def cluster_id(self) -> str: ...

    @abstractmethod
    def register_broker(self, info: BrokerInfo) -> None: ...

    @abstractmethod
    def brokers(self) -> list[BrokerInfo]: ...

    @abstractmethod
    def controller_id(self) -> int:
        """The broker that won the controller election (-1 if none)."""

    @abstractmethod
    def topics(self) -> dict[str, TopicMetadata]: ...

    def topic(self, name: str) -> TopicMetadata | None:
        return self.topics().get(name)

    @abstractmethod
    def create_topic(self, topic: TopicMetadata) -> None:
        """Raises TopicExistsError."""

    @abstractmethod
    def delete_topic(self, name: str) -> None:
        """Raises NoSuchTopicError."""

    @abstractmethod
    def add_partitions(self, name: str, partitions: dict[int, PartitionState]) -> None: ...

    @abstractmethod
    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace the topic's overrides wholesale."""

    @abstractmethod
    def update_partition_state(self, name: str, partition: int, state: PartitionState, expected_version: int) -> int:
        """Conditional write; returns the new version or raises BadVersionError."""

    @abstractmethod
    def allocate_producer_ids(self, block_size: int) -> tuple[int, int]:
        """Reserve the next `block_size` producer ids for this broker: (first id, count). Durable
        before it returns, so no id is handed out twice, across restarts and (with ZooKeeper's
        /latest_producer_id_block, the next issue) across brokers."""

    def close(self) -> None:  # noqa: B027 - optional hook, most stores hold nothing to release
        """Release connections or files."""
