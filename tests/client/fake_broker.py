"""A scripted cluster of fake brokers speaking the Kafka protocol through gregor's codec, for what a real
single broker cannot show: leaders that move mid-read, a follower named for a rack (KIP-392), and
chosen errors at chosen moments.

Each FakeNode listens on a loopback port and answers ApiVersions, Metadata, ListOffsets and Fetch from
the FakeCluster's state: partitions (records as batches, leader, epoch, replicas) and per-node scripts
of Fetch errors. Every Fetch is logged, so a test can check where the reader fetched from and with
which leader epoch.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gregor.protocol.apis import BY_KEY
from gregor.protocol.errors import ErrorCode
from gregor.protocol.frames import decode_request, encode_response, peek_header
from gregor.protocol.records import Record, iter_headers
from tests.client.batches import batch

SUPPORTED = {18: (0, 3), 3: (0, 12), 2: (1, 10), 1: (4, 12)}


@dataclass
class FakePartition:
    batches: bytes = b""
    log_start: int = 0
    leader: int = 1
    epoch: int = 0
    replicas: list[int] = field(default_factory=lambda: [1])

    @property
    def end(self) -> int:
        return max((h.next_offset for h in iter_headers(self.batches)), default=self.log_start)

    def append(self, records: list[Record]) -> None:
        self.batches += batch(records, records[0].offset)


@dataclass
class FetchLog:
    node: int
    partition: int
    offset: int
    leader_epoch: int
    rack: str
    answer: str


class FakeCluster:
    def __init__(self, nodes: dict[int, str | None], topic: str = "t") -> None:
        self.topic = topic
        self.partitions: dict[int, FakePartition] = {}
        self.errors: dict[tuple[int, int], list[ErrorCode]] = {}  # (node, partition) -> errors to answer, in order
        self.fetches: list[FetchLog] = []
        self.on_fetch: Callable[[int, int, int], None] | None = None  # (node, partition, offset), before answering
        self.drop_connection_at: set[int] = set()  # fetch numbers (1-based) on which the node hangs up instead
        self.truncate_records_to: int | None = None
        self.lock = threading.Lock()
        self.nodes = {nid: FakeNode(self, nid, rack) for nid, rack in nodes.items()}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes.values())

    def move_leader(self, partition: int, to: int) -> None:
        with self.lock:
            p = self.partitions[partition]
            p.leader = to
            p.epoch += 1

    def close(self) -> None:
        for n in self.nodes.values():
            n.close()

    # --- answers ---------------------------------------------------------------------------------

    def answer(self, node: int, api_key: int, version: int, body: Any) -> dict[str, Any] | None:
        with self.lock:
            if api_key == 18:
                return {"error_code": 0, "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                                                      for k, (lo, hi) in SUPPORTED.items()], "throttle_time_ms": 0}
            if api_key == 3:
                return self._metadata()
            if api_key == 2:
                return self._list_offsets(node, body)
            if api_key == 1:
                return self._fetch(node, body)
        raise AssertionError(f"the fake broker does not serve API {api_key}")

    def _metadata(self) -> dict[str, Any]:
        return {"throttle_time_ms": 0, "cluster_id": "fake", "controller_id": 1,
                "brokers": [{"node_id": n.node_id, "host": "127.0.0.1", "port": n.port, "rack": n.rack}
                            for n in self.nodes.values()],
                "topics": [{"error_code": 0, "name": self.topic, "is_internal": False, "partitions": [
                    {"error_code": 0, "partition_index": i, "leader_id": p.leader, "leader_epoch": p.epoch,
                     "replica_nodes": p.replicas, "isr_nodes": p.replicas, "offline_replicas": []}
                    for i, p in self.partitions.items()]}]}

    def _list_offsets(self, node: int, body: Any) -> dict[str, Any]:
        out = []
        for t in body.topics:
            parts = []
            for q in t.partitions:
                p = self.partitions[q.partition_index]
                if p.leader != node:
                    parts.append({"partition_index": q.partition_index,
                                  "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER, "timestamp": -1, "offset": -1})
                    continue
                offset = p.log_start if q.timestamp == -2 else p.end
                parts.append({"partition_index": q.partition_index, "error_code": 0, "timestamp": -1,
                              "offset": offset, "leader_epoch": p.epoch})
            out.append({"name": t.name, "partitions": parts})
        return {"throttle_time_ms": 0, "topics": out}

    def _fetch(self, node: int, body: Any) -> dict[str, Any] | None:
        if len(self.fetches) + 1 in self.drop_connection_at:
            self.drop_connection_at.discard(len(self.fetches) + 1)
            self.fetches.append(FetchLog(node, -1, -1, -1, body.rack_id, "hang up"))
            return None
        parts = []
        for t in body.topics:
            for q in t.partitions:
                parts.append(self._fetch_partition(node, q, body.rack_id))
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                "responses": [{"topic": self.topic, "partitions": parts}]}

    def _fetch_partition(self, node: int, q: Any, rack: str) -> dict[str, Any]:
        i = q.partition
        p = self.partitions[i]
        if self.on_fetch is not None:
            self.lock.release()
            try:
                self.on_fetch(node, i, q.fetch_offset)
            finally:
                self.lock.acquire()
        out: dict[str, Any] = {"partition_index": i, "error_code": 0, "high_watermark": p.end,
                               "last_stable_offset": p.end, "log_start_offset": p.log_start,
                               "aborted_transactions": None, "preferred_read_replica": -1, "records": b""}
        script = self.errors.get((node, i))
        err: ErrorCode | None = script.pop(0) if script else None
        follower = next((n for n in p.replicas if n != p.leader and self.nodes[n].rack == rack and rack), -1)
        if err is None and node != p.leader and node != follower:
            err = ErrorCode.NOT_LEADER_OR_FOLLOWER
        if err is None and not p.log_start <= q.fetch_offset <= p.end:
            err = ErrorCode.OFFSET_OUT_OF_RANGE
        if err is not None:
            out.update(error_code=err, high_watermark=-1, log_start_offset=-1)
            self.fetches.append(FetchLog(node, i, q.fetch_offset, q.current_leader_epoch, rack, err.name))
            return out
        if node == p.leader and follower >= 0:
            out["preferred_read_replica"] = follower
            self.fetches.append(FetchLog(node, i, q.fetch_offset, q.current_leader_epoch, rack, f"go to {follower}"))
            return out
        chunks, size = [], 0
        for h in iter_headers(p.batches):
            if h.next_offset <= q.fetch_offset:
                continue
            if chunks and size + h.size > q.partition_max_bytes:
                break
            chunks.append(p.batches[h.position : h.position + h.size])
            size += h.size
        records = b"".join(chunks)
        if self.truncate_records_to is not None:
            records = records[: self.truncate_records_to]
        out["records"] = records
        self.fetches.append(FetchLog(node, i, q.fetch_offset, q.current_leader_epoch, rack, f"{len(records)} bytes"))
        return out


class FakeNode:
    def __init__(self, cluster: FakeCluster, node_id: int, rack: str | None) -> None:
        self.cluster, self.node_id, self.rack = cluster, node_id, rack
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                head = _recv_exact(conn, 4)
                frame = memoryview(_recv_exact(conn, struct.unpack(">i", head)[0]))
                api_key, version, cid = peek_header(frame)
                api = BY_KEY[api_key]
                _, body = decode_request(frame, api)
                resp = self.cluster.answer(self.node_id, api_key, version, body)
                if resp is None:
                    conn.close()
                    return
                conn.sendall(b"".join(bytes(c) for c in encode_response(api, version, cid, resp)))
        except (OSError, EOFError):
            conn.close()

    def close(self) -> None:
        self._listener.close()
        for c in self._conns:
            try:
                c.close()
            except OSError:
                pass


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)
