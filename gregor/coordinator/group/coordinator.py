"""The group coordinator: classic consumer groups (join/sync/heartbeat/leave) and offsets.

It runs on the broker's event loop. Rebalances are delayed operations: a JoinGroup is
answered when every known member has rejoined or the rebalance timeout expires (for a
new group, after group.initial.rebalance.delay.ms, extended while members keep
arriving); a SyncGroup is answered when the leader has sent the assignment. Sessions
expire on timers. Committed offsets and group metadata are written to the compacted
internal topic __consumer_offsets (partition = hash of the group id) through the normal
log, and replayed from it at startup: that is metadata_manager.py's GroupMetadataManager,
which owns the group table; this class answers the classic membership requests on it. The
rebalance state machine those requests drive, with its join and session timers, is
classic_rebalance.py's ClassicRebalance (`self.rebalance`), which makes every transition.

KIP-848 consumer groups (group.protocol=consumer) share the group table, the timers and
the log; their protocol (ConsumerGroupHeartbeat) is in `consumer_protocol`, reached
through `self.consumer`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gregor.configdef import Settings, setting
from gregor.coordinator.group.classic_rebalance import (  # noqa: F401 - results imported from here by the handlers
    ClassicRebalance,
    JoinResult,
    SyncResult,
)
from gregor.coordinator.group.consumer_protocol import ConsumerGroupProtocol, ConsumerGroupSettings
from gregor.coordinator.group.metadata_manager import (  # noqa: F401 - imported from here by the broker and tests
    OFFSETS_TOPIC,
    Append,
    GroupMetadataManager,
    GroupMetadataSettings,
    java_string_hash,
    partition_for,
)
from gregor.coordinator.group.state import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    Group,
    Member,
    OffsetAndMetadata,
)
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import validate_record_set

if TYPE_CHECKING:
    from gregor.replication.partition import AppendResult

log = logging.getLogger("gregor.group")


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class GroupCoordinatorSettings(Settings):
    """The classic group protocol's settings (the coordinator's parts have their own views)."""

    min_session_timeout_ms: int = setting("group.min.session.timeout.ms")
    max_session_timeout_ms: int = setting("group.max.session.timeout.ms")
    max_size: int = setting("group.max.size")
    initial_rebalance_delay_ms: int = setting("group.initial.rebalance.delay.ms")


class GroupCoordinator:
    """The requests of classic groups (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, ...):
    it validates them and hands the group's rebalance to `self.rebalance`, its records to `self.metadata`."""

    def __init__(self, settings: GroupCoordinatorSettings, offsets: GroupMetadataSettings,
                 consumer: ConsumerGroupSettings, append: Append,
                 read_partition: Callable[[int], Iterable[memoryview]]) -> None:
        """`offsets` and `consumer` are the settings of the coordinator's group table and log
        (GroupMetadataManager) and of its consumer-protocol half (ConsumerGroupProtocol).
        `append(topic, partition, batch)` writes a batch to __consumer_offsets (see `Append`);
        `read_partition(p)` returns the record sets of one __consumer_offsets partition, oldest first."""
        self.metadata = GroupMetadataManager(offsets, append, read_partition)
        self.num_partitions = self.metadata.num_partitions
        self.groups = self.metadata.groups
        self.min_session_ms = settings.min_session_timeout_ms
        self.max_session_ms = settings.max_session_timeout_ms
        self.max_group_size = settings.max_size
        self._loop: asyncio.AbstractEventLoop | None = None
        # The classic rebalance state machine and its timers (Kafka's DelayedJoin, DelayedHeartbeat).
        self.rebalance = ClassicRebalance(settings.initial_rebalance_delay_ms, self._later,
                                          self._persist_group)
        # KIP-848 consumer groups live in the same table; their protocol is in consumer_protocol.
        self.consumer = ConsumerGroupProtocol(consumer, self.groups, self._later, self.metadata.write_unwaited)
        self.metadata.consumer = self.consumer
        self.loaded: set[int] = set()  # __consumer_offsets partitions led here, their groups in memory

    # --- lifecycle -------------------------------------------------------------------
    def load(self, partitions: Iterable[int] | None = None) -> None:
        """Replay __consumer_offsets into memory: the partitions this broker leads (all of them on a lone
        broker), when the logs are loaded; later elections load more (`follow_leadership`).

        Nothing in the log may stop the broker from starting: a batch or record that cannot be
        decoded (a bad schema version, a truncated field, a batch whose records do not parse) is
        skipped with a warning naming its partition and offset, and the replay goes on."""
        self._loop = asyncio.get_running_loop()
        wanted = sorted(set(range(self.num_partitions) if partitions is None else partitions) - self.loaded)
        if not wanted:
            return
        t0 = time.monotonic()
        before = set(self.groups)
        n, skipped = self.metadata.load(wanted)
        self.loaded.update(wanted)
        for gid in set(self.groups) - before:
            g = self.groups[gid]
            for m in g.members.values():
                self.rebalance.schedule_heartbeat(g, m)
        log.info("loaded %d groups of %d %s partitions from %d records in %.0f ms%s", len(self.groups) - len(before),
                 len(wanted), OFFSETS_TOPIC, n, (time.monotonic() - t0) * 1000,
                 f" ({skipped} unreadable records skipped)" if skipped else "")

    def follow_leadership(self, leading: set[int]) -> None:
        """The __consumer_offsets partitions this broker leads now: load the groups of partitions it
        was elected to (Kafka's onElection), forget those of partitions it no longer leads
        (onResignation: their members find the new coordinator through NOT_COORDINATOR)."""
        for p in sorted(self.loaded - leading):
            gone = self.metadata.unload(p)
            self.rebalance.unloaded(gone)
            self.loaded.discard(p)
            log.info("no longer the coordinator of %s-%d: unloaded %d groups", OFFSETS_TOPIC, p, len(gone))
        if leading - self.loaded:
            self.load(leading)

    def is_local(self, group_id: str) -> bool:
        """Whether this broker coordinates the group: it leads (and has loaded) the group's partition."""
        return self.partition_for(group_id) in self.loaded

    def shutdown(self) -> None:
        self.rebalance.cancel_timers(self.groups.values())
        self.consumer.shutdown()

    def partition_for(self, group_id: str) -> int:
        return self.metadata.partition_for(group_id)

    def _persist_group(self, g: Group) -> None:
        self.metadata.persist_group(g)

    # --- timers ----------------------------------------------------------------------
    def _later(self, delay_ms: int, fn: Callable[..., None], *args: Any) -> asyncio.TimerHandle:
        assert self._loop is not None
        return self._loop.call_later(max(delay_ms, 0) / 1000.0, fn, *args)

    # --- JoinGroup -------------------------------------------------------------------
    def join_group(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member_id: bool) -> JoinResult | asyncio.Future[Any]:
        if not group_id:
            return JoinResult(ErrorCode.INVALID_GROUP_ID, member_id=member_id)
        if not self.min_session_ms <= session_timeout_ms <= self.max_session_ms:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id=member_id)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        g = self.groups.get(group_id)
        if g is None:
            if member_id:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
            g = self.groups[group_id] = Group(group_id, current_state_timestamp_ms=_now_ms())
        if g.state == DEAD:
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        if g.consumer is not None:
            # A consumer (KIP-848) group: classic members cannot join it here; an empty one turns classic.
            if g.consumer.members:
                return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
            self.consumer.convert_to_classic(g)
        if not g.supports(protocol_type, [n for n, _ in protocols]):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        protocols = [(n, bytes(m)) for n, m in protocols]

        def new_member(mid: str) -> Member:
            return Member(mid, group_instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                          protocol_type, protocols)

        if member_id in g.pending_members:
            return self._add_member_and_rebalance(g, new_member(member_id))
        if member_id:
            return self._join_known_member(g, member_id, group_instance_id, protocols)
        new_id = f"{client_id}-{uuid.uuid4()}"
        if group_instance_id is not None and group_instance_id in g.static_members:
            return self._replace_static_member(g, group_instance_id, new_id, protocols)
        if len(g.members) + len(g.pending_members) >= self.max_group_size:
            return JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id="")
        if require_known_member_id and group_instance_id is None:
            # KIP-394: hand out the id first; the member must rejoin with it within its session timeout.
            self.rebalance.add_pending(g, new_id, session_timeout_ms)
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id)
        return self._add_member_and_rebalance(g, new_member(new_id))

    def _add_member_and_rebalance(self, g: Group, m: Member) -> asyncio.Future[Any]:
        assert self._loop is not None
        timer = g.pending_members.pop(m.member_id, None)
        if timer is not None:
            timer.cancel()
        fut = m.join_future = self._loop.create_future()
        g.members[m.member_id] = m
        if m.group_instance_id is not None:
            g.static_members[m.group_instance_id] = m.member_id
        if g.protocol_type is None:
            g.protocol_type = m.protocol_type
        if g.state == PREPARING_REBALANCE and g.initial_delay_remaining_ms >= 0:
            g.new_member_joined_during_delay = True
        self.rebalance.schedule_heartbeat(g, m)
        self.rebalance.maybe_prepare_rebalance(g, f"member {m.member_id} joined")
        self.rebalance.try_complete_join(g)
        return fut

    def _join_known_member(self, g: Group, member_id: str, instance_id: str | None,
                           protocols: list[tuple[str, bytes]]) -> JoinResult | asyncio.Future[Any]:
        assert self._loop is not None
        m = g.members.get(member_id)
        if instance_id is not None and g.static_members.get(instance_id) not in (None, member_id):
            return JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=member_id)
        if m is None:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
        if m.join_future is not None and not m.join_future.done():
            m.join_future.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id))
        if g.state == PREPARING_REBALANCE:
            m.protocols = protocols
            fut = m.join_future = self._loop.create_future()
            self.rebalance.try_complete_join(g)
            return fut
        if g.state in (COMPLETING_REBALANCE, STABLE):
            if m.same_protocols(protocols) and (g.state == COMPLETING_REBALANCE or member_id != g.leader_id):
                # Nothing changed: the member lost the join response. Answer with the current generation.
                return self.rebalance.join_result(g, m)
            m.protocols = protocols
            fut = m.join_future = self._loop.create_future()
            self.rebalance.prepare_rebalance(g, f"member {member_id} rejoined with new metadata")
            self.rebalance.try_complete_join(g)
            return fut
        return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)

    def _replace_static_member(self, g: Group, instance_id: str, new_id: str,
                               protocols: list[tuple[str, bytes]]) -> JoinResult | asyncio.Future[Any]:
        """A static member restarted: it takes over its old identity without a rebalance if nothing changed."""
        old_id = g.static_members[instance_id]
        old = g.members.pop(old_id)
        if old.heartbeat_timer is not None:
            old.heartbeat_timer.cancel()
        for fut in (old.join_future, old.sync_future):
            if fut is not None and not fut.done():
                fut.set_result(JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=old_id))
        m = Member(new_id, instance_id, old.client_id, old.client_host, old.rebalance_timeout_ms,
                   old.session_timeout_ms, old.protocol_type, protocols, old.assignment, is_new=False)
        g.members[new_id] = m
        g.static_members[instance_id] = new_id
        if g.leader_id == old_id:
            g.leader_id = new_id
        self.rebalance.schedule_heartbeat(g, m)
        if g.state == STABLE and old.same_protocols(protocols):
            self._persist_group(g)
            return self.rebalance.join_result(g, m)
        assert self._loop is not None
        fut = m.join_future = self._loop.create_future()
        self.rebalance.maybe_prepare_rebalance(g, f"static member {instance_id} rejoined")
        self.rebalance.try_complete_join(g)
        return fut

    # --- SyncGroup -------------------------------------------------------------------
    def sync_group(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: dict[str, bytes]) -> SyncResult | asyncio.Future[Any]:
        assert self._loop is not None
        g = self.groups.get(group_id)
        if g is None or g.state == DEAD:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        err = self._check_member(g, member_id, instance_id, generation_id)
        if err is not None:
            return SyncResult(err)
        if (protocol_type is not None and protocol_type != g.protocol_type) or (
                protocol_name is not None and protocol_name != g.protocol_name):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        m = g.members[member_id]
        if g.state == PREPARING_REBALANCE:
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        if g.state == STABLE:
            return SyncResult(ErrorCode.NONE, g.protocol_type, g.protocol_name, m.assignment)
        if g.state != COMPLETING_REBALANCE:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        self.rebalance.schedule_heartbeat(g, m)
        m.sync_future = self._loop.create_future()
        fut = m.sync_future
        if member_id == g.leader_id:
            for mid, member in g.members.items():
                member.assignment = assignments.get(mid, b"")
            self._persist_group(g)
            self.rebalance.transition(g, STABLE)
            for member in g.members.values():
                if member.sync_future is not None and not member.sync_future.done():
                    member.sync_future.set_result(
                        SyncResult(ErrorCode.NONE, g.protocol_type, g.protocol_name, member.assignment))
                member.sync_future = None
        return fut

    def _check_member(self, g: Group, member_id: str, instance_id: str | None,
                      generation_id: int | None = None) -> ErrorCode | None:
        """Whether `member_id` may act in the group: a member (a static one under its own instance id), and,
        given `generation_id`, of the current generation. None when it may, else the error it gets."""
        if instance_id is not None:
            known = g.static_members.get(instance_id)
            if known is not None and known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in g.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id is not None and generation_id != g.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return None

    # --- Heartbeat / LeaveGroup ------------------------------------------------------
    def heartbeat(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None) -> ErrorCode:
        g = self.groups.get(group_id)
        if g is None or g.state == DEAD:
            return ErrorCode.UNKNOWN_MEMBER_ID
        err = self._check_member(g, member_id, instance_id)
        if err is not None:
            return err
        m = g.members[member_id]
        if g.state == EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self.rebalance.schedule_heartbeat(g, m)
        if g.state == PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        if generation_id != g.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        g = self.groups.get(group_id)
        if g is None or g.state == DEAD:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(members)
        out = []
        for member_id, instance_id in members:
            if instance_id is not None:
                known = g.static_members.get(instance_id)
                if known is None:
                    out.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                if member_id and member_id != known:
                    out.append(ErrorCode.FENCED_INSTANCE_ID)
                    continue
                member_id = known
            if member_id in g.pending_members:
                g.pending_members.pop(member_id).cancel()
                out.append(ErrorCode.NONE)
                continue
            m = g.members.get(member_id)
            if m is None:
                out.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            self.rebalance.remove_member(g, m, "left the group")
            out.append(ErrorCode.NONE)
        return ErrorCode.NONE, out

    # --- offsets ---------------------------------------------------------------------
    def commit_offsets(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                       offsets: list[tuple[str, int, int, int, str | None]],
                       api_version: int = 9
                       ) -> ErrorCode | dict[tuple[str, int], ErrorCode] | asyncio.Future[dict[tuple[str, int], ErrorCode]]:
        """Group-level error, or an error per (topic, partition), or a Future of those while the commit
        waits for its replicas (offsets.commit.required.acks). For a consumer (KIP-848) group
        `generation_id` is the member epoch."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        g = self.groups.get(group_id)
        if g is None:
            if generation_id >= 0:
                return ErrorCode.ILLEGAL_GENERATION
            g = self.groups[group_id] = Group(group_id, current_state_timestamp_ms=_now_ms())
        if g.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if g.consumer is not None:
            err = self.consumer.validate_offset_commit(g, member_id, generation_id, api_version)
            if err is not None:
                return err
        elif not (generation_id < 0 and g.state == EMPTY):
            if g.state == COMPLETING_REBALANCE and member_id in g.members:
                return ErrorCode.REBALANCE_IN_PROGRESS
            err = self._check_member(g, member_id, instance_id, generation_id)
            if err is not None:
                return err
            self.rebalance.schedule_heartbeat(g, g.members[member_id])
        return self.metadata.store_offsets(g, group_id, offsets)

    def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, generation_id: int,
                           member_id: str, instance_id: str | None, offsets: list[tuple[str, int, int, int, str | None]]
                           ) -> ErrorCode | dict[tuple[str, int], ErrorCode] | asyncio.Future[dict[tuple[str, int], ErrorCode]]:
        """TxnOffsetCommit: offsets written in the producer's transaction, the group's once it commits.
        A v3+ client names its consumer's member and generation (KIP-447), checked as OffsetCommit
        checks them, so a zombie consumer's transaction cannot commit for the group."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = Group(group_id, current_state_timestamp_ms=_now_ms())
        if g.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id >= 0 or member_id:
            if g.consumer is not None:
                err = self.consumer.validate_offset_commit(g, member_id, generation_id, 9)
                if err is not None:
                    return err
            else:
                err = self._check_member(g, member_id, instance_id, generation_id)
                if err is not None:
                    return err
        return self.metadata.store_offsets(g, group_id, offsets, producer=(producer_id, producer_epoch))

    def check_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        """OffsetFetch v9 names the member: a consumer (KIP-848) group checks it is one, at its epoch."""
        g = self.groups.get(group_id)
        if g is None or g.consumer is None:
            return ErrorCode.NONE
        return self.consumer.validate_offset_fetch(g, member_id, member_epoch) or ErrorCode.NONE

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> dict[tuple[str, int], OffsetAndMetadata | None]:
        return self.metadata.fetch_offsets(group_id, partitions)

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                       ) -> ErrorCode | dict[tuple[str, int], ErrorCode]:
        return self.metadata.delete_offsets(group_id, partitions)

    # --- describe / list / delete ----------------------------------------------------
    def describe_group(self, group_id: str) -> Group | None:
        return self.metadata.describe_group(group_id)

    def list_groups(self) -> list[Group]:
        return self.metadata.list_groups()

    def delete_group(self, group_id: str) -> ErrorCode:
        return self.metadata.delete_group(group_id)

    def expire_offsets(self, now_ms: int | None = None) -> int:
        """offsets.retention.minutes (GroupMetadataManager.expire_offsets)."""
        return self.metadata.expire_offsets(now_ms)


# What a failed write to __consumer_offsets tells the client, as Kafka's group coordinator maps it:
# too large for the log is the commit's fault; a partition that lost its replicas or its leadership, or a
# storage error, sends the client to find the coordinator again; every other error is passed on.
_STORE_ERRORS = {
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
}


def _store_error(topic: str, partition: int, result: AppendResult) -> KafkaError | None:
    if result.error == ErrorCode.NONE:
        return None
    return KafkaError(_STORE_ERRORS.get(result.error, result.error),
                      f"cannot store in {topic}-{partition}: {result.error.name}: {result.message or ''}")


def append_via(replica_manager: Any, required_acks: int, timeout_ms: int) -> Append:
    """Adapter: write a built batch through the replica manager as leader. A failure of the local append
    raises KafkaError at once (a storage error must not escape into the request handler: a fuzzed 1.6 MB
    OffsetCommit over a 1 MiB segment.bytes did). With `required_acks` -1 (offsets.commit.required.acks)
    the append then waits for the ISR, up to `timeout_ms`: the adapter returns a Future of that wait,
    which fails with the KafkaError the client is to get; None when there is nothing to wait for."""

    def append(topic: str, partition: int, batch: bytes) -> asyncio.Future[None] | None:
        buf = memoryview(bytearray(batch))
        headers = validate_record_set(buf, 1 << 30)
        out = replica_manager.append_records(timeout_ms, required_acks, [(topic, partition, buf, headers, False)])
        if not isinstance(out, asyncio.Future):
            err = _store_error(topic, partition, out[0])
            if err is not None:
                raise err
            return None
        replicated: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def finish(f: asyncio.Future[list[AppendResult]]) -> None:
            err = _store_error(topic, partition, f.result()[0])
            if err is None:
                replicated.set_result(None)
            else:
                replicated.set_exception(err)

        out.add_done_callback(finish)
        return replicated

    return append
