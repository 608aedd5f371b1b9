"""The group table and its log: Kafka's GroupMetadataManager, in our code.

Owns `groups` (group id -> Group, classic and consumer groups alike) and everything that
reads or writes __consumer_offsets: the replay at startup, the group metadata and offset
records, offset commits once the coordinator has accepted them, OffsetDelete, DeleteGroups
and offsets.retention.minutes. The membership protocols (classic in coordinator.py, KIP-848 in
consumer_protocol.py) change groups in memory and call `write`/`persist_group` to log them.

Every write goes to the group's partition (`partition_for`) through `append` and raises
KafkaError when the coordinator's own append fails; memory is changed only after that append
succeeded. An offset commit waits further, for offsets.commit.required.acks (the ISR of its
partition by default, as Kafka): it is answered, and its offsets become visible to OffsetFetch,
only once its replicas have it, so a commit a client saw succeed survives the coordinator's
death. Transactional offset commits (TxnOffsetCommit) are written in the producer's transaction and
held apart (`txn_offsets`) until its marker reaches the partition: a commit marker makes them the
group's offsets, an abort drops them; OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT
for a partition with one pending. Other writes (group metadata, tombstones) are answered after the local append; their
replication is waited for in the background and a failure is logged (a new coordinator then
rebuilds the group from what was replicated, and its members rejoin).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gregor.configdef import Settings, setting
from gregor.coordinator.group import records as rec
from gregor.coordinator.group.state import DEAD, EMPTY, STABLE, Group, Member, OffsetAndMetadata
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import CONTROL_COMMIT, Record, build_batch, iter_headers, read_control_record
from gregor.protocol.records import decode_records as decode_batch

if TYPE_CHECKING:
    from gregor.coordinator.group.consumer_protocol import ConsumerGroupProtocol

log = logging.getLogger("gregor.group")

OFFSETS_TOPIC = "__consumer_offsets"
# Unreadable records named one by one per partition at load; the rest are counted.
_MAX_SKIP_WARNINGS = 10


# append(topic, partition, batch): raises KafkaError if the coordinator's own append fails; returns a
# Future while the append waits for its replicas (failing with the KafkaError the client is to get), or
# None when there is nothing to wait for.
Append = Callable[[str, int, bytes], "asyncio.Future[None] | None"]


def _now_ms() -> int:
    return int(time.time() * 1000)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's choice of __consumer_offsets partition: abs(hashCode) % partitions (abs = & 0x7fffffff)."""
    return (java_string_hash(group_id) & 0x7FFFFFFF) % partitions


@dataclass(frozen=True, slots=True)
class GroupMetadataSettings(Settings):
    offsets_topic_num_partitions: int = setting("offsets.topic.num.partitions")
    offset_metadata_max_bytes: int = setting("offset.metadata.max.bytes")
    offsets_retention_minutes: int = setting("offsets.retention.minutes")


class GroupMetadataManager:
    """The group table and __consumer_offsets (see the module docstring)."""

    def __init__(self, settings: GroupMetadataSettings, append: Append,
                 read_partition: Callable[[int], Iterable[memoryview]]) -> None:
        """`append(topic, partition, batch)` writes a batch to __consumer_offsets (see `Append`);
        `read_partition(p)` returns the record sets of one __consumer_offsets partition, oldest first."""
        self._append_batch = append
        self._read_partition = read_partition
        self.num_partitions = settings.offsets_topic_num_partitions
        self.max_metadata_bytes = settings.offset_metadata_max_bytes
        self.offsets_retention_ms = settings.offsets_retention_minutes * 60_000
        self.groups: dict[str, Group] = {}
        self._offset_writes = 0  # numbers offset commits in the order of their writes (Group.offset_write_seq)
        self.consumer: ConsumerGroupProtocol | None = None  # set by the coordinator: its records and tombstones
        # producer id -> group -> offsets written in its open transaction, until its marker
        self.txn_offsets: dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata]]] = {}

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def _consumer(self) -> ConsumerGroupProtocol:
        assert self.consumer is not None, "the coordinator sets GroupMetadataManager.consumer"
        return self.consumer

    # --- replay ------------------------------------------------------------------------
    def load(self, partitions: Iterable[int] | None = None) -> tuple[int, int]:
        """Replay the given partitions (all by default); returns (records replayed, records or batches skipped)."""
        n = skipped = 0
        for p in range(self.num_partitions) if partitions is None else partitions:
            n_p, skipped_p = self._load_partition(p)
            n += n_p
            skipped += skipped_p
        return n, skipped

    def unload(self, partition: int) -> list[Group]:
        """Forget the groups of one partition (this broker stopped leading it: Kafka's onResignation);
        returns them, so their timers can be cancelled."""
        gone = [g for gid, g in self.groups.items() if self.partition_for(gid) == partition]
        for g in gone:
            del self.groups[g.group_id]
        for pid, by_group in list(self.txn_offsets.items()):
            for gid in [gid for gid in by_group if self.partition_for(gid) == partition]:
                del by_group[gid]
            if not by_group:
                del self.txn_offsets[pid]
        return gone

    def _load_partition(self, p: int) -> tuple[int, int]:
        """Replay one partition; returns (records replayed, records or batches skipped)."""
        n = skipped = 0
        offset = -1

        def skip(what: str, e: BaseException) -> None:
            nonlocal skipped
            skipped += 1
            if skipped <= _MAX_SKIP_WARNINGS:
                log.warning("skipping an unreadable %s in %s-%d at offset %d: %s", what, OFFSETS_TOPIC, p, offset,
                            str(e) or type(e).__name__)
            elif skipped == _MAX_SKIP_WARNINGS + 1:
                log.warning("more unreadable records in %s-%d: only counting them from here", OFFSETS_TOPIC, p)

        try:
            for records in self._read_partition(p):
                for h in iter_headers(records):
                    offset = h.base_offset
                    if h.is_control:
                        if h.is_transactional:
                            try:
                                cr = read_control_record(records, h)
                            except Exception as e:
                                skip("control batch", e)
                                continue
                            if cr.is_txn_marker:
                                self.complete_txn(h.producer_id, {p}, cr.type == CONTROL_COMMIT)
                        continue
                    try:
                        batch = decode_batch(records, h)
                    except Exception as e:  # a batch that passed the CRC but does not parse
                        skip("batch", e)
                        continue
                    for r in batch:
                        offset = r.offset
                        try:
                            self._replay(r.key, r.value, h.producer_id if h.is_transactional else -1)
                            n += 1
                        except Exception as e:
                            skip("record", e)
        except Exception as e:  # the log itself could not be read further: keep what was replayed
            log.error("stopped replaying %s-%d after offset %d: %s", OFFSETS_TOPIC, p, offset, e)
        if skipped:
            log.warning("skipped %d unreadable records or batches in %s-%d", skipped, OFFSETS_TOPIC, p)
        return n, skipped

    def _replay(self, key: bytes | None, value: bytes | None, txn_producer_id: int = -1) -> None:
        """Apply one record; raises (DecodeError or other) when it cannot be decoded, changing nothing.
        An offset commit of a transaction (`txn_producer_id`) waits for its marker."""
        if key is None:
            return
        if self._consumer().replay(key, value):
            return
        k = rec.decode_key(key)
        if isinstance(k, rec.OffsetKey):
            if value is None:
                g = self.groups.get(k.group)
                if g is not None:
                    g.offsets.pop((k.topic, k.partition), None)
                    self.maybe_drop(g)
                return
            v = rec.decode_offset_value(value)
            om = OffsetAndMetadata(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp)
            if txn_producer_id >= 0:
                self.txn_offsets.setdefault(txn_producer_id, {}).setdefault(k.group, {})[(k.topic, k.partition)] = om
                return
            g = self.groups.setdefault(k.group, Group(k.group))
            g.offsets[(k.topic, k.partition)] = om
            return
        if value is None:
            g = self.groups.get(k.group)
            if g is not None:
                g.members.clear()
                g.state, g.protocol_type, g.protocol_name, g.leader_id = EMPTY, None, None, None
                self.maybe_drop(g)
            return
        v = rec.decode_group_value(value)
        g = self.groups.setdefault(k.group, Group(k.group))
        g.generation = v.generation
        g.protocol_type = v.protocol_type or None
        g.protocol_name = v.protocol
        g.leader_id = v.leader
        g.current_state_timestamp_ms = v.current_state_timestamp
        g.members = {}
        g.static_members = {}
        for m in v.members:
            member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                            m.session_timeout, v.protocol_type, [(v.protocol or "", bytes(m.subscription))],
                            bytes(m.assignment), is_new=False)
            g.members[m.member_id] = member
            if m.group_instance_id:
                g.static_members[m.group_instance_id] = m.member_id
        g.state = STABLE if g.members else EMPTY

    # --- writes ----------------------------------------------------------------------
    def write(self, group_id: str, entries: list[tuple[bytes, bytes | None]],
              producer: tuple[int, int] | None = None) -> asyncio.Future[None] | None:
        """Append records to the group's partition; raises KafkaError (nothing changes in memory then).
        Returns the wait for the append's replicas, if there is one (see `Append`). With `producer`
        (id, epoch) the batch is part of that producer's transaction."""
        now = _now_ms()
        pid, epoch = producer if producer is not None else (-1, -1)
        batch = build_batch([Record(i, now, k, v) for i, (k, v) in enumerate(entries)], producer_id=pid,
                            producer_epoch=epoch, transactional=producer is not None)
        return self._append_batch(OFFSETS_TOPIC, self.partition_for(group_id), batch)

    def write_unwaited(self, group_id: str, entries: list[tuple[bytes, bytes | None]]) -> None:
        """`write`, answered after the local append: a failed wait for the replicas is only logged."""
        pending = self.write(group_id, entries)
        if pending is not None:
            def logged(f: asyncio.Future[None]) -> None:
                if not f.cancelled() and f.exception() is not None:
                    log.warning("group %s: a write to __consumer_offsets was not replicated: %s",
                                group_id, f.exception())
            pending.add_done_callback(logged)

    def group_record(self, g: Group) -> tuple[bytes, bytes]:
        body = {
            "protocol_type": g.protocol_type or "",
            "generation": g.generation,
            "protocol": g.protocol_name,
            "leader": g.leader_id,
            "current_state_timestamp": g.current_state_timestamp_ms,
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                 "client_host": m.client_host, "rebalance_timeout": m.rebalance_timeout_ms,
                 "session_timeout": m.session_timeout_ms,
                 "subscription": m.metadata_for(g.protocol_name) if g.protocol_name else b"",
                 "assignment": m.assignment}
                for m in g.members.values()
            ],
        }
        return rec.group_key(g.group_id), rec.group_value(body)

    def persist_group(self, g: Group) -> None:
        try:
            self.write_unwaited(g.group_id, [self.group_record(g)])
        except KafkaError as e:
            # The group keeps working from memory; a restart would show the previous generation.
            log.error("could not store metadata of group %s: %s", g.group_id, e)

    def store_offsets(self, g: Group, group_id: str, offsets: list[tuple[str, int, int, int, str | None]],
                      producer: tuple[int, int] | None = None
                      ) -> dict[tuple[str, int], ErrorCode] | asyncio.Future[dict[tuple[str, int], ErrorCode]]:
        """Write accepted commits (the coordinator has checked the member and generation) and apply
        them once written as offsets.commit.required.acks asks; an error per (topic, partition), or
        a Future of them while the write waits for its replicas."""
        now = _now_ms()
        results: dict[tuple[str, int], ErrorCode] = {}
        entries: list[tuple[bytes, bytes | None]] = []
        accepted: list[tuple[tuple[str, int], OffsetAndMetadata]] = []
        for topic, partition, offset, epoch, metadata in offsets:
            md = metadata or ""
            if len(md.encode()) > self.max_metadata_bytes:
                results[(topic, partition)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            entries.append((rec.offset_key(group_id, topic, partition), rec.offset_value(offset, epoch, md, now)))
            accepted.append(((topic, partition), OffsetAndMetadata(offset, epoch, md, now)))
        pending = None
        if entries:
            try:
                pending = self.write(group_id, entries, producer)
            except KafkaError as e:
                for tp, _ in accepted:
                    results[tp] = e.code
                return results
        self._offset_writes += 1
        seq = self._offset_writes
        if producer is not None:
            return self._hold_txn_offsets(producer[0], group_id, accepted, results, pending)
        if pending is None:
            return self._apply_offsets(g, accepted, results, seq, None)
        applied: asyncio.Future[dict[tuple[str, int], ErrorCode]] = asyncio.get_running_loop().create_future()

        def replicated(f: asyncio.Future[None]) -> None:
            err = f.exception()
            if err is not None and not isinstance(err, KafkaError):
                err = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(err))
            applied.set_result(self._apply_offsets(g, accepted, results, seq, err))

        pending.add_done_callback(replicated)
        return applied

    @staticmethod
    def _apply_offsets(g: Group, accepted: list[tuple[tuple[str, int], OffsetAndMetadata]],
                       results: dict[tuple[str, int], ErrorCode], seq: int, error: KafkaError | None
                       ) -> dict[tuple[str, int], ErrorCode]:
        """The end of a commit: its offsets enter the group (unless the write failed, or a later write
        is already there), each gets its code."""
        for tp, om in accepted:
            if error is None and seq > g.offset_write_seq.get(tp, 0):
                g.offsets[tp] = om
                g.offset_write_seq[tp] = seq
            results[tp] = ErrorCode.NONE if error is None else error.code
        return results

    def _hold_txn_offsets(self, producer_id: int, group_id: str, accepted: list[tuple[tuple[str, int], OffsetAndMetadata]],
                          results: dict[tuple[str, int], ErrorCode], pending: asyncio.Future[None] | None
                          ) -> dict[tuple[str, int], ErrorCode] | asyncio.Future[dict[tuple[str, int], ErrorCode]]:
        def hold(error: BaseException | None) -> dict[tuple[str, int], ErrorCode]:
            code = ErrorCode.NONE if error is None else (
                error.code if isinstance(error, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR)
            if error is None:
                held = self.txn_offsets.setdefault(producer_id, {}).setdefault(group_id, {})
                held.update(accepted)
            for tp, _ in accepted:
                results[tp] = code
            return results

        if pending is None:
            return hold(None)
        out: asyncio.Future[dict[tuple[str, int], ErrorCode]] = asyncio.get_running_loop().create_future()
        pending.add_done_callback(lambda f: out.set_result(hold(f.exception())))
        return out

    def complete_txn(self, producer_id: int, partitions: set[int], commit: bool) -> None:
        """A transaction marker of `producer_id` reached these __consumer_offsets partitions: its offsets
        for groups there become the groups' (commit) or are dropped (abort)."""
        by_group = self.txn_offsets.get(producer_id)
        if not by_group:
            return
        for gid in [gid for gid in by_group if self.partition_for(gid) in partitions]:
            offsets = by_group.pop(gid)
            if commit:
                g = self.groups.setdefault(gid, Group(gid))
                self._offset_writes += 1
                for tp, om in offsets.items():
                    g.offsets[tp] = om
                    g.offset_write_seq[tp] = self._offset_writes
        if not by_group:
            del self.txn_offsets[producer_id]

    def has_pending_txn_offset(self, group_id: str, tp: tuple[str, int]) -> bool:
        return any(tp in by_group.get(group_id, ()) for by_group in self.txn_offsets.values())

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> dict[tuple[str, int], OffsetAndMetadata | None]:
        g = self.groups.get(group_id)
        offsets = g.offsets if g is not None else {}
        if partitions is None:
            return dict(offsets)
        return {tp: offsets.get(tp) for tp in partitions}

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                       ) -> ErrorCode | dict[tuple[str, int], ErrorCode]:
        g = self.groups.get(group_id)
        if g is None or g.state == DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if g.consumer is not None:
            subscribed: set[str] | None = g.consumer.all_subscribed_topics()
        else:
            subscribed = g.subscribed_topics() if g.state != EMPTY else set()
        if subscribed is None and g.state != EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        results: dict[tuple[str, int], ErrorCode] = {}
        entries: list[tuple[bytes, bytes | None]] = []
        for topic, partition in partitions:
            if subscribed and topic in subscribed:
                results[(topic, partition)] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            results[(topic, partition)] = ErrorCode.NONE
            if (topic, partition) in g.offsets:
                entries.append((rec.offset_key(group_id, topic, partition), None))
        if entries:
            try:
                self.write_unwaited(group_id, entries)
            except KafkaError as e:  # nothing changed in memory: every partition gets the write's error
                code = e.code if e.code != ErrorCode.NOT_LEADER_OR_FOLLOWER else ErrorCode.NOT_COORDINATOR
                return {tp: code if c == ErrorCode.NONE else c for tp, c in results.items()}
            for k, _ in entries:
                key = rec.decode_key(k)
                assert isinstance(key, rec.OffsetKey)
                g.offsets.pop((key.topic, key.partition), None)
        return results

    # --- describe / list / delete ----------------------------------------------------
    def describe_group(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def list_groups(self) -> list[Group]:
        return [g for g in self.groups.values() if g.state != DEAD]

    def delete_group(self, group_id: str) -> ErrorCode:
        g = self.groups.get(group_id)
        if g is None or g.state == DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if g.state != EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        entries: list[tuple[bytes, bytes | None]] = [
            (rec.offset_key(group_id, t, p), None) for (t, p) in g.offsets]
        entries.append((rec.group_key(group_id), None))
        entries += self._consumer().tombstones(g)
        try:
            self.write_unwaited(group_id, entries)
        except KafkaError as e:
            return e.code
        g.state = DEAD
        del self.groups[group_id]
        return ErrorCode.NONE

    def maybe_drop(self, g: Group) -> None:
        if g.state == EMPTY and not g.offsets and not g.members and g.generation == 0 and g.consumer is None:
            self.groups.pop(g.group_id, None)

    def expire_offsets(self, now_ms: int | None = None) -> int:
        """offsets.retention.minutes: an empty group's offsets go once it has been empty that long;
        a group that never had members (standalone commits) loses each offset that long after its commit."""
        now = _now_ms() if now_ms is None else now_ms
        removed = 0
        for g in list(self.groups.values()):
            if g.state != EMPTY:
                continue
            if g.protocol_type is not None or g.generation > 0:
                expired = list(g.offsets) if now - g.current_state_timestamp_ms >= self.offsets_retention_ms else []
            else:
                expired = [tp for tp, om in g.offsets.items() if now - om.commit_timestamp_ms >= self.offsets_retention_ms]
            if not expired and not (g.consumer is not None and not g.offsets):  # an empty consumer group goes too
                continue
            entries: list[tuple[bytes, bytes | None]] = [(rec.offset_key(g.group_id, t, p), None) for t, p in expired]
            drop_group = len(expired) == len(g.offsets)
            if drop_group:
                entries.append((rec.group_key(g.group_id), None))
                entries += self._consumer().tombstones(g)
            try:
                self.write_unwaited(g.group_id, entries)
            except KafkaError as e:
                log.error("could not expire offsets of group %s: %s", g.group_id, e)
                continue
            for tp in expired:
                del g.offsets[tp]
            removed += len(expired)
            if drop_group:
                del self.groups[g.group_id]
            log.info("expired %d offsets of group %s", len(expired), g.group_id)
        return removed

