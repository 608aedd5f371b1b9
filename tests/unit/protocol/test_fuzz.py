"""Hostile bytes: whatever arrives, the decoder answers with a value or a DecodeError.

The broker turns a DecodeError into INVALID_REQUEST or a closed connection; any other
exception would be a bug that could take a connection handler down. Frames are drawn
at random and, more usefully, mutated from valid requests of every API and version
(truncations, bit flips, hostile lengths, splices), so the fuzzing reaches deep fields.
"""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gregor.protocol import frames
from gregor.protocol.apis import ALL, BY_KEY
from gregor.protocol.primitives import DecodeError, Reader
from gregor.protocol.schema import Api
from tests.protocol._oracle import kp_class, oracle_cases, random_kp_message, schema_of

FUZZ = settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                derandomize=False, database=None)


def _valid_request_frames() -> list[bytes]:
    out = []
    for api, version, side in oracle_cases():
        if side != "request":
            continue
        msg = random_kp_message(api, version, side, seed=version * 1000 + api.key)
        out.append(frames.encode_request(api, version, 99, "fuzz", schema_of(api, side).from_bytes(
            bytes(msg.encode(version=version)), version))[4:])
    for api in ALL:  # APIs without an oracle: their own encoding of defaults
        if kp_class(api, "request") is None:
            for v in range(api.min_version, api.max_version + 1):
                out.append(frames.encode_request(api, v, 1, None, {})[4:])
    return out


def _valid_bodies() -> list[tuple[Api, int, str, bytes]]:
    out = []
    for api, version, side in oracle_cases():
        msg = random_kp_message(api, version, side, seed=version + 31 * api.key)
        out.append((api, version, side, bytes(msg.encode(version=version))))
    return out


VALID_FRAMES = _valid_request_frames()
VALID_BODIES = _valid_bodies()
HOSTILE_INTS = [-1, -2, 0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0x7FFFFFFF, -0x80000000, 0xFFFFFFFF]


def decode_like_the_broker(frame: bytes) -> None:
    """The server's path: peek the header, look up the API, decode header and body."""
    try:
        key, _version, _corr = frames.peek_header(memoryview(frame))
        api = BY_KEY.get(key)
        if api is not None:
            frames.decode_request(memoryview(frame), api)
    except DecodeError:
        pass


@st.composite
def mutated(draw: st.DrawFn, base: bytes) -> bytes:
    buf = bytearray(base)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "int", "varint", "splice"]))
        pos = draw(st.integers(0, max(len(buf) - 1, 0)))
        if op == "flip" and buf:
            buf[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del buf[pos:]
        elif op == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del buf[pos:pos + draw(st.integers(1, 8))]
        elif op == "int":
            width, fmt = draw(st.sampled_from([(2, ">H"), (4, ">I")]))
            buf[pos:pos + width] = struct.pack(fmt, draw(st.sampled_from(HOSTILE_INTS)) & ((1 << (8 * width)) - 1))
        elif op == "varint":  # an absurd unsigned varint, as a compact length or tag count would be read
            buf[pos:pos + 1] = draw(st.sampled_from([b"\xff" * 5 + b"\x0f", b"\xff" * 10 + b"\x01", b"\x80" * 12]))
        elif op == "splice":
            other = draw(st.sampled_from(VALID_FRAMES))
            start = draw(st.integers(0, len(other)))
            buf[pos:] = other[start:]
    return bytes(buf)


@FUZZ
@given(st.data())
def test_mutated_requests(data: st.DataObject) -> None:
    base = data.draw(st.sampled_from(VALID_FRAMES))
    decode_like_the_broker(data.draw(mutated(base)))


@settings(FUZZ, max_examples=300)
@given(key=st.sampled_from(sorted(BY_KEY)), version=st.integers(-1, 20), body=st.binary(max_size=120),
       client_id=st.one_of(st.none(), st.text(max_size=5)))
def test_random_requests(key: int, version: int, body: bytes, client_id: str | None) -> None:
    cid = b"\xff\xff" if client_id is None else struct.pack(">h", len(client_id.encode())) + client_id.encode()
    decode_like_the_broker(struct.pack(">hhi", key, version, 7) + cid + body)


@settings(FUZZ, max_examples=200)
@given(frame=st.binary(max_size=64))
def test_random_bytes(frame: bytes) -> None:
    decode_like_the_broker(frame)


@settings(FUZZ, max_examples=1000)
@given(st.data())
def test_mutated_bodies_either_side(data: st.DataObject) -> None:
    """Schema.decode on its own, requests and responses (a client-side decoder sees the latter)."""
    api, version, side, body = data.draw(st.sampled_from(VALID_BODIES))
    buf = data.draw(mutated(body))
    try:
        schema_of(api, side).decode(Reader(buf), version)
    except DecodeError:
        pass


@settings(FUZZ, max_examples=200)
@given(chunks=st.lists(st.binary(max_size=40), max_size=8), limit=st.integers(0, 64))
def test_frame_decoder_stream(chunks: list[bytes], limit: int) -> None:
    dec = frames.FrameDecoder(limit)
    try:
        for c in chunks:
            for frame in dec.feed(c):
                assert len(frame) <= limit
                decode_like_the_broker(bytes(frame))
    except DecodeError:
        pass
