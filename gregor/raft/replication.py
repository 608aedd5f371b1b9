"""Replication: the leader's log, Fetch and FetchSnapshot, both sides (KIP-595, KIP-630).

A follower fetches at its end offset, naming the epoch of its last record, once what it has is
flushed (so the offset it reports is durable: the leader counts it toward the high watermark). The
leader checks that position against its own log: on agreement it records the follower's offset,
perhaps moves the high watermark, and answers with the records from there (parking the fetch up to
its max wait when there is nothing new, not even a high watermark the follower has not been told);
otherwise it answers with the diverging epoch (the follower truncates and asks again) or, if the
records are gone below its log start, with its latest snapshot's id (the follower downloads it with
FetchSnapshot, chunk by chunk, then starts its log at the snapshot's end).
"""

from __future__ import annotations

import logging
from typing import Any

from gregor.protocol.errors import ErrorCode
from gregor.protocol.schema import Struct
from gregor.raft import records as rr
from gregor.raft import wire
from gregor.raft.accumulator import MAX_BATCH_BYTES, BatchAccumulator
from gregor.raft.election import ElectionHandlers
from gregor.raft.leader_state import LeaderState
from gregor.raft.log import DIVERGING, NO_SNAPSHOT, SNAPSHOT, OffsetAndEpoch, truncation_offset, validate_fetch
from gregor.raft.node_base import FOLLOWER, LEADER, UNATTACHED, Parked, Pending, SnapshotFetch
from gregor.raft.snapshots import SnapshotError, SnapshotValidator

E = ErrorCode
log = logging.getLogger("gregor.raft")

FETCH_MAX_BYTES = 8 << 20  # what one Fetch or FetchSnapshot carries (Kafka's KRaft uses the same bound)


class ReplicationHandlers(ElectionHandlers):
    """The replication part of a node."""

    # --- the leader's log -------------------------------------------------------------------

    def become_leader(self) -> None:
        st = self.s
        granted = sorted(st.granted)
        self._set(LEADER, st.epoch, self.node_id, self.node_id)  # persisted before the leader acts
        st = self.s
        start = self.log.end_offset
        self.log.append_as_leader(
            rr.leader_change_batch(start, st.epoch, self.node_id, sorted(self.config.voters), granted, self.now_ms),
            st.epoch)
        st.leader = LeaderState(self.node_id, st.epoch, start, sorted(self.config.voters), granted, self.now_ms,
                                self.config.check_quorum_timeout_ms, self.max_observers)
        max_batch = min(getattr(self.log, "max_batch_bytes", MAX_BATCH_BYTES), MAX_BATCH_BYTES)
        st.accumulator = BatchAccumulator(st.epoch, self.log.end_offset, self.config.append_linger_ms, max_batch,
                                          max_pending_bytes=self.max_pending_append_bytes)
        self._election_retries = 0
        self._leader_flushed()

    @property
    def max_observers(self) -> int:
        return 1000

    @property
    def max_pending_append_bytes(self) -> int:
        return 5 * (8 << 20)

    def drain_appends(self, force: bool = False) -> None:
        st = self.s
        if st.role != LEADER or st.accumulator is None:
            return
        batches = st.accumulator.drain(self.now_ms, force)
        for b in batches:
            self.log.append_as_leader(b, st.epoch)
        if batches:
            assert self.log.end_offset == st.accumulator.next_offset
            self.complete_parked()

    def _leader_flushed(self) -> None:
        st = self.s
        if st.role == LEADER and st.leader is not None and st.leader.update_local(self.log.flushed_offset):
            self._leader_hw_moved()

    def _leader_hw_moved(self) -> None:
        assert self.s.leader is not None and self.s.leader.high_watermark is not None
        self.set_high_watermark(self.s.leader.high_watermark)
        self.complete_parked(all_=True)

    def set_high_watermark(self, offset: int) -> None:
        if offset <= self.high_watermark:
            return
        assert offset <= self.log.end_offset, (offset, self.log.end_offset)
        self.high_watermark = offset
        self.log.set_high_watermark(offset)

    def leader_hw(self) -> int:
        st = self.s
        if st.role == LEADER and st.leader is not None and st.leader.high_watermark is not None:
            return st.leader.high_watermark
        return -1

    # --- Fetch: the leader's side --------------------------------------------------------------

    def _epoch_error(self, request_epoch: int) -> int:
        st = self.s
        if request_epoch < st.epoch:
            return E.FENCED_LEADER_EPOCH
        if request_epoch > st.epoch:
            return E.UNKNOWN_LEADER_EPOCH
        if st.role != LEADER:
            return E.NOT_LEADER_OR_FOLLOWER
        return E.NONE

    def handle_fetch_request(self, handle: Any, version: int, body: Struct, parked: bool = False) -> None:
        st = self.s
        leader, epoch, eps = self._leader_view()

        def answer(top: int, error: int, records: Any = None, diverging: OffsetAndEpoch | None = None,
                   snapshot: OffsetAndEpoch | None = None) -> None:
            self.reply(handle, wire.FETCH_KEY, version, wire.fetch_response(
                top, error, leader, epoch, self.leader_hw(), self.log.log_start_offset, records, diverging, snapshot,
                eps))

        if self.cluster_mismatch(body):
            return answer(E.INCONSISTENT_CLUSTER_ID, E.NONE)
        p = wire.fetch_partition(body)
        if p is None:
            return answer(E.INVALID_REQUEST, E.NONE)
        error = self._epoch_error(p.current_leader_epoch)
        if error:
            return answer(E.NONE, error)
        if p.fetch_offset < 0 or p.last_fetched_epoch > st.epoch:
            return answer(E.NONE, E.INVALID_REQUEST)
        replica = wire.fetch_replica_id(body, version)
        ls = st.leader
        assert ls is not None
        ls.note_fetch(replica, self.now_ms)
        v = validate_fetch(self.log, p.fetch_offset, p.last_fetched_epoch)
        if v.kind == DIVERGING:
            return answer(E.NONE, E.NONE, diverging=v.position)
        if v.kind == SNAPSHOT:
            return answer(E.NONE, E.NONE, snapshot=v.position)
        if replica >= 0 and replica != self.node_id and ls.update_replica(replica, p.fetch_offset,
                                                                          self.log.end_offset, self.now_ms):
            self._leader_hw_moved()
        r = ls.voters.get(replica) or ls.observers.get(replica)
        hw = self.leader_hw()
        max_bytes = max(1, min(p.partition_max_bytes, body.max_bytes, FETCH_MAX_BYTES))
        records = self.log.read(p.fetch_offset, max_bytes) if p.fetch_offset < self.log.end_offset else b""
        if (records or parked or body.max_wait_ms <= 0 or r is None or hw > r.last_sent_hw):
            if r is not None:
                r.last_sent_hw = max(r.last_sent_hw, hw)
            return answer(E.NONE, E.NONE, records=records)
        key = ("replica", replica)
        old = self.parked.pop(key, None)
        if old is not None:  # one parked fetch per replica: the older one is answered now
            self.handle_fetch_request(old.handle, old.version, old.body, parked=True)
        wait = min(body.max_wait_ms, self.config.fetch_max_wait_ms)
        self.parked[key] = Parked(handle, version, body, replica, self.now_ms + wait)
        return None

    def complete_parked(self, all_: bool = False) -> None:
        """Answer the parked fetches that now have something (new records; any, when the HW moved)."""
        if not self.parked:
            return
        end = self.log.end_offset
        due = []
        for key, pk in self.parked.items():
            p = wire.fetch_partition(pk.body)
            if all_ or pk.deadline_ms <= self.now_ms or (p is not None and p.fetch_offset < end):
                due.append(key)
        for key in due:
            pk = self.parked.pop(key, None)  # answering one may move the HW, which answers the others
            if pk is not None:
                self.handle_fetch_request(pk.handle, pk.version, pk.body, parked=True)

    def _fail_parked(self) -> None:
        for key, pk in list(self.parked.items()):
            del self.parked[key]
            leader, epoch, eps = self._leader_view()
            self.reply(pk.handle, wire.FETCH_KEY, pk.version, wire.fetch_response(
                E.NONE, E.NOT_LEADER_OR_FOLLOWER, leader, epoch, -1, self.log.log_start_offset, None, endpoints=eps))

    def parked_deadline(self) -> int | None:
        return min((pk.deadline_ms for pk in self.parked.values()), default=None)

    # --- Fetch: the follower's side ---------------------------------------------------------

    def fetch_target(self) -> int | None:
        """Whom to fetch from: the leader, or (an observer that knows none) a voter or bootstrap server in turn."""
        st = self.s
        if st.role == FOLLOWER:
            return st.leader_id
        if st.role == UNATTACHED and not self.is_voter:
            targets = sorted(self.config.voters) or [-(i + 2) for i in range(len(self.config.bootstrap_servers))]
            targets = [t for t in targets if t != self.node_id]
            return targets[self._discovery % len(targets)] if targets else None
        return None

    def send_fetch(self) -> None:
        st = self.s
        target = self.fetch_target()
        if target is None or st.snapshot_fetch is not None:
            return
        if self.log.flushed_offset < self.log.end_offset or not self.can_send(target, wire.FETCH_KEY):
            return  # what we report as fetched must be durable first
        # the leader may hold the fetch a while, but never so long that our fetch timeout fires meanwhile
        wait = min(self.config.fetch_max_wait_ms, self.config.fetch_timeout_ms // 2)
        body = wire.fetch_request(self.config.cluster_id, self.node_id, st.epoch, self.log.end_offset,
                                  self.log.last_fetched_epoch, self.log.log_start_offset, wait, FETCH_MAX_BYTES)
        self.send(target, wire.FETCH_KEY, wire.SEND_VERSION[wire.FETCH_KEY], body,
                  timeout_ms=self.config.request_timeout_ms + wait)

    def handle_fetch_response(self, pending: Pending, body: Struct) -> None:
        p = wire.fetch_response_partition(body)
        if body.error_code != E.NONE or p is None:
            return self._fetch_failed(pending)
        cl = p.current_leader
        if cl is not None and self.observe_leader(cl.leader_id, cl.leader_epoch):
            return None
        if p.error_code != E.NONE:
            return self._fetch_failed(pending)
        st = self.s
        if st.role != FOLLOWER or st.leader_id != pending.destination or st.epoch != pending.epoch:
            return None
        self._heard_from_leader()
        div = p.diverging_epoch
        if div is not None and (div.epoch >= 0 or div.end_offset >= 0):
            target = truncation_offset(self.log, OffsetAndEpoch(div.end_offset, div.epoch))
            assert target >= self.high_watermark, (
                f"node {self.node_id}: truncation to {target} below the high watermark {self.high_watermark}")
            self.log.truncate_to(target)
            return None
        snap = p.snapshot_id
        if snap is not None and snap.end_offset >= 0:
            return self._start_snapshot_fetch(OffsetAndEpoch(snap.end_offset, snap.epoch))
        if p.records:
            try:
                self.log.append_as_follower(p.records)
            except Exception as e:  # a corrupt or misplaced batch: ask again
                log.warning("node %d: fetched records from %d refused: %s", self.node_id, pending.destination, e)
                return self._fetch_failed(pending)
        if p.high_watermark >= 0:
            self.set_high_watermark(min(p.high_watermark, self.log.end_offset))
        return None

    def _heard_from_leader(self) -> None:
        """A successful Fetch or FetchSnapshot answer from the leader: it is alive, the fetch timeout starts
        again. Unless it told us it resigned (EndQuorumEpoch): a resigned leader answers no fetch, so this
        answer left before its resignation and was only read after it (the two travel on different
        connections). Restarting the timeout then would undo the handover: every follower would wait out
        a whole fetch timeout for a leader that is gone."""
        st = self.s
        if not st.leader_resigned:
            st.fetch_deadline_ms = self.now_ms + self.config.fetch_timeout_ms
        st.has_fetched = True

    def _fetch_failed(self, pending: Pending) -> None:
        self.back_off(pending.destination, pending.api_key)
        if self.s.role == UNATTACHED:
            self._discovery += 1

    # --- FetchSnapshot -----------------------------------------------------------------------

    def _start_snapshot_fetch(self, snapshot_id: OffsetAndEpoch) -> None:
        st = self.s
        if snapshot_id.offset < self.high_watermark or snapshot_id.offset <= self.log.log_start_offset:
            log.warning("node %d: leader's snapshot %s is below what we have (start %d, HW %d)", self.node_id,
                        snapshot_id, self.log.log_start_offset, self.high_watermark)
            return
        st.snapshot_fetch = SnapshotFetch(snapshot_id, self.log.new_snapshot(snapshot_id),
                                          SnapshotValidator(snapshot_id, FETCH_MAX_BYTES))

    def send_fetch_snapshot(self) -> None:
        st = self.s
        sf = st.snapshot_fetch
        if st.role != FOLLOWER or sf is None or not self.can_send(st.leader_id, wire.FETCH_SNAPSHOT_KEY):
            return
        body = wire.fetch_snapshot_request(self.config.cluster_id, self.node_id, st.epoch, sf.snapshot_id,
                                           sf.position, FETCH_MAX_BYTES)
        self.send(st.leader_id, wire.FETCH_SNAPSHOT_KEY, wire.SEND_VERSION[wire.FETCH_SNAPSHOT_KEY], body,
                  context=sf.snapshot_id)

    def handle_fetch_snapshot_request(self, handle: Any, version: int, body: Struct) -> None:
        leader, epoch, eps = self._leader_view()

        def answer(top: int, error: int, sid: OffsetAndEpoch = NO_SNAPSHOT, size: int = -1,
                   position: int = -1, data: bytes = b"") -> None:
            self.reply(handle, wire.FETCH_SNAPSHOT_KEY, version, wire.fetch_snapshot_response(
                top, error, leader, epoch, sid, size, position, data, eps))

        if self.cluster_mismatch(body):
            return answer(E.INCONSISTENT_CLUSTER_ID, E.NONE)
        p = wire.fetch_snapshot_partition(body)
        if p is None:
            return answer(E.INVALID_REQUEST, E.NONE)
        error = self._epoch_error(p.current_leader_epoch)
        if error:
            return answer(E.NONE, error)
        sid = OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch)
        ls = self.s.leader
        assert ls is not None
        ls.note_fetch(body.replica_id, self.now_ms)
        raw = self.log.open_snapshot(sid)
        if raw is None:
            return answer(E.NONE, E.SNAPSHOT_NOT_FOUND, sid)
        try:
            if p.position < 0 or p.position > raw.size:
                return answer(E.NONE, E.POSITION_OUT_OF_RANGE, sid, raw.size)
            data = raw.read(p.position, max(1, min(body.max_bytes, FETCH_MAX_BYTES)))
            return answer(E.NONE, E.NONE, sid, raw.size, p.position, data)
        finally:
            raw.close()

    def handle_fetch_snapshot_response(self, pending: Pending, body: Struct) -> None:
        p = wire.fetch_snapshot_response_partition(body)
        if body.error_code != E.NONE or p is None:
            return self.back_off(pending.destination, pending.api_key)
        cl = p.current_leader
        if cl is not None and self.observe_leader(cl.leader_id, cl.leader_epoch):
            return None
        st = self.s
        sf = st.snapshot_fetch
        if st.role != FOLLOWER or sf is None or pending.context != sf.snapshot_id or pending.epoch != st.epoch:
            return None
        if p.error_code in (E.SNAPSHOT_NOT_FOUND, E.POSITION_OUT_OF_RANGE):
            return self._abandon_snapshot_fetch(f"leader says {E(p.error_code).name}")
        if p.error_code != E.NONE:
            return self.back_off(pending.destination, pending.api_key)
        if p.position != sf.position or p.size < 0:
            return self._abandon_snapshot_fetch(f"chunk at {p.position}, expected {sf.position}")
        self._heard_from_leader()
        data = bytes(p.unaligned_records or b"")
        try:
            sf.validator.feed(data)
            sf.writer.append(data)
            sf.position += len(data)
            if sf.position < p.size:
                return None
            if sf.position > p.size:
                return self._abandon_snapshot_fetch(f"{sf.position} bytes of a {p.size}-byte snapshot")
            sf.validator.finish()
        except SnapshotError as e:
            return self._abandon_snapshot_fetch(str(e))
        sf.writer.freeze()
        st.snapshot_fetch = None
        self.log.reset_to_snapshot(sf.snapshot_id)
        if sf.snapshot_id.offset > self.high_watermark:
            self.high_watermark = sf.snapshot_id.offset
        log.info("node %d: installed snapshot %s from %d", self.node_id, sf.snapshot_id, pending.destination)
        return None

    def _abandon_snapshot_fetch(self, why: str) -> None:
        sf = self.s.snapshot_fetch
        assert sf is not None
        log.warning("node %d: snapshot %s download abandoned: %s", self.node_id, sf.snapshot_id, why)
        sf.writer.abort()
        self.s.snapshot_fetch = None
        self.back_off(self.s.leader_id, wire.FETCH_KEY)
