"""A KIP-848 consumer group's in-memory state, and the reconciliation rule.

Three epochs drive the protocol (Kafka's names):
- the group epoch goes up when the membership, a member's subscription, or the metadata of
  a subscribed topic (id, partition count) changes;
- the assignment epoch is the group epoch the target assignment was computed at: when the
  group epoch is ahead, the assignor runs again;
- each member's epoch is the assignment epoch it has converged to. A member moves towards
  its target one heartbeat at a time: it first revokes what its target no longer holds
  (state unrevoked_partitions, epoch unchanged), then gets the target's partitions that no
  other member still holds (unreleased_partitions while some are held), at the assignment
  epoch; it is stable once it holds exactly its target.

A partition belongs to at most one member at a time: `owners` maps every partition that a
member holds or has yet to revoke to that member. A partition is free when it has no owner.

Group states: Empty (no members), Assigning (group epoch ahead of the assignment epoch),
Reconciling (some member has not converged), Stable. This module holds the data and the
pure rule (`next_assignment`); `consumer_protocol` makes the transitions.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

from gregor.coordinator.group.assignors import Assignment, TopicId, TopicPartition

# Group states.
EMPTY = "Empty"
ASSIGNING = "Assigning"
RECONCILING = "Reconciling"
STABLE = "Stable"

# Member states.
MEMBER_STABLE = "stable"
UNREVOKED_PARTITIONS = "unrevoked_partitions"
UNRELEASED_PARTITIONS = "unreleased_partitions"

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

Owned = list[tuple[TopicId, list[int]]]  # topic_partitions of a heartbeat request


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: str = MEMBER_STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    session_timer: asyncio.TimerHandle | None = None
    rebalance_timer: asyncio.TimerHandle | None = None

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state == MEMBER_STABLE and self.member_epoch == epoch

    def held(self) -> list[TopicPartition]:
        """Partitions this member owns: assigned plus those it has yet to revoke."""
        return [(t, p) for a in (self.assigned, self.pending_revocation) for t, ps in a.items() for p in ps]

    def cancel_timers(self) -> None:
        for t in (self.session_timer, self.rebalance_timer):
            if t is not None:
                t.cancel()
        self.session_timer = self.rebalance_timer = None


@dataclass(eq=False)
class ConsumerGroup:
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> target assignment
    owners: dict[TopicPartition, str] = field(default_factory=dict)  # partition -> member holding it
    subscription: dict[str, tuple[TopicId, int]] = field(default_factory=dict)  # topic -> (id, partitions)
    resolved_regex: dict[str, frozenset[str]] = field(default_factory=dict)  # regex -> topics it matches
    subscribed_names: frozenset[str] = frozenset()  # all_subscribed_topics(), kept between membership changes
    regex_refreshed_at: float = 0.0  # monotonic seconds
    assignor: str = ""

    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return RECONCILING
        return STABLE

    def subscribed_topics(self, m: ConsumerMember) -> frozenset[str]:
        """The member's topic names plus what its regex matched at the last resolution."""
        names = frozenset(m.subscribed_topic_names)
        if m.subscribed_topic_regex:
            names |= self.resolved_regex.get(m.subscribed_topic_regex, frozenset())
        return names

    def all_subscribed_topics(self) -> set[str]:
        out: set[str] = set()
        for m in self.members.values():
            out |= self.subscribed_topics(m)
        return out

    def set_current(self, m: ConsumerMember, state: str, epoch: int, assigned: Assignment,
                    pending: Assignment) -> None:
        """Replace the member's current assignment, keeping `owners` in step."""
        for tp in m.held():
            if self.owners.get(tp) == m.member_id:
                del self.owners[tp]
        if epoch != m.member_epoch or (state, assigned, pending) != (m.state, m.assigned, m.pending_revocation):
            m.previous_member_epoch = m.member_epoch
        m.state, m.member_epoch, m.assigned, m.pending_revocation = state, epoch, assigned, pending
        for tp in m.held():
            other = self.owners.setdefault(tp, m.member_id)
            assert other == m.member_id, f"partition {tp} held by both {other} and {m.member_id}"

    def remove_member(self, m: ConsumerMember) -> None:
        for tp in m.held():
            if self.owners.get(tp) == m.member_id:
                del self.owners[tp]
        m.cancel_timers()
        self.members.pop(m.member_id, None)
        self.target.pop(m.member_id, None)
        if m.instance_id is not None and self.static_members.get(m.instance_id) == m.member_id:
            del self.static_members[m.instance_id]


@dataclass(frozen=True, slots=True)
class NextAssignment:
    state: str
    epoch: int
    assigned: Assignment
    pending_revocation: Assignment


def _owns_any(owned: Owned | None, partitions: Assignment) -> bool:
    """Whether the member still reports owning any of `partitions` (unknown -> assume it does)."""
    if owned is None:
        return True
    return any(p in partitions.get(tid, ()) for tid, ps in owned for p in ps)


def next_assignment(m: ConsumerMember, target_epoch: int, target: Assignment, owned: Owned | None,
                    owners: dict[TopicPartition, str]) -> NextAssignment | None:
    """Kafka's CurrentAssignmentBuilder: the member's next step towards its target, or None to stay.

    `owned` is what the member reported in this heartbeat (None: not reported)."""
    if m.state == MEMBER_STABLE:
        if m.member_epoch == target_epoch:
            return None
    elif m.state == UNREVOKED_PARTITIONS:
        if _owns_any(owned, m.pending_revocation):
            return None  # still revoking: no progress until it reports them gone
    epoch = m.member_epoch
    assigned: dict[TopicId, frozenset[int]] = {}
    pending: dict[TopicId, frozenset[int]] = {}
    to_assign: dict[TopicId, set[int]] = {}
    unreleased = False
    for tid in set(target) | set(m.assigned):
        want = target.get(tid, frozenset())
        have = m.assigned.get(tid, frozenset())
        keep = have & want
        revoke = have - keep
        add = set(want - keep)
        revoking_now = m.pending_revocation.get(tid, frozenset())
        held_elsewhere = {p for p in add if (tid, p) in owners and p not in revoking_now}
        if held_elsewhere:
            unreleased = True
            add -= held_elsewhere
        if keep:
            assigned[tid] = keep
        if revoke:
            pending[tid] = revoke
        if add:
            to_assign[tid] = add
    if pending and _owns_any(owned, pending):
        # Revoke first, at the current epoch; the member acknowledges by no longer reporting them.
        return NextAssignment(UNREVOKED_PARTITIONS, epoch, assigned, pending)
    for tid, ps in to_assign.items():
        assigned[tid] = assigned.get(tid, frozenset()) | frozenset(ps)
    state = UNRELEASED_PARTITIONS if unreleased else MEMBER_STABLE
    return NextAssignment(state, target_epoch, assigned, {})


def new_member_id() -> str:
    """A member id as Kafka makes them (Uuid.randomUuid().toString(): URL-safe base64, no padding)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
