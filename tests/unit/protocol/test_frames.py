"""Framing and headers: what every request and response goes through before its body.

Header versions are where hand-written Kafka codecs usually go wrong (client_id stays a
non-compact string in header v2; ApiVersions responses keep header v0 so a client can
read them before it knows what the broker speaks), so each case is checked against
kafka-python's framing or against bytes laid out by hand.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from gregor.protocol import frames
from gregor.protocol.apis import BY_KEY
from gregor.protocol.primitives import DecodeError
from gregor.protocol.schema import Api
from tests.protocol._oracle import kp_class, random_kp_message

PRODUCE, METADATA, API_VERSIONS, HEARTBEAT = BY_KEY[0], BY_KEY[3], BY_KEY[18], BY_KEY[12]


def _kp_framed_request(api: Api, version: int, correlation_id: int, client_id: str | None,
                       seed: int = 1) -> tuple[Any, bytes]:
    """A random request of this API/version, framed with its header by kafka-python."""
    msg = random_kp_message(api, version, "request", seed)
    msg.with_header(correlation_id=correlation_id, client_id=client_id)
    return msg, bytes(msg.encode(header=True, framed=True))


@pytest.mark.parametrize(("api", "version", "header_version"), [
    (PRODUCE, 8, 1), (PRODUCE, 9, 2), (METADATA, 8, 1), (METADATA, 12, 2), (HEARTBEAT, 3, 1), (HEARTBEAT, 4, 2),
])
@pytest.mark.parametrize("client_id", ["rdkafka", None, "ünïcode"])
def test_request_headers_match_kafka_python(api: Api, version: int, header_version: int,
                                            client_id: str | None) -> None:
    msg, framed = _kp_framed_request(api, version, 12345, client_id)
    assert struct.unpack_from(">i", framed)[0] == len(framed) - 4
    header, body = frames.decode_request(memoryview(framed)[4:], api)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        api.key, version, 12345, client_id)
    assert header.header_version == header_version
    assert frames.peek_header(memoryview(framed)[4:]) == (api.key, version, 12345)
    assert frames.encode_request(api, version, 12345, client_id, body) == framed


def test_header_v2_client_id_is_not_compact() -> None:
    frame = frames.encode_request(HEARTBEAT, 4, 7, "ab", {"group_id": "g", "generation_id": 1, "member_id": "m"})
    # size, key, version, correlation id, then INT16 length 2 (not uvarint 3), then the empty tag section.
    assert frame[4:16] == struct.pack(">hhih", 12, 4, 7, 2) + b"ab"
    assert frame[16] == 0


def test_unknown_header_tagged_fields_are_skipped() -> None:
    body = frames.encode_request(HEARTBEAT, 4, 9, "c", {"group_id": "g", "generation_id": 3, "member_id": "m"})[4:]
    prefix_len = 2 + 2 + 4 + 2 + 1  # key, version, correlation id, client id "c"
    assert body[prefix_len] == 0
    tagged = bytes([2, 0, 2]) + b"hi" + bytes([77, 0])  # two tags, one with a payload, one empty
    frame = body[:prefix_len] + tagged + body[prefix_len + 1:]
    header, decoded = frames.decode_request(memoryview(frame), HEARTBEAT)
    assert header.correlation_id == 9 and header.client_id == "c"
    assert (decoded.group_id, decoded.generation_id, decoded.member_id) == ("g", 3, "m")


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_response_always_uses_header_v0(version: int) -> None:
    body = {"error_code": 0, "api_keys": [{"api_key": 0, "min_version": 3, "max_version": 11}]}
    data = b"".join(bytes(c) for c in frames.encode_response(API_VERSIONS, version, 77, body))
    assert struct.unpack_from(">ii", data) == (len(data) - 4, 77)
    assert struct.unpack_from(">h", data, 8)[0] == 0  # error code right after the correlation id: no tag byte
    decoded = kp_class(API_VERSIONS, "response").decode(data[8:], version=version)
    assert decoded.api_keys[0].max_version == 11
    corr, ours = frames.decode_response(data[4:], API_VERSIONS, version)
    assert corr == 77 and ours.api_keys[0].min_version == 3


def test_flexible_response_header_has_tag_section() -> None:
    data = b"".join(bytes(c) for c in frames.encode_response(HEARTBEAT, 4, 5, {"error_code": 27}))
    assert data == struct.pack(">iib", 4 + 1 + 4 + 2 + 1, 5, 0) + struct.pack(">ihb", 0, 27, 0)
    legacy = b"".join(bytes(c) for c in frames.encode_response(HEARTBEAT, 3, 5, {"error_code": 27}))
    assert legacy == struct.pack(">ii", 4 + 4 + 2, 5) + struct.pack(">ih", 0, 27)
    corr, _ = frames.decode_response(memoryview(data)[4:], HEARTBEAT, 4)
    assert corr == 5


@pytest.mark.parametrize(("api", "version"), [(PRODUCE, 9), (PRODUCE, 3), (METADATA, 12), (HEARTBEAT, 4),
                                             (BY_KEY[1], 12), (BY_KEY[9], 8)])
def test_truncated_requests_raise_decode_error(api: Api, version: int) -> None:
    _, framed = _kp_framed_request(api, version, 1, "client", seed=3)
    frame = framed[4:]
    frames.decode_request(memoryview(frame), api)  # the whole frame decodes
    for n in range(len(frame)):
        with pytest.raises(DecodeError):
            frames.decode_request(memoryview(frame[:n]), api)


def test_peek_header_needs_eight_bytes() -> None:
    with pytest.raises(DecodeError):
        frames.peek_header(memoryview(b"\x00\x12\x00\x03\x00\x00\x00"))


def test_unsupported_version_is_a_decode_error() -> None:
    frame = frames.encode_request(PRODUCE, 9, 1, None, {"acks": 1, "timeout_ms": 1, "topic_data": []})[4:]
    patched = frame[:2] + struct.pack(">h", 2) + frame[4:]  # Produce v2: removed in Kafka 4.0
    with pytest.raises(DecodeError):
        frames.decode_request(memoryview(patched), PRODUCE)


def test_frame_decoder_reassembles_a_byte_stream() -> None:
    f1 = frames.encode_request(HEARTBEAT, 4, 1, "a", {"group_id": "g"})
    f2 = frames.encode_request(HEARTBEAT, 3, 2, None, {"group_id": "h"})
    dec = frames.FrameDecoder(max_frame_bytes=1 << 20)
    got = []
    for b in f1 + f2:
        got.extend(dec.feed(bytes([b])))
    assert [bytes(g) for g in got] == [f1[4:], f2[4:]]
    assert dec.pending_bytes() == 0
    got = dec.feed(f1 + f2[:5])
    assert [bytes(g) for g in got] == [f1[4:]] and dec.pending_bytes() == 5


def test_frame_decoder_rejects_negative_and_oversized_frames() -> None:
    with pytest.raises(DecodeError):
        frames.FrameDecoder(100).feed(struct.pack(">i", -1))
    with pytest.raises(frames.FrameTooLarge):
        frames.FrameDecoder(100).feed(struct.pack(">i", 101))
    assert issubclass(frames.FrameTooLarge, DecodeError)
    assert frames.FrameDecoder(100).feed(struct.pack(">i", 100)) == []  # at the limit: wait for the rest


class _Reservations:
    """A reserve callback that records what it was asked and refuses while `refuse` is set."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, bool]] = []
        self.api_keys: list[int] = []
        self.refuse = False

    def __call__(self, size: int, small: bool, api_key: int) -> bool:
        self.asked.append((size, small))
        self.api_keys.append(api_key)
        return not self.refuse


def test_large_frame_is_checked_and_reserved_from_its_size_before_its_body() -> None:
    res = _Reservations()
    dec = frames.FrameDecoder(max_frame_bytes=10 << 20, reserve=res, read_buffer_bytes=1024)
    assert dec.feed(struct.pack(">i", 5 << 20)) == []
    assert dec.feed(b"\x00") == [] and res.asked == [], "the API key's two bytes come first"
    body = b"\x00\x03" + bytes(range(256)) * (5 << 12)
    body = body[:5 << 20]
    got = dec.feed(body[1:2]) + dec.feed(body[2:1000]) + dec.feed(body[1000:])
    assert res.asked == [(5 << 20, False)] and res.api_keys == [3], "reserved before the rest of the body"
    assert [bytes(f) for f in got] == [body]
    assert res.asked == [(5 << 20, False)]
    assert dec.pending_bytes() == 0
    # The body is read straight into a buffer of exactly the frame's size.
    dec.feed(struct.pack(">i", 4096) + b"\x00\x01")
    target = dec.get_buffer()
    assert len(target) == 4094
    with pytest.raises(frames.FrameTooLarge):
        frames.FrameDecoder(100, reserve=res).feed(struct.pack(">i", 101))
    assert res.asked[-1][0] != 101, "an oversized frame is refused before any reservation"


def test_small_frames_are_reserved_only_once_complete() -> None:
    res = _Reservations()
    dec = frames.FrameDecoder(max_frame_bytes=1 << 20, reserve=res, read_buffer_bytes=1024)
    f = frames.encode_request(HEARTBEAT, 4, 1, "a", {"group_id": "g"})
    assert dec.feed(f[:-1]) == [] and res.asked == []
    assert [bytes(g) for g in dec.feed(f[-1:])] == [f[4:]]
    assert res.asked == [(len(f) - 4, True)]


def test_refused_reservation_blocks_until_granted() -> None:
    res = _Reservations()
    dec = frames.FrameDecoder(max_frame_bytes=1 << 20, reserve=res, read_buffer_bytes=1024)
    f1 = frames.encode_request(HEARTBEAT, 4, 1, "a", {"group_id": "g"})
    f2 = frames.encode_request(HEARTBEAT, 4, 2, "b", {"group_id": "h"})
    res.refuse = True
    buf = dec.get_buffer()
    buf[: len(f1 + f2)] = f1 + f2
    assert dec.buffer_updated(len(f1 + f2)) == []
    assert dec.blocked == len(f1) - 4
    res.refuse = False
    got = dec.granted()  # f1 was reserved by the caller; f2 asks for itself
    assert [bytes(g) for g in got] == [f1[4:], f2[4:]]
    assert dec.blocked == 0 and dec.pending_bytes() == 0
    assert res.asked == [(len(f1) - 4, True), (len(f2) - 4, True)]
    res.refuse = True
    with pytest.raises(DecodeError):
        dec.feed(f1)  # feed() has no way to wait


def test_frame_decoder_stream_of_mixed_sizes_in_odd_chunks() -> None:
    import random

    rnd = random.Random(5)
    bodies = [rnd.randbytes(rnd.choice([8, 100, 1000, 3000, 70_000])) for _ in range(60)]
    stream = b"".join(struct.pack(">i", len(b)) + b for b in bodies)
    dec = frames.FrameDecoder(max_frame_bytes=1 << 20, read_buffer_bytes=2048)
    got: list[bytes] = []
    pos = 0
    while pos < len(stream):
        n = rnd.randint(1, 5000)
        got += [bytes(f) for f in dec.feed(stream[pos:pos + n])]
        pos += n
    assert got == bodies and dec.pending_bytes() == 0


def test_produce_entries_are_bounded_by_the_request_size() -> None:
    """A Produce made of empty partition entries (6 bytes each) would decode to ~40 times its
    size; real entries carry a batch of >= 61 bytes, so one entry per 64 bytes is allowed
    (one per KiB beyond 4 MiB)."""
    from gregor.protocol.records import Record, build_batch

    def produce(n: int, records: bytes | None) -> memoryview:
        body = {"transactional_id": None, "acks": 1, "timeout_ms": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": i, "records": records} for i in range(n)]}]}
        return memoryview(bytearray(frames.encode_request(PRODUCE, 9, 1, "x", body)[4:]))

    with pytest.raises(DecodeError, match="too many topic and partition entries"):
        frames.decode_request(produce(100_000, None), PRODUCE)
    smallest = build_batch([Record(0, 1, None, b"")])
    _, body = frames.decode_request(produce(20_000, smallest), PRODUCE)
    assert len(body.topic_data[0].partition_data) == 20_000
    _, body = frames.decode_request(produce(500, None), PRODUCE)  # small requests have slack
    assert len(body.topic_data[0].partition_data) == 500
    assert frames.produce_entry_budget(100 << 20) == 1000 + (4 << 20) // 64 + (96 << 20) // 1024
