"""The KIP-848 consumer group protocol on the group coordinator (group.protocol=consumer).

ConsumerGroupHeartbeat is the whole membership API: a member joins with epoch 0, then
heartbeats every `group.consumer.heartbeat.interval.ms`, and leaves with epoch -1 (a static
member, one with group.instance.id, may leave for a while with -2 and keep its
assignment). The broker assigns partitions itself (assignors `uniform` and `range`) and
hands each member its part incrementally, as `consumer_state` describes: a partition
reaches its new owner only once its previous owner has reported it revoked, left, or been
fenced. Members that stop heartbeating for `group.consumer.session.timeout.ms` are fenced,
as are members that take longer than their rebalance timeout to revoke partitions.

A group is either classic or consumer. An empty classic group (for instance one that
only holds committed offsets) becomes a consumer group on the first consumer heartbeat, and
an empty consumer group becomes classic on the first JoinGroup, as in Kafka; otherwise a
heartbeat to a classic group gets GROUP_ID_NOT_FOUND and a JoinGroup to a consumer group
INCONSISTENT_GROUP_PROTOCOL (Kafka would take classic members into a consumer group; not
done here). DescribeGroups does not describe consumer groups (GROUP_ID_NOT_FOUND from v6, a
Dead group before, as Kafka 4.0); ConsumerGroupDescribe does.

Persistence: the group epoch is written to __consumer_offsets as Kafka's
ConsumerGroupMetadata record (key version 3, value version 0), so after a restart the group
is still a consumer group and its epoch keeps growing. Members, target and current
assignments (Kafka's key versions 4-8) are not written: after a restart the members'
heartbeats get UNKNOWN_MEMBER_ID and they rejoin with epoch 0. Committed offsets use the
shared offset records and survive as they always do.

Deviations from Kafka 4.0, on purpose:
- A heartbeat with epoch > 0 for a group the broker does not know (or that is an empty
  classic group, e.g. offsets only) gets UNKNOWN_MEMBER_ID, not GROUP_ID_NOT_FOUND: without
  persisted members this is what a restart looks like, and librdkafka treats
  GROUP_ID_NOT_FOUND on a heartbeat as fatal but rejoins on UNKNOWN_MEMBER_ID.
- A static member rejoining with epoch 0 under the member id that already holds its
  instance id is taken as a rejoin of that member, not UNRELEASED_INSTANCE_ID (a KIP-1082
  client keeps its member id when it rejoins after being fenced).
- `subscribed_topic_regex` is matched with Python's `re.fullmatch` against non-internal
  topic names; Kafka uses RE2/J. The common syntax agrees; Python accepts constructs RE2
  refuses (backreferences, lookaround) and we do not reject them. Regexes are re-resolved
  at most once a second per group, on a heartbeat.
- Subscribed topics' metadata (ids, partition counts) is checked on every heartbeat, so a
  partition increase bumps the group epoch at the next heartbeat of any member.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gregor.configdef import ConfigError, Settings, setting
from gregor.coordinator.group import records as rec
from gregor.coordinator.group.assignors import Assignment
from gregor.coordinator.group.consumer_state import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    MEMBER_STABLE,
    UNREVOKED_PARTITIONS,
    ConsumerGroup,
    ConsumerMember,
    Owned,
    new_member_id,
    next_assignment,
)
from gregor.coordinator.group.consumer_target import (  # noqa: F401 - the version constant is imported from here
    CONSUMER_GENERATED_MEMBER_ID_VERSION,
    HeartbeatRequest,
    compute_target,
    resolve_regexes,
    validate_heartbeat,
)
from gregor.coordinator.group.group_configs import HEARTBEAT, SESSION, effective
from gregor.coordinator.group.state import EMPTY, Group
from gregor.metadata.store import TopicMetadata
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.primitives import Reader, Writer
from gregor.protocol.schema import INT32, STRING, Schema, f

log = logging.getLogger("gregor.group")

PROTOCOL_TYPE = "consumer"
REGEX_REFRESH_S = 1.0

# --- __consumer_offsets records: ConsumerGroupMetadata (the group epoch) -------------------

CONSUMER_GROUP_METADATA_KEY_VERSION = 3
_METADATA_KEY = Schema("ConsumerGroupMetadataKey", [f("group", STRING)], "3", "none")
_METADATA_VALUE = Schema("ConsumerGroupMetadataValue", [f("epoch", INT32)], "0", "0+")


def metadata_key(group_id: str) -> bytes:
    w = Writer()
    w.int16(CONSUMER_GROUP_METADATA_KEY_VERSION)
    _METADATA_KEY.encode(w, {"group": group_id}, CONSUMER_GROUP_METADATA_KEY_VERSION)
    return w.getvalue()


def metadata_value(epoch: int) -> bytes:
    w = Writer()
    w.int16(0)
    _METADATA_VALUE.encode(w, {"epoch": epoch}, 0)
    return w.getvalue()


# --- results (the request, HeartbeatRequest, is consumer_target's) ---------------------------------

@dataclass(slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: unchanged since the member last heard it


@dataclass(frozen=True, slots=True)
class ConsumerGroupSettings(Settings):
    session_timeout_ms: int = setting("group.consumer.session.timeout.ms")
    min_session_timeout_ms: int = setting("group.consumer.min.session.timeout.ms")
    max_session_timeout_ms: int = setting("group.consumer.max.session.timeout.ms")
    heartbeat_interval_ms: int = setting("group.consumer.heartbeat.interval.ms")
    min_heartbeat_interval_ms: int = setting("group.consumer.min.heartbeat.interval.ms")
    max_heartbeat_interval_ms: int = setting("group.consumer.max.heartbeat.interval.ms")
    max_size: int = setting("group.consumer.max.size")
    assignors: list[str] = setting("group.consumer.assignors")

    def broker_value(self, name: str) -> int:
        """A group config's broker default or bound by its property name (group_configs.GROUP_CONFIGS names
        them): one of this view's fields."""
        return int(getattr(self, _FIELD_OF[name]))


_FIELD_OF = {prop: field for field, prop in ConsumerGroupSettings.properties().items()}


def _is_subset(owned: Owned | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(p in assigned.get(tid, ()) for tid, ps in owned for p in ps)


def _err(code: ErrorCode, message: str) -> KafkaError:
    return KafkaError(code, message)


class ConsumerGroupProtocol:
    """The consumer-protocol half of the group coordinator. It shares the coordinator's group table
    (a Group carries `consumer` state when it is a consumer group), its timers and its log."""

    def __init__(self, settings: ConsumerGroupSettings, groups: dict[str, Group],
                 later: Callable[..., Any], write: Callable[[str, list[tuple[bytes, bytes | None]]], None]) -> None:
        self.groups = groups
        self.settings = settings
        # A group's own configs (KIP-848 GROUP resource: group_configs.py) by group id; set by the broker.
        self.group_configs: Callable[[str], Mapping[str, str]] = lambda _group_id: {}
        self._later = later
        self._write = write
        self.session_timeout_ms = settings.session_timeout_ms
        self.heartbeat_interval_ms = settings.heartbeat_interval_ms
        self.max_size = settings.max_size
        self.assignors: list[str] = list(settings.assignors)
        lo, hi = settings.min_session_timeout_ms, settings.max_session_timeout_ms
        if not lo <= self.session_timeout_ms <= hi:
            raise ConfigError(f"group.consumer.session.timeout.ms must be within [{lo}, {hi}] "
                              "(group.consumer.min/max.session.timeout.ms)")
        lo, hi = settings.min_heartbeat_interval_ms, settings.max_heartbeat_interval_ms
        if not lo <= self.heartbeat_interval_ms <= hi:
            raise ConfigError(f"group.consumer.heartbeat.interval.ms must be within [{lo}, {hi}] "
                              "(group.consumer.min/max.heartbeat.interval.ms)")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError("group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms")
        if not self.assignors:
            raise ConfigError("group.consumer.assignors must name at least one assignor")

    def session_ms(self, group_id: str) -> int:
        """The group's consumer.session.timeout.ms, else group.consumer.session.timeout.ms."""
        return effective(self.group_configs(group_id), self.settings.broker_value)[SESSION]

    def heartbeat_ms(self, group_id: str) -> int:
        """The group's consumer.heartbeat.interval.ms, else group.consumer.heartbeat.interval.ms."""
        return effective(self.group_configs(group_id), self.settings.broker_value)[HEARTBEAT]

    # --- persistence -------------------------------------------------------------------
    def replay(self, key: bytes, value: bytes | None) -> bool:
        """Apply one __consumer_offsets record if it is ours; False if it is not."""
        if len(key) < 2 or int.from_bytes(key[:2], "big", signed=True) != CONSUMER_GROUP_METADATA_KEY_VERSION:
            return False
        r = Reader(key)
        r.int16()
        group_id = _METADATA_KEY.decode(r, CONSUMER_GROUP_METADATA_KEY_VERSION).group
        g = self.groups.get(group_id)
        if value is None:
            if g is not None and g.consumer is not None:
                g.consumer = None
                g.protocol_type = None
                if not g.offsets:
                    del self.groups[group_id]
            return True
        vr = Reader(value)
        epoch = _METADATA_VALUE.decode(vr, vr.int16()).epoch
        if g is None:
            g = self.groups[group_id] = Group(group_id)
        g.consumer = ConsumerGroup(group_epoch=epoch, assignment_epoch=epoch)
        g.protocol_type, g.protocol_name, g.leader_id, g.state = PROTOCOL_TYPE, None, None, EMPTY
        g.members.clear()
        return True

    def tombstones(self, g: Group) -> list[tuple[bytes, bytes | None]]:
        """Records that delete the group's consumer-protocol state (on DeleteGroups, expiry, downgrade)."""
        return [(metadata_key(g.group_id), None)] if g.consumer is not None else []

    def _persist(self, group_id: str, entries: list[tuple[bytes, bytes | None]]) -> None:
        if not entries:
            return
        try:
            self._write(group_id, entries)
        except KafkaError as e:
            # The group keeps working from memory; after a restart it would show an older epoch.
            log.error("could not store consumer group %s: %s", group_id, e)

    # --- ConsumerGroupHeartbeat --------------------------------------------------------
    def heartbeat(self, req: HeartbeatRequest, topics: Mapping[str, TopicMetadata], api_version: int) -> HeartbeatResult:
        """`topics` is the cluster's topic metadata now (name -> TopicMetadata)."""
        try:
            validate_heartbeat(req, api_version, self.assignors)
            if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(req)
            return self._heartbeat(req, topics)
        except KafkaError as e:
            return HeartbeatResult(e.code, e.message)

    def _group(self, req: HeartbeatRequest, records: list[tuple[bytes, bytes | None]]) -> Group:
        g = self.groups.get(req.group_id)
        if g is not None and g.consumer is not None:
            return g
        if g is not None and (g.members or g.pending_members or g.state != EMPTY):
            raise _err(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a consumer group.")
        if req.member_epoch != 0:
            raise _err(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {req.group_id}.")
        if g is None:
            g = self.groups[req.group_id] = Group(req.group_id, current_state_timestamp_ms=int(time.time() * 1000))
        else:
            if g.protocol_type is not None or g.generation > 0:
                records.append((rec.group_key(g.group_id), None))  # the classic group's metadata goes
            log.info("converting empty classic group %s to a consumer group", g.group_id)
        g.consumer = ConsumerGroup()
        g.protocol_type, g.protocol_name, g.leader_id = PROTOCOL_TYPE, None, None
        return g

    def _member(self, g: Group, req: HeartbeatRequest, member_id: str) -> tuple[ConsumerMember, bool]:
        """The member the heartbeat is from (and whether it is new), after Kafka's identity checks."""
        cg = g.consumer
        assert cg is not None
        joining = req.member_epoch == 0
        if req.instance_id is None:
            m = cg.members.get(member_id)
            if m is None:
                if not joining:
                    raise _err(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {g.group_id}.")
                return self._new_member(req, member_id), True
            if not joining:
                self._check_epoch(m, req)
            return m, False
        iid = req.instance_id
        existing_id = cg.static_members.get(iid)
        existing = cg.members.get(existing_id) if existing_id is not None else None
        if joining:
            if existing is None:
                m = cg.members.get(member_id)
                return (m, False) if m is not None else (self._new_member(req, member_id), True)
            if existing.member_id == member_id:
                return existing, False
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise _err(ErrorCode.UNRELEASED_INSTANCE_ID,
                           f"Static member {member_id} with instance id {iid} cannot join the group because the "
                           f"instance id is owned by {existing.member_id} member.")
            return self._replace_static_member(g, existing, member_id), False
        if existing is None:
            raise _err(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {iid} is unknown.")
        if existing.member_id != member_id:
            raise _err(ErrorCode.FENCED_INSTANCE_ID,
                       f"Static member {member_id} with instance id {iid} was fenced by member {existing.member_id}.")
        self._check_epoch(existing, req)
        return existing, False

    @staticmethod
    def _new_member(req: HeartbeatRequest, member_id: str) -> ConsumerMember:
        return ConsumerMember(member_id, req.instance_id, req.rack_id, req.client_id, req.client_host,
                              req.rebalance_timeout_ms)

    @staticmethod
    def _check_epoch(m: ConsumerMember, req: HeartbeatRequest) -> None:
        e = req.member_epoch
        if e > m.member_epoch:
            raise _err(ErrorCode.FENCED_MEMBER_EPOCH,
                       f"The consumer group member has a greater member epoch ({e}) than the one known by the group "
                       f"coordinator ({m.member_epoch}). The member must abandon all its partitions and rejoin.")
        if e < m.member_epoch and (e != m.previous_member_epoch or not _is_subset(req.topic_partitions, m.assigned)):
            # The previous epoch with a subset of the assignment is accepted: the response that moved it may be lost.
            raise _err(ErrorCode.FENCED_MEMBER_EPOCH,
                       f"The consumer group member has a smaller member epoch ({e}) than the one known by the group "
                       f"coordinator ({m.member_epoch}). The member must abandon all its partitions and rejoin.")

    def _replace_static_member(self, g: Group, old: ConsumerMember, new_id: str) -> ConsumerMember:
        """A static member came back under a new member id: it takes over the old one's assignment, at epoch 0."""
        cg = g.consumer
        assert cg is not None
        m = ConsumerMember(new_id, old.instance_id, old.rack_id, old.client_id, old.client_host,
                           old.rebalance_timeout_ms, old.subscribed_topic_names, old.subscribed_topic_regex,
                           old.server_assignor)
        target = cg.target.get(old.member_id)
        cg.remove_member(old)
        cg.members[new_id] = m
        if m.instance_id is not None:
            cg.static_members[m.instance_id] = new_id
        if target is not None:
            cg.target[new_id] = target
        cg.set_current(m, MEMBER_STABLE, 0, old.assigned, {})
        m.previous_member_epoch = 0
        log.info("static member %s of group %s rejoined as %s", old.instance_id, g.group_id, new_id)
        return m

    def _heartbeat(self, req: HeartbeatRequest, topics: Mapping[str, TopicMetadata]) -> HeartbeatResult:
        records: list[tuple[bytes, bytes | None]] = []
        g = self._group(req, records)
        cg = g.consumer
        assert cg is not None
        member_id = req.member_id or new_member_id()  # v0 join: the coordinator names the member
        if member_id not in cg.members and len(cg.members) >= self.max_size:
            raise _err(ErrorCode.GROUP_MAX_SIZE_REACHED,
                       f"The consumer group has reached its maximum capacity of {self.max_size} members.")
        try:
            m, is_new = self._member(g, req, member_id)
        except KafkaError:
            self._persist(g.group_id, records)
            raise
        assigned_before = m.assigned if not is_new else None

        # 1. Update the member; a new member or a changed subscription bumps the group epoch.
        before = (m.subscribed_topic_names, m.subscribed_topic_regex, m.server_assignor)
        if req.rack_id is not None:
            m.rack_id = req.rack_id
        if req.rebalance_timeout_ms != -1:
            m.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.server_assignor is not None:
            m.server_assignor = req.server_assignor
        if req.subscribed_topic_names is not None:
            m.subscribed_topic_names = tuple(sorted(set(req.subscribed_topic_names)))
        if req.subscribed_topic_regex is not None:
            m.subscribed_topic_regex = req.subscribed_topic_regex or None
        m.client_id, m.client_host = req.client_id, req.client_host
        bump = is_new or cg.group_epoch == 0 or before != (m.subscribed_topic_names, m.subscribed_topic_regex,
                                                              m.server_assignor)
        if is_new:
            cg.members[m.member_id] = m
            if m.instance_id is not None:
                cg.static_members[m.instance_id] = m.member_id
            log.info("member %s joins consumer group %s", m.member_id, g.group_id)

        # 2. Resolve regexes and check the subscribed topics' metadata: a change bumps the group epoch.
        now_s = time.monotonic()
        if bump or now_s - cg.regex_refreshed_at >= REGEX_REFRESH_S:
            resolve_regexes(cg, topics)
            cg.regex_refreshed_at = now_s
            cg.subscribed_names = frozenset(cg.all_subscribed_topics())
        subscription: dict[str, tuple[Any, int]] = {}
        for name in cg.subscribed_names:
            t = topics.get(name)
            if t is not None:
                subscription[name] = (t.topic_id, len(t.partitions))
        if subscription != cg.subscription:
            cg.subscription = subscription
            bump = True
        if bump:
            cg.group_epoch += 1
            records.append((metadata_key(g.group_id), metadata_value(cg.group_epoch)))
            log.info("consumer group %s is at epoch %d", g.group_id, cg.group_epoch)

        # 3. A new group epoch: compute the target assignment.
        if cg.group_epoch > cg.assignment_epoch:
            compute_target(g.group_id, cg, self.assignors)

        # 4. Move this member one step towards its target.
        self._reconcile(g, m, req.topic_partitions)
        self._schedule_session(g, m)
        self._update_state(g)
        self._persist(g.group_id, records)

        full = req.member_epoch == 0 or (
            req.rebalance_timeout_ms != -1 and req.topic_partitions is not None
            and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None))
        assignment = m.assigned if full or m.assigned != assigned_before else None
        return HeartbeatResult(ErrorCode.NONE, None, m.member_id, m.member_epoch, self.heartbeat_ms(g.group_id),
                               assignment)

    def _reconcile(self, g: Group, m: ConsumerMember, owned: Owned | None) -> None:
        cg = g.consumer
        assert cg is not None
        if m.is_reconciled_to(cg.assignment_epoch):
            return
        nxt = next_assignment(m, cg.assignment_epoch, cg.target.get(m.member_id, {}), owned, cg.owners)
        if nxt is None or (nxt.state, nxt.epoch, nxt.assigned, nxt.pending_revocation) == (
                m.state, m.member_epoch, m.assigned, m.pending_revocation):
            return
        cg.set_current(m, nxt.state, nxt.epoch, nxt.assigned, nxt.pending_revocation)
        log.debug("member %s of group %s: %s at epoch %d", m.member_id, g.group_id, m.state, m.member_epoch)
        if m.rebalance_timer is not None:
            m.rebalance_timer.cancel()
            m.rebalance_timer = None
        if m.state == UNREVOKED_PARTITIONS:
            m.rebalance_timer = self._later(m.rebalance_timeout_ms, self._on_rebalance_timeout, g, m, m.member_epoch)

    def _update_state(self, g: Group) -> None:
        assert g.consumer is not None
        state = g.consumer.state()
        if g.state != state:
            g.state = state
            g.current_state_timestamp_ms = int(time.time() * 1000)

    # --- leaving and fencing -----------------------------------------------------------
    def _leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        g = self.groups.get(req.group_id)
        if g is None or g.consumer is None:
            raise _err(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
        cg = g.consumer
        if req.instance_id is None:
            m = cg.members.get(req.member_id)
            if m is None:
                raise _err(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {g.group_id}.")
            self._fence(g, m, "left the group")
        else:
            mid = cg.static_members.get(req.instance_id)
            m = cg.members.get(mid) if mid is not None else None
            if m is None:
                raise _err(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
            if m.member_id != req.member_id:
                raise _err(ErrorCode.FENCED_INSTANCE_ID, f"Static member {req.member_id} with instance id "
                           f"{req.instance_id} was fenced by member {m.member_id}.")
            if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # A temporary leave: the assignment stays reserved until it rejoins or its session times out.
                cg.set_current(m, m.state, LEAVE_GROUP_STATIC_MEMBER_EPOCH, m.assigned, {})
                if m.rebalance_timer is not None:
                    m.rebalance_timer.cancel()
                    m.rebalance_timer = None
                log.info("static member %s (%s) of group %s left temporarily", m.member_id, m.instance_id, g.group_id)
                self._update_state(g)
            else:
                self._fence(g, m, "left the group")
        return HeartbeatResult(ErrorCode.NONE, None, req.member_id, req.member_epoch, 0)

    def _fence(self, g: Group, m: ConsumerMember, reason: str) -> None:
        """Remove the member: its partitions are free at once; the group epoch goes up."""
        cg = g.consumer
        assert cg is not None
        cg.remove_member(m)
        cg.subscribed_names = frozenset(cg.all_subscribed_topics())
        cg.subscription = {t: v for t, v in cg.subscription.items() if t in cg.subscribed_names}
        cg.group_epoch += 1
        log.info("member %s of consumer group %s %s; group epoch %d", m.member_id, g.group_id, reason, cg.group_epoch)
        self._update_state(g)
        self._persist(g.group_id, [(metadata_key(g.group_id), metadata_value(cg.group_epoch))])

    def _is_current(self, g: Group, m: ConsumerMember) -> bool:
        return self.groups.get(g.group_id) is g and g.consumer is not None and g.consumer.members.get(m.member_id) is m

    def _schedule_session(self, g: Group, m: ConsumerMember) -> None:
        if m.session_timer is not None:
            m.session_timer.cancel()
        m.session_timer = self._later(self.session_ms(g.group_id), self._on_session_timeout, g, m)

    def _on_session_timeout(self, g: Group, m: ConsumerMember) -> None:
        m.session_timer = None
        if self._is_current(g, m):
            self._fence(g, m, f"expired after {self.session_ms(g.group_id)} ms without a heartbeat")

    def _on_rebalance_timeout(self, g: Group, m: ConsumerMember, epoch: int) -> None:
        m.rebalance_timer = None
        if self._is_current(g, m) and m.state == UNREVOKED_PARTITIONS and m.member_epoch == epoch:
            self._fence(g, m, f"did not revoke its partitions within {m.rebalance_timeout_ms} ms")

    def convert_to_classic(self, g: Group) -> None:
        """An empty consumer group receives a JoinGroup: it becomes a classic group (Kafka's offline downgrade)."""
        assert g.consumer is not None and not g.consumer.members
        self._persist(g.group_id, self.tombstones(g))
        g.consumer = None
        g.protocol_type = None
        g.state = EMPTY
        log.info("converting empty consumer group %s to a classic group", g.group_id)

    def shutdown(self) -> None:
        for g in self.groups.values():
            if g.consumer is not None:
                for m in g.consumer.members.values():
                    m.cancel_timers()

    # --- describe and offsets ------------------------------------------------------------
    def describe(self, group_id: str) -> Group:
        """The consumer group, or KafkaError(GROUP_ID_NOT_FOUND) as Kafka answers ConsumerGroupDescribe."""
        g = self.groups.get(group_id)
        if g is None:
            raise _err(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        if g.consumer is None:
            raise _err(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        return g

    def validate_offset_commit(self, g: Group, member_id: str, member_epoch: int, api_version: int) -> ErrorCode | None:
        """Kafka's ConsumerGroup.validateOffsetCommit: a member commits at its current epoch; a commit from
        outside the group (epoch < 0) is only taken while the group has no members."""
        cg = g.consumer
        assert cg is not None
        if member_epoch < 0 and not cg.members:
            return None
        m = cg.members.get(member_id)
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if api_version < 9:
            return ErrorCode.UNSUPPORTED_VERSION  # consumer-protocol members must commit with OffsetCommit v9+
        if member_epoch != m.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return None

    def validate_offset_fetch(self, g: Group, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        cg = g.consumer
        assert cg is not None
        if member_id is None and member_epoch < 0:
            return None  # the admin client, or a client that does not say who it is
        m = cg.members.get(member_id or "")
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != m.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return None
