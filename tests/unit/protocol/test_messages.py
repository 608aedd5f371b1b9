"""Our message definitions against kafka-python 3.0, byte for byte and field by field.

Round trips through our own codec alone would not catch a field in the wrong place or
of the wrong type, so every check here has kafka-python (built from Kafka's own JSON
schemas) on the other side. ConsumerGroupHeartbeat and ConsumerGroupDescribe, which
kafka-python lacks, are checked against bytes laid out by hand from the KIP-848 spec.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest

from gregor.protocol import frames
from gregor.protocol.apis import ALL, BY_KEY
from gregor.protocol.messages.consumer_group import CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT
from gregor.protocol.primitives import Reader, Writer
from gregor.protocol.schema import Api, Schema, Struct, _compile_writer
from tests.protocol._oracle import (
    default_pairs,
    kp_class,
    kp_encode,
    kp_layout,
    kp_to_dict,
    normalize,
    oracle_cases,
    our_layout,
    project,
    random_kp_message,
    schema_of,
)

CASES = oracle_cases()

# Deviations from Kafka's definitions, as (check, api key, side) -> (first version affected, why).
# Strict xfail: when a definition is fixed the test XPASSes and the entry must go. None today.
KNOWN_DEVIATIONS: dict[tuple[str, int, str], tuple[int, str]] = {}


def _cases(check: str, cases: list[tuple[Api, int, str]] = CASES) -> list[Any]:
    """Parametrize over cases, marking the known deviations for this check as strict xfails."""
    out = []
    for api, v, side in cases:
        first, reason = KNOWN_DEVIATIONS.get((check, api.key, side), (1 << 15, ""))
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if v >= first else []
        out.append(pytest.param(api, v, side, marks=marks, id=f"{api.name}-v{v}-{side}"))
    return out


SAMPLES = 6  # random messages per case: enough to hit null / empty / present variants


# Kafka 4.0's accepted ranges, capped where noted in the message modules.
EXPECTED_RANGES = {
    0: (3, 11), 1: (4, 12), 2: (1, 10), 3: (0, 12), 8: (2, 9), 9: (1, 9), 10: (0, 6),
    11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5), 18: (0, 4),
    19: (2, 7), 20: (1, 6), 21: (0, 2), 22: (0, 5), 23: (2, 4), 24: (0, 5), 25: (0, 4), 26: (0, 4),
    27: (1, 1), 28: (0, 4), 29: (1, 3), 30: (1, 3), 31: (1, 3), 32: (1, 4), 33: (0, 2), 37: (0, 3), 42: (0, 2), 44: (0, 1),
    7: (1, 3), 43: (0, 2), 45: (0, 0), 46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 60: (0, 2), 61: (0, 0), 65: (0, 0), 66: (0, 1), 68: (0, 1), 69: (0, 1),
    17: (0, 1), 36: (0, 2), 50: (0, 0), 51: (0, 0), 35: (1, 4), 34: (1, 2), 75: (0, 0),
    52: (0, 2), 53: (0, 1), 54: (0, 1), 55: (0, 2), 59: (0, 1),
}


def test_registry_has_every_api_once_with_expected_ranges() -> None:
    assert len(BY_KEY) == len(ALL)
    assert {a.key: (a.min_version, a.max_version) for a in ALL} == EXPECTED_RANGES


@pytest.mark.parametrize("api", [a for a in ALL if kp_class(a, "request") is not None], ids=lambda a: a.name)
def test_flexible_versions_match_kafka(api: Api) -> None:
    cls = kp_class(api, "request")
    for v in range(api.min_version, api.max_version + 1):
        assert api.request.is_flexible(v) == cls.flexible_version_q(v), v
        assert api.response.is_flexible(v) == kp_class(api, "response").flexible_version_q(v), v


@pytest.mark.parametrize(("api", "version", "side"), _cases("layout"))
def test_layout_matches_kafka(api: Api, version: int, side: str) -> None:
    """Names, order, types, nullability and tags of every field in this version."""
    schema = schema_of(api, side)
    flexible = schema.is_flexible(version)
    ours = our_layout(schema.fields, version, flexible)
    theirs = kp_layout(kp_class(api, side)._struct, version, flexible)
    assert ours == theirs


@pytest.mark.parametrize(("api", "version", "side"), _cases("defaults"))
def test_defaults_match_kafka(api: Api, version: int, side: str) -> None:
    schema = schema_of(api, side)
    pairs = default_pairs(schema.fields, kp_class(api, side)._struct, version)
    mismatched = [(name, ours, theirs) for name, ours, theirs in pairs if ours != theirs]
    assert not mismatched


@pytest.mark.parametrize(("api", "version", "side"), _cases("round_trip"))
def test_kafka_python_bytes_round_trip(api: Api, version: int, side: str) -> None:
    """kafka-python encodes; we decode all of it to the same values and re-encode the same bytes."""
    schema = schema_of(api, side)
    for i in range(SAMPLES):
        msg = random_kp_message(api, version, side, seed=hash((api.key, version, side, i)) & 0xFFFFFFFF)
        data = kp_encode(msg, version)
        r = Reader(data)
        decoded = schema.decode(r, version)
        assert r.remaining() == 0, "trailing bytes: a field is missing from our definition"
        theirs = kp_to_dict(msg)
        assert project(normalize(decoded.to_dict()), theirs) == theirs
        assert schema.to_bytes(decoded, version) == data
        # And the other way: our encoder fed plain dicts writes kafka-python's bytes.
        assert schema.to_bytes(theirs, version) == data


@pytest.mark.parametrize(("api", "version", "side"),
                         _cases("unknown_tags", [c for c in CASES if schema_of(c[0], c[2]).is_flexible(c[1])]))
def test_unknown_tagged_fields_are_skipped(api: Api, version: int, side: str) -> None:
    """A newer peer's tags we do not know must be skipped, at the top level and in nested structs."""
    schema = schema_of(api, side)
    msg = random_kp_message(api, version, side, seed=7)
    data = kp_encode(msg, version)
    decoded = schema.from_bytes(data, version)
    expected = normalize(decoded.to_dict())
    # Rewrite the top-level tag section: its own tags plus an unknown one (tag 90, 3 bytes).
    top_start = _top_level_tag_section_start(schema, decoded, version)
    r = Reader(data, top_start)
    tags = r.skip_tagged_fields()
    tags[90] = memoryview(b"xyz")
    w = Writer()
    w.unsigned_varint(len(tags))
    for tag in sorted(tags):
        w.unsigned_varint(tag)
        w.unsigned_varint(len(tags[tag]))
        w.raw(tags[tag])
    mutated = data[:top_start] + w.getvalue()
    assert normalize(schema.from_bytes(mutated, version).to_dict()) == expected


def test_unknown_tagged_fields_in_nested_structs_are_skipped() -> None:
    unknown = bytes([2, 5, 3]) + b"abc" + bytes([200, 1, 0])  # tags 5 and 200 (a two-byte varint), sizes 3 and 0
    plain = struct.pack(">i", 10) + bytes([2]) + bytes([2]) + b"g" + struct.pack(">h", 69)
    wire = plain + unknown + b"\x00"  # DeleteGroups v2 response: result carries unknown tags
    got = BY_KEY[42].response.from_bytes(wire, 2)
    assert got.results[0].group_id == "g" and got.results[0].error_code == 69
    assert BY_KEY[42].response.to_bytes(got, 2) == plain + b"\x00" + b"\x00"  # unknown tags are not echoed back


def _top_level_tag_section_start(schema: Schema, decoded: Struct, version: int) -> int:
    """Offset of the top-level tag section: encode the untagged fields alone and measure."""
    plain_fields = [fd for fd in schema.fields if not (fd.tag is not None and version in fd.tagged)]
    w = Writer()
    _compile_writer(plain_fields, version, True, False)(w, decoded)
    return len(w.getvalue()) - 1  # minus the (empty) tag section this partial encoding wrote


def test_absent_fields_decode_to_kafka_defaults() -> None:
    """Fields a version lacks read as Kafka's defaults, which handlers rely on."""
    join = BY_KEY[11].request.from_bytes(
        kp_encode(kp_class(BY_KEY[11], "request")[0](group_id="g", session_timeout_ms=10, member_id="",
                                                     protocol_type="consumer", protocols=[]), 0), 0)
    assert join.rebalance_timeout_ms == -1
    assert join.group_instance_id is None
    lo = BY_KEY[2].request.from_bytes(struct.pack(">ii", -1, 0), 1)
    assert (lo.isolation_level, lo.timeout_ms) == (0, 0)
    fetch_resp = BY_KEY[1].response.from_bytes(struct.pack(">ii", 0, 0), 4)
    assert fetch_resp.session_id == 0 and fetch_resp.error_code == 0


def test_missing_fields_encode_as_kafka_defaults() -> None:
    """A handler may leave out fields it has nothing to say about; they go out as Kafka would send them."""
    body = {"responses": [{"name": "t", "partition_responses": [{"index": 0, "error_code": 0, "base_offset": 5}]}]}
    got = BY_KEY[0].response.to_bytes(body, 9)
    decoded = kp_class(BY_KEY[0], "response").decode(got, version=9)
    part = decoded.responses[0].partition_responses[0]
    assert (part.log_append_time_ms, part.log_start_offset, part.error_message) == (-1, -1, None)
    assert part.current_leader is None  # tagged struct left out entirely


def test_fetch_response_keeps_records_as_separate_chunks() -> None:
    """Large record sets are written by reference, never copied into the header buffer."""
    blob = memoryview(bytes(range(256)) * 64)  # 16 KiB
    body = {"responses": [{"topic": "t", "partitions": [{"partition_index": 0, "high_watermark": 1,
                                                          "records": blob}]}]}
    chunks = frames.encode_response(BY_KEY[1], 12, 42, body)
    assert any(c is blob for c in chunks)
    data = b"".join(bytes(c) for c in chunks)
    assert struct.unpack_from(">i", data)[0] == len(data) - 4
    corr, decoded = frames.decode_response(data[4:], BY_KEY[1], 12)
    assert corr == 42 and bytes(decoded.responses[0].partitions[0].records) == bytes(blob)


# --- KIP-848 APIs: no kafka-python oracle, so bytes laid out by hand -------------------------

def _cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    b = s.encode()
    return bytes([len(b) + 1]) + b


def _carr(n: int | None) -> bytes:
    return b"\x00" if n is None else bytes([n + 1])


TOPIC = uuid.UUID("12345678-1234-5678-1234-567812345678")


def test_consumer_group_heartbeat_request_v1_layout() -> None:
    wire = (
        _cstr("grp") + _cstr("member-1") + struct.pack(">i", 3)
        + _cstr(None) + _cstr("rack-a") + struct.pack(">i", 45000)
        + _carr(2) + _cstr("a") + _cstr("b")
        + _cstr("^t.*")
        + _cstr("uniform")
        + _carr(1) + TOPIC.bytes + _carr(2) + struct.pack(">ii", 0, 7) + b"\x00"
        + b"\x00"
    )
    got = CONSUMER_GROUP_HEARTBEAT.request.from_bytes(wire, 1)
    assert got.to_dict() | {"topic_partitions": None} == {
        "group_id": "grp", "member_id": "member-1", "member_epoch": 3, "instance_id": None,
        "rack_id": "rack-a", "rebalance_timeout_ms": 45000, "subscribed_topic_names": ["a", "b"],
        "subscribed_topic_regex": "^t.*", "server_assignor": "uniform", "topic_partitions": None,
    }
    assert got.topic_partitions[0].topic_id == TOPIC and got.topic_partitions[0].partitions == [0, 7]
    assert CONSUMER_GROUP_HEARTBEAT.request.to_bytes(got, 1) == wire


def test_consumer_group_heartbeat_request_v0_has_no_regex_and_nulls_by_default() -> None:
    wire = _cstr("g") + _cstr("") + struct.pack(">i", 0) + _cstr(None) + _cstr(None) + struct.pack(">i", -1) \
        + _carr(None) + _cstr(None) + _carr(None) + b"\x00"
    assert CONSUMER_GROUP_HEARTBEAT.request.to_bytes({"group_id": "g", "member_id": "", "member_epoch": 0}, 0) == wire
    got = CONSUMER_GROUP_HEARTBEAT.request.from_bytes(wire, 0)
    assert got.subscribed_topic_regex is None and got.subscribed_topic_names is None


@pytest.mark.parametrize("version", [0, 1])
def test_consumer_group_heartbeat_response_layout(version: int) -> None:
    with_assignment = (
        struct.pack(">ih", 0, 0) + _cstr(None) + _cstr("m") + struct.pack(">ii", 5, 3000)
        + b"\x01" + _carr(1) + TOPIC.bytes + _carr(1) + struct.pack(">i", 2) + b"\x00" + b"\x00"
        + b"\x00"
    )
    got = CONSUMER_GROUP_HEARTBEAT.response.from_bytes(with_assignment, version)
    assert got.member_epoch == 5 and got.heartbeat_interval_ms == 3000
    assert got.assignment.topic_partitions[0].partitions == [2]
    assert CONSUMER_GROUP_HEARTBEAT.response.to_bytes(got, version) == with_assignment
    no_assignment = struct.pack(">ih", 0, 25) + _cstr("boom") + _cstr(None) + struct.pack(">ii", 0, 0) + b"\xff" + b"\x00"
    got = CONSUMER_GROUP_HEARTBEAT.response.from_bytes(no_assignment, version)
    assert got.assignment is None and got.error_message == "boom"
    assert CONSUMER_GROUP_HEARTBEAT.response.to_bytes(
        {"error_code": 25, "error_message": "boom", "member_epoch": 0}, version) == no_assignment


def test_consumer_group_describe_request_layout() -> None:
    wire = _carr(2) + _cstr("g1") + _cstr("g2") + b"\x01" + b"\x00"
    for v in (0, 1):
        got = CONSUMER_GROUP_DESCRIBE.request.from_bytes(wire, v)
        assert got.group_ids == ["g1", "g2"] and got.include_authorized_operations is True
        assert CONSUMER_GROUP_DESCRIBE.request.to_bytes(got, v) == wire


@pytest.mark.parametrize("version", [0, 1])
def test_consumer_group_describe_response_layout(version: int) -> None:
    assignment = _carr(1) + TOPIC.bytes + _cstr("t") + _carr(1) + struct.pack(">i", 0) + b"\x00" + b"\x00"
    member = (
        _cstr("m1") + _cstr(None) + _cstr("r") + struct.pack(">i", 4) + _cstr("cid") + _cstr("/1.2.3.4")
        + _carr(1) + _cstr("t") + _cstr(None) + assignment + assignment
        + (struct.pack(">b", 1) if version >= 1 else b"") + b"\x00"
    )
    group = (
        struct.pack(">h", 0) + _cstr(None) + _cstr("g") + _cstr("Stable") + struct.pack(">ii", 7, 7)
        + _cstr("uniform") + _carr(1) + member + struct.pack(">i", -2147483648) + b"\x00"
    )
    wire = struct.pack(">i", 0) + _carr(1) + group + b"\x00"
    got = CONSUMER_GROUP_DESCRIBE.response.from_bytes(wire, version)
    m = got.groups[0].members[0]
    assert m.member_type == (1 if version >= 1 else -1)
    assert m.assignment.topic_partitions[0].topic_name == "t"
    assert m.target_assignment.topic_partitions[0].topic_id == TOPIC
    assert CONSUMER_GROUP_DESCRIBE.response.to_bytes(got, version) == wire
