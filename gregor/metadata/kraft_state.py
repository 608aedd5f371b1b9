"""What a KRaft node holds of the cluster's metadata: the shared MetadataState plus what only the quorum's log
records (broker registrations and fencing, producer id blocks, feature levels, log dir failures), how a
record is replayed into it, the records a snapshot of it holds, and the events that turn one state into
another (a snapshot loaded while the node runs).

Pure: no I/O, no clock, no locks. The store (gregor.metadata.kraft) replays committed records into a
KRaftState on the event loop; the active controller decides against it (through `Overlay`, so a change
sees the ones decided before it in the same write).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from gregor.metadata.applier import MetadataState
from gregor.metadata.applier import replay as replay_shared
from gregor.metadata.kraft_records import (
    AnyRecord,
    BrokerRegistrationChangeRecord,
    Endpoint,
    FeatureLevelRecord,
    FenceBrokerRecord,
    LogDirFailureRecord,
    LogDirHandledRecord,
    NoOpRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from gregor.metadata.records import (
    AclsRecord,
    BrokerConfigsRecord,
    EntityConfigsRecord,
    TopicRecord,
)
from gregor.metadata.store import (
    ACLS,
    BROKER_CONFIGS,
    BROKERS,
    CONFIGS,
    CREATED,
    DELETED,
    ENTITY_CONFIGS,
    LOG_DIR_FAILURE,
    PARTITIONS,
    BrokerInfo,
    LogDirFailure,
    MetadataEvent,
    TopicMetadata,
)


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    epoch: int  # the offset of its RegisterBrokerRecord
    incarnation_id: uuid.UUID
    endpoints: tuple[Endpoint, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    inter_broker_listener: str

    def info(self) -> BrokerInfo:
        inter = next((e for e in self.endpoints if e.name == self.inter_broker_listener), None)
        if inter is None and self.endpoints:
            inter = self.endpoints[0]
        return BrokerInfo(self.broker_id, inter.host if inter else "", inter.port if inter else 0, self.rack,
                          self.epoch, tuple((e.name, e.host, e.port) for e in self.endpoints),
                          tuple((e.name, e.security_protocol) for e in self.endpoints))

    def record(self) -> RegisterBrokerRecord:
        """As a snapshot holds it: with its epoch."""
        return RegisterBrokerRecord(self.broker_id, self.incarnation_id, self.endpoints, self.rack, self.fenced,
                                    self.inter_broker_listener, self.epoch, self.in_controlled_shutdown)


class KRaftState:
    """The replayed metadata. `meta` is what every store holds; the rest is the quorum's own."""

    def __init__(self) -> None:
        self.meta = MetadataState()
        self.brokers: dict[int, BrokerRegistration] = {}
        self.next_producer_id = 0
        self.features: dict[str, int] = {}
        self.log_dir_failures: dict[str, LogDirFailure] = {}

    def live_brokers(self) -> tuple[BrokerInfo, ...]:
        """The unfenced registrations: what the cache calls the live brokers."""
        return tuple(r.info() for _, r in sorted(self.brokers.items()) if not r.fenced)

    # --- replay -------------------------------------------------------------------------------------
    def replay(self, record: AnyRecord, offset: int, version: int | None) -> MetadataEvent | None:
        """Apply a committed record (at `offset`); with a `version`, also the event that announces it."""
        handler = _REPLAY.get(type(record))
        if handler is not None:
            return handler(self, record, offset, version)
        return replay_shared(self.meta, record, version)  # type: ignore[arg-type]

    def _brokers_event(self, version: int | None) -> MetadataEvent | None:
        return None if version is None else MetadataEvent(version, BROKERS, brokers=self.live_brokers())

    def _register(self, r: RegisterBrokerRecord, offset: int, version: int | None) -> MetadataEvent | None:
        epoch = r.broker_epoch if r.broker_epoch >= 0 else offset
        self.brokers[r.broker_id] = BrokerRegistration(r.broker_id, epoch, r.incarnation_id, r.endpoints, r.rack,
                                                       r.fenced, r.in_controlled_shutdown, r.inter_broker_listener)
        return self._brokers_event(version)

    def _change(self, broker_id: int, broker_epoch: int, version: int | None, **fields: Any) -> MetadataEvent | None:
        reg = self.brokers.get(broker_id)
        if reg is None or reg.epoch != broker_epoch:  # an older registration's: the new one stands
            return None
        self.brokers[broker_id] = replace(reg, **fields)
        return self._brokers_event(version)

    def _unregister(self, r: UnregisterBrokerRecord, offset: int, version: int | None) -> MetadataEvent | None:
        reg = self.brokers.get(r.broker_id)
        if reg is None or reg.epoch != r.broker_epoch:
            return None
        del self.brokers[r.broker_id]
        return self._brokers_event(version)

    def _producer_ids(self, r: ProducerIdsRecord, offset: int, version: int | None) -> MetadataEvent | None:
        self.next_producer_id = max(self.next_producer_id, r.next_producer_id)
        return None

    def _feature(self, r: FeatureLevelRecord, offset: int, version: int | None) -> MetadataEvent | None:
        self.features[r.name] = r.feature_level
        return None

    def _log_dir_failure(self, r: LogDirFailureRecord, offset: int, version: int | None) -> MetadataEvent | None:
        self.log_dir_failures[r.name] = r.failure
        return None if version is None else MetadataEvent(version, LOG_DIR_FAILURE, entity=r.name,
                                                          log_dir_failure=r.failure)

    def _log_dir_handled(self, r: LogDirHandledRecord, offset: int, version: int | None) -> MetadataEvent | None:
        if self.log_dir_failures.pop(r.name, None) is None:
            return None
        return None if version is None else MetadataEvent(version, LOG_DIR_FAILURE, entity=r.name)

    # --- a snapshot's records -------------------------------------------------------------------------
    def records(self) -> Iterator[AnyRecord]:
        """Every record a snapshot holds, which replayed into an empty state give this one."""
        for name, level in sorted(self.features.items()):
            yield FeatureLevelRecord(name, level)
        for _, reg in sorted(self.brokers.items()):
            yield reg.record()
        if self.next_producer_id:
            yield ProducerIdsRecord(-1, -1, self.next_producer_id)
        for t in self.meta.topics.values():
            yield TopicRecord(t)
        for entity, configs in sorted(self.meta.broker_configs.items()):
            yield BrokerConfigsRecord(entity, configs)
        for path, configs in sorted(self.meta.entity_configs.items()):
            yield EntityConfigsRecord.at(path, configs)
        for pattern, entries in self.meta.acl_entries.items():
            yield AclsRecord(pattern, entries)
        for name, failure in sorted(self.log_dir_failures.items()):
            yield LogDirFailureRecord(name, failure)


_REPLAY: dict[type[Any], Callable[[KRaftState, Any, int, int | None], MetadataEvent | None]] = {
    RegisterBrokerRecord: KRaftState._register,
    UnregisterBrokerRecord: KRaftState._unregister,
    FenceBrokerRecord: lambda s, r, o, v: s._change(r.broker_id, r.broker_epoch, v, fenced=True),
    UnfenceBrokerRecord: lambda s, r, o, v: s._change(r.broker_id, r.broker_epoch, v, fenced=False,
                                                      in_controlled_shutdown=False),
    BrokerRegistrationChangeRecord: lambda s, r, o, v: s._change(r.broker_id, r.broker_epoch, v,
                                                                 in_controlled_shutdown=r.in_controlled_shutdown),
    ProducerIdsRecord: KRaftState._producer_ids,
    FeatureLevelRecord: KRaftState._feature,
    LogDirFailureRecord: KRaftState._log_dir_failure,
    LogDirHandledRecord: KRaftState._log_dir_handled,
    NoOpRecord: lambda s, r, o, v: None,
}


def diff(old: KRaftState, new: KRaftState, versions: Iterator[int]) -> list[MetadataEvent]:
    """The events that take a subscriber holding `old` to `new` (a snapshot replaced the state), each with
    the next of `versions`."""
    out: list[MetadataEvent] = []
    for name in old.meta.topics.keys() - new.meta.topics.keys():
        out.append(MetadataEvent(next(versions), DELETED, name, None))
    for name, t in new.meta.topics.items():
        before = old.meta.topics.get(name)
        if before is None or before.topic_id != t.topic_id:
            if before is not None:
                out.append(MetadataEvent(next(versions), DELETED, name, None))
            out.append(MetadataEvent(next(versions), CREATED, name, t.copy()))
        elif before.partitions != t.partitions:
            out.append(MetadataEvent(next(versions), PARTITIONS, name, t.copy()))
        if before is not None and before.topic_id == t.topic_id and before.configs != t.configs:
            out.append(MetadataEvent(next(versions), CONFIGS, name, t.copy()))
    out += _keyed(old.meta.broker_configs, new.meta.broker_configs, versions,
                  lambda v, k, c: MetadataEvent(v, BROKER_CONFIGS, entity=k, configs=dict(c)))
    out += _keyed(old.meta.entity_configs, new.meta.entity_configs, versions,
                  lambda v, k, c: MetadataEvent(v, ENTITY_CONFIGS, entity=k, configs=dict(c)))
    out += _keyed(old.meta.acl_entries, new.meta.acl_entries, versions,
                  lambda v, k, c: MetadataEvent(v, ACLS, acl_pattern=k, acls=c))
    out += _keyed(old.log_dir_failures, new.log_dir_failures, versions,
                  lambda v, k, c: MetadataEvent(v, LOG_DIR_FAILURE, entity=k, log_dir_failure=c))
    if old.live_brokers() != new.live_brokers():
        out.append(MetadataEvent(next(versions), BROKERS, brokers=new.live_brokers()))
    return out


K = TypeVar("K")
V = TypeVar("V")


def _keyed(old: dict[K, V], new: dict[K, V], versions: Iterator[int],
           event: Callable[[int, K, Any], MetadataEvent]) -> list[MetadataEvent]:
    """Events for the keys whose value changed; a removed key's event carries an empty value (None for a
    log dir failure: handled)."""
    out = []
    for k in old.keys() - new.keys():
        empty: Any = None if isinstance(old[k], LogDirFailure) else type(old[k])()
        out.append(event(next(versions), k, empty))
    for k, v in new.items():
        if old.get(k) != v:
            out.append(event(next(versions), k, v))
    return out


# --- deciding against the state plus what the same write decided before -------------------------------------
class Overlay(dict, Generic[K, V]):  # type: ignore[type-arg]
    """A dict over `base` that copies a value out of it on first read (with `copy`), so replaying records into
    the overlay never changes `base`; keys removed here stay removed."""

    def __init__(self, base: dict[K, V], copy: Callable[[V], V]) -> None:
        super().__init__()
        self.base = base
        self._copy = copy
        self.removed: set[K] = set()

    def get(self, key: K, default: Any = None) -> Any:  # type: ignore[override]
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        if key in self.removed or key not in self.base:
            return default
        value = self._copy(self.base[key])
        dict.__setitem__(self, key, value)
        return value

    def __getitem__(self, key: K) -> V:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or (key not in self.removed and key in self.base)

    def __setitem__(self, key: K, value: V) -> None:
        self.removed.discard(key)
        dict.__setitem__(self, key, value)

    def pop(self, key: K, default: Any = None) -> Any:  # type: ignore[override]
        value = self.get(key, default)
        dict.pop(self, key, None)
        self.removed.add(key)
        return value


_MISSING = object()


def overlay(state: KRaftState) -> MetadataState:
    """A MetadataState that reads `state.meta` and takes the records replayed into it without changing `state`
    (the controller's scratch for one write: each change is decided seeing the ones before it)."""
    scratch = MetadataState()
    scratch.version = state.meta.version
    scratch.topics = Overlay(state.meta.topics, TopicMetadata.copy)
    scratch.broker_configs = Overlay(state.meta.broker_configs, dict)
    scratch.entity_configs = Overlay(state.meta.entity_configs, dict)
    scratch.acl_entries = Overlay(state.meta.acl_entries, lambda v: v)
    return scratch
