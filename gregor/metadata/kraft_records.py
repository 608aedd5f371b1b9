"""The metadata log's records: what `__cluster_metadata` holds, as bytes, and the records only KRaft writes.

Every record value is framed as Kafka frames its metadata records (KIP-631): an unsigned varint frame
version (1), the record type, the record's version, then the record in the codec's schema language
(flexible, so later versions can add tagged fields). The types are our own definitions; their names
follow KIP-631's where the meaning is the same (RegisterBrokerRecord, FenceBrokerRecord,
FeatureLevelRecord, ProducerIdsRecord, ...). The records every store shares (gregor.metadata.records) keep
their coarser shape here: a TopicRecord carries the topic's partitions and configs, a ConfigRecord
replaces a resource's configs wholesale, an AclsRecord holds every entry of one pattern, exactly what
the applier decides and replays.

Changes sent by a broker to the active controller (gregor.metadata.kraft's writes through
`MetadataWrite`) use the same encoding: a change that is already its own record (creating a topic is
a TopicRecord) is sent as that record, and AlterAcls (add and remove, decided against the ACLs the
controller holds) has a type of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
    AddPartitions,
    AlterAcls,
    Change,
    CreateTopic,
    DeleteTopic,
    LogDirFailure,
    PartitionState,
    ReassignPartitions,
    SetBrokerConfigs,
    SetEntityConfigs,
    SetTopicConfigs,
    TopicMetadata,
)
from gregor.protocol.primitives import DecodeError, Reader, Writer
from gregor.protocol.schema import BOOL, INT8, INT16, INT32, INT64, STRING, UINT16, UUID, Array, Schema, f
from gregor.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

FRAME_VERSION = 1
METADATA_VERSION_FEATURE = "metadata.version"
KRAFT_VERSION_FEATURE = "kraft.version"
# Our metadata.version: the one level this code writes and reads (its records and their versions).
METADATA_VERSION = 1

# ConfigRecord's resource types (Kafka's ConfigResource.Type codes).
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


# --- the records only KRaft writes ---------------------------------------------------------------------
@dataclass(frozen=True)
class Endpoint:
    name: str
    host: str
    port: int
    security_protocol: str


@dataclass(frozen=True)
class RegisterBrokerRecord:
    """A broker registered (or registered again after a restart, with a new incarnation): fenced until its
    heartbeat says it caught up with the metadata. Its broker epoch is this record's offset."""

    broker_id: int
    incarnation_id: uuid.UUID
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    fenced: bool = True
    inter_broker_listener: str = ""
    broker_epoch: int = -1  # -1 in the log (the record's offset is the epoch); a snapshot writes it
    in_controlled_shutdown: bool = False


@dataclass(frozen=True)
class UnregisterBrokerRecord:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True)
class FenceBrokerRecord:
    """The broker's session ended (no heartbeat for broker.session.timeout.ms) or it shut down: not live."""

    broker_id: int
    broker_epoch: int


@dataclass(frozen=True)
class UnfenceBrokerRecord:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True)
class BrokerRegistrationChangeRecord:
    """The broker entered a controlled shutdown (its leaderships are moving away)."""

    broker_id: int
    broker_epoch: int
    in_controlled_shutdown: bool


@dataclass(frozen=True)
class ProducerIdsRecord:
    """The producer ids below `next_producer_id` are handed out (the last block went to `broker_id`)."""

    broker_id: int
    broker_epoch: int
    next_producer_id: int


@dataclass(frozen=True)
class FeatureLevelRecord:
    name: str
    feature_level: int


@dataclass(frozen=True)
class LogDirFailureRecord:
    """A broker took replicas offline (a failed log dir); the controller moves them (the ZooKeeper mode's
    log dir event notification, `name` its id)."""

    name: str
    failure: LogDirFailure


@dataclass(frozen=True)
class LogDirHandledRecord:
    name: str


@dataclass(frozen=True)
class NoOpRecord:
    pass


@dataclass(frozen=True)
class AlterAclsChange:
    """AlterAcls as a broker sends it to the controller (the change, not its outcome)."""

    change: AlterAcls


KRaftRecord = (RegisterBrokerRecord | UnregisterBrokerRecord | FenceBrokerRecord | UnfenceBrokerRecord
               | BrokerRegistrationChangeRecord | ProducerIdsRecord | FeatureLevelRecord | LogDirFailureRecord
               | LogDirHandledRecord | NoOpRecord)
AnyRecord = Record | KRaftRecord

# --- schemas --------------------------------------------------------------------------------------------
_INTS = Array(INT32)


def _partitions() -> Any:
    return f("partitions", [
        f("partition_id", INT32), f("replicas", _INTS), f("isr", _INTS), f("leader", INT32),
        f("leader_epoch", INT32), f("partition_epoch", INT32), f("controller_epoch", INT32),
        f("adding_replicas", _INTS), f("removing_replicas", _INTS),
    ])


def _configs() -> Any:
    return f("configs", [f("name", STRING), f("value", STRING)])


def _pattern() -> list[Any]:
    return [f("resource_type", INT8), f("resource_name", STRING), f("pattern_type", INT8)]


def _entries(name: str = "entries") -> Any:
    return f(name, [f("principal", STRING), f("host", STRING), f("operation", INT8), f("permission_type", INT8)])


def _schema(name: str, *fields: Any) -> Schema:
    return Schema(name, list(fields), "0", "0+")


_SCHEMAS: dict[int, Schema] = {
    0: _schema("RegisterBrokerRecord", f("broker_id", INT32), f("incarnation_id", UUID),
               f("endpoints", [f("name", STRING), f("host", STRING), f("port", UINT16), f("security_protocol", STRING)]),
               f("rack", STRING, nullable="0+"), f("fenced", BOOL), f("inter_broker_listener", STRING),
               f("broker_epoch", INT64), f("in_controlled_shutdown", BOOL)),
    1: _schema("UnregisterBrokerRecord", f("broker_id", INT32), f("broker_epoch", INT64)),
    2: _schema("TopicRecord", f("name", STRING), f("topic_id", UUID), f("internal", BOOL), _configs(), _partitions()),
    3: _schema("PartitionRecord", f("name", STRING), _partitions()),
    4: _schema("ConfigRecord", f("resource_type", INT8), f("resource_name", STRING), _configs()),
    5: _schema("PartitionChangeRecord", f("name", STRING), _partitions()),
    6: _schema("AssignmentRecord", f("name", STRING), _partitions()),
    7: _schema("FenceBrokerRecord", f("broker_id", INT32), f("broker_epoch", INT64)),
    8: _schema("UnfenceBrokerRecord", f("broker_id", INT32), f("broker_epoch", INT64)),
    9: _schema("RemoveTopicRecord", f("name", STRING)),
    12: _schema("FeatureLevelRecord", f("name", STRING), f("feature_level", INT16)),
    14: _schema("EntityConfigsRecord", f("entity_type", STRING), f("entity", STRING), _configs()),
    15: _schema("ProducerIdsRecord", f("broker_id", INT32), f("broker_epoch", INT64), f("next_producer_id", INT64)),
    17: _schema("BrokerRegistrationChangeRecord", f("broker_id", INT32), f("broker_epoch", INT64),
                f("in_controlled_shutdown", BOOL)),
    18: _schema("AccessControlEntriesRecord", *_pattern(), _entries()),
    20: _schema("NoOpRecord"),
    30: _schema("LogDirFailureRecord", f("name", STRING), f("broker_id", INT32),
                f("partitions", [f("topic", STRING), f("partition", INT32)])),
    31: _schema("LogDirHandledRecord", f("name", STRING)),
    100: _schema("AlterAclsChange", *_pattern(), _entries("add"), _entries("remove")),
}


# --- to the schema's dicts and back ---------------------------------------------------------------------
def _parts_out(parts: dict[int, PartitionState]) -> list[dict[str, Any]]:
    return [{"partition_id": p, "replicas": s.replicas, "isr": s.isr, "leader": s.leader,
             "leader_epoch": s.leader_epoch, "partition_epoch": s.version, "controller_epoch": s.controller_epoch,
             "adding_replicas": s.adding_replicas, "removing_replicas": s.removing_replicas}
            for p, s in sorted(parts.items())]


def _parts_in(rows: list[Any]) -> dict[int, PartitionState]:
    return {r.partition_id: PartitionState(list(r.replicas), r.leader, r.leader_epoch, list(r.isr), r.controller_epoch,
                                           r.partition_epoch, list(r.adding_replicas), list(r.removing_replicas))
            for r in rows}


def _configs_out(configs: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in sorted(configs.items())]


def _configs_in(rows: list[Any]) -> dict[str, str]:
    return {r.name: r.value for r in rows}


def _pattern_out(p: ResourcePattern) -> dict[str, Any]:
    return {"resource_type": int(p.resource_type), "resource_name": p.name, "pattern_type": int(p.pattern_type)}


def _pattern_in(b: Any) -> ResourcePattern:
    return ResourcePattern(ResourceType(b.resource_type), b.resource_name, PatternType(b.pattern_type))


def _entries_out(entries: frozenset[AccessControlEntry]) -> list[dict[str, Any]]:
    return [{"principal": e.principal, "host": e.host, "operation": int(e.operation),
             "permission_type": int(e.permission_type)}
            for e in sorted(entries, key=lambda e: (e.principal, e.host, int(e.operation), int(e.permission_type)))]


def _entries_in(rows: list[Any]) -> frozenset[AccessControlEntry]:
    return frozenset(AccessControlEntry(r.principal, r.host, AclOperation(r.operation), AclPermissionType(r.permission_type))
                     for r in rows)


def _out(r: Any) -> tuple[int, dict[str, Any]]:  # noqa: C901 - one branch per record type, a table in code
    if isinstance(r, TopicRecord):
        t = r.topic
        return 2, {"name": t.name, "topic_id": t.topic_id, "internal": t.internal, "configs": _configs_out(t.configs),
                   "partitions": _parts_out(t.partitions)}
    if isinstance(r, PartitionStateRecord):
        return 5, {"name": r.name, "partitions": _parts_out(r.partitions)}
    if isinstance(r, PartitionsRecord):
        return 3, {"name": r.name, "partitions": _parts_out(r.partitions)}
    if isinstance(r, AssignmentRecord):
        return 6, {"name": r.name, "partitions": _parts_out(r.partitions)}
    if isinstance(r, RemoveTopicRecord):
        return 9, {"name": r.name}
    if isinstance(r, TopicConfigsRecord):
        return 4, {"resource_type": TOPIC_RESOURCE, "resource_name": r.name, "configs": _configs_out(r.configs)}
    if isinstance(r, BrokerConfigsRecord):
        return 4, {"resource_type": BROKER_RESOURCE, "resource_name": r.entity, "configs": _configs_out(r.configs)}
    if isinstance(r, EntityConfigsRecord):
        return 14, {"entity_type": r.entity_type, "entity": r.entity, "configs": _configs_out(r.configs)}
    if isinstance(r, AclsRecord):
        return 18, {**_pattern_out(r.pattern), "entries": _entries_out(r.entries)}
    if isinstance(r, RegisterBrokerRecord):
        return 0, {"broker_id": r.broker_id, "incarnation_id": r.incarnation_id, "rack": r.rack, "fenced": r.fenced,
                   "inter_broker_listener": r.inter_broker_listener, "broker_epoch": r.broker_epoch,
                   "in_controlled_shutdown": r.in_controlled_shutdown,
                   "endpoints": [{"name": e.name, "host": e.host, "port": e.port, "security_protocol": e.security_protocol}
                                 for e in r.endpoints]}
    if isinstance(r, UnregisterBrokerRecord | FenceBrokerRecord | UnfenceBrokerRecord):
        return _BROKER_EVENT_IDS[type(r)], {"broker_id": r.broker_id, "broker_epoch": r.broker_epoch}
    if isinstance(r, BrokerRegistrationChangeRecord):
        return 17, {"broker_id": r.broker_id, "broker_epoch": r.broker_epoch,
                    "in_controlled_shutdown": r.in_controlled_shutdown}
    if isinstance(r, ProducerIdsRecord):
        return 15, {"broker_id": r.broker_id, "broker_epoch": r.broker_epoch, "next_producer_id": r.next_producer_id}
    if isinstance(r, FeatureLevelRecord):
        return 12, {"name": r.name, "feature_level": r.feature_level}
    if isinstance(r, LogDirFailureRecord):
        return 30, {"name": r.name, "broker_id": r.failure.broker,
                    "partitions": [{"topic": t, "partition": p} for t, p in r.failure.partitions]}
    if isinstance(r, LogDirHandledRecord):
        return 31, {"name": r.name}
    if isinstance(r, NoOpRecord):
        return 20, {}
    if isinstance(r, AlterAclsChange):
        return 100, {**_pattern_out(r.change.pattern), "add": _entries_out(r.change.add),
                     "remove": _entries_out(r.change.remove)}
    raise TypeError(f"not a metadata record: {r!r}")


_BROKER_EVENT_IDS: dict[type[Any], int] = {UnregisterBrokerRecord: 1, FenceBrokerRecord: 7, UnfenceBrokerRecord: 8}


def _config_record(b: Any) -> Any:
    configs = _configs_in(b.configs)
    if b.resource_type == TOPIC_RESOURCE:
        return TopicConfigsRecord(b.resource_name, configs)
    if b.resource_type == BROKER_RESOURCE:
        return BrokerConfigsRecord(b.resource_name, configs)
    raise DecodeError(f"ConfigRecord for an unknown resource type {b.resource_type}")


_IN: dict[int, Callable[[Any], Any]] = {
    0: lambda b: RegisterBrokerRecord(b.broker_id, b.incarnation_id, tuple(
        Endpoint(e.name, e.host, e.port, e.security_protocol) for e in b.endpoints), b.rack, b.fenced,
        b.inter_broker_listener, b.broker_epoch, b.in_controlled_shutdown),
    1: lambda b: UnregisterBrokerRecord(b.broker_id, b.broker_epoch),
    2: lambda b: TopicRecord(TopicMetadata(b.name, b.topic_id, _parts_in(b.partitions), _configs_in(b.configs),
                                           b.internal)),
    3: lambda b: PartitionsRecord(b.name, _parts_in(b.partitions)),
    4: _config_record,
    5: lambda b: PartitionStateRecord(b.name, _parts_in(b.partitions)),
    6: lambda b: AssignmentRecord(b.name, _parts_in(b.partitions)),
    7: lambda b: FenceBrokerRecord(b.broker_id, b.broker_epoch),
    8: lambda b: UnfenceBrokerRecord(b.broker_id, b.broker_epoch),
    9: lambda b: RemoveTopicRecord(b.name),
    12: lambda b: FeatureLevelRecord(b.name, b.feature_level),
    14: lambda b: EntityConfigsRecord(b.entity_type, b.entity, _configs_in(b.configs)),
    15: lambda b: ProducerIdsRecord(b.broker_id, b.broker_epoch, b.next_producer_id),
    17: lambda b: BrokerRegistrationChangeRecord(b.broker_id, b.broker_epoch, b.in_controlled_shutdown),
    18: lambda b: AclsRecord(_pattern_in(b), _entries_in(b.entries)),
    20: lambda b: NoOpRecord(),
    30: lambda b: LogDirFailureRecord(b.name, LogDirFailure(b.broker_id, tuple((r.topic, r.partition)
                                                                                for r in b.partitions))),
    31: lambda b: LogDirHandledRecord(b.name),
    100: lambda b: AlterAclsChange(AlterAcls(_pattern_in(b), _entries_in(b.add), _entries_in(b.remove))),
}


def encode(record: Any) -> bytes:
    """A record's value in the metadata log (frame version, type, version, body)."""
    type_id, body = _out(record)
    w = Writer()
    w.unsigned_varint(FRAME_VERSION)
    w.unsigned_varint(type_id)
    w.unsigned_varint(0)
    _SCHEMAS[type_id].encode(w, body, 0)
    return w.getvalue()


def decode(value: bytes | memoryview) -> Any:
    """The record in a value of the metadata log; DecodeError for one this code cannot read."""
    r = Reader(value)
    frame = r.unsigned_varint()
    if frame != FRAME_VERSION:
        raise DecodeError(f"metadata record frame version {frame} (this code reads {FRAME_VERSION})")
    type_id, version = r.unsigned_varint(), r.unsigned_varint()
    schema = _SCHEMAS.get(type_id)
    if schema is None:
        raise DecodeError(f"unknown metadata record type {type_id}")
    body = schema.decode(r, version)
    if r.remaining():
        raise DecodeError(f"{r.remaining()} bytes after a {schema.name}")
    return _IN[type_id](body)


# --- changes, as a broker sends them to the controller -------------------------------------------------------
def encode_change(change: Change | LogDirFailureRecord | LogDirHandledRecord) -> bytes:
    if isinstance(change, CreateTopic):
        return encode(TopicRecord(change.topic))
    if isinstance(change, DeleteTopic):
        return encode(RemoveTopicRecord(change.name))
    if isinstance(change, AddPartitions):
        return encode(PartitionsRecord(change.name, change.partitions))
    if isinstance(change, SetTopicConfigs):
        return encode(TopicConfigsRecord(change.name, change.configs))
    if isinstance(change, ReassignPartitions):
        return encode(AssignmentRecord(change.name, change.partitions))
    if isinstance(change, SetBrokerConfigs):
        return encode(BrokerConfigsRecord(change.entity, change.configs))
    if isinstance(change, SetEntityConfigs):
        return encode(EntityConfigsRecord(change.entity_type, change.entity, change.configs))
    if isinstance(change, AlterAcls):
        return encode(AlterAclsChange(change))
    if isinstance(change, LogDirFailureRecord | LogDirHandledRecord):
        return encode(change)
    raise TypeError(f"not a change: {change!r}")


def decode_change(value: bytes | memoryview) -> Change | LogDirFailureRecord | LogDirHandledRecord:
    r = decode(value)
    if isinstance(r, TopicRecord):
        return CreateTopic(r.topic)
    if isinstance(r, RemoveTopicRecord):
        return DeleteTopic(r.name)
    if isinstance(r, PartitionsRecord):
        return AddPartitions(r.name, r.partitions)
    if isinstance(r, TopicConfigsRecord):
        return SetTopicConfigs(r.name, r.configs)
    if isinstance(r, AssignmentRecord):
        return ReassignPartitions(r.name, r.partitions)
    if isinstance(r, BrokerConfigsRecord):
        return SetBrokerConfigs(r.entity, r.configs)
    if isinstance(r, EntityConfigsRecord):
        return SetEntityConfigs(r.entity_type, r.entity, r.configs)
    if isinstance(r, AlterAclsChange):
        return r.change
    if isinstance(r, LogDirFailureRecord | LogDirHandledRecord):
        return r
    raise DecodeError(f"a {type(r).__name__} is not a change a broker may send")
