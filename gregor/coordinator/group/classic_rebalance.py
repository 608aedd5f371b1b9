"""The classic rebalance state machine of a consumer group, and its timers.

    Empty | Stable | CompletingRebalance --prepare_rebalance--> PreparingRebalance
    PreparingRebalance --every member rejoined, or the join timer--> CompletingRebalance (or Empty)
    CompletingRebalance --the leader's SyncGroup (the coordinator)--> Stable

This is where those transitions are made and their timers kept, as Kafka's GroupCoordinator
does with its delayed operations: the join timer is DelayedJoin (the rebalance timeout) or, for a
group that was empty, InitialDelayedJoin (group.initial.rebalance.delay.ms, extended while members
keep arriving, up to the rebalance timeout); a member's heartbeat timer is DelayedHeartbeat (its
session timeout); a KIP-394 pending member's timer drops its handed-out id. Transitions are
checked against Kafka's valid previous states where they are made (`transition`).

The group coordinator answers the requests (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) and
calls in here; this module knows nothing of it: it schedules through `later(delay_ms, fn, *args)`
and writes a group's metadata through `persist_group(g)`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gregor.coordinator.group.state import (
    COMPLETING_REBALANCE,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    Group,
    Member,
)
from gregor.protocol.errors import ErrorCode

log = logging.getLogger("gregor.group")

# Kafka's GroupState.validPreviousStates, for the transitions made here (Dead is the metadata manager's).
_VALID_PREVIOUS = {
    PREPARING_REBALANCE: (EMPTY, STABLE, COMPLETING_REBALANCE),
    COMPLETING_REBALANCE: (PREPARING_REBALANCE,),
    STABLE: (COMPLETING_REBALANCE,),
    EMPTY: (PREPARING_REBALANCE,),
}


@dataclass(slots=True)
class JoinResult:
    error: ErrorCode
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] | None = None  # only the leader gets them


@dataclass(slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class ClassicRebalance:
    """Rebalances of classic groups: preparing one, completing the join, member expiry and removal."""

    def __init__(self, initial_delay_ms: int, later: Callable[..., asyncio.TimerHandle],
                 persist_group: Callable[[Group], None]) -> None:
        self.initial_delay_ms = initial_delay_ms
        self._later = later
        self._persist_group = persist_group

    def transition(self, g: Group, state: str) -> None:
        assert g.state in _VALID_PREVIOUS[state], f"group {g.group_id}: {g.state} -> {state}"
        g.state = state
        g.current_state_timestamp_ms = int(time.time() * 1000)

    def cancel_timers(self, groups: Iterable[Group]) -> None:
        """Every timer kept here (the broker is stopping)."""
        for g in groups:
            if g.join_timer is not None:
                g.join_timer.cancel()
            for m in g.members.values():
                if m.heartbeat_timer is not None:
                    m.heartbeat_timer.cancel()
            for t in g.pending_members.values():
                t.cancel()

    def unloaded(self, groups: Iterable[Group]) -> None:
        """This broker stopped coordinating these groups (its __consumer_offsets partition moved): their
        timers stop, and a member waiting on a JoinGroup or SyncGroup is answered NOT_COORDINATOR at once
        (Kafka's onGroupUnloaded), so it finds the new coordinator now rather than at its next request."""
        groups = list(groups)
        self.cancel_timers(groups)
        for g in groups:
            for m in g.members.values():
                for fut in (m.join_future, m.sync_future):
                    if fut is not None and not fut.done():
                        fut.set_result(JoinResult(ErrorCode.NOT_COORDINATOR, member_id=m.member_id)
                                       if fut is m.join_future else SyncResult(ErrorCode.NOT_COORDINATOR))
                m.join_future = m.sync_future = None

    # --- sessions (DelayedHeartbeat) -------------------------------------------------
    def schedule_heartbeat(self, g: Group, m: Member) -> None:
        if m.heartbeat_timer is not None:
            m.heartbeat_timer.cancel()
        m.heartbeat_timer = self._later(m.session_timeout_ms, self._on_session_expired, g, m)

    def _on_session_expired(self, g: Group, m: Member) -> None:
        if g.members.get(m.member_id) is not m:
            return
        if m.join_future is not None or m.sync_future is not None:
            self.schedule_heartbeat(g, m)  # blocked in a rebalance: alive by definition
            return
        log.info("member %s of group %s expired after %d ms without a heartbeat", m.member_id, g.group_id,
                 m.session_timeout_ms)
        self.remove_member(g, m, "session timeout")

    def add_pending(self, g: Group, member_id: str, session_timeout_ms: int) -> None:
        """KIP-394: `member_id` was handed out; the member must rejoin with it within its session timeout."""
        g.pending_members[member_id] = self._later(session_timeout_ms, self._expire_pending, g, member_id)

    def _expire_pending(self, g: Group, member_id: str) -> None:
        if g.pending_members.pop(member_id, None) is not None and g.state == PREPARING_REBALANCE:
            self.try_complete_join(g)

    # --- the join (DelayedJoin, InitialDelayedJoin) ----------------------------------
    def join_result(self, g: Group, m: Member) -> JoinResult:
        members = None
        if m.member_id == g.leader_id:
            assert g.protocol_name is not None
            members = [(x.member_id, x.group_instance_id, x.metadata_for(g.protocol_name)) for x in g.members.values()]
        return JoinResult(ErrorCode.NONE, g.generation, g.protocol_type, g.protocol_name, g.leader_id or "",
                          m.member_id, members)

    def maybe_prepare_rebalance(self, g: Group, reason: str) -> None:
        if g.state in (EMPTY, STABLE, COMPLETING_REBALANCE):
            self.prepare_rebalance(g, reason)

    def prepare_rebalance(self, g: Group, reason: str) -> None:
        if g.state == COMPLETING_REBALANCE:
            for m in g.members.values():  # their syncs belong to a generation that will not complete
                if m.sync_future is not None and not m.sync_future.done():
                    m.sync_future.set_result(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
                m.sync_future = None
        was_empty = g.state == EMPTY
        self.transition(g, PREPARING_REBALANCE)
        log.info("preparing to rebalance group %s (generation %d): %s", g.group_id, g.generation, reason)
        if g.join_timer is not None:
            g.join_timer.cancel()
        if was_empty and self.initial_delay_ms > 0:
            g.initial_delay_remaining_ms = max(g.max_rebalance_timeout_ms() - self.initial_delay_ms, 0)
            g.new_member_joined_during_delay = False
            g.join_timer = self._later(min(self.initial_delay_ms, g.max_rebalance_timeout_ms()),
                                       self._on_initial_delay, g)
        else:
            g.initial_delay_remaining_ms = -1
            g.join_timer = self._later(g.max_rebalance_timeout_ms(), self._on_join_timeout, g)

    def _on_initial_delay(self, g: Group) -> None:
        g.join_timer = None
        if g.state != PREPARING_REBALANCE:
            return
        if g.new_member_joined_during_delay and g.initial_delay_remaining_ms > 0:
            step = min(self.initial_delay_ms, g.initial_delay_remaining_ms)
            g.initial_delay_remaining_ms -= step
            g.new_member_joined_during_delay = False
            g.join_timer = self._later(step, self._on_initial_delay, g)
            return
        g.initial_delay_remaining_ms = -1
        self._complete_join(g)

    def _on_join_timeout(self, g: Group) -> None:
        g.join_timer = None
        if g.state == PREPARING_REBALANCE:
            self._complete_join(g)

    def try_complete_join(self, g: Group) -> None:
        if g.state != PREPARING_REBALANCE or g.initial_delay_remaining_ms >= 0:
            return  # still in the initial delay: more members may be on their way
        if g.all_rejoined():
            if g.join_timer is not None:
                g.join_timer.cancel()
                g.join_timer = None
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        for m in [m for m in g.members.values() if m.join_future is None]:
            log.info("removing member %s from group %s: it did not rejoin in time", m.member_id, g.group_id)
            self.drop_member(g, m)
        for t in g.pending_members.values():
            t.cancel()
        g.pending_members.clear()
        g.generation += 1
        if not g.members:
            g.protocol_name = None
            g.leader_id = None
            self.transition(g, EMPTY)
            self._persist_group(g)
            log.info("group %s is empty at generation %d", g.group_id, g.generation)
            return
        g.protocol_name = g.select_protocol()
        if g.leader_id not in g.members:
            g.leader_id = next(iter(g.members))
        self.transition(g, COMPLETING_REBALANCE)
        log.info("group %s formed generation %d with %d members (protocol %s)", g.group_id, g.generation,
                 len(g.members), g.protocol_name)
        for m in g.members.values():
            fut, m.join_future = m.join_future, None
            m.is_new = False
            self.schedule_heartbeat(g, m)
            if fut is not None and not fut.done():
                fut.set_result(self.join_result(g, m))

    # --- members leaving -------------------------------------------------------------
    def drop_member(self, g: Group, m: Member) -> None:
        """Take `m` out of the group, its timer cancelled and its waiting join or sync answered."""
        g.members.pop(m.member_id, None)
        if m.group_instance_id is not None and g.static_members.get(m.group_instance_id) == m.member_id:
            del g.static_members[m.group_instance_id]
        if m.heartbeat_timer is not None:
            m.heartbeat_timer.cancel()
        for fut in (m.join_future, m.sync_future):
            if fut is not None and not fut.done():
                fut.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=m.member_id)
                               if fut is m.join_future else SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))

    def remove_member(self, g: Group, m: Member, reason: str) -> None:
        """`m` left or expired: drop it and rebalance the others."""
        self.drop_member(g, m)
        if g.state == PREPARING_REBALANCE:
            self.try_complete_join(g)
        elif g.state in (STABLE, COMPLETING_REBALANCE):
            self.prepare_rebalance(g, f"member {m.member_id} {reason}")
            self.try_complete_join(g)
