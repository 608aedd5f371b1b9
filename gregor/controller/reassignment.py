"""Partition reassignment (KIP-455), as pure steps over a partition state.

A reassignment to target replicas TRS from the original replicas ORS is written as one assignment:
replicas RS = TRS + (ORS - TRS), adding = TRS - ORS, removing = ORS - TRS. The new replicas start as
followers (ReplicaManager follows any assigned replica that does not lead) and copy the log; their
leader adds them to the ISR as they catch up. Once every TRS member is in the ISR, the controller
elects a leader from TRS if the current one is not in it, shrinks the ISR to TRS (leader epoch bump)
and writes the assignment TRS with adding and removing empty; ReplicaManager deletes the removed
replicas' logs. Everything needed to resume is in the assignment itself, so a new controller picks a
reassignment up where the old one left it.
"""

from __future__ import annotations

from collections.abc import Collection

from gregor.controller.election import NO_LEADER, changed, reassignment_leader
from gregor.metadata.store import PartitionState
from gregor.protocol.errors import ErrorCode, KafkaError


def in_progress(s: PartitionState) -> bool:
    return bool(s.adding_replicas or s.removing_replicas)


def original_replicas(s: PartitionState) -> list[int]:
    """ORS: the replicas before the reassignment under way (all of them when none is)."""
    return [r for r in s.replicas if r not in s.adding_replicas]


def target_replicas(s: PartitionState) -> list[int]:
    """TRS: the replicas the reassignment under way ends with (all of them when none is)."""
    return [r for r in s.replicas if r not in s.removing_replicas]


def assignment(replicas: list[int], adding: list[int], removing: list[int]) -> PartitionState:
    """An assignment for ReassignPartitions (the store keeps the state's leader, epoch and ISR)."""
    return PartitionState(list(replicas), NO_LEADER, 0, [], 0, 0, list(adding), list(removing))


def validate_target(target: list[int] | None, known_brokers: Collection[int]) -> None:
    """Kafka's checks of a target replica list (INVALID_REPLICA_ASSIGNMENT): non-empty, no duplicates,
    every broker live or known to the cluster (assigned somewhere: a broker down for a moment)."""
    if target is None:
        return
    if not target:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The replica list is empty.")
    if len(set(target)) != len(target):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Duplicate brokers in the replica list {target}.")
    unknown = [b for b in target if b not in known_brokers]
    if unknown:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unknown broker(s) {unknown} in the replica list {target}.")


def plan(s: PartitionState, target: list[int]) -> PartitionState | None:
    """The assignment that starts a reassignment to `target` (replacing one under way: its original
    replicas stay the ORS), or None when `target` is already the assignment with nothing under way."""
    ors = original_replicas(s)
    if target == ors and not in_progress(s):
        return None
    if target == ors:  # back to where it started: a cancellation
        return assignment(ors, [], [])
    return assignment(target + [r for r in ors if r not in target],
                      [r for r in target if r not in ors], [r for r in ors if r not in target])


def completion(s: PartitionState, eligible: Collection[int], controller_epoch: int,
               force: bool = False) -> tuple[PartitionState | None, bool]:
    """(state to write or None, whether the reassignment can complete now). It completes once every TRS
    member is in the ISR (`force`: at once, for a cancellation back to the ORS) and a TRS member can
    lead: the leader is kept if in TRS, else the first eligible TRS member in the ISR; the ISR shrinks
    to TRS. A forced completion without any eligible TRS member in the ISR leaves the partition
    leaderless, the ISR as it was."""
    trs = target_replicas(s)
    if not force and not all(r in s.isr for r in trs):
        return None, False
    leader = s.leader if s.leader in trs and s.leader in eligible else reassignment_leader(trs, s.isr, eligible)
    if leader == NO_LEADER:
        if not force:
            return None, False
        return (None if s.leader == NO_LEADER else changed(s, NO_LEADER, s.isr, controller_epoch)), True
    isr = [r for r in s.isr if r in trs]
    if leader == s.leader and isr == s.isr:
        return None, True
    return changed(s, leader, isr, controller_epoch), True
