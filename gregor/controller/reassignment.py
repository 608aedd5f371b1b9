"""Partition reassignment (KIP-455), as pure steps over a partition state.

A reassignment to target replicas TRS from the original replicas ORS is written as one assignment:
replicas RS = TRS + (ORS - TRS), adding = TRS - ORS, removing = ORS - TRS. The new replicas start as
followers (ReplicaManager follows any assigned replica that does not lead) and copy the log; their
leader adds them to the ISR as they catch up. Once every TRS member is in the ISR, the controller
elects a leader from TRS if the current one is not in it, shrinks the ISR to TRS (leader epoch bump)
and writes the assignment TRS with adding and removing empty; ReplicaManager deletes the removed
replicas' logs. Everything needed to resume is in the assignment itself, so a new controller picks a
reassignment up where the old one left it.

The functions below are the pure steps; `Reassignments` is the controller's bookkeeping around them
(which partitions are under way, AlterPartitionReassignments, ListPartitionReassignments, advancing
on STATE events), writing through the controller's fenced writes.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from gregor.controller.context import ControllerContext, TopicPartition
from gregor.controller.election import NO_LEADER, changed, reassignment_leader
from gregor.metadata.store import (
    CREATED,
    DELETED,
    PARTITIONS,
    STATE,
    ControllerMovedError,
    MetadataError,
    PartitionState,
)
from gregor.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("gregor.controller")


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


class Reassignments:
    """The reassignments under way, as the controller tracks them: an index of the partitions with
    adding or removing replicas (rebuilt from the cache, so a new controller resumes them), the
    AlterPartitionReassignments and ListPartitionReassignments work, and the completion step run on
    every STATE event of a reassigning topic. All writes go through the controller (fenced by its
    epoch) and run under its lock."""

    def __init__(self, ctx: ControllerContext) -> None:
        self.controller = ctx
        self.cache = ctx.cache
        self._reassigning: dict[str, set[int]] = {}  # topic -> partitions with a reassignment under way
        self._pending: set[str] = set()  # topics with an advance scheduled

    def index_topic(self, topic: str) -> None:
        t = self.cache.topic(topic)
        parts = {p for p, s in t.partitions.items() if in_progress(s)} if t is not None else set()
        if parts:
            self._reassigning[topic] = parts
        else:
            self._reassigning.pop(topic, None)

    def index_all(self) -> None:
        self._reassigning = {}
        for name in self.cache.topics():
            self.index_topic(name)

    def on_event(self, kind: str, topic: str) -> None:
        """A topic event (on the loop): keep the index, and advance the topic's reassignments if active."""
        if kind in (CREATED, PARTITIONS, DELETED):
            self.index_topic(topic)
        if kind not in (CREATED, PARTITIONS, STATE):
            return
        if self.controller.active and topic in self._reassigning and topic not in self._pending:
            self._pending.add(topic)
            self.controller.spawn(self._advance(topic))

    async def resume_all_locked(self) -> None:
        """At activation (under the controller's lock): every reassignment under way is advanced."""
        self.index_all()
        for topic in list(self._reassigning):
            await self.advance_locked(topic)

    async def alter(self, requests: dict[str, dict[int, list[int] | None]]
                    ) -> dict[str, dict[int, tuple[int, str | None]]]:
        """AlterPartitionReassignments: per partition a target replica list (None: cancel). Returns per
        partition (error code, message) once the assignments are written and in the cache. Raises
        KafkaError(NOT_CONTROLLER)."""
        ctl = self.controller
        async with ctl.lock:
            ctl.require_active()
            known = {b.broker_id for b in self.cache.brokers()}
            for t in self.cache.topics().values():
                for s in t.partitions.values():
                    known.update(s.replicas)
            eligible = ctl.eligible()
            out: dict[str, dict[int, tuple[int, str | None]]] = {}
            for name, parts in requests.items():
                res = out.setdefault(name, {})
                t = self.cache.topic(name)
                writes: dict[int, PartitionState] = {}
                cancels: dict[TopicPartition, tuple[PartitionState, int]] = {}
                for p, target in parts.items():
                    s = t.partitions.get(p) if t is not None else None
                    if s is None:
                        res[p] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unknown partition {name}-{p}.")
                        continue
                    try:
                        validate_target(target, known)
                    except KafkaError as e:
                        res[p] = (e.code, e.message)
                        continue
                    if target is None or (target == original_replicas(s) and in_progress(s)):
                        if not in_progress(s):
                            res[p] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                                      f"No reassignment is in progress for {name}-{p}.")
                            continue
                        view = s.copy()  # the cancellation completes at once, back to the ORS
                        view.removing_replicas, view.adding_replicas = list(s.adding_replicas), []
                        new, _ = completion(view, eligible, ctl.epoch, force=True)
                        if new is not None:
                            cancels[(name, p)] = (new, s.version)
                        writes[p] = assignment(original_replicas(s), [], [])
                    else:
                        planned = plan(s, list(target))
                        if planned is not None:
                            writes[p] = planned
                    res[p] = (ErrorCode.NONE, None)
                if cancels:
                    for (_, p), r in (await ctl.write_states(cancels)).items():
                        if isinstance(r, MetadataError):
                            res[p] = (ErrorCode.NOT_CONTROLLER if isinstance(r, ControllerMovedError)
                                      else ErrorCode.UNKNOWN_SERVER_ERROR, str(r))
                            writes.pop(p, None)
                if writes:
                    if await ctl.write_assignments(name, writes):
                        log.info("controller %d: reassignment of %s partitions %s written", ctl.broker_id, name,
                                 sorted(writes))
                    else:
                        for p in writes:
                            res[p] = (ErrorCode.UNKNOWN_SERVER_ERROR, "The metadata store refused the assignment.")
                    self.index_topic(name)
                    if name in self._reassigning:
                        await self.advance_locked(name)
            return out

    def list_in_progress(self, topics: dict[str, list[int]] | None) -> dict[str, dict[int, PartitionState]]:
        """ListPartitionReassignments: the reassignments under way (of the given partitions, or all).
        Raises KafkaError(NOT_CONTROLLER)."""
        self.controller.require_active()
        out: dict[str, dict[int, PartitionState]] = {}
        wanted = topics.items() if topics is not None else ((n, None) for n in self._reassigning)
        for name, parts in wanted:
            t = self.cache.topic(name)
            if t is None:
                continue
            for p in (parts if parts is not None else sorted(t.partitions)):
                s = t.partitions.get(p)
                if s is not None and in_progress(s):
                    out.setdefault(name, {})[p] = s
        return out

    async def _advance(self, topic: str) -> None:
        async with self.controller.lock:
            self._pending.discard(topic)
            if self.controller.active:
                await self.advance_locked(topic)

    async def advance_locked(self, topic: str) -> None:
        """Complete the topic's reassignments whose target replicas are all in the ISR: leader from TRS,
        ISR shrunk to TRS (one state write), then the assignment TRS with nothing adding or removing."""
        ctl = self.controller
        t = self.cache.topic(topic)
        if t is None:
            return
        eligible = ctl.eligible()
        states: dict[TopicPartition, tuple[PartitionState, int]] = {}
        done: list[int] = []
        for p in sorted(self._reassigning.get(topic, ())):
            s = t.partitions.get(p)
            if s is None or not in_progress(s):
                continue
            new, complete = completion(s, eligible, ctl.epoch)
            if new is not None:
                states[(topic, p)] = (new, s.version)
            if complete:
                done.append(p)
        if states:
            written = await ctl.write_states(states)
            done = [p for p in done if not isinstance(written.get((topic, p), 0), MetadataError)]
        if done and ctl.active:
            t = self.cache.topic(topic)
            if t is None:
                return
            finals = {p: assignment(target_replicas(t.partitions[p]), [], []) for p in done if p in t.partitions}
            if await ctl.write_assignments(topic, finals):
                log.info("controller %d: reassignment of %s partitions %s completed", ctl.broker_id, topic, sorted(finals))
        self.index_topic(topic)
