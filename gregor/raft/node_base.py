"""The state a quorum node keeps and the transitions between its roles (Kafka's QuorumState), under the
parts that handle each kind of message (election.py, replication.py) and the node itself (node.py).

Roles (KIP-595, with KIP-996's Prospective):

    Unattached   an epoch without a known leader, possibly having voted in it
    Prospective  a voter that lost its leader and asks, without bumping the epoch, whether it could win
                 (pre-vote); a majority says yes -> Candidate
    Candidate    epoch + 1, voted for itself, asking for votes; a majority -> Leader
    Leader       appends, serves fetches, computes the high watermark
    Follower     knows the leader of its epoch and fetches from it
    Resigned     a leader that gave up its epoch (shutdown, lost quorum) and tells the others so

Every transition that changes the epoch, the leader or the vote writes `quorum-state` first (fsynced),
so a crash never lets a voter vote twice in an epoch or forget it led one. An observer (not a voter)
is only ever Unattached or Follower.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import Any

from gregor.raft.accumulator import BatchAccumulator
from gregor.raft.config import Endpoint, QuorumConfig
from gregor.raft.leader_state import LeaderState
from gregor.raft.listeners import ListenerContext
from gregor.raft.log import OffsetAndEpoch, RaftLog, RawSnapshotWriter
from gregor.raft.quorum_state import ElectionState, MemoryQuorumStateStore
from gregor.raft.snapshots import SnapshotValidator

log = logging.getLogger("gregor.raft")

UNATTACHED, PROSPECTIVE, CANDIDATE, LEADER, FOLLOWER, RESIGNED = (
    "Unattached", "Prospective", "Candidate", "Leader", "Follower", "Resigned")


@dataclass(frozen=True, slots=True)
class Send:
    """A request for the driver to send to node `destination` (negative: a bootstrap server)."""

    request_id: int
    destination: int
    api_key: int
    version: int
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to a request this node was handed with `handle`."""

    handle: Any
    api_key: int
    version: int
    body: dict[str, Any]


@dataclass(slots=True)
class Pending:
    request_id: int
    destination: int
    api_key: int
    deadline_ms: int
    epoch: int
    role: str
    context: Any = None


@dataclass(slots=True)
class Parked:
    """A Fetch the leader holds until there is something to answer (new records, a new HW) or it times out."""

    handle: Any
    version: int
    body: Any
    replica_id: int
    deadline_ms: int


@dataclass
class SnapshotFetch:
    snapshot_id: OffsetAndEpoch
    writer: RawSnapshotWriter
    validator: SnapshotValidator
    position: int = 0


@dataclass
class NodeState:
    """What changes from role to role."""

    role: str = UNATTACHED
    epoch: int = 0
    leader_id: int = -1
    voted_id: int = -1
    election_deadline_ms: int | None = None  # Unattached, Prospective, Candidate, Resigned
    fetch_deadline_ms: int | None = None  # Follower
    backoff_until_ms: int | None = None  # a lost election waits before trying again
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    vote_round: int = 0
    has_fetched: bool = False  # Follower: fetched from this leader since it began following
    leader_resigned: bool = False  # Follower: this leader said (EndQuorumEpoch) it resigned
    leader: LeaderState | None = None
    accumulator: BatchAccumulator | None = None
    end_acked: set[int] = field(default_factory=set)  # Resigned: voters told
    preferred: list[int] = field(default_factory=list)  # Resigned: successors, best first
    snapshot_fetch: SnapshotFetch | None = None


class NodeBase:
    """The shared state of a node and its transitions; the message handling lives in the parts built on it."""

    def __init__(self, config: QuorumConfig, raft_log: RaftLog, store: Any = None, rng: random.Random | None = None,
                 now_ms: int = 0, endpoint: Endpoint | None = None) -> None:
        self.config = config
        self.node_id = config.node_id
        self.log = raft_log
        self.store = store if store is not None else MemoryQuorumStateStore()
        self.rng = rng or random.Random()
        self.now_ms = now_ms
        self.endpoint = endpoint or config.voters.get(config.node_id)
        self.s = NodeState()
        self.high_watermark = raft_log.log_start_offset  # the snapshot's end is committed
        self.outbox: list[Send | Reply] = []
        self.inflight: dict[int, Pending] = {}
        self.backoff: dict[tuple[int, int], int] = {}
        self.parked: dict[Any, Parked] = {}
        self.listeners: list[ListenerContext] = []
        self._next_request_id = 1
        self._election_retries = 0
        self._discovery = 0  # round robin over voters / bootstrap servers for an observer without a leader
        self._persisted = self.store.read()

    # --- who is who ------------------------------------------------------------------------

    @property
    def is_voter(self) -> bool:
        return self.config.is_voter

    @property
    def other_voters(self) -> list[int]:
        return sorted(v for v in self.config.voters if v != self.node_id)

    @property
    def role(self) -> str:
        return self.s.role

    @property
    def epoch(self) -> int:
        return self.s.epoch

    @property
    def leader_id(self) -> int:
        return self.s.leader_id

    def endpoints_of(self, node_id: int) -> list[dict[str, Any]]:
        ep = self.config.voters.get(node_id)
        return [] if ep is None else [{"node_id": node_id, "host": ep.host, "port": ep.port}]

    def last_position(self) -> OffsetAndEpoch:
        return OffsetAndEpoch(self.log.end_offset, self.log.last_fetched_epoch)

    # --- timers ---------------------------------------------------------------------------

    def random_election_timeout(self) -> int:
        t = self.config.election_timeout_ms
        return t + self.rng.randrange(t)

    def election_backoff(self) -> int:
        """Binary exponential, random, at most controller.quorum.election.backoff.max.ms."""
        self._election_retries += 1
        cap = min(self.config.election_backoff_max_ms, self.config.retry_backoff_ms << min(self._election_retries, 20))
        return self.rng.randrange(max(cap, 1)) + 1

    # --- persistence ----------------------------------------------------------------------

    def _persist(self, epoch: int, leader_id: int, voted_id: int) -> int:
        """Record the epoch's leader and vote. Within one epoch neither is ever forgotten: a node that led
        an epoch (or voted in it) and restarts must know it, whatever role it passed through since."""
        old = self._persisted
        if old is not None and old.epoch == epoch:
            leader_id = leader_id if leader_id >= 0 else old.leader_id
            if old.voted_id >= 0:
                assert voted_id in (-1, old.voted_id), f"node {self.node_id} voting twice in epoch {epoch}"
                voted_id = old.voted_id
        new = ElectionState(epoch, leader_id, voted_id, tuple(sorted(self.config.voters)))
        if self._persisted != new:
            self.store.write(new)
            self._persisted = new
        return voted_id

    # --- transitions ----------------------------------------------------------------------

    def _leave_role(self) -> None:
        """Whatever the old role held that the new one must not: a snapshot download."""
        st = self.s
        if st.snapshot_fetch is not None:
            st.snapshot_fetch.writer.abort()

    def _fail_parked(self) -> None:
        """Parked fetches are answered with the new state (a follower learns the new leader from them)."""
        raise NotImplementedError

    def _set(self, role: str, epoch: int, leader_id: int = -1, voted_id: int = -1) -> None:
        if epoch < self.s.epoch:
            raise AssertionError(f"node {self.node_id}: epoch going back from {self.s.epoch} to {epoch}")
        old = (self.s.role, self.s.epoch, self.s.leader_id)
        voted_id = self._persist(epoch, leader_id, voted_id)  # a vote of this epoch made before a restart stands
        self._leave_role()
        self.s = NodeState(role=role, epoch=epoch, leader_id=leader_id, voted_id=voted_id,
                           vote_round=self.s.vote_round + 1)
        self._fail_parked()
        if old != (role, epoch, leader_id):
            log.info("node %d: %s epoch %d (leader %d) -> %s epoch %d (leader %d)", self.node_id, *old,
                     role, epoch, leader_id)

    def become_unattached(self, epoch: int, voted_id: int = -1) -> None:
        if epoch == self.s.epoch and voted_id < 0:
            voted_id = self.s.voted_id  # a vote stands for the whole epoch
        self._set(UNATTACHED, epoch, -1, voted_id)
        if self.is_voter:
            self.s.election_deadline_ms = self.now_ms + self.random_election_timeout()

    def become_follower(self, epoch: int, leader_id: int) -> None:
        assert leader_id != self.node_id, f"node {self.node_id} cannot follow itself"
        voted = self.s.voted_id if epoch == self.s.epoch else -1
        self._set(FOLLOWER, epoch, leader_id, voted)
        self.s.fetch_deadline_ms = self.now_ms + self.config.fetch_timeout_ms
        self._election_retries = 0

    def become_prospective(self) -> None:
        """Pre-vote in the current epoch (KIP-996): nothing is persisted, no epoch is bumped."""
        assert self.is_voter
        st = self.s
        keep_leader = st.leader_id if st.role in (FOLLOWER, PROSPECTIVE) else -1
        granted = st.granted if st.role == PROSPECTIVE else set()  # a new round keeps the grants of this epoch
        self._set(PROSPECTIVE, st.epoch, keep_leader, st.voted_id)
        self.s.election_deadline_ms = self.now_ms + self.random_election_timeout()
        self.s.granted = granted | {self.node_id}
        self._maybe_won_prevote()

    def _maybe_won_prevote(self) -> None:
        if self.s.role == PROSPECTIVE and len(self.s.granted) >= self.config.majority:
            self.become_candidate()

    def become_candidate(self) -> None:
        assert self.is_voter
        self._set(CANDIDATE, self.s.epoch + 1, -1, self.node_id)
        self.s.election_deadline_ms = self.now_ms + self.random_election_timeout()
        self.s.granted = {self.node_id}
        self._maybe_won_election()

    def _maybe_won_election(self) -> None:
        if self.s.role == CANDIDATE and len(self.s.granted) >= self.config.majority:
            self.become_leader()

    def become_leader(self) -> None:
        raise NotImplementedError

    def become_resigned(self) -> None:
        st = self.s
        assert st.role == LEADER
        preferred = st.leader.preferred_successors() if st.leader is not None else self.other_voters
        self._set(RESIGNED, st.epoch, self.node_id, st.voted_id)
        self.s.preferred = preferred
        self.s.end_acked = set()
        self.s.election_deadline_ms = self.now_ms + self.config.election_timeout_ms

    def lost_election(self) -> None:
        """A majority said no: wait a random, growing while, then pre-vote again."""
        self.s.backoff_until_ms = self.now_ms + self.election_backoff()
        self.s.election_deadline_ms = None

    # --- what any response can tell: a newer epoch, a leader --------------------------------

    def observe_leader(self, leader_id: int, epoch: int) -> bool:
        """React to another node's view of the leader. Returns whether this node changed state."""
        st = self.s
        if epoch < st.epoch or epoch < 0:
            return False
        if leader_id == self.node_id:
            if epoch > st.epoch:  # we led that epoch before a restart and forgot: step aside
                self.become_unattached(epoch)
                return True
            return False
        if epoch > st.epoch:
            if leader_id >= 0:
                self.become_follower(epoch, leader_id)
            else:
                self.become_unattached(epoch)
            return True
        if leader_id >= 0 and st.role in (UNATTACHED, PROSPECTIVE, CANDIDATE):
            self.become_follower(epoch, leader_id)
            return True
        if leader_id >= 0 and st.role == LEADER:
            raise AssertionError(f"node {self.node_id} leads epoch {epoch}, and {leader_id} says it does too")
        return False

    # --- requests out ---------------------------------------------------------------------

    def send(self, destination: int, api_key: int, version: int, body: dict[str, Any], context: Any = None,
             timeout_ms: int | None = None) -> None:
        rid = self._next_request_id
        self._next_request_id += 1
        deadline = self.now_ms + (timeout_ms if timeout_ms is not None else self.config.request_timeout_ms)
        self.inflight[rid] = Pending(rid, destination, api_key, deadline, self.s.epoch, self.s.role, context)
        self.outbox.append(Send(rid, destination, api_key, version, body))

    def can_send(self, destination: int, api_key: int) -> bool:
        """No request of this kind in flight to it, and no backoff after a failed one."""
        if any(p.destination == destination and p.api_key == api_key for p in self.inflight.values()):
            return False
        until = self.backoff.get((destination, api_key))
        return until is None or until <= self.now_ms

    def back_off(self, destination: int, api_key: int) -> None:
        self.backoff[(destination, api_key)] = self.now_ms + self.config.retry_backoff_ms

    def reply(self, handle: Any, api_key: int, version: int, body: dict[str, Any]) -> None:
        self.outbox.append(Reply(handle, api_key, version, body))
