"""The one way a metadata `Change` is applied, shared by every store: pure, state in, records and events out.

Two steps, each a table keyed by type:
- `decide(change, view)` validates a Change against the current state (a `StateView`) and returns the
  `Record` that says what it writes, or raises its error (TopicExistsError, NoSuchTopicError,
  BadVersionError). `decide_state_update` does the same for a conditional partition-state write.
- `replay(state, record, version)` applies a record to a `MetadataState` and, given the version that
  holds it, returns the `MetadataEvent` subscribers get.

A store only persists what `decide` returned. The embedded store decides against its MetadataState,
replays the record into it, appends it to its journal and publishes the event; at start it replays
its journal with no version (no events). The ZooKeeper store decides against the znodes it reads (a
StateView over them) and writes the record as znodes conditional on the versions it read; its events
come from its watches. Its partition-state writes are checked by ZooKeeper itself (a set conditional on
the state znode's version: the rule `decide_state_update` states), pipelined without a read first. A
store replicating a metadata log would decide on its leader, append the records to the log and replay
them on every replica.

No I/O, no clock, no locks here: callers hold whatever lock orders their writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sized
from typing import Any, Protocol, TypeVar

from gregor.metadata.records import (
    AclsRecord,
    AssignmentRecord,
    BrokerConfigsRecord,
    EntityConfigsRecord,
    PartitionsRecord,
    PartitionStateRecord,
    Record,
    RemoveTopicRecord,
    TopicConfigsRecord,
    TopicRecord,
)
from gregor.metadata.store import (
    ACLS,
    BROKER_CONFIGS,
    CONFIGS,
    CREATED,
    DELETED,
    ENTITY_CONFIGS,
    PARTITIONS,
    STATE,
    AddPartitions,
    AlterAcls,
    BadVersionError,
    BrokerInfo,
    Change,
    CreateTopic,
    DeleteTopic,
    MetadataError,
    MetadataEvent,
    MetadataImage,
    NoSuchTopicError,
    ReassignPartitions,
    SetBrokerConfigs,
    SetEntityConfigs,
    SetTopicConfigs,
    StateUpdate,
    TopicExistsError,
    TopicMetadata,
)
from gregor.security.acl import AccessControlEntry, ResourcePattern


class StateView(Protocol):
    """What `decide` reads. The objects returned are not to be changed."""

    def topic(self, name: str) -> TopicMetadata | None: ...

    def acls(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]: ...


class MetadataState:
    """The durable part of the cluster's metadata, as a store holds it in memory: topics (assignment,
    partition states, configs), dynamic broker configs, user/client/group configs and ACLs, and the
    metadata version of the last change. Live registrations and the controller are a store's own
    (ephemeral in ZooKeeper), not part of it."""

    def __init__(self) -> None:
        self.version = 0
        self.topics: dict[str, TopicMetadata] = {}
        self.broker_configs: dict[str, dict[str, str]] = {}  # entity -> dynamic configs, the non-empty ones
        self.entity_configs: dict[str, dict[str, str]] = {}  # entity path -> configs, the non-empty ones
        self.acl_entries: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}  # the non-empty patterns

    # --- StateView ------------------------------------------------------------------------------
    def topic(self, name: str) -> TopicMetadata | None:
        return self.topics.get(name)

    def acls(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self.acl_entries.get(pattern, frozenset())

    # --- keyed values: an empty value removes the key ---------------------------------------------
    def set_broker_configs(self, entity: str, configs: dict[str, str]) -> None:
        put_or_remove(self.broker_configs, entity, configs)

    def set_entity_configs(self, path: str, configs: dict[str, str]) -> None:
        put_or_remove(self.entity_configs, path, configs)

    def set_acls(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry]) -> None:
        put_or_remove(self.acl_entries, pattern, entries)

    def image(self, cluster_id: str, brokers: tuple[BrokerInfo, ...], controller_id: int) -> MetadataImage:
        """A copy of everything, with the store's live brokers and controller."""
        return MetadataImage(self.version, cluster_id, brokers, controller_id,
                             {name: t.copy() for name, t in self.topics.items()},
                             {e: dict(c) for e, c in self.broker_configs.items()},
                             {e: dict(c) for e, c in self.entity_configs.items()}, acls=dict(self.acl_entries))


K = TypeVar("K")
V = TypeVar("V", bound=Sized)


def put_or_remove(table: dict[K, V], key: K, value: V) -> None:
    """Keyed metadata values (configs, ACLs) as every view of them keeps them: an empty value removes the
    key, so no table holds empty entries and "none" reads the same everywhere."""
    if value:
        table[key] = value
    else:
        table.pop(key, None)


# --- decide: a Change against the state -> the record it writes -------------------------------------
def _existing(view: StateView, name: str) -> TopicMetadata:
    t = view.topic(name)
    if t is None:
        raise NoSuchTopicError(name)
    return t


def _create_topic(ch: CreateTopic, view: StateView) -> Record:
    if view.topic(ch.topic.name) is not None:
        raise TopicExistsError(ch.topic.name)
    return TopicRecord(ch.topic)


def _delete_topic(ch: DeleteTopic, view: StateView) -> Record:
    _existing(view, ch.name)
    return RemoveTopicRecord(ch.name)


def _add_partitions(ch: AddPartitions, view: StateView) -> Record:
    cur = _existing(view, ch.name)
    if any(p in cur.partitions for p in ch.partitions):  # a concurrent addition won the race
        raise BadVersionError(f"{ch.name} has {len(cur.partitions)} partitions now")
    return PartitionsRecord(ch.name, ch.partitions)


def _reassign(ch: ReassignPartitions, view: StateView) -> Record:
    cur = _existing(view, ch.name)
    missing = [p for p in ch.partitions if p not in cur.partitions]
    if missing:
        raise NoSuchTopicError(f"{ch.name} has no partitions {missing}")
    changed = {}
    for p, s in ch.partitions.items():
        new = cur.partitions[p].copy()  # the state (leader, epoch, ISR, version) is not the assignment's to change
        new.replicas, new.adding_replicas, new.removing_replicas = (
            list(s.replicas), list(s.adding_replicas), list(s.removing_replicas))
        changed[p] = new
    return AssignmentRecord(ch.name, changed)


def _set_topic_configs(ch: SetTopicConfigs, view: StateView) -> Record:
    _existing(view, ch.name)
    return TopicConfigsRecord(ch.name, ch.configs)


def _set_broker_configs(ch: SetBrokerConfigs, view: StateView) -> Record:
    return BrokerConfigsRecord(ch.entity, ch.configs)


def _set_entity_configs(ch: SetEntityConfigs, view: StateView) -> Record:
    return EntityConfigsRecord(ch.entity_type, ch.entity, ch.configs)


def _alter_acls(ch: AlterAcls, view: StateView) -> Record:
    return AclsRecord(ch.pattern, (view.acls(ch.pattern) - ch.remove) | ch.add)


_DECIDE: dict[type[Any], Callable[[Any, StateView], Record]] = {
    CreateTopic: _create_topic,
    DeleteTopic: _delete_topic,
    AddPartitions: _add_partitions,
    ReassignPartitions: _reassign,
    SetTopicConfigs: _set_topic_configs,
    SetBrokerConfigs: _set_broker_configs,
    SetEntityConfigs: _set_entity_configs,
    AlterAcls: _alter_acls,
}


def decide(change: Change, view: StateView) -> Record:
    """The record `change` writes against `view`, or its error (a MetadataError)."""
    rule = _DECIDE.get(type(change))
    if rule is None:
        raise MetadataError(f"unknown change {change!r}")
    return rule(change, view)


def decide_state_update(u: StateUpdate, view: StateView) -> PartitionStateRecord:
    """A conditional partition-state write: it holds only if the state is still at `u.expected_version`;
    the assignment stays the topic's (ReassignPartitions changes it) and the version grows by one.
    Fencing by the controller epoch is the store's (it knows the controller)."""
    t = view.topic(u.topic)
    if t is None or u.partition not in t.partitions:
        raise NoSuchTopicError(f"{u.topic}-{u.partition}")
    cur = t.partitions[u.partition]
    if cur.version != u.expected_version:
        raise BadVersionError(f"{u.topic}-{u.partition}: version {cur.version}, expected {u.expected_version}")
    new = u.state.copy()
    new.replicas, new.adding_replicas, new.removing_replicas = (
        list(cur.replicas), list(cur.adding_replicas), list(cur.removing_replicas))
    new.version = u.expected_version + 1
    return PartitionStateRecord(u.topic, {u.partition: new})


# --- replay: a record into the state (-> the event announcing it) ------------------------------------
# A live change's record may hold the caller's objects: the state keeps copies, and the event carries the
# record's own objects (handed over by the caller), so a subscriber shares nothing with the store. A record
# replayed from a log (no version) was decoded for this replay alone: the state takes its objects.
def _replay_topic(state: MetadataState, r: TopicRecord, version: int | None) -> MetadataEvent | None:
    state.topics[r.topic.name] = r.topic if version is None else r.topic.copy()
    return None if version is None else MetadataEvent(version, CREATED, r.topic.name, r.topic)


def _replay_remove(state: MetadataState, r: RemoveTopicRecord, version: int | None) -> MetadataEvent | None:
    state.topics.pop(r.name, None)
    return None if version is None else MetadataEvent(version, DELETED, r.name, None)


def _replay_partitions(state: MetadataState, r: PartitionsRecord | AssignmentRecord,
                       version: int | None) -> MetadataEvent | None:
    t = state.topics[r.name]
    t.partitions.update(r.partitions if version is None else {p: s.copy() for p, s in r.partitions.items()})
    return None if version is None else MetadataEvent(version, PARTITIONS, r.name, t.copy())


def _replay_states(state: MetadataState, r: PartitionStateRecord, version: int | None) -> MetadataEvent | None:
    state.topics[r.name].partitions.update(
        r.partitions if version is None else {p: s.copy() for p, s in r.partitions.items()})
    # Only the partitions that changed: an ISR change of one partition costs O(1) however large its topic.
    return None if version is None else MetadataEvent(version, STATE, r.name, partitions=r.partitions)


def _replay_topic_configs(state: MetadataState, r: TopicConfigsRecord, version: int | None) -> MetadataEvent | None:
    t = state.topics[r.name]
    t.configs = dict(r.configs)
    return None if version is None else MetadataEvent(version, CONFIGS, r.name, t.copy())


def _replay_broker_configs(state: MetadataState, r: BrokerConfigsRecord, version: int | None) -> MetadataEvent | None:
    state.set_broker_configs(r.entity, dict(r.configs))
    return None if version is None else MetadataEvent(version, BROKER_CONFIGS, entity=r.entity, configs=r.configs)


def _replay_entity_configs(state: MetadataState, r: EntityConfigsRecord, version: int | None) -> MetadataEvent | None:
    state.set_entity_configs(r.path, dict(r.configs))
    return None if version is None else MetadataEvent(version, ENTITY_CONFIGS, entity=r.path, configs=r.configs)


def _replay_acls(state: MetadataState, r: AclsRecord, version: int | None) -> MetadataEvent | None:
    state.set_acls(r.pattern, r.entries)
    return None if version is None else MetadataEvent(version, ACLS, acl_pattern=r.pattern, acls=r.entries)


_REPLAY: dict[type[Any], Callable[[MetadataState, Any, int | None], MetadataEvent | None]] = {
    TopicRecord: _replay_topic,
    RemoveTopicRecord: _replay_remove,
    PartitionsRecord: _replay_partitions,
    AssignmentRecord: _replay_partitions,
    PartitionStateRecord: _replay_states,
    TopicConfigsRecord: _replay_topic_configs,
    BrokerConfigsRecord: _replay_broker_configs,
    EntityConfigsRecord: _replay_entity_configs,
    AclsRecord: _replay_acls,
}


def replay(state: MetadataState, record: Record, version: int | None = None) -> MetadataEvent | None:
    """Apply `record` to `state`; with the `version` that holds it (a live change), also the event that
    announces it. Without one (a replay from a log at start) no event is built: a topic's snapshot
    would cost a copy of the whole topic per record."""
    return _REPLAY[type(record)](state, record, version)
