"""Elections: Vote (with KIP-996's pre-vote), BeginQuorumEpoch and EndQuorumEpoch, both sides, and the
timers that start them.

A voter grants its one vote of an epoch to a candidate whose log is at least as up to date as its own
(last epoch, then end offset). A pre-vote is granted on the same test without voting (a candidate
grants them too), and refused by a leader and by a follower that has heard from its leader since it
began following: the leader is alive, no election is needed. Any request or response naming a newer
epoch moves the node to that epoch first.
"""

from __future__ import annotations

from typing import Any

from gregor.protocol.errors import ErrorCode
from gregor.protocol.schema import Struct
from gregor.raft import wire
from gregor.raft.node_base import (
    CANDIDATE,
    FOLLOWER,
    LEADER,
    PROSPECTIVE,
    RESIGNED,
    UNATTACHED,
    NodeBase,
    Pending,
)

E = ErrorCode


class ElectionHandlers(NodeBase):
    """The election part of a node."""

    # --- common checks --------------------------------------------------------------------

    def cluster_mismatch(self, body: Struct) -> bool:
        cid = getattr(body, "cluster_id", None)
        return self.config.cluster_id is not None and cid is not None and cid != self.config.cluster_id

    def _leader_view(self) -> tuple[int, int, list[dict[str, Any]]]:
        """The leader this node tells others of: none while it resigned or lost contact (Prospective)."""
        st = self.s
        leader = st.leader_id if st.role not in (RESIGNED, PROSPECTIVE) else -1
        return leader, st.epoch, self.endpoints_of(leader)

    # --- Vote -------------------------------------------------------------------------------

    def handle_vote_request(self, handle: Any, version: int, body: Struct) -> None:
        def answer(error: int, granted: bool, top: int = 0) -> None:
            leader, epoch, eps = self._leader_view()
            self.reply(handle, wire.VOTE_KEY, version, wire.vote_response(error, leader, epoch, granted, eps, top))

        if self.cluster_mismatch(body):
            return answer(E.NONE, False, E.INCONSISTENT_CLUSTER_ID)
        p = wire.one_partition(body)
        if p is None:
            return answer(E.NONE, False, E.INVALID_REQUEST)
        candidate, epoch = p.replica_id, p.replica_epoch
        pre_vote = bool(p.pre_vote) if version >= 2 else False
        if candidate not in self.config.voters or candidate == self.node_id:
            return answer(E.INCONSISTENT_VOTER_SET, False)
        if epoch < self.s.epoch:
            return answer(E.FENCED_LEADER_EPOCH, False)
        if epoch > self.s.epoch:
            self.become_unattached(epoch)
        theirs = (p.last_offset_epoch, p.last_offset)
        ours = (self.log.last_fetched_epoch, self.log.end_offset)
        granted = self._can_grant(candidate, theirs >= ours, pre_vote)
        if granted and not pre_vote and self.s.voted_id != candidate:
            self.become_unattached(epoch, voted_id=candidate)  # persisted before the answer leaves
        return answer(E.NONE, granted)

    def _can_grant(self, candidate: int, up_to_date: bool, pre_vote: bool) -> bool:
        st = self.s
        if not self.is_voter or st.role in (LEADER, RESIGNED):
            return False
        if st.role == FOLLOWER:
            return pre_vote and not st.has_fetched and up_to_date
        if st.role == CANDIDATE:
            return pre_vote and up_to_date
        if pre_vote:
            return up_to_date
        if st.voted_id >= 0:
            return st.voted_id == candidate
        return up_to_date

    def handle_vote_response(self, pending: Pending, body: Struct) -> None:
        p = wire.one_partition(body)
        if body.error_code != E.NONE or p is None:
            return self.back_off(pending.destination, wire.VOTE_KEY)
        # A grant naming a leader of our epoch comes from a voter that has not heard from it either: no news.
        if not (p.vote_granted and p.leader_epoch == self.s.epoch) and self.observe_leader(p.leader_id, p.leader_epoch):
            return None
        if p.error_code != E.NONE:
            return self.back_off(pending.destination, wire.VOTE_KEY)
        st = self.s
        _round, pre_vote = pending.context
        # An answer from an earlier round of the same epoch still counts (the timeout may be shorter than a round trip).
        if st.epoch != pending.epoch or st.role != (PROSPECTIVE if pre_vote else CANDIDATE):
            return None
        (st.granted if p.vote_granted else st.rejected).add(pending.destination)
        if pre_vote:
            self._maybe_won_prevote()
        else:
            self._maybe_won_election()
        st = self.s
        if st.role in (PROSPECTIVE, CANDIDATE) and len(self.config.voters) - len(st.rejected) < self.config.majority:
            if st.backoff_until_ms is None:
                self.lost_election()
        return None

    def send_votes(self) -> None:
        st = self.s
        if st.role not in (PROSPECTIVE, CANDIDATE) or st.backoff_until_ms is not None:
            return
        pre_vote = st.role == PROSPECTIVE
        for v in self.other_voters:
            if v in st.granted or v in st.rejected or not self.can_send(v, wire.VOTE_KEY):
                continue
            body = wire.vote_request(self.config.cluster_id, v, st.epoch, self.node_id, self.last_position(), pre_vote)
            self.send(v, wire.VOTE_KEY, wire.SEND_VERSION[wire.VOTE_KEY], body, context=(st.vote_round, pre_vote))

    # --- BeginQuorumEpoch -------------------------------------------------------------------

    def handle_begin_quorum_epoch_request(self, handle: Any, version: int, body: Struct) -> None:
        def answer(error: int, top: int = 0) -> None:
            leader, epoch, eps = self._leader_view()
            self.reply(handle, wire.BEGIN_QUORUM_EPOCH_KEY, version, wire.epoch_response(error, leader, epoch, eps, top))

        if self.cluster_mismatch(body):
            return answer(E.NONE, E.INCONSISTENT_CLUSTER_ID)
        p = wire.one_partition(body)
        if p is None:
            return answer(E.NONE, E.INVALID_REQUEST)
        leader, epoch = p.leader_id, p.leader_epoch
        if leader not in self.config.voters:
            return answer(E.INCONSISTENT_VOTER_SET)
        if epoch < self.s.epoch:
            return answer(E.FENCED_LEADER_EPOCH)
        if leader == self.node_id:
            return answer(E.INVALID_REQUEST)
        st = self.s
        if epoch > st.epoch or st.role != FOLLOWER or st.leader_id != leader:
            self.become_follower(epoch, leader)
        return answer(E.NONE)

    def handle_begin_quorum_epoch_response(self, pending: Pending, body: Struct) -> None:
        p = wire.one_partition(body)
        if body.error_code != E.NONE or p is None:
            return self.back_off(pending.destination, wire.BEGIN_QUORUM_EPOCH_KEY)
        if self.observe_leader(p.leader_id, p.leader_epoch):
            return None
        st = self.s
        if p.error_code != E.NONE:
            return self.back_off(pending.destination, wire.BEGIN_QUORUM_EPOCH_KEY)
        if st.role == LEADER and st.leader is not None and pending.epoch == st.epoch:
            r = st.leader.voters.get(pending.destination)
            if r is not None:
                r.begin_acked = True
        return None

    def send_begin_quorum_epochs(self) -> None:
        st = self.s
        if st.role != LEADER or st.leader is None:
            return
        interval = self.config.begin_quorum_epoch_timeout_ms
        for v in self.other_voters:
            r = st.leader.voters[v]
            if not self.can_send(v, wire.BEGIN_QUORUM_EPOCH_KEY):
                continue
            if r.begin_acked and self.now_ms - max(r.last_fetch_ms, r.last_begin_sent_ms) < interval:
                continue
            r.last_begin_sent_ms = self.now_ms
            body = wire.begin_quorum_epoch_request(self.config.cluster_id, v, self.node_id, st.epoch,
                                                   self.config.listener_name, self.endpoint)
            self.send(v, wire.BEGIN_QUORUM_EPOCH_KEY, wire.SEND_VERSION[wire.BEGIN_QUORUM_EPOCH_KEY], body)

    def begin_quorum_epoch_deadline(self) -> int | None:
        st = self.s
        if st.role != LEADER or st.leader is None:
            return None
        interval = self.config.begin_quorum_epoch_timeout_ms
        busy = {p.destination for p in self.inflight.values() if p.api_key == wire.BEGIN_QUORUM_EPOCH_KEY}
        times = [max(r.last_fetch_ms + interval, r.last_begin_sent_ms + interval,
                     self.backoff.get((v, wire.BEGIN_QUORUM_EPOCH_KEY), 0))
                 for v, r in st.leader.voters.items() if v != self.node_id and r.begin_acked and v not in busy]
        return min(times) if times else None

    # --- EndQuorumEpoch ---------------------------------------------------------------------

    def handle_end_quorum_epoch_request(self, handle: Any, version: int, body: Struct) -> None:
        def answer(error: int, top: int = 0) -> None:
            leader, epoch, eps = self._leader_view()
            self.reply(handle, wire.END_QUORUM_EPOCH_KEY, version, wire.epoch_response(error, leader, epoch, eps, top))

        if self.cluster_mismatch(body):
            return answer(E.NONE, E.INCONSISTENT_CLUSTER_ID)
        p = wire.one_partition(body)
        if p is None:
            return answer(E.NONE, E.INVALID_REQUEST)
        leader, epoch = p.leader_id, p.leader_epoch
        if leader not in self.config.voters:
            return answer(E.INCONSISTENT_VOTER_SET)
        if epoch < self.s.epoch:
            return answer(E.FENCED_LEADER_EPOCH)
        preferred = wire.preferred_successors(p, version)
        if epoch > self.s.epoch:
            self.become_unattached(epoch)
        st = self.s
        if self.is_voter and leader != self.node_id:
            wait = self._end_epoch_backoff(preferred)
            if st.role == FOLLOWER and st.leader_id == leader:
                st.fetch_deadline_ms = self.now_ms + wait
                st.leader_resigned = True  # an answer to a fetch read from now on is older than this
            elif st.role == UNATTACHED and st.election_deadline_ms is not None:
                st.election_deadline_ms = min(st.election_deadline_ms, self.now_ms + wait)
        return answer(E.NONE)

    def _end_epoch_backoff(self, preferred: list[int]) -> int:
        """The first preferred successor tries at once, the others after a growing wait, the rest last."""
        if self.node_id not in preferred:
            return self.config.election_backoff_max_ms
        position = preferred.index(self.node_id)
        if position == 0:
            return 0
        return min(self.config.election_backoff_max_ms, self.config.retry_backoff_ms << position)

    def handle_end_quorum_epoch_response(self, pending: Pending, body: Struct) -> None:
        p = wire.one_partition(body)
        if body.error_code != E.NONE or p is None:
            return self.back_off(pending.destination, wire.END_QUORUM_EPOCH_KEY)
        if self.observe_leader(p.leader_id, p.leader_epoch):
            return None
        if p.error_code != E.NONE:
            return self.back_off(pending.destination, wire.END_QUORUM_EPOCH_KEY)
        if self.s.role == RESIGNED and pending.epoch == self.s.epoch:
            self.s.end_acked.add(pending.destination)
        return None

    def send_end_quorum_epochs(self) -> None:
        st = self.s
        if st.role != RESIGNED:
            return
        for v in self.other_voters:
            if v in st.end_acked or not self.can_send(v, wire.END_QUORUM_EPOCH_KEY):
                continue
            body = wire.end_quorum_epoch_request(self.config.cluster_id, self.node_id, st.epoch, st.preferred,
                                                 self.config.listener_name, self.endpoint)
            self.send(v, wire.END_QUORUM_EPOCH_KEY, wire.SEND_VERSION[wire.END_QUORUM_EPOCH_KEY], body)

    # --- timers ---------------------------------------------------------------------------

    def election_timers(self) -> None:
        """Fire whatever election timer is due."""
        st, now = self.s, self.now_ms
        if st.role == LEADER:
            if st.leader is not None and st.leader.check_quorum_expired(now):
                self.become_resigned()  # cut off from the majority: stop taking writes
            return
        if not self.is_voter:
            if st.role == FOLLOWER and st.fetch_deadline_ms is not None and now >= st.fetch_deadline_ms:
                self.become_unattached(st.epoch)  # find the leader again
            return
        if st.backoff_until_ms is not None:
            if now >= st.backoff_until_ms:
                self.become_prospective()
            return
        if st.role == FOLLOWER:
            if st.fetch_deadline_ms is not None and now >= st.fetch_deadline_ms:
                self.become_prospective()
        elif st.election_deadline_ms is not None and now >= st.election_deadline_ms:
            self.become_prospective()

    def election_deadline(self) -> int | None:
        st = self.s
        times = [t for t in (st.election_deadline_ms, st.fetch_deadline_ms, st.backoff_until_ms) if t is not None]
        if st.role == LEADER and st.leader is not None:
            times = [t for t in (st.leader.check_quorum_deadline(),) if t is not None]
        return min(times) if times else None
