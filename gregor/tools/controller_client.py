"""A blocking client for the tools that talk to the controller (elect-leaders, reassign): it reads
Metadata from a bootstrap server, finds the controller (Metadata's controller_id), checks in
ApiVersions that the controller serves the API, and sends the request there on our own codec
(confluent-kafka has no AlterPartitionReassignments/ListPartitionReassignments). NOT_CONTROLLER
(the controller moved meanwhile) is retried once against the new one, as Kafka's admin client does."""

from __future__ import annotations

import socket
import struct
from typing import Any

from gregor.protocol import apis
from gregor.protocol.errors import ErrorCode
from gregor.protocol.frames import decode_response, encode_request
from gregor.protocol.schema import Api, Struct
from gregor.tools.common import ToolError, _host_port, check_reachable

_SIZE = struct.Struct(">i")
METADATA_VERSION = 8  # controller_id, offline_replicas, no flexible encoding needed
CLIENT_ID = "gregor-admin"


class Connection:
    """One blocking connection to one broker."""

    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.where = f"{host}:{port}"
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as e:
            raise ToolError(f"cannot connect to {self.where}: {e.strerror or e}") from None
        self.timeout_s = timeout_s
        self._cid = 0

    def request(self, api: Api, version: int, body: dict[str, Any]) -> Struct:
        self._cid += 1
        try:
            self.sock.sendall(encode_request(api, version, self._cid, CLIENT_ID, body))
            size = _SIZE.unpack(self._read(4))[0]
            got, resp = decode_response(memoryview(self._read(size)), api, version)
        except TimeoutError:
            raise ToolError(f"no answer from {self.where} to {api.name} within {self.timeout_s:g} s") from None
        except OSError as e:
            raise ToolError(f"{api.name} to {self.where} failed: {e.strerror or e}") from None
        if got != self._cid:
            raise ToolError(f"{self.where} answered correlation id {got}, expected {self._cid}")
        return resp

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ToolError(f"{self.where} closed the connection")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


class ClusterClient:
    """Metadata from the bootstrap servers; requests to the controller."""

    def __init__(self, servers: str, timeout_s: float) -> None:
        check_reachable(servers, timeout_s)
        self.servers = servers
        self.timeout_s = timeout_s
        self._bootstrap: Connection | None = None
        self._controller: tuple[int, Connection] | None = None
        self._nodes: dict[int, Connection] = {}

    def metadata(self, topics: list[str] | None = None) -> Struct:
        """Metadata v8 for `topics` (None: all), never creating a topic."""
        if self._bootstrap is None:
            for server in self.servers.split(","):
                if server.strip():
                    try:
                        self._bootstrap = Connection(*_host_port(server), self.timeout_s)
                        break
                    except ToolError:
                        continue
            if self._bootstrap is None:
                raise ToolError(f"cannot connect to any of {self.servers}")
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": False}
        return self._bootstrap.request(apis.BY_KEY[3], METADATA_VERSION, body)

    def to_bootstrap(self, api: Api, body: dict[str, Any], max_version: int, unserved: str = "") -> Struct:
        """Send to the bootstrap broker at the highest version both sides serve (ToolError if it serves none,
        followed by `unserved`: what that means)."""
        self.metadata([])  # connects
        conn = self._bootstrap
        assert conn is not None
        served = next((k for k in conn.request(apis.BY_KEY[18], 0, {}).api_keys if k.api_key == api.key), None)
        if served is None:
            raise ToolError(f"the broker does not serve {api.name} (API key {api.key}){unserved}")
        return conn.request(api, min(served.max_version, max_version), body)

    def to_controller(self, api_key: int, body: dict[str, Any], max_version: int) -> Struct:
        """Send to the controller at the highest version both sides serve (up to `max_version`)."""
        api = apis.BY_KEY[api_key]
        for attempt in range(2):
            conn, version = self._controller_connection(api, max_version)
            resp = conn.request(api, version, body)
            if resp.get("error_code") == ErrorCode.NOT_CONTROLLER and attempt == 0:
                self._drop_controller()
                continue
            return resp
        raise AssertionError("unreachable")

    def _controller_connection(self, api: Api, max_version: int) -> tuple[Connection, int]:
        md = self.metadata([])
        cid = md.controller_id
        if cid < 0:
            raise ToolError("the cluster has no controller at the moment (Metadata names none); try again")
        if self._controller is not None and self._controller[0] != cid:
            self._drop_controller()
        if self._controller is None:
            node = next((b for b in md.brokers if b.node_id == cid), None)
            if node is None:
                raise ToolError(f"the controller (broker {cid}) is not among the live brokers")
            self._controller = (cid, Connection(node.host, node.port, self.timeout_s))
        conn = self._controller[1]
        versions = conn.request(apis.BY_KEY[18], 0, {})
        served = next((k for k in versions.api_keys if k.api_key == api.key), None)
        if served is None:
            raise ToolError(f"the controller (broker {cid}) does not serve {api.name} (API key {api.key})")
        return conn, min(served.max_version, max_version)

    def to_node(self, node_id: int, api_key: int, body: dict[str, Any], max_version: int) -> Struct:
        """Send to one broker (by id, from Metadata) at the highest version both sides serve."""
        api = apis.BY_KEY[api_key]
        conn = self._nodes.get(node_id)
        if conn is None:
            node = next((b for b in self.metadata([]).brokers if b.node_id == node_id), None)
            if node is None:
                raise ToolError(f"broker {node_id} is not among the live brokers")
            conn = self._nodes[node_id] = Connection(node.host, node.port, self.timeout_s)
        served = next((k for k in conn.request(apis.BY_KEY[18], 0, {}).api_keys if k.api_key == api.key), None)
        if served is None:
            raise ToolError(f"broker {node_id} does not serve {api.name} (API key {api.key})")
        return conn.request(api, min(served.max_version, max_version), body)

    def _drop_controller(self) -> None:
        if self._controller is not None:
            self._controller[1].close()
            self._controller = None

    def close(self) -> None:
        self._drop_controller()
        for conn in self._nodes.values():
            conn.close()
        self._nodes.clear()
        if self._bootstrap is not None:
            self._bootstrap.close()


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
