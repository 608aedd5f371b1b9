"""The controller's leader and ISR rules, as pure functions of a partition state (Kafka's, ZooKeeper mode).

No I/O and no clock: the controller (gregor.controller.controller) reads the cache, asks these what a
partition's state should become, and writes the answers in one fenced batch. Each function returns the
new state, or None when nothing changes, so an event that changes nothing writes nothing.

Rules (Kafka's PartitionLeaderElectionAlgorithms and ReplicaStateMachine):
- Offline election: the first replica in assignment order that is live and in the ISR; the ISR keeps
  its live members. With `unclean.leader.election.enable` and no live ISR member, the first live
  replica leads alone (its log may lack acknowledged records). Otherwise no leader (-1) and the ISR is
  kept as it was, so a returning member of the last ISR can lead again without loss.
- A dead follower leaves the ISR; the leader's ISR is never emptied by the controller.
- Controlled shutdown: the first live ISR replica that is not shutting down; the stopping broker leaves
  the ISRs it follows where another member remains.
- Preferred: replicas[0], if live and in the ISR. Reassignment: the first target replica live and in the ISR.
- Every leader change and every ISR removal by the controller bumps the leader epoch, and the state
  records the controller epoch that wrote it.

`eligible` below is the set of brokers that may lead: live and not shutting down (Kafka's liveBrokerIds).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from gregor.metadata.store import PartitionState
from gregor.protocol.errors import ErrorCode

NO_LEADER = -1


def changed(s: PartitionState, leader: int, isr: list[int], controller_epoch: int) -> PartitionState:
    """A copy of `s` with a new leader and ISR, the leader epoch bumped, written at `controller_epoch`."""
    new = s.copy()
    new.leader, new.isr = leader, list(isr)
    new.leader_epoch = s.leader_epoch + 1
    new.controller_epoch = controller_epoch
    return new


def offline_leader(replicas: list[int], isr: list[int], eligible: Collection[int],
                   unclean: bool) -> tuple[int, list[int], bool]:
    """(leader, ISR, whether the election was unclean) for a partition whose leader is gone."""
    for r in replicas:
        if r in eligible and r in isr:
            return r, [i for i in isr if i in eligible or i == r], False
    if unclean:
        for r in replicas:
            if r in eligible:
                return r, [r], True
    return NO_LEADER, list(isr), False


def after_broker_change(s: PartitionState, live: Collection[int], shutting_down: Collection[int],
                        unclean: bool, controller_epoch: int) -> tuple[PartitionState | None, bool]:
    """The state after the live brokers changed (a broker died or returned), and whether an unclean
    election made it. A live leader keeps leading and dead followers leave its ISR; a partition without
    a live leader gets one by the offline rule. A shutting-down leader is still live (its controlled
    shutdown moves what it can)."""
    if s.leader != NO_LEADER and s.leader in live:
        isr = [r for r in s.isr if r in live]
        if isr == s.isr or not isr:
            return None, False
        return changed(s, s.leader, isr, controller_epoch), False
    eligible = [b for b in live if b not in shutting_down]
    leader, isr, was_unclean = offline_leader(s.replicas, s.isr, eligible, unclean)
    if leader == s.leader and isr == s.isr:
        return None, False
    return changed(s, leader, isr, controller_epoch), was_unclean


def controlled_shutdown(s: PartitionState, broker: int, live: Collection[int], shutting_down: Collection[int],
                        controller_epoch: int) -> PartitionState | None:
    """The state once `broker` (in `shutting_down`) hands over: its leadership goes to the first live ISR
    replica not shutting down (none: it keeps leading, and is reported as remaining); it leaves the ISR
    of a partition it follows if another member remains."""
    if broker not in s.replicas or len(s.replicas) < 2:
        return None
    if s.leader == broker:
        for r in s.replicas:
            if r in live and r not in shutting_down and r in s.isr:
                return changed(s, r, [i for i in s.isr if i not in shutting_down], controller_epoch)
        return None
    if broker in s.isr:
        isr = [i for i in s.isr if i != broker]
        if isr:
            return changed(s, s.leader, isr, controller_epoch)
    return None


def preferred(s: PartitionState, eligible: Collection[int], controller_epoch: int) -> tuple[PartitionState | None, int]:
    """(new state, error code) of a preferred election: replicas[0] leads if it is eligible and in the ISR."""
    if not s.replicas:
        return None, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    pref = s.replicas[0]
    if s.leader == pref:
        return None, ErrorCode.ELECTION_NOT_NEEDED
    if pref in eligible and pref in s.isr:
        return changed(s, pref, s.isr, controller_epoch), ErrorCode.NONE
    return None, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE


def unclean(s: PartitionState, live: Collection[int], eligible: Collection[int],
            controller_epoch: int) -> tuple[PartitionState | None, int]:
    """(new state, error code) of ElectLeaders' UNCLEAN type: only a partition without a live leader is
    elected, by the offline rule with unclean election allowed."""
    if s.leader != NO_LEADER and s.leader in live:
        return None, ErrorCode.ELECTION_NOT_NEEDED
    leader, isr, _ = offline_leader(s.replicas, s.isr, eligible, True)
    if leader == NO_LEADER:
        return None, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    return changed(s, leader, isr, controller_epoch), ErrorCode.NONE


def reassignment_leader(target: list[int], isr: list[int], eligible: Collection[int]) -> int:
    """The first target replica that is eligible and in the ISR, or -1."""
    return next((r for r in target if r in eligible and r in isr), NO_LEADER)


def imbalanced(partitions: Iterable[tuple[str, int, PartitionState]], eligible: Collection[int],
               percentage: int) -> list[tuple[str, int]]:
    """Kafka's auto rebalance choice: per broker, imbalance = partitions whose preferred replica it is but
    led by another / partitions whose preferred replica it is. For each broker above `percentage`, the
    partitions it should lead where a preferred election would succeed (eligible, in the ISR) and no
    reassignment is under way."""
    preferred_count: dict[int, int] = {}
    misled: dict[int, list[tuple[str, int, PartitionState]]] = {}
    for t, p, s in partitions:
        if not s.replicas:
            continue
        pref = s.replicas[0]
        preferred_count[pref] = preferred_count.get(pref, 0) + 1
        if s.leader != pref:
            misled.setdefault(pref, []).append((t, p, s))
    out: list[tuple[str, int]] = []
    for b, rows in misled.items():
        if len(rows) * 100 <= percentage * preferred_count[b] or b not in eligible:
            continue
        out.extend((t, p) for t, p, s in rows if b in s.isr and not s.adding_replicas and not s.removing_replicas)
    return out


def unclean_enabled(configs: Mapping[str, str], default: bool) -> bool:
    """A topic's `unclean.leader.election.enable`: its override, else the broker's default."""
    v = configs.get("unclean.leader.election.enable")
    return default if v is None else v.strip().lower() == "true"
