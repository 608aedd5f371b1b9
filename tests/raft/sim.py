"""A deterministic simulation of a quorum: RaftNodes over an in-memory network, with a fake clock.

Everything random comes from one seed: message delays, loss, duplication and reordering; network
partitions; node crashes (a crash keeps only what the node flushed, sometimes a little more, as a page
cache written back would) and restarts from the node's log, snapshots and quorum-state; flushes that
take time; client appends to whoever leads; snapshots taken by the listeners. Every message goes
through the real codec (frames and message definitions) on its way.

`Checker` verifies Raft's safety after every event:

- at most one leader per epoch;
- a committed batch (below some node's high watermark) is never lost or changed: every node's log
  below its high watermark, and every leader's whole log over the committed range, hold exactly the
  same batches (same offsets, epochs, bytes);
- a node's high watermark never goes back while it stays up, and never passes its log end;
- every listener applies the same sequence: at each offset it reaches, its state (a hash chain of all
  the records it applied, carried through its snapshots) equals every other listener's there;
- batches reach a listener in order, once, with no gap;
- every append the client saw committed (its leader applied it) is in the final committed log.
"""

from __future__ import annotations

import glob
import hashlib
import heapq
import json
import os
import random
from dataclasses import dataclass, field
from typing import Any

from gregor.protocol import frames
from gregor.raft import wire
from gregor.raft.config import Endpoint, QuorumConfig
from gregor.raft.errors import BufferFullError, NotLeaderError
from gregor.raft.listeners import LeaderAndEpoch
from gregor.raft.memory_log import MemoryLog
from gregor.raft.metadata_log import METADATA_LOG_DIR_NAME, MetadataLog
from gregor.raft.node import RaftNode
from gregor.raft.node_base import LEADER, Reply, Send
from gregor.raft.quorum_state import MemoryQuorumStateStore
from gregor.raft.records import Batch
from gregor.raft.snapshots import SnapshotReader


class InvariantViolation(AssertionError):
    pass


def _chain(prev: str, value: bytes) -> str:
    return hashlib.sha256(prev.encode() + value).hexdigest()[:16]


class StateMachine:
    """The listener: applies committed records to a hash chain; snapshots it now and then."""

    def __init__(self, sim: Simulation, node_id: int) -> None:
        self.sim = sim
        self.node_id = node_id
        self.next_offset = 0
        self.chain = "0"
        self.count = 0
        self.bytes_since_snapshot = 0
        self.leader: LeaderAndEpoch | None = None
        self.node: RaftNode | None = None

    def handle_commit(self, batches: list[Batch]) -> None:
        for b in batches:
            if b.base_offset != self.next_offset:
                raise InvariantViolation(f"node {self.node_id}: batch at {b.base_offset}, expected {self.next_offset}")
            self.sim.checker.delivered_batch(self.node_id, b)
            for v in b.records:
                self.chain = _chain(self.chain, v)
                self.count += 1
                self.sim.checker.applied_value(self.node_id, v, b.epoch)
            self.next_offset = b.next_offset
            self.sim.checker.state_at(self.node_id, self.next_offset, self.chain, self.count)
            self.bytes_since_snapshot += b.size_bytes
        if self.node is not None and self.bytes_since_snapshot > self.sim.snapshot_bytes:
            w = self.node.create_snapshot(self.next_offset, 0)
            if w is not None:
                w.append([json.dumps({"offset": self.next_offset, "chain": self.chain, "count": self.count}).encode()])
                w.freeze()
                self.sim.stats["snapshots"] += 1
            self.bytes_since_snapshot = 0

    def handle_load_snapshot(self, reader: SnapshotReader) -> None:
        recs = list(reader.records())
        if len(recs) != 1:
            raise InvariantViolation(f"node {self.node_id}: snapshot {reader.snapshot_id} holds {len(recs)} records")
        state = json.loads(recs[0])
        if state["offset"] != reader.snapshot_id.offset:
            raise InvariantViolation(f"snapshot {reader.snapshot_id} says it ends at {state['offset']}")
        self.next_offset, self.chain, self.count = state["offset"], state["chain"], state["count"]
        self.sim.checker.state_at(self.node_id, self.next_offset, self.chain, self.count)
        self.sim.stats["snapshot_loads"] += 1

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader = leader


@dataclass
class SimNode:
    node_id: int
    log: Any  # MemoryLog, or MetadataLog with a storage directory
    store: MemoryQuorumStateStore
    node: RaftNode | None = None
    sm: StateMachine | None = None
    incarnation: int = 0
    flushing: bool = False
    flushed_sizes: dict[str, int] = field(default_factory=dict)  # segment file sizes at the last flush


@dataclass(order=True)
class Event:
    time: int
    seq: int
    kind: str = field(compare=False)
    data: Any = field(compare=False, default=None)


class Checker:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.leaders: dict[int, int] = {}  # epoch -> leader
        self.committed: dict[int, tuple[int, int, bytes]] = {}  # base offset -> (next offset, epoch, bytes)
        self.committed_end = 0
        self.states: dict[int, tuple[str, int]] = {}  # offset -> (chain, count) of the applied prefix
        self.hw: dict[tuple[int, int], int] = {}  # (node, incarnation) -> last high watermark
        self.checked: dict[tuple[int, int], int] = {}
        self.acked: dict[bytes, tuple[int, int]] = {}  # value -> (node that acked, epoch)
        self.delivered: dict[int, tuple[int, int, tuple[bytes, ...], bool]] = {}  # what listeners were handed

    def delivered_batch(self, node_id: int, b: Batch) -> None:
        got = (b.next_offset, b.epoch, tuple(b.records), b.is_control)
        seen = self.delivered.setdefault(b.base_offset, got)
        if seen != got:
            raise InvariantViolation(f"node {node_id} was handed {got[:2]} at {b.base_offset}, another {seen[:2]}")

    def applied_value(self, node_id: int, value: bytes, epoch: int) -> None:
        sn = self.sim.nodes[node_id]
        if sn.node is not None and sn.node.role == LEADER and value in self.sim.pending_appends:
            self.acked[value] = (node_id, epoch)

    def state_at(self, node_id: int, offset: int, chain: str, count: int) -> None:
        seen = self.states.get(offset)
        if seen is None:
            self.states[offset] = (chain, count)
        elif seen != (chain, count):
            raise InvariantViolation(f"node {node_id} applied {count} records up to {offset} with state {chain}, "
                                     f"another node {seen[1]} with {seen[0]}")

    def _record(self, node_id: int, base: int, nxt: int, epoch: int, data: bytes) -> None:
        seen = self.committed.get(base)
        if seen is None:
            self.committed[base] = (nxt, epoch, data)
            self.committed_end = max(self.committed_end, nxt)
        elif seen != (nxt, epoch, data):
            raise InvariantViolation(f"node {node_id}: committed batch at {base} is (next {nxt}, epoch {epoch}), "
                                     f"it was (next {seen[0]}, epoch {seen[1]}) (or its bytes changed)")

    def check(self) -> None:
        for sn in self.sim.nodes.values():
            n = sn.node
            if n is None:
                continue
            key = (sn.node_id, sn.incarnation)
            if n.role == LEADER:
                other = self.leaders.setdefault(n.epoch, sn.node_id)
                self.sim.stats["elections"] = len(self.leaders)
                if other != sn.node_id:
                    raise InvariantViolation(f"two leaders in epoch {n.epoch}: {other} and {sn.node_id}")
            hw = n.high_watermark
            if hw < self.hw.get(key, -1):
                raise InvariantViolation(f"node {sn.node_id}: HW went back from {self.hw[key]} to {hw}")
            if hw > n.log.end_offset and hw > n.log.log_start_offset:
                raise InvariantViolation(f"node {sn.node_id}: HW {hw} above its log end {n.log.end_offset}")
            self.hw[key] = hw
            start = max(self.checked.get(key, 0), sn.log.log_start_offset)
            for base, epoch, data in records_in(sn.log, start, hw):
                self._record(sn.node_id, base, base + _batch_count(data), epoch, data)
            if hw > 0:
                # A snapshot is taken only of committed records, and one taken in the step that committed
                # them leaves none to read here: they count as committed all the same.
                self.committed_end = max(self.committed_end, min(hw, sn.log.log_start_offset))
            self.checked[key] = max(start, hw)
            if n.role == LEADER and n.s.leader is not None and n.s.leader.started_ms == self.sim.now:
                self.check_leader_complete(sn)

    def check_leader_complete(self, sn: SimNode) -> None:
        """A new leader holds every committed batch (or a snapshot past it)."""
        log = sn.log
        if log.end_offset < self.committed_end:
            raise InvariantViolation(f"leader {sn.node_id} ends at {log.end_offset}, before the committed "
                                     f"{self.committed_end}")
        for base, epoch, data in records_in(log, log.log_start_offset, self.committed_end):
            seen = self.committed.get(base)
            if seen is not None and seen != (base + _batch_count(data), epoch, data):
                raise InvariantViolation(f"leader {sn.node_id} holds another batch at committed offset {base}")

    def final(self) -> None:
        committed_values = {v for _n, _e, values, _c in self.delivered.values() for v in values}
        lost = [v for v in self.acked if v not in committed_values]
        if lost:
            raise InvariantViolation(f"{len(lost)} acknowledged appends are not committed: {lost[:3]}")


def records_in(log: Any, start: int, end: int) -> list[tuple[int, int, bytes]]:
    """(base offset, epoch, bytes) of the whole batches of a log within [start, end)."""
    if isinstance(log, MemoryLog):
        return log.records_in(start, end)
    from gregor.protocol.records import iter_headers
    start = max(start, log.log_start_offset)
    if start >= min(end, log.end_offset):
        return []
    data = bytes(log.read(start, 64 << 20))
    return [(h.base_offset, h.partition_leader_epoch, data[h.position:h.position + h.size])
            for h in iter_headers(data) if h.base_offset >= start and h.next_offset <= end]


def _batch_count(data: bytes) -> int:
    from gregor.protocol.records import read_header
    return read_header(data, 0).last_offset_delta + 1


class Simulation:
    def __init__(self, seed: int, voters: int = 3, observers: int = 0, *, loss: float = 0.02, dup: float = 0.01,
                 max_delay_ms: int = 30, crash_rate: float = 0.3, partition_rate: float = 0.3,
                 append_rate: float = 0.5, snapshot_bytes: int = 3000, election_timeout_ms: int = 1000,
                 fetch_timeout_ms: int = 2000, linger_ms: int = 5, fault_every_ms: tuple[int, int] = (200, 3000),
                 downtime_ms: tuple[int, int] = (100, 6000), flush_delays_ms: tuple[int, ...] = (0, 0, 1, 2, 5),
                 storage_dir: str | None = None, segment_bytes: int = 2048) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.now = 0
        self.seq = 0
        self.events: list[Event] = []
        self.voter_ids = list(range(1, voters + 1))
        self.observer_ids = list(range(100, 100 + observers))
        self.loss, self.dup, self.max_delay_ms = loss, dup, max_delay_ms
        self.crash_rate, self.partition_rate, self.append_rate = crash_rate, partition_rate, append_rate
        self.snapshot_bytes = snapshot_bytes
        self.fault_every_ms, self.downtime_ms, self.flush_delays_ms = fault_every_ms, downtime_ms, flush_delays_ms
        self.election_timeout_ms, self.fetch_timeout_ms, self.linger_ms = election_timeout_ms, fetch_timeout_ms, linger_ms
        self.voters = {v: Endpoint("node", 9000 + v) for v in self.voter_ids}
        self.nodes: dict[int, SimNode] = {}
        self.cut: set[frozenset[int]] = set()  # pairs that cannot talk
        self.pending_appends: set[bytes] = set()
        self.append_counter = 0
        self.checker = Checker(self)
        self.faults = True
        self._same_time_steps = 0
        self.stats = {"events": 0, "messages": 0, "crashes": 0, "partitions": 0, "appends": 0, "snapshots": 0,
                      "snapshot_loads": 0, "elections": 0}
        self.storage_dir, self.segment_bytes = storage_dir, segment_bytes
        for nid in self.voter_ids + self.observer_ids:
            self.nodes[nid] = SimNode(nid, self.open_log(nid), MemoryQuorumStateStore())
            self.start(nid)

    # --- the pieces -----------------------------------------------------------------------

    def config(self, nid: int) -> QuorumConfig:
        return QuorumConfig(node_id=nid, voters=self.voters, election_timeout_ms=self.election_timeout_ms,
                            fetch_timeout_ms=self.fetch_timeout_ms, append_linger_ms=self.linger_ms,
                            cluster_id="sim-cluster")

    def start(self, nid: int) -> None:
        sn = self.nodes[nid]
        sn.incarnation += 1
        sn.flushing = False
        sn.sm = StateMachine(self, nid)
        sn.node = RaftNode(self.config(nid), sn.log, sn.store, random.Random(self.rng.random()), now_ms=self.now)
        sn.sm.node = sn.node
        sn.node.register_listener(sn.sm)

    def open_log(self, nid: int) -> Any:
        if self.storage_dir is None:
            return MemoryLog()
        return MetadataLog.open(os.path.join(self.storage_dir, f"node-{nid}"), segment_bytes=self.segment_bytes)

    def crash(self, nid: int) -> None:
        """kill -9: the memory log keeps what was flushed (and perhaps a little more); the file log keeps
        what the page cache held, and now and then a power loss tears the tail of its last segment."""
        sn = self.nodes[nid]
        if sn.node is None:
            return
        sn.node = None
        sn.sm = None
        if isinstance(sn.log, MemoryLog):
            sn.log = sn.log.durable(keep_unflushed=self.rng.choice([0, 0, 1, 2]))
        else:
            sn.log.abandon()
            segs = sorted(glob.glob(os.path.join(self.storage_dir or "", f"node-{nid}", METADATA_LOG_DIR_NAME,
                                                 "*.log")))
            if segs and self.rng.random() < 0.5:
                size = os.path.getsize(segs[-1])
                keep = sn.flushed_sizes.get(segs[-1], 0)
                if size > keep:
                    os.truncate(segs[-1], self.rng.randint(keep, size))
                    self.stats["torn"] = self.stats.get("torn", 0) + 1
            sn.log = self.open_log(nid)
        self.stats["crashes"] += 1

    def push(self, delay: int, kind: str, data: Any = None) -> None:
        self.seq += 1
        heapq.heappush(self.events, Event(self.now + delay, self.seq, kind, data))

    def can_talk(self, a: int, b: int) -> bool:
        return frozenset((a, b)) not in self.cut

    # --- messages ---------------------------------------------------------------------------

    def route(self, src: int, out: list[Send | Reply]) -> None:
        inc = self.nodes[src].incarnation
        for m in out:
            self.stats["messages"] += 1
            if isinstance(m, Send):
                api = wire.QUORUM_APIS[m.api_key]
                data = frames.encode_request(api, m.version, m.request_id & 0x7FFFFFFF, f"node-{src}", m.body)
                self._transmit(src, m.destination, ("req", src, inc, m.request_id, m.api_key, m.version, data))
            else:
                dst, dst_inc, rid = m.handle
                api = wire.QUORUM_APIS[m.api_key]
                data = b"".join(bytes(c) for c in frames.encode_response(api, m.version, rid & 0x7FFFFFFF, m.body))
                self._transmit(src, dst, ("resp", dst, dst_inc, rid, m.api_key, m.version, data))

    def _transmit(self, src: int, dst: int, msg: tuple) -> None:
        if not self.can_talk(src, dst) or self.rng.random() < self.loss:
            if msg[0] == "req" and self.rng.random() < 0.5:  # sometimes the connection says so quickly
                self.push(self.rng.randint(1, 5), "fail", (src, msg[2], msg[3]))
            return
        copies = 2 if self.rng.random() < self.dup else 1
        for _ in range(copies):
            self.push(self.rng.randint(0, self.max_delay_ms), "deliver", (src, dst, msg))

    def deliver(self, src: int, dst: int, msg: tuple) -> None:
        kind = msg[0]
        sn = self.nodes[dst]
        if not self.can_talk(src, dst):
            return
        if kind == "req":
            _, sender, sender_inc, rid, key, version, data = msg
            if sn.node is None:
                self.push(self.rng.randint(1, 5), "fail", (sender, sender_inc, rid))
                return
            api = wire.QUORUM_APIS[key]
            header, body = frames.decode_request(memoryview(data)[4:], api)
            sn.node.handle_request((sender, sender_inc, rid), key, version, body, self.now)
        else:
            _, to, to_inc, rid, key, version, data = msg
            if sn.node is None or sn.incarnation != to_inc:
                return
            api = wire.QUORUM_APIS[key]
            _corr, body = frames.decode_response(data[4:], api, version)
            sn.node.handle_response(rid, body, self.now)
        self.run_node(dst)

    def run_node(self, nid: int) -> None:
        sn = self.nodes[nid]
        if sn.node is None:
            return
        out = sn.node.poll(self.now)
        self.route(nid, out)
        if sn.node.needs_flush and not sn.flushing:
            sn.flushing = True
            self.push(self.rng.choice(self.flush_delays_ms), "flush", (nid, sn.incarnation))

    # --- faults and clients -------------------------------------------------------------------

    def random_fault(self) -> None:
        r = self.rng.random()
        ids = list(self.nodes)
        if r < 0.4 and self.rng.random() < self.crash_rate:
            up = [i for i in ids if self.nodes[i].node is not None]
            if len(up) > 1:
                victim = self.rng.choice(up)
                if self.rng.random() < 0.5:  # prefer the leader now and then
                    leaders = [i for i in up if self.nodes[i].node.role == LEADER]  # type: ignore[union-attr]
                    victim = leaders[0] if leaders else victim
                self.crash(victim)
                self.push(self.rng.randint(*self.downtime_ms), "restart", victim)
        elif r < 0.8 and self.rng.random() < self.partition_rate:
            self.stats["partitions"] += 1
            group = set(self.rng.sample(ids, self.rng.randint(1, max(1, len(ids) // 2))))
            for a in group:
                for b in ids:
                    if b not in group:
                        self.cut.add(frozenset((a, b)))
            self.push(self.rng.randint(500, 8000), "heal", None)
        elif r < 0.9:
            for sn in self.nodes.values():
                if sn.node is not None and sn.node.role == LEADER and self.rng.random() < 0.3:
                    sn.node.resign(sn.node.epoch)
                    self.run_node(sn.node_id)

    def client_append(self) -> None:
        leaders = [sn for sn in self.nodes.values() if sn.node is not None and sn.node.role == LEADER]
        if not leaders:
            return
        sn = self.rng.choice(leaders)
        assert sn.node is not None
        self.append_counter += 1
        value = f"v{self.append_counter}-{'x' * self.rng.choice([1, 10, 100, 400])}".encode()
        try:
            values = [value] if self.rng.random() < 0.7 else [value + b"/a", value + b"/b"]
            if len(values) == 1:
                sn.node.schedule_append(sn.node.epoch, values, self.now)
            else:
                sn.node.schedule_atomic_append(sn.node.epoch, values, self.now)
            self.pending_appends.update(values)
            self.stats["appends"] += 1
        except (NotLeaderError, BufferFullError):
            pass
        self.run_node(sn.node_id)

    # --- the loop -----------------------------------------------------------------------------

    def next_time(self) -> int:
        times = [self.events[0].time] if self.events else []
        for sn in self.nodes.values():
            if sn.node is not None and (t := sn.node.next_deadline_ms()) is not None:
                times.append(max(t, self.now))
        return min(times) if times else self.now + 10

    def step(self) -> None:
        t = self.next_time()
        if t <= self.now:
            self._same_time_steps += 1
            if self._same_time_steps > 5000:
                raise InvariantViolation(f"stuck at {self.now} ms: " + "; ".join(
                    f"{n}: {sn.node.describe()} deadline {sn.node.next_deadline_ms()}"
                    for n, sn in self.nodes.items() if sn.node is not None))
        else:
            self._same_time_steps = 0
        self.now = max(self.now, t)
        self.stats["events"] += 1
        if self.events and self.events[0].time <= self.now:
            ev = heapq.heappop(self.events)
            self.handle(ev)
        else:
            for nid, sn in self.nodes.items():
                if sn.node is not None and (d := sn.node.next_deadline_ms()) is not None and d <= self.now:
                    self.run_node(nid)
        self.checker.check()

    def handle(self, ev: Event) -> None:
        if ev.kind == "deliver":
            src, dst, msg = ev.data
            self.deliver(src, dst, msg)
        elif ev.kind == "fail":
            nid, inc, rid = ev.data
            sn = self.nodes[nid]
            if sn.node is not None and sn.incarnation == inc:
                sn.node.handle_failure(rid, self.now)
                self.run_node(nid)
        elif ev.kind == "flush":
            nid, inc = ev.data
            sn = self.nodes[nid]
            if sn.node is not None and sn.incarnation == inc:
                sn.flushing = False
                sn.log.flush()
                if not isinstance(sn.log, MemoryLog):
                    d = os.path.join(self.storage_dir or "", f"node-{nid}", METADATA_LOG_DIR_NAME)
                    sn.flushed_sizes = {p: os.path.getsize(p) for p in glob.glob(os.path.join(d, "*.log"))}
                sn.node.on_flushed(self.now)
                self.run_node(nid)
        elif ev.kind == "restart":
            if self.nodes[ev.data].node is None:
                self.start(ev.data)
                self.run_node(ev.data)
        elif ev.kind == "heal":
            self.cut.clear()
        elif ev.kind == "fault":
            if self.faults:
                self.random_fault()
                self.push(self.rng.randint(*self.fault_every_ms), "fault")
        elif ev.kind == "append":
            if self.rng.random() < self.append_rate:
                self.client_append()
            self.push(self.rng.randint(1, 60), "append")

    def run(self, duration_ms: int) -> None:
        if not any(e.kind == "fault" for e in self.events):
            self.push(self.rng.randint(*self.fault_every_ms), "fault")
            self.push(1, "append")
        end = self.now + duration_ms
        while self.now < end:
            self.step()

    # --- liveness ---------------------------------------------------------------------------

    def heal_all(self) -> None:
        """The faults stop: no partition, every node up, and the network and disks back to normal speed
        (the adversarial profiles' delays exceed their own timeouts, which no quorum survives)."""
        self.faults = False
        self.cut.clear()
        self.loss, self.dup = 0.0, 0.0
        self.max_delay_ms = min(self.max_delay_ms, 10)
        self.flush_delays_ms = tuple(d for d in self.flush_delays_ms if d <= 5) or (0,)
        for nid, sn in self.nodes.items():
            if sn.node is None:
                self.start(nid)
                self.run_node(nid)

    def leader(self) -> SimNode | None:
        leaders = [sn for sn in self.nodes.values() if sn.node is not None and sn.node.role == LEADER]
        return leaders[0] if len(leaders) == 1 else None

    def wait_for(self, predicate: Any, limit_ms: int) -> int | None:
        """Run until `predicate()` holds; the time it took, or None."""
        start = self.now
        while self.now - start < limit_ms:
            if predicate():
                return self.now - start
            self.step()
        return self.now - start if predicate() else None

    def commit_probe(self, limit_ms: int) -> int | None:
        """Append on the leader and wait until every node has applied it: the time it took, or None."""
        sn = self.leader()
        if sn is None or sn.node is None:
            return None
        self.append_counter += 1
        value = f"probe-{self.append_counter}".encode()
        offset = sn.node.schedule_append(sn.node.epoch, [value], self.now)
        self.pending_appends.add(value)
        self.run_node(sn.node_id)

        def everywhere() -> bool:
            return all(s.sm is not None and s.sm.next_offset > offset for s in self.nodes.values())
        return self.wait_for(everywhere, limit_ms)


# Settings that hunt the rare interleavings: short timeouts against long delays (split votes, stale
# leaders), frequent crashes with short downtimes (a voter restarting right after voting), slow flushes
# (crashes that lose what a node appended but had not flushed).
CHAOS = dict(crash_rate=1.0, partition_rate=1.0, loss=0.05, dup=0.02, max_delay_ms=40, election_timeout_ms=150,
             fetch_timeout_ms=300, linger_ms=2, fault_every_ms=(20, 400), downtime_ms=(5, 800),
             flush_delays_ms=(0, 1, 5, 20, 60))

# Slow flushes and crashes every few tens of milliseconds with short downtimes: what a node appended and
# had not flushed is lost often, so anything counted before it was durable shows as a lost commit.
DURABILITY = dict(CHAOS, flush_delays_ms=(0, 50, 200, 400), downtime_ms=(5, 300), fault_every_ms=(10, 150),
                  election_timeout_ms=100, fetch_timeout_ms=200, max_delay_ms=60)
