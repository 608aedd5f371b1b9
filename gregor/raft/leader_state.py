"""LeaderState: what the leader of an epoch tracks of the replicas (Kafka's LeaderState).

The high watermark is the largest offset a majority of the voters holds durably (the leader's own
flushed end offset counts for itself, a follower's fetch offset for it: a follower fetches only once
what it has is flushed), and it only moves once that offset is past the start of this epoch (the
LeaderChange record): Raft's rule that a leader commits entries of older epochs only by committing one
of its own. It never moves back while this node leads.

Check quorum: a leader that a majority of the voters (itself included) has not fetched from for
1.5 x controller.quorum.fetch.timeout.ms resigns, so a leader cut off from the others (or frozen past
the election timeout) stops accepting writes instead of leading alone.

Observers (replicas that fetch without voting: brokers) are tracked for DescribeQuorum only, bounded
in number and forgotten once idle.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ReplicaState:
    node_id: int
    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    leader_end_at_last_fetch: int = -1
    last_sent_hw: int = -1  # the high watermark its last fetch response carried
    last_begin_sent_ms: int = -1  # BeginQuorumEpoch, voters only
    begin_acked: bool = False


class LeaderState:
    def __init__(self, node_id: int, epoch: int, epoch_start_offset: int, voters: list[int], granting: list[int],
                 now_ms: int, check_quorum_timeout_ms: int, max_observers: int) -> None:
        self.node_id = node_id
        self.epoch = epoch
        self.epoch_start_offset = epoch_start_offset
        self.granting = sorted(granting)
        self.voters = {v: ReplicaState(v) for v in voters}
        self.observers: dict[int, ReplicaState] = {}
        self.max_observers = max_observers
        self.high_watermark: int | None = None
        self.check_quorum_timeout_ms = check_quorum_timeout_ms
        self._fetched_since_check: set[int] = set()
        self._check_deadline_ms = now_ms + check_quorum_timeout_ms
        self.started_ms = now_ms
        me = self.voters[node_id]
        me.last_caught_up_ms = now_ms

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def update_local(self, flushed_offset: int) -> bool:
        """The leader's own durable end moved. Returns whether the high watermark moved."""
        me = self.voters[self.node_id]
        if flushed_offset > me.end_offset:
            me.end_offset = flushed_offset
        return self._recompute()

    def update_replica(self, node_id: int, fetch_offset: int, leader_end_offset: int, now_ms: int) -> bool:
        """A replica fetched at `fetch_offset` (validated against our log). Returns whether the HW moved."""
        voter = node_id in self.voters
        r = self.voters.get(node_id) if voter else self.observers.get(node_id)
        if r is None:
            if len(self.observers) >= self.max_observers:
                self._evict_observers(now_ms, force=True)
            r = self.observers[node_id] = ReplicaState(node_id)
        if fetch_offset >= leader_end_offset:
            r.last_caught_up_ms = now_ms
        elif r.leader_end_at_last_fetch >= 0 and fetch_offset >= r.leader_end_at_last_fetch:
            r.last_caught_up_ms = max(r.last_caught_up_ms, r.last_fetch_ms)
        r.last_fetch_ms = now_ms
        r.leader_end_at_last_fetch = leader_end_offset
        r.end_offset = fetch_offset
        if not voter:
            return False
        self.note_fetch(node_id, now_ms)
        return self._recompute()

    def note_fetch(self, node_id: int, now_ms: int) -> None:
        """A voter fetched in this epoch (records, a diverging epoch or a snapshot): it follows us."""
        r = self.voters.get(node_id)
        if r is None:
            return
        r.begin_acked = True
        self._fetched_since_check.add(node_id)
        if len(self._fetched_since_check | {self.node_id}) >= self.majority:
            self._fetched_since_check.clear()
            self._check_deadline_ms = now_ms + self.check_quorum_timeout_ms

    def _recompute(self) -> bool:
        offsets = sorted((r.end_offset for r in self.voters.values()), reverse=True)
        candidate = offsets[self.majority - 1]
        if candidate <= self.epoch_start_offset:
            return False  # nothing of this epoch is on a majority yet
        if self.high_watermark is None or candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def check_quorum_expired(self, now_ms: int) -> bool:
        return self.majority > 1 and now_ms >= self._check_deadline_ms

    def check_quorum_deadline(self) -> int | None:
        return self._check_deadline_ms if self.majority > 1 else None

    def _evict_observers(self, now_ms: int, force: bool = False) -> None:
        idle = [o for o in self.observers.values() if now_ms - o.last_fetch_ms > 2 * self.check_quorum_timeout_ms]
        for o in idle:
            del self.observers[o.node_id]
        if force and len(self.observers) >= self.max_observers:
            oldest = min(self.observers.values(), key=lambda o: o.last_fetch_ms)
            del self.observers[oldest.node_id]

    def expire_observers(self, now_ms: int) -> None:
        self._evict_observers(now_ms)

    def preferred_successors(self) -> list[int]:
        """The other voters, most caught up first (who should try to lead next)."""
        others = [r for r in self.voters.values() if r.node_id != self.node_id]
        return [r.node_id for r in sorted(others, key=lambda r: (-r.end_offset, r.node_id))]

    def describe(self, leader_end_offset: int, now_ms: int) -> tuple[list[dict], list[dict]]:
        """(voters, observers) as DescribeQuorum reports them."""
        def row(r: ReplicaState) -> dict:
            if r.node_id == self.node_id:
                return {"replica_id": r.node_id, "log_end_offset": leader_end_offset,
                        "last_fetch_timestamp": now_ms, "last_caught_up_timestamp": now_ms}
            return {"replica_id": r.node_id, "log_end_offset": r.end_offset,
                    "last_fetch_timestamp": r.last_fetch_ms, "last_caught_up_timestamp": r.last_caught_up_ms}
        return ([row(r) for _, r in sorted(self.voters.items())], [row(r) for _, r in sorted(self.observers.items())])
