"""The registry's Kafka client: the few requests a registry makes, on the asyncio loop it runs on.

Built on the broker's own inter-broker connection (gregor.client.BrokerClient) and codec, so it never
blocks the loop (a registry inside a broker shares the broker's loop) and speaks TLS and SASL as a
broker does. What it does: metadata; create the `_schemas` topic; produce one record with acks=all;
fetch and list offsets of one partition; find a group's coordinator and send it the classic group
protocol's requests; describe ACLs. Each connection first asks ApiVersions, and every request uses the
highest version both sides know, so the same client works against Gregor and Kafka.

Failures: a connection error or a retriable error code (not the leader, coordinator moving, not enough
replicas yet) refreshes metadata and retries with a backoff until the request timeout; anything else
raises KafkaRequestError with the error's name.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from gregor.client.broker_client import BrokerClient, BrokerConnectionError
from gregor.protocol import records as rec
from gregor.protocol.apis import BY_KEY
from gregor.protocol.errors import ErrorCode
from gregor.protocol.messages.api_versions import API_VERSIONS
from gregor.protocol.messages.find_coordinator import FIND_COORDINATOR
from gregor.protocol.messages.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, LIST_OFFSETS
from gregor.protocol.messages.metadata import METADATA
from gregor.protocol.messages.produce import PRODUCE
from gregor.protocol.messages.topics import CREATE_TOPICS
from gregor.protocol.schema import Api, Struct
from gregor.security.inter_broker import ClientSecurity

log = logging.getLogger("gregor.schema_registry.kafka")

RETRIABLE = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.NETWORK_EXCEPTION, ErrorCode.NOT_CONTROLLER,
})
T = TypeVar("T")
_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)
_FETCH_MAX_BYTES = 8 << 20


class KafkaRequestError(Exception):
    def __init__(self, code: int, message: str = "") -> None:
        try:
            name = ErrorCode(code).name
        except ValueError:
            name = f"error {code}"
        super().__init__(f"{name}{': ' + message if message else ''}")
        self.code = code
        self.retriable = code in RETRIABLE


def parse_bootstrap(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in items:
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        if not item:
            continue
        host, _, port = item.rpartition(":")
        out.append((host.strip("[]") or "127.0.0.1", int(port)))
    if not out:
        raise ValueError("no bootstrap server")
    return out


class KafkaClient:
    """Requests to a Kafka cluster from one asyncio loop; close() ends every connection."""

    def __init__(self, bootstrap: str | Sequence[str], *, client_id: str = "schema-registry",
                 security: ClientSecurity | None = None, request_timeout_s: float = 30.0) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.security = security
        self.request_timeout_s = request_timeout_s
        self._brokers: dict[int, tuple[str, int]] = {}
        self._conns: dict[object, tuple[BrokerClient, dict[int, int]]] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self.controller_id = -1
        self._closed = False
        self._connecting = asyncio.Lock()  # one new connection at a time: two would race for one slot

    async def close(self) -> None:
        self._closed = True
        for client, _ in self._conns.values():
            client.close()
        self._conns.clear()

    # --- connections and versions -------------------------------------------------------------------
    async def _conn(self, node: int | None) -> tuple[BrokerClient, dict[int, int]]:
        """A connection to broker `node` (None: any bootstrap server), with the API versions it serves."""
        async with self._connecting:
            return await self._connect(node)

    async def _connect(self, node: int | None) -> tuple[BrokerClient, dict[int, int]]:
        if self._closed:
            raise BrokerConnectionError("the registry's Kafka client is closed")
        keys: list[object] = [node] if node is not None else [k for k in self._conns if not isinstance(k, int)]
        for k in keys:
            entry = self._conns.get(k)
            if entry is not None and not entry[0].closed:
                return entry
        if node is not None:
            if node not in self._brokers:
                resp, _ = await self._send_on(await self._connect(None), METADATA, {"topics": [],
                                                                                 "allow_auto_topic_creation": False})
                self._brokers.update({b.node_id: (b.host, b.port) for b in resp.brokers})
            if node not in self._brokers:
                raise BrokerConnectionError(f"broker {node} is not in the cluster's metadata")
            addresses: list[tuple[object, tuple[str, int]]] = [(node, self._brokers[node])]
        else:
            addresses = [(("bootstrap", i), a) for i, a in enumerate(self.bootstrap)]
        last: Exception | None = None
        for key, (host, port) in addresses:
            client = BrokerClient(host, port, self.client_id, security=self.security,
                                  connect_timeout_s=self.request_timeout_s)
            try:
                resp = await client.request(API_VERSIONS, 3, {"client_software_name": "gregor-schema-registry",
                                                              "client_software_version": "1"}, self.request_timeout_s)
            except (BrokerConnectionError, TimeoutError) as e:
                client.close()
                last = e
                continue
            versions = {k.api_key: k.max_version for k in resp.api_keys}
            self._conns[key] = (client, versions)
            return client, versions
        where = f"broker {node}" if node is not None else "any bootstrap server"
        raise BrokerConnectionError(f"cannot reach {where}: {last}")

    @staticmethod
    def _version(api: Api, versions: dict[int, int]) -> int:
        theirs = versions.get(api.key)
        if theirs is None or theirs < api.min_version:
            raise KafkaRequestError(ErrorCode.UNSUPPORTED_VERSION, f"the broker does not serve {api.name}")
        return min(api.max_version, theirs)

    async def send(self, api: Api, body: dict[str, Any], node: int | None = None) -> tuple[Struct, int]:
        """One request to `node` (None: any broker). Returns the response and the version used."""
        return await self._send_on(await self._conn(node), api, body)

    async def _send_on(self, conn: tuple[BrokerClient, dict[int, int]], api: Api, body: dict[str, Any]) -> tuple[Struct, int]:
        client, versions = conn
        version = self._version(api, versions)
        try:
            return await client.request(api, version, body, self.request_timeout_s), version
        except (BrokerConnectionError, TimeoutError):
            client.close()
            raise

    async def _retrying(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run `attempt()` until it returns, retrying connection errors and retriable codes until the timeout."""
        deadline = time.monotonic() + self.request_timeout_s
        i = 0
        while True:
            try:
                return await attempt()
            except (BrokerConnectionError, TimeoutError, KafkaRequestError) as e:
                if isinstance(e, KafkaRequestError) and not e.retriable:
                    raise
                if time.monotonic() + _BACKOFF_S[min(i, len(_BACKOFF_S) - 1)] > deadline:
                    raise KafkaRequestError(ErrorCode.REQUEST_TIMED_OUT, f"{what}: {e}") from e
                self._leaders.clear()
                await asyncio.sleep(_BACKOFF_S[min(i, len(_BACKOFF_S) - 1)])
                i += 1

    # --- metadata and topics ------------------------------------------------------------------------
    async def metadata(self, topics: list[str] | None) -> Struct:
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": False}
        resp, _ = await self.send(METADATA, body)
        self._brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        self.controller_id = resp.controller_id
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code == ErrorCode.NONE and p.leader_id >= 0:
                    self._leaders[(t.name, p.partition_index)] = p.leader_id
        return resp

    async def topic_partitions(self, topic: str) -> int | None:
        """The topic's partition count, None if it does not exist."""
        async def attempt() -> int | None:
            resp = await self.metadata([topic])
            for t in resp.topics:
                if t.name == topic:
                    if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                        return None
                    if t.error_code != ErrorCode.NONE:
                        raise KafkaRequestError(t.error_code, f"metadata of {topic}")
                    return len(t.partitions)
            return None

        return await self._retrying(f"metadata of {topic}", attempt)

    async def create_topic(self, topic: str, partitions: int, replication_factor: int, configs: dict[str, str]) -> bool:
        """Create the topic; False if it exists already."""
        async def attempt() -> bool:
            await self.metadata([])
            node = self.controller_id if self.controller_id in self._brokers else None
            body = {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": replication_factor,
                                "assignments": [], "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                    "timeout_ms": int(self.request_timeout_s * 1000), "validate_only": False}
            resp, _ = await self.send(CREATE_TOPICS, body, node)
            result = resp.topics[0]
            if result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS:
                return False
            if result.error_code != ErrorCode.NONE:
                raise KafkaRequestError(result.error_code, result.get("error_message") or f"creating {topic}")
            return True

        return await self._retrying(f"creating {topic}", attempt)

    async def live_brokers(self) -> int:
        await self.metadata([])
        return len(self._brokers)

    async def _leader(self, topic: str, partition: int) -> int:
        leader = self._leaders.get((topic, partition))
        if leader is None:
            await self.metadata([topic])
            leader = self._leaders.get((topic, partition))
            if leader is None:
                raise KafkaRequestError(ErrorCode.LEADER_NOT_AVAILABLE, f"no leader for {topic}-{partition}")
        return leader

    # --- one partition ------------------------------------------------------------------------------
    async def produce(self, topic: str, partition: int, key: bytes | None, value: bytes | None) -> int:
        """Append one record with acks=all; returns its offset."""
        batch = rec.build_batch([rec.Record(0, int(time.time() * 1000), key, value)])

        async def attempt() -> int:
            leader = await self._leader(topic, partition)
            body = {"transactional_id": None, "acks": -1, "timeout_ms": int(self.request_timeout_s * 1000),
                    "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}
            resp, _ = await self.send(PRODUCE, body, leader)
            p = resp.responses[0].partition_responses[0]
            if p.error_code != ErrorCode.NONE:
                raise KafkaRequestError(p.error_code, p.get("error_message") or f"producing to {topic}-{partition}")
            offset: int = p.base_offset
            return offset

        return await self._retrying(f"producing to {topic}-{partition}", attempt)

    async def list_offset(self, topic: str, partition: int, latest: bool = True) -> int:
        """The partition's end offset (high watermark), or its log start offset."""
        async def attempt() -> int:
            leader = await self._leader(topic, partition)
            body = {"replica_id": -1, "isolation_level": 0, "timeout_ms": 0,
                    "topics": [{"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                                               "timestamp": LATEST_TIMESTAMP if latest else EARLIEST_TIMESTAMP}]}]}
            resp, _ = await self.send(LIST_OFFSETS, body, leader)
            p = resp.topics[0].partitions[0]
            if p.error_code != ErrorCode.NONE:
                raise KafkaRequestError(p.error_code, f"offsets of {topic}-{partition}")
            offset: int = p.offset
            return offset

        return await self._retrying(f"offsets of {topic}-{partition}", attempt)

    async def fetch(self, topic: str, partition: int, offset: int, max_wait_ms: int) -> tuple[list[rec.Record], int, int]:
        """Records from `offset` on (waiting up to max_wait_ms for some), the offset to fetch next, and the
        high watermark."""
        fetch_api = BY_KEY[1]

        async def attempt() -> tuple[list[rec.Record], int, int]:
            leader = await self._leader(topic, partition)
            body = {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": _FETCH_MAX_BYTES,
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": topic, "partitions": [{
                        "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                        "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": _FETCH_MAX_BYTES}]}],
                    "forgotten_topics_data": [], "rack_id": ""}
            resp, _ = await self.send(fetch_api, body, leader)
            if resp.get("error_code", 0):
                raise KafkaRequestError(resp.error_code, f"fetching {topic}-{partition}")
            p = resp.responses[0].partitions[0]
            if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                start = await self.list_offset(topic, partition, latest=False)
                if start > offset:  # the log start moved past us (records deleted): go on from it
                    return [], start, p.high_watermark
            if p.error_code != ErrorCode.NONE:
                raise KafkaRequestError(p.error_code, f"fetching {topic}-{partition}")
            out: list[rec.Record] = []
            next_offset = offset
            data = p.records or b""
            for h in rec.iter_headers(memoryview(data)):
                next_offset = max(next_offset, h.next_offset)
                if h.is_control:
                    continue
                out.extend(r for r in rec.decode_records(memoryview(data), h) if r.offset >= offset)
            return out, next_offset, p.high_watermark

        return await self._retrying(f"fetching {topic}-{partition}", attempt)

    # --- groups -------------------------------------------------------------------------------------
    async def find_coordinator(self, group: str) -> int:
        async def attempt() -> int:
            resp, version = await self.send(FIND_COORDINATOR, {"key": group, "key_type": 0, "coordinator_keys": [group]})
            if version >= 4:
                c = resp.coordinators[0]
                code, node, host, port = c.error_code, c.node_id, c.host, c.port
            else:
                code, node, host, port = resp.error_code, resp.node_id, resp.host, resp.port
            if code != ErrorCode.NONE:
                raise KafkaRequestError(code, f"finding the coordinator of group {group}")
            self._brokers[node] = (host, port)
            return int(node)

        return await self._retrying(f"finding the coordinator of group {group}", attempt)
