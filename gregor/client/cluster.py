"""The reader's view of the cluster: brokers and their connections, a topic's partitions and leaders
(Metadata), and offsets by time or position (ListOffsets), each retried as Kafka's clients retry them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from gregor.client.connection import Connection, tls_context
from gregor.client.errors import AuthenticationError, BrokerUnavailableError, ReaderError
from gregor.client.reader_config import ReaderConfig
from gregor.protocol.apis import BY_KEY
from gregor.protocol.errors import ErrorCode

METADATA, LIST_OFFSETS = BY_KEY[3], BY_KEY[2]
EARLIEST, LATEST = -2, -1  # ListOffsets' special timestamps

# Answers that mean "ask again, after a metadata refresh": the leader moved or is not there yet, a
# replica is catching up, a disk failed over (as Kafka's consumer treats them).
RETRIABLE = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.BROKER_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION,
})

T = TypeVar("T")


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


@dataclass(frozen=True)
class PartitionLeader:
    partition: int
    leader: int  # -1 while there is none
    leader_epoch: int
    replicas: tuple[int, ...]
    error: int


class Backoff:
    """Waits between retries: retry.backoff.ms doubling up to retry.backoff.max.ms, with +-20% jitter so
    readers that failed together do not retry together."""

    def __init__(self, cfg: ReaderConfig) -> None:
        self.first_ms, self.max_ms = cfg.retry_backoff_ms, cfg.retry_backoff_max_ms

    def delay_s(self, attempt: int) -> float:
        ms = min(self.first_ms * 2 ** max(attempt - 1, 0), self.max_ms)
        return ms * random.uniform(0.8, 1.2) / 1000


class Cluster:
    """Connections to the brokers of one cluster, opened on first use, and what Metadata said of them."""

    def __init__(self, cfg: ReaderConfig, connect: Callable[..., Connection] = Connection) -> None:
        self.cfg = cfg
        self._bootstrap = cfg.bootstrap()
        self._tls = tls_context(cfg) if cfg.tls else None
        self._connect = connect
        self.brokers: dict[int, tuple[str, int, str | None]] = {}  # node id -> host, port, rack
        self._conns: dict[tuple[int, int], Connection] = {}  # (node id, lane) -> connection
        self.backoff = Backoff(cfg)

    def connection(self, node_id: int, lane: int = 0) -> Connection:
        """An open connection to broker `node_id` (BrokerUnavailableError if unknown or unreachable). Lanes
        are separate connections to the same broker, for fetches that must be in flight together."""
        conn = self._conns.get((node_id, lane))
        if conn is None or not conn.connected:
            if node_id not in self.brokers:
                raise BrokerUnavailableError(f"broker {node_id} is not in the cluster's metadata")
            host, port, _ = self.brokers[node_id]
            conn = self._connect(host, port, node_id, self.cfg, self._tls)
            self._conns[(node_id, lane)] = conn
            conn.open()
        return conn

    def _any_connection(self) -> Connection:
        for conn in self._conns.values():
            if conn.connected:
                return conn
        candidates = [(nid, h, p) for nid, (h, p, _) in self.brokers.items()]
        candidates += [(-1 - i, h, p) for i, (h, p) in enumerate(self._bootstrap)]
        errors = []
        for nid, host, port in candidates:
            conn = self._connect(host, port, nid, self.cfg, self._tls)
            try:
                conn.open()
            except BrokerUnavailableError as e:
                errors.append(str(e))
                continue
            self._conns[(nid, 0)] = conn
            return conn
        raise BrokerUnavailableError("no broker reachable: " + "; ".join(errors))

    def retrying(self, what: str, attempt: Callable[[], T]) -> T:
        """`attempt()` until it stops raising BrokerUnavailableError or a retriable ReaderError, at most
        `retries` + 1 times, waiting between tries."""
        failures = 0
        while True:
            try:
                return attempt()
            except AuthenticationError:
                raise
            except ReaderError as e:
                retriable = isinstance(e, BrokerUnavailableError) or e.code in RETRIABLE
                failures += 1
                if not retriable or failures > self.cfg.retries:
                    if retriable:
                        raise type(e)(f"{what} failed {failures} times (retries={self.cfg.retries}): {e}",
                                      e.code) from e
                    raise
                time.sleep(self.backoff.delay_s(failures))

    def partitions(self, topic: str) -> dict[int, PartitionLeader]:
        """The topic's partitions and leaders, from a fresh Metadata request (retried)."""
        return self.retrying(f"Metadata for topic {topic}", lambda: self._metadata(topic))

    def _metadata(self, topic: str) -> dict[int, PartitionLeader]:
        conn = self._any_connection()
        version = conn.version(METADATA, 1, 12)
        resp = conn.request(METADATA, version, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        self.brokers = {b.node_id: (b.host, b.port, b.rack) for b in resp.brokers}
        for key in [k for k in self._conns if k[0] >= 0 and k[0] not in self.brokers]:
            self._conns.pop(key).close()
        t = next((t for t in resp.topics if t.name == topic), None)
        if t is None or t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise ReaderError(f"topic {topic} does not exist", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if t.error_code != ErrorCode.NONE:
            raise ReaderError(f"Metadata for topic {topic}: {error_name(t.error_code)}", ErrorCode(t.error_code))
        return {p.partition_index: PartitionLeader(p.partition_index, p.leader_id, p.leader_epoch,
                                                   tuple(p.replica_nodes), p.error_code) for p in t.partitions}

    def topics(self) -> dict[str, int]:
        """Every topic the cluster holds, with its partition count (topics answered with an error are left
        out), from a fresh Metadata request for all topics (retried). Asking never creates a topic."""
        return self.retrying("Metadata for all topics", self._all_topics)

    def _all_topics(self) -> dict[str, int]:
        conn = self._any_connection()
        version = conn.version(METADATA, 1, 12)
        resp = conn.request(METADATA, version, {"topics": None, "allow_auto_topic_creation": False})
        self.brokers = {b.node_id: (b.host, b.port, b.rack) for b in resp.brokers}
        return {t.name: len(t.partitions) for t in resp.topics if t.error_code == ErrorCode.NONE}

    def list_offsets(self, topic: str, timestamps: Mapping[int, int], read_committed: bool
                     ) -> dict[int, int]:
        """partition -> the offset of ListOffsets for its timestamp (EARLIEST, LATEST - the last stable
        offset under read_committed - or a time in ms: the first offset whose timestamp is at least it,
        or -1 when none is), each asked of its leader, retried while leaders move."""
        out: dict[int, int] = {}

        def attempt() -> dict[int, int]:
            leaders = self.partitions(topic)
            missing = [p for p in timestamps if p not in leaders]
            if missing:
                raise ReaderError(f"topic {topic} has no partition {', '.join(map(str, missing))} "
                                  f"(it has {len(leaders)})", None)
            by_leader: dict[int, list[int]] = {}
            for p in timestamps:
                if p not in out:
                    by_leader.setdefault(leaders[p].leader, []).append(p)
            for leader, parts in by_leader.items():
                if leader < 0:
                    raise ReaderError(f"{topic}-{parts[0]} has no leader", ErrorCode.LEADER_NOT_AVAILABLE)
                self._list_offsets_at(leader, topic, parts, timestamps, leaders, read_committed, out)
            return out

        return self.retrying(f"ListOffsets for topic {topic}", attempt)

    def _list_offsets_at(self, leader: int, topic: str, parts: Iterable[int], timestamps: Mapping[int, int],
                         leaders: Mapping[int, PartitionLeader], read_committed: bool, out: dict[int, int]) -> None:
        conn = self.connection(leader)
        version = conn.version(LIST_OFFSETS, 1, 10)
        body = {"replica_id": -1, "isolation_level": int(read_committed), "timeout_ms": self.cfg.socket_timeout_ms,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": p, "current_leader_epoch": leaders[p].leader_epoch, "timestamp": timestamps[p]}
                    for p in parts]}]}
        resp = conn.request(LIST_OFFSETS, version, body)
        failed = None
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code == ErrorCode.NONE:
                    out[p.partition_index] = p.offset
                elif failed is None:
                    failed = p
        if failed is not None:
            raise ReaderError(f"ListOffsets for {topic}-{failed.partition_index}: {error_name(failed.error_code)}",
                              ErrorCode(failed.error_code))

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
