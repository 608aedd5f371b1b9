"""RaftManager: the quorum node on asyncio, with real sockets, files and a clock (Kafka's KafkaRaftManager).

It runs one RaftNode on the event loop: requests from the QuorumServer go into the node, the node's
requests go out over BrokerClient connections (two per peer: fetches, which the leader may hold, on
their own, everything else on the other), its log is flushed on a worker thread, and it is polled
whenever something happened or its next deadline comes. The layer above uses the client API here
(the node's, plus `wait_for_commit`); listener callbacks run on the loop, inside the node's poll.

A failure the node cannot go on from (a flush or a listener raising) stops it and is kept in
`failure`: a metadata log that cannot be written must not keep voting.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import time
from collections.abc import Sequence
from typing import Any

from gregor.client.broker_client import BrokerClient, BrokerConnectionError
from gregor.protocol.schema import Struct
from gregor.raft import wire
from gregor.raft.config import Endpoint, QuorumConfig
from gregor.raft.errors import NotLeaderError, RaftError
from gregor.raft.listeners import LeaderAndEpoch, RaftListener
from gregor.raft.log import OffsetAndEpoch, RaftLog
from gregor.raft.node import RaftNode
from gregor.raft.node_base import Reply, Send
from gregor.raft.quorum_state import FileQuorumStateStore
from gregor.raft.server import QuorumServer
from gregor.raft.snapshots import SnapshotWriter
from gregor.security.inter_broker import ClientSecurity

log = logging.getLogger("gregor.raft")

_FETCHES = (wire.FETCH_KEY, wire.FETCH_SNAPSHOT_KEY)


def now_ms() -> int:
    """Wall-clock milliseconds: batches carry them as their append time (the node never lets time go back)."""
    return time.time_ns() // 1_000_000


class _CommitTracker:
    """The first listener: resolves `wait_for_commit` futures as their batches are handed over."""

    def __init__(self) -> None:
        self.waiters: dict[int, list[tuple[int, asyncio.Future[int]]]] = {}

    def add(self, offset: int, epoch: int, fut: asyncio.Future[int]) -> None:
        self.waiters.setdefault(offset, []).append((epoch, fut))

    def handle_commit(self, batches: list[Any]) -> None:
        if not self.waiters:
            return
        for b in batches:
            span = b.last_offset - b.base_offset + 1
            offsets = ([o for o in range(b.base_offset, b.last_offset + 1) if o in self.waiters]
                       if span < len(self.waiters) else [o for o in self.waiters if b.base_offset <= o <= b.last_offset])
            for offset in offsets:
                for epoch, fut in self.waiters.pop(offset):
                    if fut.done():
                        continue
                    if b.epoch == epoch:
                        fut.set_result(offset)
                    else:
                        fut.set_exception(NotLeaderError(
                            f"offset {offset} was written in epoch {b.epoch}, not {epoch}: the append was lost "
                            "with its leader", -1, b.epoch))

    def handle_load_snapshot(self, reader: Any) -> None:
        for offset in [o for o in self.waiters if o < reader.snapshot_id.offset]:
            for _epoch, fut in self.waiters.pop(offset):
                if not fut.done():
                    fut.set_exception(RaftError(f"offset {offset} is now covered by snapshot {reader.snapshot_id}: "
                                                "whether the append survived is unknown here"))

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        pass

    def fail_all(self, why: str) -> None:
        for waiters in self.waiters.values():
            for _epoch, fut in waiters:
                if not fut.done():
                    fut.set_exception(RaftError(why))
        self.waiters.clear()


class RaftManager:
    """One quorum member on the event loop. Build it, `register_listener`, `await start()`."""

    def __init__(self, config: QuorumConfig, raft_log: RaftLog, state_dir: str, *,
                 listen: Endpoint | None = None, serve: bool = True, max_request_bytes: int = 100 << 20,
                 max_connections: int = 500, client_id: str | None = None,
                 security: ClientSecurity | None = None) -> None:
        """`listen`: where the quorum listener binds (default: this voter's endpoint); `serve=False` when
        the owner hands the quorum's requests in itself (`handle_request`, e.g. from a broker listener)."""
        self.config = config
        self.log = raft_log
        self.node = RaftNode(config, raft_log, FileQuorumStateStore(state_dir), random.Random(), now_ms(),
                             max_observers=max_connections)
        self.listen = listen if listen is not None else config.voters.get(config.node_id)
        self.server = (QuorumServer(self.handle_request, max_request_bytes, max_connections)
                       if self.listen and serve else None)
        self.client_id = client_id or f"raft-{config.node_id}"
        self.security = security  # how to reach the other voters' listeners (TLS on a controller listener)
        self.failure: BaseException | None = None
        self._clients: dict[tuple[int, bool], BrokerClient] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sends: set[asyncio.Task[None]] = set()
        self._flushing = False
        self._flusher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"raft-flush-{config.node_id}")
        self._commits = _CommitTracker()
        self.node.register_listener(self._commits)
        self._stopping = False

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self.server is not None and self.listen is not None:
            await self.server.start(self.listen.host, self.listen.port)
        self._task = asyncio.create_task(self._run(), name=f"raft-{self.config.node_id}")

    @property
    def port(self) -> int:
        return self.server.port if self.server is not None else 0

    async def shutdown(self, resign_timeout_s: float = 5.0) -> None:
        """Resign if leading (the others elect at once), stop, flush and close the log. A leader waits up to
        `resign_timeout_s` for every other voter to acknowledge its EndQuorumEpoch (Kafka's graceful
        shutdown waits 5 s too): 2 s proved too short for a loaded machine, where an unacknowledged one
        leaves the others waiting out their fetch timeout."""
        if self._task is None:
            return
        if self.failure is None and self.node.role == "Leader":
            self.node.resign(self.node.epoch)
            self.wake()
            deadline = time.monotonic() + resign_timeout_s
            while time.monotonic() < deadline and len(self.node.s.end_acked) < len(self.node.other_voters):
                await asyncio.sleep(0.01)
        self._stopping = True
        self.wake()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task = None
        for t in list(self._sends):
            t.cancel()
        await asyncio.gather(*self._sends, return_exceptions=True)
        for c in self._clients.values():
            c.close()
        if self.server is not None:
            await self.server.close()
        self._flusher.shutdown(wait=True)
        self._commits.fail_all("the quorum node shut down")
        self.log.close()

    def wake(self) -> None:
        self._wake.set()

    # --- the loop ---------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while not self._stopping:
                self._wake.clear()
                now = now_ms()
                self._route(self.node.poll(now))
                self._maybe_flush()
                deadline = self.node.next_deadline_ms()
                wait_s = 1.0 if deadline is None else min(1.0, max(0.0, (deadline - now_ms()) / 1000))
                if wait_s > 0:
                    try:
                        await asyncio.wait_for(self._wake.wait(), wait_s)
                    except TimeoutError:
                        pass
                else:
                    await asyncio.sleep(0)
        except Exception as e:  # a listener or the log failed: this node stops
            log.exception("node %d: the quorum node failed and stops", self.config.node_id)
            self.failure = e
        finally:
            self._stopping = True

    def _route(self, out: list[Send | Reply]) -> None:
        for m in out:
            if isinstance(m, Reply):
                fut: asyncio.Future[dict[str, Any]] = m.handle
                if not fut.done():
                    fut.set_result(m.body)
            else:
                t = asyncio.create_task(self._send(m))
                self._sends.add(t)
                t.add_done_callback(self._sends.discard)

    async def handle_request(self, api_key: int, version: int, body: Struct) -> dict[str, Any]:
        """Answer one of the quorum's requests (decoded); the body of the response, in the request's version."""
        if self._stopping or self.failure is not None:
            raise ConnectionError("the quorum node is stopping")
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.node.handle_request(fut, api_key, version, body, now_ms())
        self.wake()
        return await fut

    def _client(self, destination: int, fetches: bool) -> BrokerClient:
        c = self._clients.get((destination, fetches))
        if c is None or c.closed:
            ep = (self.config.voters.get(destination) if destination >= 0
                  else self.config.bootstrap_servers[-destination - 2])
            assert ep is not None, f"no endpoint for node {destination}"
            c = BrokerClient(ep.host, ep.port, self.client_id, max_in_flight=2,
                             connect_timeout_s=self.config.request_timeout_ms / 1000, security=self.security)
            self._clients[(destination, fetches)] = c
        return c

    async def _send(self, m: Send) -> None:
        api = wire.QUORUM_APIS[m.api_key]
        timeout_s = (self.config.request_timeout_ms + self.config.fetch_max_wait_ms) / 1000
        try:
            body = await self._client(m.destination, m.api_key in _FETCHES).request(api, m.version, m.body, timeout_s)
        except (BrokerConnectionError, TimeoutError, OSError) as e:
            log.debug("node %d: %s to %d failed: %s", self.config.node_id, api.name, m.destination, e)
            if not self._stopping:
                self.node.handle_failure(m.request_id, now_ms())
        else:
            if not self._stopping:
                self.node.handle_response(m.request_id, body, now_ms())
        self.wake()

    def _maybe_flush(self) -> None:
        if self._flushing or not self.node.needs_flush:
            return
        self._flushing = True
        fut = asyncio.get_running_loop().run_in_executor(self._flusher, self.log.flush)
        fut.add_done_callback(self._flushed)

    def _flushed(self, fut: asyncio.Future[None]) -> None:
        self._flushing = False
        if fut.exception() is not None:
            log.error("node %d: the metadata log cannot be flushed: %s", self.config.node_id, fut.exception())
            self.failure = fut.exception()
            self._stopping = True
        elif not self._stopping:
            self.node.on_flushed(now_ms())
        self.wake()

    # --- the client API ---------------------------------------------------------------------

    def register_listener(self, listener: RaftListener) -> None:
        self.node.register_listener(listener)
        self.wake()

    def leader_and_epoch(self) -> LeaderAndEpoch:
        return self.node.leader_and_epoch()

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return self.log.latest_snapshot_id

    def resign(self, epoch: int) -> None:
        """Give up the leadership of `epoch` (the others elect at once)."""
        self.node.resign(epoch)
        self.wake()

    @property
    def high_watermark(self) -> int:
        return self.node.high_watermark

    def schedule_append(self, epoch: int, values: Sequence[bytes]) -> int:
        offset = self.node.schedule_append(epoch, values, now_ms())
        self.wake()
        return offset

    def schedule_atomic_append(self, epoch: int, values: Sequence[bytes]) -> int:
        offset = self.node.schedule_atomic_append(epoch, values, now_ms())
        self.wake()
        return offset

    def create_snapshot(self, end_offset: int, last_contained_log_time_ms: int) -> SnapshotWriter | None:
        return self.node.create_snapshot(end_offset, last_contained_log_time_ms)

    def wait_for_commit(self, offset: int, epoch: int) -> asyncio.Future[int]:
        """Resolves with `offset` once the record appended there in `epoch` is committed (handed to the
        listeners); fails with NotLeaderError if another epoch's record took its place (the append was
        lost with its leader)."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._commits.add(offset, epoch, fut)
        self.wake()
        return fut
