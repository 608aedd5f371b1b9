"""Hostile clients, one function each, for tests that check the broker survives them.

Every actor talks raw Kafka protocol over real sockets, as a stranger on the network would.
Actors that keep connections open return an `Actor` whose `close()` ends them, so a test can
run several at once while a normal client works, then measure the broker. Other kinds of
hostile input (decompression bombs, lying batches, garbage to internal topics) belong here
too: add a function that does it and returns an Actor or a result.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gregor.protocol import apis
from gregor.protocol.frames import decode_response, encode_request

FETCH, METADATA, API_VERSIONS = apis.BY_KEY[1], apis.BY_KEY[3], apis.BY_KEY[18]


def _connect(bootstrap: str, timeout_s: float = 10.0) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=timeout_s)


@dataclass
class Actor:
    """Connections an actor holds open, and a thread that keeps it busy, if any."""

    socks: list[socket.socket] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    stats: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(30)
        for s in self.socks:
            s.close()

    def closed_by_broker(self) -> int:
        """How many of the actor's connections the broker has closed."""
        n = 0
        for s in self.socks:
            try:
                s.setblocking(False)
                if s.recv(1 << 16) == b"":
                    n += 1
            except BlockingIOError:
                pass
            except OSError:
                n += 1
        return n


def _in_thread(actor: Actor, body: Callable[[], None]) -> Actor:
    actor.thread = threading.Thread(target=body, daemon=True)
    actor.thread.start()
    return actor


def fetch_body(topic: str, offsets: list[int], *, max_bytes: int = 52428800, partition_max_bytes: int = 1048576,
               min_bytes: int = 0, max_wait_ms: int = 0) -> dict[str, Any]:
    """A Fetch v11 body naming partition 0 of `topic` once per entry of `offsets`."""
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": o, "log_start_offset": -1,
                 "partition_max_bytes": partition_max_bytes} for o in offsets]}],
            "forgotten_topics_data": [], "rack_id": ""}


def partial_frames(bootstrap: str, connections: int, frame_bytes: int, send_bytes: int | None = None) -> Actor:
    """`connections` connections each announce a frame of `frame_bytes` and send its first
    `send_bytes` (default all but the last byte), as fast as the broker takes them, then hold.
    The actor's stats count the body bytes the broker accepted."""
    body_len = frame_bytes - 1 if send_bytes is None else send_bytes
    filler = memoryview(bytes(1 << 20))
    actor = Actor(socks=[_connect(bootstrap) for _ in range(connections)])
    sent = dict.fromkeys(range(connections), 0)
    actor.stats["sent_bytes"] = 0
    for s in actor.socks:
        s.sendall(struct.pack(">i", frame_bytes))
        s.setblocking(False)

    def run() -> None:
        while not actor.stop.is_set():
            todo = [i for i, n in sent.items() if n < body_len]
            if not todo:
                break
            _, writable, _ = select.select([], [actor.socks[i] for i in todo], [], 0.2)
            for s in writable:
                i = actor.socks.index(s)
                try:
                    n = s.send(filler[: min(len(filler), body_len - sent[i])])
                except BlockingIOError:
                    continue
                except OSError:
                    sent[i] = body_len  # closed by the broker
                    continue
                sent[i] += n
                actor.stats["sent_bytes"] += n

    return _in_thread(actor, run)


def pipelined_fetches(bootstrap: str, topic: str, *, connections: int = 1, max_requests: int = 100_000) -> Actor:
    """Connections that send Fetch after Fetch for `topic` (from offset 0, 50 MiB each) and
    never read a response. The actor's stats count the requests the broker took in."""
    frame = encode_request(FETCH, 11, 1, "hostile-pipeliner",
                           fetch_body(topic, [0], partition_max_bytes=52428800))
    actor = Actor(socks=[_connect(bootstrap) for _ in range(connections)])
    actor.stats["requests_sent"] = 0
    for s in actor.socks:
        s.setblocking(False)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)

    def run() -> None:
        pending = {id(s): memoryview(frame) for s in actor.socks}
        while not actor.stop.is_set() and actor.stats["requests_sent"] < max_requests:
            _, writable, _ = select.select([], actor.socks, [], 0.2)
            for s in writable:
                view = pending[id(s)]
                try:
                    n = s.send(view)
                except (BlockingIOError, OSError):
                    continue
                view = view[n:]
                if not view:
                    actor.stats["requests_sent"] += 1
                    view = memoryview(frame)
                pending[id(s)] = view

    return _in_thread(actor, run)


def parked_fetches(bootstrap: str, topic: str, *, connections: int, per_connection: int,
                   repeats: int = 2000) -> Actor:
    """Connections that each send `per_connection` Fetches naming partition 0 of `topic`
    `repeats` times (a 56 KB frame, which a broker must hold while it is parked), asking for
    1 GiB with max_wait 60 s: each request stays in the broker for a minute."""
    frame = encode_request(FETCH, 11, 3, "hostile-parker",
                           fetch_body(topic, [0] * repeats, min_bytes=1 << 30, max_wait_ms=60_000))
    actor = Actor(socks=[_connect(bootstrap) for _ in range(connections)])
    for s in actor.socks:
        s.setblocking(False)

    def run() -> None:
        left = {id(s): memoryview(frame * per_connection) for s in actor.socks}
        while not actor.stop.is_set() and any(left.values()):
            _, writable, _ = select.select([], [s for s in actor.socks if left[id(s)]], [], 0.2)
            for s in writable:
                try:
                    n = s.send(left[id(s)])
                except (BlockingIOError, OSError):
                    continue
                left[id(s)] = left[id(s)][n:]

    return _in_thread(actor, run)


def repeated_partition_fetch(bootstrap: str, topic: str, repeats: int) -> tuple[int, int]:
    """One Fetch naming partition 0 of `topic` `repeats` times, read to the end.
    Returns (response size in bytes, partition entries in the response)."""
    s = _connect(bootstrap, timeout_s=120)
    try:
        s.sendall(encode_request(FETCH, 11, 7, "hostile-repeater", fetch_body(topic, [0] * repeats)))
        size = struct.unpack(">i", _recv_exact(s, 4))[0]
        data = _recv_exact(s, size)
    finally:
        s.close()
    from gregor.protocol.frames import decode_response

    _, resp = decode_response(data, FETCH, 11)
    return size, sum(len(t.partitions) for t in resp.responses)


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = s.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("closed by broker")
        got += k
    return bytes(buf)


def huge_metadata_request(bootstrap: str, topics: int) -> tuple[bool, int]:
    """A Metadata v12 request naming `topics` made-up topics (26 bytes each on the wire, about
    15 times that once decoded). Returns (answered, topics in the answer); (False, 0) when the
    broker closed the connection instead."""
    body = {"topics": [{"topic_id": None, "name": f"no-such-topic-{i:010d}"} for i in range(topics)],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    s = _connect(bootstrap, timeout_s=120)
    try:
        s.sendall(encode_request(METADATA, 12, 9, "hostile-metadata", body))
        size = struct.unpack(">i", _recv_exact(s, 4))[0]
        data = _recv_exact(s, size)
    except OSError:
        return False, 0
    finally:
        s.close()
    from gregor.protocol.frames import decode_response

    _, resp = decode_response(data, METADATA, 12)
    return True, len(resp.topics)


def connection_flood(bootstrap: str, connections: int) -> Actor:
    """Open `connections` connections and keep them, idle. Refused ones are closed by the
    broker right away: see Actor.closed_by_broker()."""
    actor = Actor()
    for _ in range(connections):
        try:
            actor.socks.append(_connect(bootstrap))
        except OSError:
            break
    time.sleep(0.5)
    return actor


def api_versions_ok(bootstrap: str) -> bool:
    """Whether a fresh connection gets an ApiVersions answer (the broker is serving)."""
    try:
        s = _connect(bootstrap, timeout_s=5)
    except OSError:
        return False
    try:
        s.sendall(encode_request(API_VERSIONS, 3, 1, "probe", {"client_software_name": "p",
                                                                "client_software_version": "1"}))
        size = struct.unpack(">i", _recv_exact(s, 4))[0]
        _recv_exact(s, size)
        return True
    except OSError:
        return False
    finally:
        s.close()


# --- poisoned data: decompression bombs, lying batches, garbage to internal topics -----------------

def zero_bomb(codec: int, total: int) -> bytes:
    """`total` zero bytes compressed with `codec`, built a MiB at a time (never held whole)."""
    import zlib

    import cramjam

    from gregor.protocol import compression

    chunk = bytes(1 << 20)
    if codec == compression.GZIP:
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        return b"".join(z.compress(chunk) for _ in range(total // len(chunk))) + z.flush()
    comp = {compression.ZSTD: cramjam.zstd.Compressor(), compression.LZ4: cramjam.lz4.Compressor()}[codec]
    for _ in range(total // len(chunk)):
        comp.compress(chunk)
    return bytes(comp.finish())


def _batch_with_body(body: bytes, count: int, codec: int) -> bytes:
    """A CRC-valid batch header claiming `count` records over `body` (whatever it holds)."""
    from gregor.protocol.records import HEADER_SIZE, Record, build_batch, compute_crc

    b = bytearray(build_batch([Record(0, int(time.time() * 1000), b"k", b"v")]))[:HEADER_SIZE] + body
    struct.pack_into(">i", b, 8, len(b) - 12)
    struct.pack_into(">h", b, 21, codec)
    struct.pack_into(">i", b, 23, count - 1)
    struct.pack_into(">i", b, 57, count)
    struct.pack_into(">I", b, 17, compute_crc(b, 0, len(b)))
    return bytes(b)


def poisoned_batches() -> list[tuple[str, bytes]]:
    """(name, record set) pairs no broker may store: bombs of each codec (each under 1 MiB
    compressed, so it passes max.message.bytes and only the decompression limit stops it), batches
    that lie about their records, and a snappy frame that lies about its length."""
    from gregor.protocol import compression
    from gregor.protocol.records import Record, build_batch

    good = build_batch([Record(0, int(time.time() * 1000), b"k", b"v")])
    sizes = {compression.ZSTD: 2 << 30, compression.GZIP: 512 << 20, compression.LZ4: 200 << 20}
    out = [(f"{compression.NAMES[c]} bomb of {n >> 20} MiB", _batch_with_body(zero_bomb(c, n), 1, c))
           for c, n in sizes.items()]
    out.append(("snappy length lie", _batch_with_body(b"\xff\xff\xff\xff\x0f" + bytes(64), 1, compression.SNAPPY)))
    out.append(("2^31 records", _batch_with_body(good[61:], 2**31 - 1, compression.NONE)))
    out.append(("record past the batch", _batch_with_body(b"\x7e" + good[62:], 1, compression.NONE)))
    return out


def poisoned_produce(bootstrap: str, topics: list[str], batches: list[tuple[str, bytes]]) -> Actor:
    """One connection sending every poisoned batch to every topic (internal ones included), over
    and over, until closed. Its stats count answers by error code; every answer must be an error and
    the connection must stay open ('closed' counts the times it did not)."""
    actor = Actor(socks=[_connect(bootstrap, timeout_s=60)])
    actor.stats.update(answers={}, accepted=[], closed=0, rounds=0)
    produce = apis.BY_KEY[0]

    def run() -> None:
        cid = 0
        while not actor.stop.is_set():
            for topic in topics:
                for name, records in batches:
                    if actor.stop.is_set():
                        return
                    cid += 1
                    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
                            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}
                    s = actor.socks[0]
                    try:
                        s.sendall(encode_request(produce, 9, cid, "hostile", body))
                        size = struct.unpack(">i", _recv_exact(s, 4))[0]
                        resp = _recv_exact(s, size)
                    except OSError:
                        actor.stats["closed"] += 1
                        s.close()
                        actor.socks[0] = _connect(bootstrap, timeout_s=60)
                        continue
                    part = decode_response(resp, produce, 9)[1].responses[0].partition_responses[0]
                    codes = actor.stats["answers"]
                    codes[part.error_code] = codes.get(part.error_code, 0) + 1
                    if part.error_code == 0:
                        actor.stats["accepted"].append((topic, name))
            actor.stats["rounds"] += 1

    return _in_thread(actor, run)
