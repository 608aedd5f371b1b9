"""The quorum's message definitions: against kafka-python where it has them, against bytes laid out by
hand from the KIPs where it does not.

kafka-python (built from Kafka's JSON) knows Fetch up to v18 and DescribeQuorum 0-2, so the quorum's
Fetch (13-17) and DescribeQuorum are checked field by field and byte for byte against it, as
tests/protocol/test_messages.py checks the broker's APIs. It has no Vote, BeginQuorumEpoch,
EndQuorumEpoch or FetchSnapshot: their newest versions are written out here byte by byte, and every
version round-trips.
"""

from __future__ import annotations

import base64
import struct
import uuid
from typing import Any

import pytest

from gregor.protocol import frames
from gregor.protocol.messages.raft import BEGIN_QUORUM_EPOCH, DESCRIBE_QUORUM, END_QUORUM_EPOCH, FETCH_SNAPSHOT, VOTE
from gregor.protocol.messages.raft_fetch import METADATA_TOPIC_ID, RAFT_FETCH
from gregor.protocol.primitives import Reader
from gregor.protocol.schema import Api
from tests.protocol._oracle import (
    default_pairs,
    kp_class,
    kp_encode,
    kp_layout,
    kp_to_dict,
    normalize,
    our_layout,
    project,
    random_kp_message,
    schema_of,
)

ORACLE = [(api, v, side) for api in (RAFT_FETCH, DESCRIBE_QUORUM) for side in ("request", "response")
          for v in range(api.min_version, api.max_version + 1)]


def _id(c: tuple[Api, int, str]) -> str:
    return f"{c[0].name}-v{c[1]}-{c[2]}"


@pytest.mark.parametrize(("api", "version", "side"), ORACLE, ids=[_id(c) for c in ORACLE])
def test_layout_and_defaults_match_kafka(api: Api, version: int, side: str) -> None:
    schema = schema_of(api, side)
    flexible = schema.is_flexible(version)
    cls = kp_class(api, side)
    assert flexible == cls.flexible_version_q(version)
    assert our_layout(schema.fields, version, flexible) == kp_layout(cls._struct, version, flexible)
    assert [(n, a, b) for n, a, b in default_pairs(schema.fields, cls._struct, version) if a != b] == []


@pytest.mark.parametrize(("api", "version", "side"), ORACLE, ids=[_id(c) for c in ORACLE])
def test_kafka_python_bytes_round_trip(api: Api, version: int, side: str) -> None:
    schema = schema_of(api, side)
    for i in range(8):
        msg = random_kp_message(api, version, side, seed=1000 * version + 17 * i + (side == "response"))
        data = kp_encode(msg, version)
        r = Reader(data)
        decoded = schema.decode(r, version)
        assert r.remaining() == 0
        theirs = _zero_uuids(kp_to_dict(msg))
        assert project(normalize(decoded.to_dict()), theirs) == theirs
        assert schema.to_bytes(decoded, version) == data
        assert schema.to_bytes(theirs, version) == data


def _zero_uuids(v: Any) -> Any:
    """kafka-python leaves an absent tagged uuid None; Kafka's (and our) default is the zero uuid."""
    if isinstance(v, dict):
        return {k: (uuid.UUID(int=0) if x is None and k.endswith("directory_id") else _zero_uuids(x))
                for k, x in v.items()}
    if isinstance(v, list):
        return [_zero_uuids(x) for x in v]
    return v


def test_metadata_topic_id_is_kafkas() -> None:
    assert base64.urlsafe_b64encode(METADATA_TOPIC_ID.bytes).rstrip(b"=") == b"AAAAAAAAAAAAAAAAAAAAAQ"


def test_raft_fetch_is_not_what_the_broker_advertises() -> None:
    from gregor.protocol.apis import BY_KEY
    assert BY_KEY[1].max_version == 12 and BY_KEY[1] is not RAFT_FETCH
    for api in (VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, DESCRIBE_QUORUM, FETCH_SNAPSHOT):
        assert BY_KEY[api.key] is api


# --- hand-laid bytes (no oracle) ------------------------------------------------------------

def _cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    b = s.encode()
    return bytes([len(b) + 1]) + b


def _str(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _carr(n: int) -> bytes:
    return bytes([n + 1])


NO_TAGS = b"\x00"
D1, D2 = uuid.UUID(int=0x1234), uuid.UUID(int=0xABCDEF)


def _check(api: Api, side: str, version: int, body: dict[str, Any], wire: bytes) -> None:
    schema = schema_of(api, side)
    assert schema.to_bytes(body, version) == wire
    decoded = schema.from_bytes(wire, version)
    assert schema.to_bytes(decoded, version) == wire


def test_vote_v2_request_bytes() -> None:
    body = {"cluster_id": "c1", "voter_id": 3, "topics": [{"topic_name": "__cluster_metadata", "partitions": [
        {"partition_index": 0, "replica_epoch": 7, "replica_id": 2, "replica_directory_id": D1,
         "voter_directory_id": D2, "last_offset_epoch": 6, "last_offset": 1234, "pre_vote": True}]}]}
    wire = (_cstr("c1") + struct.pack(">i", 3) + _carr(1) + _cstr("__cluster_metadata") + _carr(1)
            + struct.pack(">iii", 0, 7, 2) + D1.bytes + D2.bytes + struct.pack(">iq?", 6, 1234, True)
            + NO_TAGS + NO_TAGS + NO_TAGS)
    _check(VOTE, "request", 2, body, wire)
    # v0 has neither the voter key nor pre_vote, and reads pre_vote as false
    v0 = (_cstr("c1") + _carr(1) + _cstr("__cluster_metadata") + _carr(1)
          + struct.pack(">iiiiq", 0, 7, 2, 6, 1234) + NO_TAGS + NO_TAGS + NO_TAGS)
    got = VOTE.request.from_bytes(v0, 0)
    assert got.topics[0].partitions[0].pre_vote is False and got.voter_id == -1
    assert VOTE.request.to_bytes(got, 0) == v0


def test_vote_v2_response_bytes_with_tagged_endpoints() -> None:
    body = {"error_code": 0, "topics": [{"topic_name": "__cluster_metadata", "partitions": [
        {"partition_index": 0, "error_code": 74, "leader_id": 1, "leader_epoch": 9, "vote_granted": False}]}],
        "node_endpoints": [{"node_id": 1, "host": "h", "port": 9093}]}
    endpoints = _carr(1) + struct.pack(">i", 1) + _cstr("h") + struct.pack(">H", 9093) + NO_TAGS
    wire = (struct.pack(">h", 0) + _carr(1) + _cstr("__cluster_metadata") + _carr(1)
            + struct.pack(">ihii?", 0, 74, 1, 9, False) + NO_TAGS + NO_TAGS
            + bytes([1, 0, len(endpoints)]) + endpoints)
    _check(VOTE, "response", 2, body, wire)


def test_begin_quorum_epoch_v0_is_not_flexible_and_v1_is() -> None:
    part = {"partition_index": 0, "voter_directory_id": D1, "leader_id": 2, "leader_epoch": 5}
    v0 = _str(None) + struct.pack(">i", 1) + _str("__cluster_metadata") + struct.pack(">iiii", 1, 0, 2, 5)
    _check(BEGIN_QUORUM_EPOCH, "request", 0,
           {"cluster_id": None, "topics": [{"topic_name": "__cluster_metadata", "partitions": [part]}]}, v0)
    v1 = (_cstr("c") + struct.pack(">i", 4) + _carr(1) + _cstr("__cluster_metadata") + _carr(1)
          + struct.pack(">i", 0) + D1.bytes + struct.pack(">ii", 2, 5) + NO_TAGS + NO_TAGS
          + _carr(1) + _cstr("CONTROLLER") + _cstr("localhost") + struct.pack(">H", 9093) + NO_TAGS + NO_TAGS)
    _check(BEGIN_QUORUM_EPOCH, "request", 1,
           {"cluster_id": "c", "voter_id": 4, "topics": [{"topic_name": "__cluster_metadata", "partitions": [part]}],
            "leader_endpoints": [{"name": "CONTROLLER", "host": "localhost", "port": 9093}]}, v1)


def test_end_quorum_epoch_successors_by_version() -> None:
    v0 = (_str("c") + struct.pack(">i", 1) + _str("__cluster_metadata") + struct.pack(">iiii", 1, 0, 3, 8)
          + struct.pack(">iii", 2, 2, 1))
    body0 = {"cluster_id": "c", "topics": [{"topic_name": "__cluster_metadata", "partitions": [
        {"partition_index": 0, "leader_id": 3, "leader_epoch": 8, "preferred_successors": [2, 1]}]}]}
    _check(END_QUORUM_EPOCH, "request", 0, body0, v0)
    v1 = (_cstr("c") + _carr(1) + _cstr("__cluster_metadata") + _carr(1) + struct.pack(">iii", 0, 3, 8)
          + _carr(2) + struct.pack(">i", 2) + D1.bytes + NO_TAGS + struct.pack(">i", 1) + D2.bytes + NO_TAGS
          + NO_TAGS + NO_TAGS + _carr(0) + NO_TAGS)
    body1 = {"cluster_id": "c", "topics": [{"topic_name": "__cluster_metadata", "partitions": [
        {"partition_index": 0, "leader_id": 3, "leader_epoch": 8, "preferred_candidates": [
            {"candidate_id": 2, "candidate_directory_id": D1}, {"candidate_id": 1, "candidate_directory_id": D2}]}]}],
        "leader_endpoints": []}
    _check(END_QUORUM_EPOCH, "request", 1, body1, v1)


def test_fetch_snapshot_v1_bytes() -> None:
    req = {"cluster_id": "c", "replica_id": 2, "max_bytes": 1 << 20, "topics": [{"name": "__cluster_metadata",
           "partitions": [{"partition": 0, "current_leader_epoch": 4, "snapshot_id": {"end_offset": 100, "epoch": 3},
                           "position": 65536, "replica_directory_id": D1}]}]}
    tagged_dir = bytes([1, 0, 16]) + D1.bytes
    wire = (struct.pack(">ii", 2, 1 << 20) + _carr(1) + _cstr("__cluster_metadata") + _carr(1)
            + struct.pack(">ii", 0, 4) + struct.pack(">qi", 100, 3) + NO_TAGS + struct.pack(">q", 65536)
            + tagged_dir + NO_TAGS + bytes([1, 0, 2]) + _cstr("c"))
    _check(FETCH_SNAPSHOT, "request", 1, req, wire)
    resp = {"throttle_time_ms": 0, "error_code": 0, "topics": [{"name": "__cluster_metadata", "partitions": [
        {"index": 0, "error_code": 0, "snapshot_id": {"end_offset": 100, "epoch": 3},
         "current_leader": {"leader_id": 1, "leader_epoch": 4}, "size": 3, "position": 0,
         "unaligned_records": b"abc"}]}]}
    leader = struct.pack(">ii", 1, 4) + NO_TAGS
    wire = (struct.pack(">ih", 0, 0) + _carr(1) + _cstr("__cluster_metadata") + _carr(1) + struct.pack(">ih", 0, 0)
            + struct.pack(">qi", 100, 3) + NO_TAGS + struct.pack(">qq", 3, 0) + bytes([4]) + b"abc"
            + bytes([1, 0, len(leader)]) + leader + NO_TAGS + NO_TAGS)
    _check(FETCH_SNAPSHOT, "response", 1, resp, wire)


@pytest.mark.parametrize("api", [VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, FETCH_SNAPSHOT], ids=lambda a: a.name)
def test_every_version_round_trips_through_frames(api: Api) -> None:
    """Requests and responses of each version survive a frame: headers v1/v2 by flexibility."""
    for v in range(api.min_version, api.max_version + 1):
        req = _sample(api.request.fields, v)
        data = frames.encode_request(api, v, 11, "raft", req)
        header, body = frames.decode_request(memoryview(data)[4:], api)
        assert (header.api_key, header.api_version, header.correlation_id) == (api.key, v, 11)
        assert api.request.to_bytes(body, v) == api.request.to_bytes(req, v)
        resp = _sample(api.response.fields, v)
        out = b"".join(bytes(c) for c in frames.encode_response(api, v, 12, resp))
        corr, rbody = frames.decode_response(out[4:], api, v)
        assert corr == 12 and api.response.to_bytes(rbody, v) == api.response.to_bytes(resp, v)


def _sample(fields: list[Any], version: int) -> dict[str, Any]:
    """Every field of a version set to a value other than its default."""
    from gregor.protocol.schema import Array, StructType
    out: dict[str, Any] = {}
    for fd in fields:
        t = fd.type
        if isinstance(t, Array) and isinstance(t.item, StructType):
            out[fd.name] = [_sample(t.item.fields, version), _sample(t.item.fields, version)]
        elif isinstance(t, StructType):
            out[fd.name] = _sample(t.fields, version)
        elif isinstance(t, Array):
            out[fd.name] = [1, 2, 3]
        else:
            out[fd.name] = {"bool": True, "int8": 3, "int16": 5, "uint16": 65000, "int32": 77, "int64": 1 << 40,
                            "uuid": D2, "string": "s", "bytes": b"b", "records": b"r"}[t.name]
    return out
