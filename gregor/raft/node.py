"""RaftNode: one member of the metadata quorum, sans IO (Kafka's KafkaRaftClient, in h11's manner).

It owns no socket, thread or clock. Its driver hands it what happened and asks what to do:

    node.handle_request(handle, api_key, version, body, now_ms)   a request from another node
    node.handle_response(request_id, body, now_ms)                 the answer to one of ours
    node.handle_failure(request_id, now_ms)                        it failed (connection, timeout)
    node.on_flushed(now_ms)                                        the log was flushed (see needs_flush)
    out = node.poll(now_ms)    timers fire, appends are written, listeners are handed commits; returns
                               the requests to send (Send) and the answers to give (Reply)
    node.next_deadline_ms()    when to poll again at the latest

The log (a RaftLog) and the quorum-state store are called synchronously; only `flush` is left to the
driver, which may run it on a worker thread. The layer above uses the client API: register_listener,
schedule_append / schedule_atomic_append (the leader's appends, their offsets at once), create_snapshot,
resign, leader_and_epoch, high_watermark.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from gregor.protocol.errors import ErrorCode
from gregor.protocol.schema import Struct
from gregor.raft import wire
from gregor.raft.errors import InvalidSnapshotError, NotLeaderError
from gregor.raft.listeners import DELIVERY_BYTES_PER_POLL, LeaderAndEpoch, ListenerContext, RaftListener
from gregor.raft.log import OffsetAndEpoch, last_epoch_at
from gregor.raft.node_base import CANDIDATE, FOLLOWER, LEADER, RESIGNED, Reply, Send
from gregor.raft.records import Batch, decode_batches
from gregor.raft.replication import FETCH_MAX_BYTES, ReplicationHandlers
from gregor.raft.snapshots import SnapshotReader, SnapshotWriter

E = ErrorCode
log = logging.getLogger("gregor.raft")


class RaftNode(ReplicationHandlers):
    """A quorum member: its state machine, message handling and client API (see the module docstring)."""

    def __init__(self, *args: Any, max_observers: int = 1000, **kwargs: Any) -> None:
        self._max_observers = max_observers
        super().__init__(*args, **kwargs)
        self._delivery_pending = False
        self._initialize()

    @property
    def max_observers(self) -> int:
        return self._max_observers

    def _initialize(self) -> None:
        """Resume from quorum-state and the log: a node never forgets an epoch, a vote or a leadership."""
        saved = self._persisted
        epoch, leader, voted = (saved.epoch, saved.leader_id, saved.voted_id) if saved else (0, -1, -1)
        if saved is not None and saved.voters and set(saved.voters) != set(self.config.voters):
            log.warning("node %d: quorum-state lists voters %s, the configuration %s", self.node_id,
                        list(saved.voters), sorted(self.config.voters))
        log_epoch = self.log.last_fetched_epoch
        if log_epoch > epoch:  # the log saw an epoch the state file did not record: it cannot be older
            epoch, leader, voted = log_epoch, -1, -1
        if not self.is_voter:
            if leader >= 0 and leader != self.node_id:
                self.become_follower(epoch, leader)
            else:
                self.become_unattached(epoch)
        elif leader == self.node_id:
            self._set(RESIGNED, epoch, self.node_id, voted)  # it led this epoch before the restart: not again
            self.s.preferred = self.other_voters
            self.s.election_deadline_ms = self.now_ms + self.config.election_timeout_ms
        elif voted == self.node_id and leader < 0:
            self._set(CANDIDATE, epoch, -1, self.node_id)
            self.s.election_deadline_ms = self.now_ms + self.random_election_timeout()
            self.s.granted = {self.node_id}
            self._maybe_won_election()
        elif leader >= 0:
            self.become_follower(epoch, leader)
        else:
            self.become_unattached(epoch, voted)

    # --- inputs ---------------------------------------------------------------------------

    def handle_request(self, handle: Any, api_key: int, version: int, body: Struct, now_ms: int) -> None:
        self.now_ms = max(self.now_ms, now_ms)
        handler = {
            wire.VOTE_KEY: self.handle_vote_request,
            wire.BEGIN_QUORUM_EPOCH_KEY: self.handle_begin_quorum_epoch_request,
            wire.END_QUORUM_EPOCH_KEY: self.handle_end_quorum_epoch_request,
            wire.FETCH_KEY: self.handle_fetch_request,
            wire.FETCH_SNAPSHOT_KEY: self.handle_fetch_snapshot_request,
            wire.DESCRIBE_QUORUM_KEY: self.handle_describe_quorum_request,
        }.get(api_key)
        if handler is None:
            raise ValueError(f"API key {api_key} is not a quorum API")
        handler(handle, version, body)

    def handle_response(self, request_id: int, body: Struct, now_ms: int) -> None:
        self.now_ms = max(self.now_ms, now_ms)
        pending = self.inflight.pop(request_id, None)
        if pending is None:
            return  # timed out meanwhile
        {
            wire.VOTE_KEY: self.handle_vote_response,
            wire.BEGIN_QUORUM_EPOCH_KEY: self.handle_begin_quorum_epoch_response,
            wire.END_QUORUM_EPOCH_KEY: self.handle_end_quorum_epoch_response,
            wire.FETCH_KEY: self.handle_fetch_response,
            wire.FETCH_SNAPSHOT_KEY: self.handle_fetch_snapshot_response,
        }[pending.api_key](pending, body)

    def handle_failure(self, request_id: int, now_ms: int) -> None:
        self.now_ms = max(self.now_ms, now_ms)
        pending = self.inflight.pop(request_id, None)
        if pending is not None:
            if pending.api_key == wire.FETCH_KEY:
                self._fetch_failed(pending)
            else:
                self.back_off(pending.destination, pending.api_key)

    @property
    def needs_flush(self) -> bool:
        return self.log.flushed_offset < self.log.end_offset

    def on_flushed(self, now_ms: int) -> None:
        self.now_ms = max(self.now_ms, now_ms)
        self._leader_flushed()

    def poll(self, now_ms: int) -> list[Send | Reply]:
        self.now_ms = max(self.now_ms, now_ms)
        for rid, p in list(self.inflight.items()):
            if p.deadline_ms <= self.now_ms:
                self.handle_failure(rid, self.now_ms)
        for key, until in list(self.backoff.items()):
            if until <= self.now_ms:
                del self.backoff[key]
        self.election_timers()
        if self.s.role == LEADER:
            self.drain_appends()
            self.complete_parked()
            if self.s.leader is not None:
                self.s.leader.expire_observers(self.now_ms)
        self.send_votes()
        self.send_begin_quorum_epochs()
        self.send_end_quorum_epochs()
        self.send_fetch()
        self.send_fetch_snapshot()
        self._deliver()
        out, self.outbox = self.outbox, []
        return out

    def next_deadline_ms(self) -> int | None:
        times = [p.deadline_ms for p in self.inflight.values()]
        times += [t for t in self.backoff.values()]
        for t in (self.election_deadline(), self.begin_quorum_epoch_deadline(), self.parked_deadline()):
            if t is not None:
                times.append(t)
        acc = self.s.accumulator
        if acc is not None and (t := acc.deadline_ms()) is not None:
            times.append(t)
        if self._delivery_pending or self.outbox:
            times.append(self.now_ms)
        return min(times) if times else None

    # --- listeners ------------------------------------------------------------------------

    def register_listener(self, listener: RaftListener) -> None:
        self.listeners.append(ListenerContext(listener))
        self._delivery_pending = True

    def leader_and_epoch(self) -> LeaderAndEpoch:
        leader, epoch, _ = self._leader_view()
        return LeaderAndEpoch(leader, epoch)

    def _deliver(self) -> None:
        pending = False
        decoded: dict[int, tuple[list[Batch], int]] = {}  # listeners at the same offset share one read and decode
        for ctx in self.listeners:
            pending = self._deliver_to(ctx, decoded) or pending
        self._delivery_pending = pending  # a listener stopped by its budget: poll again at once

    def _committed_from(self, offset: int, hw: int, max_bytes: int,
                        decoded: dict[int, tuple[list[Batch], int]]) -> tuple[list[Batch], int]:
        got = decoded.get(offset)
        if got is None:
            data = self.log.read(offset, max_bytes)
            got = ([b for b in decode_batches(data) if b.next_offset > offset and b.last_offset < hw], len(data))
            decoded[offset] = got
        return got

    def _deliver_to(self, ctx: ListenerContext, decoded: dict[int, tuple[list[Batch], int]]) -> bool:
        """Bring one listener along; returns whether committed batches are left for the next poll."""
        snap = self.log.latest_snapshot_id
        if snap is not None and ctx.next_offset < snap.offset and (
                ctx.next_offset < self.log.log_start_offset or not ctx.loaded_snapshot):
            raw = self.log.open_snapshot(snap)
            assert raw is not None, f"snapshot {snap} vanished"
            try:
                ctx.listener.handle_load_snapshot(SnapshotReader(raw, FETCH_MAX_BYTES))
            finally:
                raw.close()
            ctx.next_offset = snap.offset
            ctx.loaded_snapshot = True
        budget = DELIVERY_BYTES_PER_POLL
        hw = self.high_watermark
        while ctx.next_offset < hw and budget > 0:
            batches, size = self._committed_from(ctx.next_offset, hw, FETCH_MAX_BYTES, decoded)
            if not batches:
                break
            ctx.listener.handle_commit(batches)
            ctx.next_offset = batches[-1].next_offset
            budget -= size
        current = self.leader_and_epoch()
        if current != ctx.last_leader:
            st = self.s
            if not (current.leader_id == self.node_id and st.leader is not None
                    and ctx.next_offset <= st.leader.epoch_start_offset):
                ctx.last_leader = current  # (the leader's listener hears of it once it read all before it)
                ctx.listener.handle_leader_change(current)
        return budget <= 0 and ctx.next_offset < hw

    # --- the client API ------------------------------------------------------------------------

    def schedule_append(self, epoch: int, values: Sequence[bytes], now_ms: int | None = None) -> int:
        """Append records as leader of `epoch`; returns the offset the last one will have. Raises
        NotLeaderError (not the leader of that epoch), RecordTooLargeError or BufferFullError."""
        return self._append(epoch, values, now_ms, atomic=False)

    def schedule_atomic_append(self, epoch: int, values: Sequence[bytes], now_ms: int | None = None) -> int:
        """As schedule_append, all records in one batch: committed (or lost) together."""
        return self._append(epoch, values, now_ms, atomic=True)

    def _append(self, epoch: int, values: Sequence[bytes], now_ms: int | None, atomic: bool) -> int:
        if now_ms is not None:
            self.now_ms = max(self.now_ms, now_ms)
        st = self.s
        if st.role != LEADER or st.accumulator is None or epoch != st.epoch:
            leader, current, _ = self._leader_view()
            raise NotLeaderError(f"node {self.node_id} is {st.role} in epoch {st.epoch}, not the leader of epoch "
                                 f"{epoch} (leader {leader})", leader, current)
        return st.accumulator.append(values, self.now_ms, atomic)

    def create_snapshot(self, end_offset: int, last_contained_log_time_ms: int) -> SnapshotWriter | None:
        """A writer for a snapshot of the state below `end_offset` (committed: at or below the high
        watermark), or None if the latest snapshot already covers it. Freezing it starts the log there."""
        if end_offset > self.high_watermark:
            raise InvalidSnapshotError(f"snapshot at {end_offset} above the high watermark {self.high_watermark}")
        if end_offset < self.log.log_start_offset:
            raise InvalidSnapshotError(f"snapshot at {end_offset} below the log start {self.log.log_start_offset}")
        latest = self.log.latest_snapshot_id
        epoch = last_epoch_at(self.log.epoch_entries(), latest, end_offset)
        sid = OffsetAndEpoch(end_offset, epoch)
        if latest is not None and sid.offset <= latest.offset:
            return None
        return SnapshotWriter(self.log.new_snapshot(sid), last_contained_log_time_ms, self.now_ms,
                              FETCH_MAX_BYTES, self._snapshot_frozen)

    def _snapshot_frozen(self, sid: OffsetAndEpoch) -> None:
        latest = self.log.latest_snapshot_id
        self.log.delete_before_snapshot(max(sid, latest) if latest is not None else sid)

    def resign(self, epoch: int) -> None:
        """Give up leadership of `epoch` (graceful shutdown): the others are told to elect at once."""
        if self.s.role == LEADER and self.s.epoch == epoch:
            self.drain_appends(force=True)
            self.become_resigned()

    # --- DescribeQuorum -------------------------------------------------------------------

    def handle_describe_quorum_request(self, handle: Any, version: int, body: Struct) -> None:
        key = wire.DESCRIBE_QUORUM_KEY
        p = wire.one_partition(body)
        if p is None:
            return self.reply(handle, key, version, wire.describe_quorum_error(
                E.UNKNOWN_TOPIC_OR_PARTITION, "the quorum's one partition is __cluster_metadata-0"))
        st = self.s
        if st.role != LEADER or st.leader is None:
            return self.reply(handle, key, version, wire.describe_quorum_error(
                E.NOT_LEADER_OR_FOLLOWER, f"node {self.node_id} is not the leader (leader {st.leader_id}, epoch "
                f"{st.epoch})"))
        voters, observers = st.leader.describe(self.log.end_offset, self.now_ms)
        nodes = [{"node_id": v, "listeners": [{"name": self.config.listener_name, "host": ep.host, "port": ep.port}]}
                 for v, ep in sorted(self.config.voters.items())]
        return self.reply(handle, key, version, {
            "error_code": E.NONE, "error_message": None, "topics": [{"topic_name": wire.METADATA_TOPIC, "partitions": [{
                "partition_index": 0, "error_code": E.NONE, "error_message": None, "leader_id": self.node_id,
                "leader_epoch": st.epoch, "high_watermark": self.leader_hw(), "current_voters": voters,
                "observers": observers}]}], "nodes": nodes})

    # --- for tests and tools ----------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        st = self.s
        return {"node_id": self.node_id, "role": st.role, "epoch": st.epoch, "leader_id": st.leader_id,
                "voted_id": st.voted_id, "high_watermark": self.high_watermark,
                "log_start_offset": self.log.log_start_offset, "log_end_offset": self.log.end_offset,
                "snapshot": self.log.latest_snapshot_id}

    @property
    def is_following(self) -> bool:
        return self.s.role == FOLLOWER
