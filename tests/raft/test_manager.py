"""The quorum on asyncio with real sockets and files, in one process: three RaftManagers on loopback
ports elect, replicate and answer the wire as Kafka's controllers would (kafka-python's own classes
encode the DescribeQuorum and ApiVersions requests and decode our answers)."""

from __future__ import annotations

import asyncio
import socket
import struct
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import DescribeQuorumRequest, DescribeQuorumResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from gregor.raft.config import Endpoint, QuorumConfig
from gregor.raft.errors import NotLeaderError
from gregor.raft.manager import RaftManager
from gregor.raft.metadata_log import MetadataLog
from gregor.tools.ports import pick_ports


class Collect:
    def __init__(self) -> None:
        self.values: list[bytes] = []
        self.leaders: list[Any] = []

    def handle_commit(self, batches: list[Any]) -> None:
        for b in batches:
            self.values.extend(b.records)

    def handle_load_snapshot(self, reader: Any) -> None:
        self.values = list(reader.records())

    def handle_leader_change(self, leader: Any) -> None:
        self.leaders.append(leader)


async def quorum(tmp_path: Path, n: int = 3, fetch_timeout_ms: int = 2000
                 ) -> tuple[dict[int, RaftManager], dict[int, Collect]]:
    ports = pick_ports(n)
    voters = {i + 1: Endpoint("127.0.0.1", ports[i]) for i in range(n)}
    managers, listeners = {}, {}
    for nid in voters:
        config = QuorumConfig(node_id=nid, voters=voters, cluster_id="test-cluster", append_linger_ms=5,
                              fetch_timeout_ms=fetch_timeout_ms)
        log = MetadataLog.open(str(tmp_path / f"n{nid}"))
        m = RaftManager(config, log, log.directory)
        listeners[nid] = Collect()
        m.register_listener(listeners[nid])
        managers[nid] = m
    for m in managers.values():
        await m.start()
    return managers, listeners


async def leader_of(managers: dict[int, RaftManager], timeout_s: float = 15.0) -> RaftManager:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        leaders = [m for m in managers.values() if m.node.role == "Leader"]
        if len(leaders) == 1 and all(m.leader_and_epoch().leader_id == leaders[0].config.node_id
                                     for m in managers.values()):
            return leaders[0]
        await asyncio.sleep(0.02)
    raise AssertionError({n: m.node.describe() for n, m in managers.items()})


def wire_request(port: int, api_key: int, version: int, body: bytes) -> bytes:
    """One request framed by hand (header v2: flexible), its response frame without the size."""
    header = struct.pack(">hhi", api_key, version, 7) + struct.pack(">h", 4) + b"test" + b"\x00"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        size = struct.unpack(">i", _read(s, 4))[0]
        return _read(s, size)


def _read(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def test_three_managers_elect_replicate_and_answer_kafka_clients(tmp_path: Path) -> None:
    async def main() -> None:
        managers, listeners = await quorum(tmp_path)
        try:
            leader = await leader_of(managers)
            epoch = leader.leader_and_epoch().epoch
            offsets = [leader.schedule_append(epoch, [f"v{i}".encode()]) for i in range(50)]
            await asyncio.wait_for(leader.wait_for_commit(offsets[-1], epoch), 10)
            await asyncio.sleep(0.3)
            for c in listeners.values():
                assert c.values == [f"v{i}".encode() for i in range(50)]
                assert c.leaders[-1] == (leader.config.node_id, epoch)
            follower = next(m for m in managers.values() if m is not leader)
            with pytest.raises(NotLeaderError):
                follower.schedule_append(epoch, [b"no"])

            # DescribeQuorum as kafka-python's describe_metadata_quorum sends it, at each version it knows
            loop = asyncio.get_running_loop()
            for version in range(0, 3):
                req = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
                    topic_name="__cluster_metadata",
                    partitions=[DescribeQuorumRequest.TopicData.PartitionData(partition_index=0)])])
                raw = await loop.run_in_executor(None, wire_request, leader.port, 55, version,
                                                 bytes(req.encode(version=version)))
                resp = DescribeQuorumResponse.decode(raw[4 + 1:], version=version)  # correlation id, header tags
                p = resp.topics[0].partitions[0]
                assert (resp.error_code, p.error_code, p.leader_id, p.leader_epoch) == (0, 0, leader.config.node_id,
                                                                                       epoch)
                assert p.high_watermark == leader.high_watermark
                assert sorted(v.replica_id for v in p.current_voters) == [1, 2, 3]
                if version >= 1:
                    assert all(v.last_caught_up_timestamp > 0 for v in p.current_voters)
                if version >= 2:
                    assert sorted((n.node_id, n.listeners[0].port) for n in resp.nodes) == sorted(
                        (nid, m.port) for nid, m in managers.items())
            raw = await loop.run_in_executor(None, wire_request, follower.port, 55, 2,
                                             bytes(req.encode(version=2)))
            assert DescribeQuorumResponse.decode(raw[5:], version=2).topics[0].partitions[0].error_code == 6
            # ApiVersions (header v0 response) lists exactly the quorum's APIs
            raw = await loop.run_in_executor(None, wire_request, leader.port, 18, 3,
                                             bytes(ApiVersionsRequest(client_software_name="t",
                                                                      client_software_version="1").encode(version=3)))
            av = ApiVersionsResponse.decode(raw[4:], version=3)
            assert {k.api_key: (k.min_version, k.max_version) for k in av.api_keys} == {
                1: (13, 17), 18: (0, 4), 52: (0, 2), 53: (0, 1), 54: (0, 1), 55: (0, 2), 59: (0, 1)}
            # anything else closes the connection
            with pytest.raises(ConnectionError):
                await loop.run_in_executor(None, wire_request, leader.port, 3, 12, b"\x00")
        finally:
            for m in managers.values():
                await m.shutdown()

    asyncio.run(main())


def test_a_graceful_shutdown_hands_leadership_over_at_once(tmp_path: Path) -> None:
    async def main() -> None:
        # The followers would notice a silent leader only after a 20 s fetch timeout: a new leader well before
        # it (even on a loaded machine) is EndQuorumEpoch's doing.
        managers, _ = await quorum(tmp_path, fetch_timeout_ms=20_000)
        try:
            leader = await leader_of(managers)
            t0 = asyncio.get_running_loop().time()
            await leader.shutdown()
            rest = {n: m for n, m in managers.items() if m is not leader}
            new = await leader_of(rest)
            took = asyncio.get_running_loop().time() - t0
            assert new is not leader and took < 10
            epoch = new.leader_and_epoch().epoch
            off = new.schedule_append(epoch, [b"after"])
            await asyncio.wait_for(new.wait_for_commit(off, epoch), 10)
        finally:
            for m in managers.values():
                await m.shutdown()

    asyncio.run(main())
