"""The records of `__consumer_offsets`: committed offsets and group metadata.

Layouts follow Kafka's, so tools that read the topic (kcat, Kafka's own formatter) can
parse them: every key and value starts with an int16 schema version. Offset commits use
key version 1 {group, topic, partition} and value version 3 {offset, leader epoch,
metadata, commit timestamp}; group metadata uses key version 2 {group} and value
version 3. A null value is a tombstone (offset deleted, group deleted).
"""

from __future__ import annotations

from dataclasses import dataclass

from gregor.protocol.primitives import DecodeError, Reader, Writer
from gregor.protocol.schema import BYTES, INT32, INT64, STRING, Schema, Struct, f

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

_OFFSET_KEY = Schema("OffsetCommitKey", [
    f("group", STRING),
    f("topic", STRING),
    f("partition", INT32),
], "0-1", "none")

_GROUP_KEY = Schema("GroupMetadataKey", [f("group", STRING)], "2", "none")

_OFFSET_VALUE = Schema("OffsetCommitValue", [
    f("offset", INT64),
    f("leader_epoch", INT32, "3+", default=-1),
    f("metadata", STRING),
    f("commit_timestamp", INT64),
    f("expire_timestamp", INT64, "1", default=-1),
], "0-3", "none")

_GROUP_VALUE = Schema("GroupMetadataValue", [
    f("protocol_type", STRING),
    f("generation", INT32),
    f("protocol", STRING, nullable="0+"),
    f("leader", STRING, nullable="0+"),
    f("current_state_timestamp", INT64, "2+", default=-1),
    f("members", [
        f("member_id", STRING),
        f("group_instance_id", STRING, "3+", nullable="3+", has_default=True),
        f("client_id", STRING),
        f("client_host", STRING),
        f("rebalance_timeout", INT32, "1+"),
        f("session_timeout", INT32),
        f("subscription", BYTES),
        f("assignment", BYTES),
    ]),
], "0-3", "none")


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


def _encode(schema: Schema, version: int, body: object) -> bytes:
    w = Writer()
    w.int16(version)
    schema.encode(w, body, version)
    return w.getvalue()


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _encode(_OFFSET_KEY, OFFSET_KEY_VERSION, {"group": group, "topic": topic, "partition": partition})


def group_key(group: str) -> bytes:
    return _encode(_GROUP_KEY, GROUP_KEY_VERSION, {"group": group})


def offset_value(offset: int, leader_epoch: int, metadata: str, commit_timestamp: int) -> bytes:
    return _encode(_OFFSET_VALUE, OFFSET_VALUE_VERSION, {
        "offset": offset, "leader_epoch": leader_epoch, "metadata": metadata, "commit_timestamp": commit_timestamp})


def group_value(body: dict[str, object]) -> bytes:
    return _encode(_GROUP_VALUE, GROUP_VALUE_VERSION, body)


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    r = Reader(data)
    version = r.int16()
    if version in (0, 1):
        s = _OFFSET_KEY.decode(r, version)
        return OffsetKey(s.group, s.topic, s.partition)
    if version == 2:
        return GroupKey(_GROUP_KEY.decode(r, version).group)
    raise DecodeError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(data: bytes) -> Struct:
    r = Reader(data)
    return _OFFSET_VALUE.decode(r, r.int16())


def decode_group_value(data: bytes) -> Struct:
    r = Reader(data)
    return _GROUP_VALUE.decode(r, r.int16())
