"""The metadata store of a KRaft node: the quorum's replicated log (`__cluster_metadata`, gregor.raft) behind
the same MetadataStore interface as the embedded and ZooKeeper stores, so handlers, replication,
coordinators and security read one MetadataCache, fed by the same events, in every mode.

Reading. The store is a listener of the node's RaftManager: every committed record is replayed, in
order and once, into a KRaftState (the MetadataState every store holds, plus registrations, producer
ids, feature levels) by gregor.metadata.applier's `replay` (gregor.metadata.kraft_state for KRaft's own
records), and the event each returns is published to the subscribers, numbered by a local metadata
version that only grows (a snapshot loaded while running publishes the difference it makes). The
quorum's leader is the controller: the LeaderChange record that opens each epoch, once committed, is
a BROKERS event naming it. Snapshots of the state are written by the policy of
`metadata.log.max.record.bytes.between.snapshots` / `metadata.log.max.snapshot.interval.ms`.

Writing. Only the active controller writes the log: the quorum's leader, once it replayed its own
epoch's LeaderChange record (everything its predecessors committed is then in its state). It decides
against its state (`append_decided`: one write at a time, each change seeing the ones decided before
it) and appends the records atomically, answering once they are committed and replayed here.
Everyone else sends their writes to it (ControllerChannel, the controller listener):
- `apply` (topics, configs, ACLs, quotas, SCRAM credentials): MetadataWrite with the changes;
- a leader's ISR change (`update_partition_states` without a controller epoch): AlterPartition;
- the controller's own partition-state writes (with its epoch, the quorum's) are local, fenced by the
  epoch: a deposed controller's append fails (ControllerMovedError);
- registration, heartbeats, controlled shutdown: BrokerLifecycle (gregor.metadata.kraft_lifecycle);
- producer id blocks: AllocateProducerIds.
A write returns once this node replayed it, with the version that holds it, as every store does.

Threads: replay, events and the controller's writes run on the node's event loop; the blocking
MetadataStore methods are called off it (TopicAdmin's writer thread, the controller's) and run their
coroutine on the loop. `snapshot()` may be called from any thread.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from gregor.configdef import Settings, setting
from gregor.metadata import kraft_records
from gregor.metadata.applier import decide, decide_state_update
from gregor.metadata.applier import replay as replay_shared
from gregor.metadata.kraft_channel import ControllerChannel
from gregor.metadata.kraft_lifecycle import BrokerLifecycle
from gregor.metadata.kraft_records import LogDirFailureRecord, LogDirHandledRecord
from gregor.metadata.kraft_state import KRaftState, diff, overlay
from gregor.metadata.records import PartitionStateRecord
from gregor.metadata.store import (
    BROKERS,
    BadVersionError,
    BrokerInfo,
    Change,
    ControllerMovedError,
    LogDirFailure,
    MetadataError,
    MetadataEvent,
    MetadataImage,
    MetadataStore,
    NoSuchTopicError,
    PartitionState,
    StateUpdate,
    TopicExistsError,
)
from gregor.protocol.errors import ErrorCode
from gregor.protocol.messages.kraft_controller import ALLOCATE_PRODUCER_IDS, ALTER_PARTITION, METADATA_WRITE
from gregor.protocol.primitives import DecodeError
from gregor.raft.errors import BufferFullError, NotLeaderError, RaftError
from gregor.raft.listeners import LeaderAndEpoch
from gregor.raft.manager import RaftManager, now_ms
from gregor.raft.records import LEADER_CHANGE, Batch
from gregor.raft.snapshot_policy import SnapshotPolicy
from gregor.raft.snapshots import SnapshotReader

__all__ = ["KRaftMetadataStore", "KRaftSettings", "error_code_of", "error_of"]

log = logging.getLogger("gregor.metadata.kraft")

T = TypeVar("T")
SNAPSHOT_CHUNK_RECORDS = 256
# What the build of a controller write returns: (the caller's result, the encoded records to append).
Build = Callable[[KRaftState], tuple[T, list[bytes]]]


@dataclass(frozen=True, slots=True)
class KRaftSettings(Settings):
    node_id: int = setting("node.id")
    heartbeat_interval_ms: int = setting("broker.heartbeat.interval.ms")
    registration_timeout_ms: int = setting("initial.broker.registration.timeout.ms")
    request_timeout_ms: int = setting("request.timeout.ms")
    snapshot_bytes: int = setting("metadata.log.max.record.bytes.between.snapshots")
    snapshot_interval_ms: int = setting("metadata.log.max.snapshot.interval.ms")


_ERRORS: list[tuple[type[MetadataError], ErrorCode]] = [
    (TopicExistsError, ErrorCode.TOPIC_ALREADY_EXISTS), (NoSuchTopicError, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (BadVersionError, ErrorCode.INVALID_UPDATE_VERSION), (ControllerMovedError, ErrorCode.NOT_CONTROLLER)]


def error_code_of(e: MetadataError) -> int:
    return next((code for cls, code in _ERRORS if isinstance(e, cls)), ErrorCode.UNKNOWN_SERVER_ERROR)


def error_of(code: int, message: str | None) -> MetadataError:
    cls = next((c for c, k in _ERRORS if k == code), MetadataError)
    return cls(message or ErrorCode(code).name)


class KRaftMetadataStore(MetadataStore):
    """See the module doc. Built before its RaftManager starts (it registers as its listener)."""

    def __init__(self, settings: KRaftSettings, cluster_id: str, raft: RaftManager, channel: ControllerChannel) -> None:
        super().__init__()
        self.settings = settings
        self.node_id = settings.node_id
        self._cluster_id = cluster_id
        self.raft = raft
        self.channel = channel
        self.state = KRaftState()
        self._lock = threading.Lock()  # the state against snapshot() from other threads
        self._version = 0
        self.next_offset = 0  # the next offset to replay
        self._last_append_ms = -1
        self.controller_id = -1  # the quorum's leader, as this node knows it
        self.active_epoch = -1  # >= 0: this node is the active controller of that epoch
        self._write_lock: asyncio.Lock | None = None
        self._waiters: list[tuple[int, int, Callable[[], bool], asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._policy = SnapshotPolicy(settings.snapshot_bytes, settings.snapshot_interval_ms, now_ms())
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self.on_activation: list[Callable[[int], None]] = []  # called (on the loop) with the epoch when active
        self.snapshots_written = 0
        self.lifecycle = BrokerLifecycle(self.node_id, cluster_id, channel, settings.heartbeat_interval_ms,
                                         settings.registration_timeout_ms, lambda: self.next_offset - 1,
                                         self.wait_until, self._unfenced)
        raft.register_listener(self)

    def bind_loop(self) -> None:
        """Called on the node's loop before the quorum starts."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._write_lock = asyncio.Lock()

    # --- reads ---------------------------------------------------------------------------------------
    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def version(self) -> int:
        return self._version

    def snapshot(self) -> MetadataImage:
        with self._lock:
            self.state.meta.version = self._version
            return self.state.meta.image(self._cluster_id, self.state.live_brokers(), self.controller_id)

    def _unfenced(self, broker_id: int, epoch: int) -> bool:
        reg = self.state.brokers.get(broker_id)
        return reg is not None and reg.epoch == epoch and not reg.fenced

    # --- the Raft listener (on the loop) ------------------------------------------------------------------
    def handle_commit(self, batches: list[Batch]) -> None:
        for b in batches:
            if b.control:
                for c in b.control:
                    if c.type == LEADER_CHANGE and c.message is not None:
                        self._leader_record(int(c.message.leader_id), b.epoch)
            else:
                self._replay_batch(b)
            self.next_offset = b.next_offset
            self._last_append_ms = b.append_time_ms
            self._policy.committed(b.size_bytes)
        self._check_waiters()
        now = now_ms()
        if self._policy.due(now):
            self._write_snapshot(now)

    def _replay_batch(self, b: Batch) -> None:
        events: list[MetadataEvent] = []
        with self._lock:
            for i, raw in enumerate(b.records):
                offset = b.base_offset + i
                try:
                    record = kraft_records.decode(raw)
                    event = self.state.replay(record, offset, self._version + 1)
                except (DecodeError, KeyError, ValueError) as e:  # skipped, as every store skips what it cannot read
                    log.warning("__cluster_metadata offset %d: record skipped (%s: %s)", offset, type(e).__name__, e)
                    continue
                if event is not None:
                    self._version += 1
                    events.append(event)
        for ev in events:
            self._publish(ev)

    def _leader_record(self, leader_id: int, epoch: int) -> None:
        self.controller_id = leader_id
        current = self.raft.leader_and_epoch()
        if leader_id == self.node_id and current == (leader_id, epoch) and self.active_epoch != epoch:
            self.active_epoch = epoch
            log.info("node %d: active controller of epoch %d (at offset %d)", self.node_id, epoch, self.next_offset)
            for fn in list(self.on_activation):
                fn(epoch)
        self._publish_controller()

    def _publish_controller(self) -> None:
        with self._lock:
            self._version += 1
            event = MetadataEvent(self._version, BROKERS, brokers=self.state.live_brokers(),
                                  controller_id=self.controller_id)
        self._publish(event)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        if leader.leader_id != self.node_id and self.active_epoch >= 0:
            log.info("node %d: no longer the active controller (epoch %d; leader now %d in epoch %d)", self.node_id,
                     self.active_epoch, leader.leader_id, leader.epoch)
            self.active_epoch = -1
        if leader.leader_id != self.controller_id and leader.leader_id != self.node_id:
            self.controller_id = leader.leader_id
            self._publish_controller()
        self._check_waiters()

    def handle_load_snapshot(self, reader: SnapshotReader) -> None:
        new = KRaftState()
        for raw in reader.records():
            try:
                new.replay(kraft_records.decode(raw), -1, None)
            except (DecodeError, KeyError, ValueError) as e:
                log.warning("snapshot %s: record skipped (%s: %s)", reader.snapshot_id, type(e).__name__, e)
        with self._lock:
            events = diff(self.state, new, itertools.count(self._version + 1))
            self._version += len(events)
            self.state = new
        for ev in events:
            self._publish(ev)
        self.next_offset = reader.snapshot_id.offset
        self._policy.taken(now_ms())
        log.info("node %d: loaded the metadata snapshot %s (%d changes to what it held)", self.node_id,
                 reader.snapshot_id, len(events))
        self._check_waiters()

    def _write_snapshot(self, now: int) -> None:
        """The state as records, at the next offset: the log before it can then go."""
        try:
            writer = self.raft.create_snapshot(self.next_offset, self._last_append_ms)
        except RaftError as e:
            log.warning("node %d: no snapshot at %d: %s", self.node_id, self.next_offset, e)
            return
        if writer is not None:
            try:
                chunk: list[bytes] = []
                for record in self.state.records():
                    chunk.append(kraft_records.encode(record))
                    if len(chunk) >= SNAPSHOT_CHUNK_RECORDS:
                        writer.append(chunk)
                        chunk = []
                if chunk:
                    writer.append(chunk)
                writer.freeze()
                self.snapshots_written += 1
            finally:
                writer.close()
        self._policy.taken(now)

    # --- waiting on the replay (on the loop) ------------------------------------------------------------
    async def wait_until(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until `predicate()` holds (checked after each replayed batch and leader change)."""
        if predicate():
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (0, next(self._seq), predicate, fut))
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            return predicate()
        return True

    def _check_waiters(self) -> None:
        keep = []
        for w in self._waiters:
            if w[3].done():
                continue
            if w[2]():
                w[3].set_result(None)
            else:
                keep.append(w)
        self._waiters = keep

    async def wait_caught_up(self, timeout_s: float) -> bool:
        """Until a leader is known and this node replayed everything committed when it learned of it."""
        def caught_up() -> bool:
            hw = self.raft.high_watermark
            return self.raft.leader_and_epoch().leader_id >= 0 and hw > 0 and self.next_offset >= hw
        return await self.wait_until(caught_up, timeout_s)

    # --- the active controller's writes (on the loop) -----------------------------------------------------
    def require_active(self) -> int:
        if self.active_epoch < 0:
            raise ControllerMovedError(f"node {self.node_id} is not the active controller (leader "
                                       f"{self.raft.leader_and_epoch().leader_id})")
        return self.active_epoch

    async def append_decided(self, build: Build[T], epoch: int | None = None) -> tuple[T, int]:
        """One controller write: `build(state)` decides against the state (with everything committed before)
        and returns (result, records); the records are appended in one batch and this returns (result, the
        last record's offset) once they are committed and replayed here. ControllerMovedError when this node
        is not the active controller (of `epoch`, if given) or loses the leadership before the commit."""
        assert self._write_lock is not None, "bind_loop() first"
        async with self._write_lock:
            active = self.require_active()
            if epoch is not None and epoch != active:
                raise ControllerMovedError(f"controller epoch {epoch} is not the current {active}")
            result, values = build(self.state)
            if not values:
                return result, self.next_offset - 1
            while True:
                try:
                    offset = self.raft.schedule_atomic_append(active, values)
                    break
                except BufferFullError:
                    await asyncio.sleep(0.01)
                except NotLeaderError as e:
                    raise ControllerMovedError(str(e)) from None
            timeout_s = self.settings.request_timeout_ms / 1000
            try:
                await asyncio.wait_for(self.raft.wait_for_commit(offset, active), timeout_s)
            except NotLeaderError as e:
                raise ControllerMovedError(f"the write was lost with the leadership: {e}") from None
            except RaftError as e:
                raise MetadataError(f"the metadata write's outcome is unknown: {e}") from None
            except TimeoutError:
                raise MetadataError(f"the metadata write was not committed within {timeout_s:g} s (request.timeout.ms): "
                                    "the controller quorum may have lost its majority") from None
            if not await self.wait_until(lambda: self.next_offset > offset, timeout_s):
                raise MetadataError(f"offset {offset} committed but not replayed within {timeout_s:g} s")
            return result, offset

    # --- blocking calls from other threads -----------------------------------------------------------------
    def _run(self, coro: Awaitable[T], timeout_s: float | None = None) -> T:
        if self._loop is None or threading.get_ident() == self._loop_thread:
            raise RuntimeError("the KRaft store's blocking calls run off its event loop, after bind_loop()")
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        t = (self.settings.request_timeout_ms / 1000 + 5) if timeout_s is None else timeout_s
        try:
            return fut.result(t)
        except TimeoutError:
            fut.cancel()
            raise MetadataError(f"no answer from the controller quorum within {t:g} s") from None

    @property
    def _write_timeout_s(self) -> float:
        return self.settings.request_timeout_ms / 1000

    # --- MetadataStore: registration and the controller -------------------------------------------------------
    async def register_on_loop(self, info: BrokerInfo) -> int:
        return await self.lifecycle.register(info)

    def register_broker(self, info: BrokerInfo) -> int:
        return self._run(self.lifecycle.register(info))

    def unregister_broker(self, broker_id: int) -> None:
        """A clean stop's last step: stop heartbeating (a controlled shutdown already fenced this broker; without
        one its session ends after broker.session.timeout.ms)."""
        if broker_id == self.node_id and self._loop is not None and not self._loop.is_closed():
            try:
                self._run(self.lifecycle.stop(), 10.0)
            except (MetadataError, RuntimeError):
                pass

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int, timeout_s: float
                                  ) -> tuple[int, list[tuple[str, int]]] | None:
        """Through the heartbeat (want_shut_down): (NONE, []) once the controller said shut down, else the
        partitions still led here."""
        if await self.lifecycle.controlled_shutdown(timeout_s):
            return ErrorCode.NONE, []
        led = [(n, p) for n, t in self.state.meta.topics.items() for p, s in t.partitions.items()
               if s.leader == broker_id and len(s.replicas) > 1]
        return ErrorCode.REQUEST_TIMED_OUT, led

    def elect_controller(self, broker_id: int) -> int | None:
        """The quorum elects the controller: this broker is it while it is the active controller."""
        epoch = self.active_epoch
        return epoch if broker_id == self.node_id and epoch >= 0 else None

    def resign_controller(self, broker_id: int, controller_epoch: int) -> None:
        if broker_id == self.node_id and self._loop is not None:
            self._loop.call_soon_threadsafe(self.raft.resign, controller_epoch)

    # --- MetadataStore: changes ---------------------------------------------------------------------------
    def apply(self, changes: Sequence[Change]) -> list[int | MetadataError]:
        return self._run(self._forward([kraft_records.encode_change(c) for c in changes]))

    async def _forward(self, values: list[bytes]) -> list[int | MetadataError]:
        """MetadataWrite to the active controller; per change the local version holding it, or its error."""
        resp = await self.channel.call(METADATA_WRITE, 0, {"broker_id": self.node_id,
                                                          "broker_epoch": self.lifecycle.broker_epoch,
                                                          "changes": values}, self._write_timeout_s)
        if resp.error_code != ErrorCode.NONE:
            err = error_of(resp.error_code, resp.error_message)
            return [err for _ in values]
        last = max((r.offset for r in resp.results if r.error_code == ErrorCode.NONE), default=-1)
        await self.wait_until(lambda: self.next_offset > last, self._write_timeout_s)
        v = self._version
        return [v if r.error_code == ErrorCode.NONE else error_of(r.error_code, r.error_message) for r in resp.results]

    def update_partition_states(self, updates: Sequence[StateUpdate],
                                controller_epoch: int | None = None) -> list[int | MetadataError]:
        if controller_epoch is not None:
            return self._run(self._controller_states(list(updates), controller_epoch))
        return self._run(self._alter_partition(list(updates)))

    async def _controller_states(self, updates: list[StateUpdate], epoch: int) -> list[int | MetadataError]:
        try:
            results, _ = await self.append_decided(lambda st: decide_states(st, updates), epoch)
        except ControllerMovedError as e:
            return [e for _ in updates]
        return results

    async def _alter_partition(self, updates: list[StateUpdate]) -> list[int | MetadataError]:
        topics: dict[str, list[tuple[int, StateUpdate]]] = {}
        for i, u in enumerate(updates):
            topics.setdefault(u.topic, []).append((i, u))
        results: list[int | MetadataError] = [NoSuchTopicError(f"{u.topic}-{u.partition}") for u in updates]
        body_topics = []
        for name, items in topics.items():
            t = self.state.meta.topics.get(name)
            if t is None:
                continue
            body_topics.append({"topic_id": t.topic_id, "partitions": [
                {"partition_index": u.partition, "leader_epoch": u.state.leader_epoch, "leader_recovery_state": 0,
                 "partition_epoch": u.expected_version,
                 "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": -1} for b in u.state.isr]}
                for _, u in items]})
        if not body_topics:
            return results
        resp = await self.channel.call(ALTER_PARTITION, 3, {"broker_id": self.node_id,
                                                            "broker_epoch": self.lifecycle.broker_epoch,
                                                            "topics": body_topics}, self._write_timeout_s)
        if resp.error_code != ErrorCode.NONE:
            return [error_of(resp.error_code, f"AlterPartition: {ErrorCode(resp.error_code).name}") for _ in updates]
        by_id = {t.topic_id: n for n, t in self.state.meta.topics.items()}
        written: list[tuple[str, int, int]] = []
        for rt in resp.topics:
            name = by_id.get(rt.topic_id)
            for rp in rt.partitions:
                for i, u in topics.get(name or "", []):
                    if u.partition != rp.partition_index:
                        continue
                    if rp.error_code == ErrorCode.NONE:
                        results[i] = rp.partition_epoch
                        written.append((u.topic, u.partition, rp.partition_epoch))
                    elif rp.error_code in (ErrorCode.INVALID_UPDATE_VERSION, ErrorCode.FENCED_LEADER_EPOCH,
                                           ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.INELIGIBLE_REPLICA):
                        results[i] = BadVersionError(f"{u.topic}-{u.partition}: {ErrorCode(rp.error_code).name}")
                    else:
                        results[i] = error_of(rp.error_code, f"{u.topic}-{u.partition}: "
                                                             f"{ErrorCode(rp.error_code).name}")

        def replayed() -> bool:
            for name, p, v in written:
                t = self.state.meta.topics.get(name)
                s = t.partitions.get(p) if t is not None else None
                if s is not None and s.version < v:
                    return False
            return True

        await self.wait_until(replayed, self._write_timeout_s)
        return results

    def allocate_producer_ids(self, block_size: int) -> tuple[int, int]:
        return self._run(self._allocate_producer_ids())

    async def _allocate_producer_ids(self) -> tuple[int, int]:
        resp = await self.channel.call(ALLOCATE_PRODUCER_IDS, 0, {"broker_id": self.node_id,
                                                                  "broker_epoch": self.lifecycle.broker_epoch},
                                       self._write_timeout_s)
        if resp.error_code != ErrorCode.NONE:
            raise MetadataError(f"AllocateProducerIds: {ErrorCode(resp.error_code).name}")
        return int(resp.producer_id_start), int(resp.producer_id_len)

    def notify_log_dir_failure(self, broker_id: int, partitions: Sequence[tuple[str, int]]) -> None:
        name = f"log_dir_event_{broker_id}_{time.time_ns()}"
        record = LogDirFailureRecord(name, LogDirFailure(broker_id, tuple(sorted(partitions))))
        (r,) = self._run(self._forward([kraft_records.encode_change(record)]))
        if isinstance(r, MetadataError):
            raise r

    def delete_log_dir_event(self, name: str) -> None:
        self._run(self._forward([kraft_records.encode_change(LogDirHandledRecord(name))]))

    def close(self) -> None:
        self.channel.close()


# --- decisions the active controller makes (pure: state in, results and records out) ------------------------
def decide_changes(state: KRaftState, changes: Sequence[Change | LogDirFailureRecord | LogDirHandledRecord]
                   ) -> tuple[list[MetadataError | None], list[bytes]]:
    """Each change decided against the state and the changes before it (gregor.metadata.applier's rules):
    per change None (written) or its error; the records, encoded."""
    scratch = overlay(state)
    failures = dict(state.log_dir_failures)
    results: list[MetadataError | None] = []
    values: list[bytes] = []
    for ch in changes:
        try:
            if isinstance(ch, LogDirFailureRecord | LogDirHandledRecord):
                if isinstance(ch, LogDirHandledRecord) and failures.pop(ch.name, None) is None:
                    results.append(None)
                    continue
                values.append(kraft_records.encode(ch))
                results.append(None)
                continue
            record = decide(ch, scratch)
        except MetadataError as e:
            results.append(e)
            continue
        values.append(kraft_records.encode(record))  # before the replay below may change the record's objects
        replay_shared(scratch, record, None)
        results.append(None)
    return results, values


def decide_states(state: KRaftState, updates: Sequence[StateUpdate]) -> tuple[list[int | MetadataError], list[bytes]]:
    """Conditional partition-state writes (the controller's): per update the new partition version or its error;
    the states of one topic in one record."""
    scratch = overlay(state)
    results: list[int | MetadataError] = []
    by_topic: dict[str, dict[int, PartitionState]] = {}
    for u in updates:
        try:
            record = decide_state_update(u, scratch)
        except MetadataError as e:
            results.append(e)
            continue
        replay_shared(scratch, record, None)
        new = record.partitions[u.partition]
        by_topic.setdefault(u.topic, {})[u.partition] = new
        results.append(new.version)
    return results, [kraft_records.encode(PartitionStateRecord(n, parts)) for n, parts in by_topic.items()]
