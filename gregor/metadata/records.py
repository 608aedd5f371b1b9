"""Metadata records: what a `Change` writes, once validated, as the new value of the keys it touches.

A `Change` (gregor.metadata.store) is a request ("add these partitions"); a record is its outcome
("topic t now also has partitions 3 and 4"), decided against the current state by
gregor.metadata.applier. Every store persists records in its own way and none of them decides
anything while persisting: the embedded store appends them to its journal, the ZooKeeper store writes
each as znodes (conditional on the versions it read), and a store replaying a replicated metadata log
(Kafka's KRaft) would append them to that log. Replaying a record into a `MetadataState`
(applier.replay) gives the same state on every replica.

Records hold plain values; the objects in them may be the caller's (a `CreateTopic`'s topic is handed
over), so whoever keeps one in a state copies it (applier.replay does).
"""

from __future__ import annotations

from dataclasses import dataclass

from gregor.metadata.store import PartitionState, TopicMetadata, entity_path
from gregor.security.acl import AccessControlEntry, ResourcePattern


@dataclass(frozen=True)
class TopicRecord:
    """A topic created: its id, partitions (assignment and first state) and configs."""

    topic: TopicMetadata


@dataclass(frozen=True)
class RemoveTopicRecord:
    name: str


@dataclass(frozen=True)
class PartitionsRecord:
    """Partitions added to an existing topic."""

    name: str
    partitions: dict[int, PartitionState]


@dataclass(frozen=True)
class AssignmentRecord:
    """New assignments (replicas, adding, removing) of some partitions, their state (leader, epoch, ISR,
    version) as it was: the whole new partition states."""

    name: str
    partitions: dict[int, PartitionState]


@dataclass(frozen=True)
class PartitionStateRecord:
    """New states (leader, leader epoch, ISR, controller epoch, version) of some partitions of a topic, their
    assignment as it was: the whole new partition states."""

    name: str
    partitions: dict[int, PartitionState]


@dataclass(frozen=True)
class TopicConfigsRecord:
    """A topic's overrides, replaced wholesale."""

    name: str
    configs: dict[str, str]


@dataclass(frozen=True)
class BrokerConfigsRecord:
    """One broker entity's dynamic configs, replaced wholesale (empty: none left)."""

    entity: str
    configs: dict[str, str]


@dataclass(frozen=True)
class EntityConfigsRecord:
    """A user, client or group entity's configs, replaced wholesale (empty: none left)."""

    entity_type: str
    entity: str
    configs: dict[str, str]

    @property
    def path(self) -> str:
        return entity_path(self.entity_type, self.entity)

    @staticmethod
    def at(path: str, configs: dict[str, str]) -> EntityConfigsRecord:
        """The record for an entity path ("users/alice/clients/app")."""
        entity_type, _, entity = path.partition("/")
        return EntityConfigsRecord(entity_type, entity, configs)


@dataclass(frozen=True)
class AclsRecord:
    """Every access control entry of one resource pattern now (empty: none left)."""

    pattern: ResourcePattern
    entries: frozenset[AccessControlEntry]


Record = (TopicRecord | RemoveTopicRecord | PartitionsRecord | AssignmentRecord | PartitionStateRecord
          | TopicConfigsRecord | BrokerConfigsRecord | EntityConfigsRecord | AclsRecord)
