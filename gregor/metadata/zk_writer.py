"""The write side of the ZooKeeper metadata store: records as znodes, and partition states in pipelined multis.

A change is decided by gregor.metadata.applier against `ZnodeReads`, a StateView over the znodes it
reads (remembering each znode's version), and `ZooKeeperWriter.write` turns the record into znode
writes conditional on those versions, so a change that raced another broker's fails (or, for ACLs, is
decided again) instead of overwriting it. Each write returns the paths the watcher must re-read for
the store's read-your-writes. See zookeeper.py's module doc for the layout and the events.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError as ZkBadVersion
from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError
from kazoo.protocol.states import ZnodeStat

from gregor.metadata.records import (
    AclsRecord,
    AssignmentRecord,
    BrokerConfigsRecord,
    EntityConfigsRecord,
    PartitionsRecord,
    Record,
    RemoveTopicRecord,
    TopicConfigsRecord,
    TopicRecord,
)
from gregor.metadata.store import (
    BadVersionError,
    ControllerMovedError,
    MetadataError,
    NoSuchTopicError,
    PartitionState,
    StateUpdate,
    TopicExistsError,
    TopicMetadata,
)
from gregor.metadata.zk_znodes import (
    CONFIG_BROKERS,
    CONFIG_CHANGE_PREFIX,
    CONFIG_CHANGES,
    CONFIG_ROOT,
    CONFIG_TOPICS,
    CONTROLLER_EPOCH,
    PARTITIONS_PER_MULTI,
    STATE_MULTI_CHUNK,
    TOPICS,
    _create_states,
    _failed,
    _parse_assignment,
    _raise_first,
    _state_path,
    _topic_path,
    acl_change_notification,
    acl_path,
    acl_znode,
    config_znode,
    parse_acl_znode,
    topic_znode,
)
from gregor.security.acl import AccessControlEntry, ResourcePattern

# Sends one pipelined kazoo request within zookeeper.max.in.flight.requests (ZooKeeperWatcher.call).
Call = Callable[..., Any]


def _delete_partitions_in(tx: Any, topic_path: str, parts: list[str]) -> None:
    """Add the deletion of these partitions' znodes (each state, then the partition) to `tx`."""
    for p in parts:
        tx.delete(f"{topic_path}/partitions/{p}/state")
        tx.delete(f"{topic_path}/partitions/{p}")


class AclRaceLost(Exception):
    """The ACL znode changed between its read and the conditional write: decide again from a new read."""


class ZnodeReads:
    """The StateView a change is decided against: the znodes as read now, each read at most once, with
    the versions the writes are then conditional on."""

    def __init__(self, zk: KazooClient) -> None:
        self._zk = zk
        self._topics: dict[str, tuple[TopicMetadata, int] | None] = {}
        self._acls: dict[ResourcePattern, tuple[frozenset[AccessControlEntry], int | None]] = {}

    def topic(self, name: str) -> TopicMetadata | None:
        """The topic's assignment (/brokers/topics/<t>), its states left out (leader -1): changes that
        need them are partition-state writes, conditional on the state znodes' own versions."""
        if name not in self._topics:
            try:
                data, stat = self._zk.get(_topic_path(name))
            except NoNodeError:
                self._topics[name] = None
            else:
                tid, parts = _parse_assignment(data)
                meta = TopicMetadata(name, tid, {p: PartitionState(r, -1, adding_replicas=a, removing_replicas=rm)
                                                 for p, (r, a, rm) in parts.items()})
                self._topics[name] = (meta, stat.version)
        read = self._topics[name]
        return None if read is None else read[0]

    def topic_version(self, name: str) -> int:
        read = self._topics.get(name)
        assert read is not None, f"{name}: written without being read"
        return read[1]

    def acls(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self._acl_read(pattern)[0]

    def _acl_read(self, pattern: ResourcePattern) -> tuple[frozenset[AccessControlEntry], int | None]:
        if pattern not in self._acls:
            try:
                data, stat = self._zk.get(acl_path(pattern))
                self._acls[pattern] = (parse_acl_znode(data), stat.version)
            except NoNodeError:
                self._acls[pattern] = (frozenset(), None)
        return self._acls[pattern]

    def acl_version(self, pattern: ResourcePattern) -> tuple[frozenset[AccessControlEntry], int | None]:
        """The entries read and the znode's version (None: there was no znode)."""
        return self._acl_read(pattern)


class ZooKeeperWriter:
    """Writes records as znodes (one table entry per record type) and partition states in chunked multis."""

    def __init__(self, zk: KazooClient, call: Call) -> None:
        self._zk = zk
        self._call = call
        self._writes: dict[type[Any], Callable[[Any, ZnodeReads], list[str]]] = {
            TopicRecord: self._create_topic,
            RemoveTopicRecord: self._delete_topic,
            PartitionsRecord: self._add_partitions,
            AssignmentRecord: self._reassign,
            TopicConfigsRecord: self._topic_configs,
            BrokerConfigsRecord: self._broker_configs,
            EntityConfigsRecord: self._entity_configs,
            AclsRecord: self._acls,
        }

    def write(self, record: Record, reads: ZnodeReads) -> list[str]:
        """Write one record decided against `reads`; returns the paths the reader must re-read. Raises
        MetadataError, or AclRaceLost when an ACL change must be decided again."""
        write = self._writes.get(type(record))
        if write is None:
            raise MetadataError(f"{type(record).__name__} is not written by a change")
        return write(record, reads)

    # --- configs and ACLs ------------------------------------------------------------------------
    def _entity_configs(self, r: EntityConfigsRecord, reads: ZnodeReads) -> list[str]:
        path = f"{CONFIG_ROOT}/{r.path}"
        data = config_znode(r.configs)
        if r.entity_type == "groups" and not r.configs:
            try:  # a group's configs removed (DeleteGroups, or every config deleted): no znode is left behind
                self._zk.delete(path)
            except NoNodeError:
                pass
        else:
            self._set_or_create(path, data, makepath=True)
        note = json.dumps({"version": 2, "entity_path": r.path}).encode()
        # Deleted by the readers after 15 minutes (zk_config_reader), as Kafka's brokers do.
        self._zk.create(f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}", note, sequence=True, makepath=True)
        return [path]

    def _broker_configs(self, r: BrokerConfigsRecord, reads: ZnodeReads) -> list[str]:
        path = f"{CONFIG_BROKERS}/{r.entity}"
        self._set_or_create(path, config_znode(r.configs))
        return [CONFIG_BROKERS, path]

    def _set_or_create(self, path: str, data: bytes, makepath: bool = False) -> None:
        try:
            self._zk.set(path, data)
        except NoNodeError:
            try:
                self._zk.create(path, data, makepath=makepath)
            except NodeExistsError:  # created meanwhile by another broker: ours is the later write
                self._zk.set(path, data)

    def _acls(self, r: AclsRecord, reads: ZnodeReads) -> list[str]:
        """The pattern's znode, conditional on the version read (created if absent, deleted when empty), as
        Kafka's AclAuthorizer does; then the change notification every broker watches."""
        path = acl_path(r.pattern)
        cur, version = reads.acl_version(r.pattern)
        if r.entries == cur:
            return [path]
        try:
            if version is None:
                self._zk.create(path, acl_znode(r.entries), makepath=True)
            elif r.entries:
                self._zk.set(path, acl_znode(r.entries), version=version)
            else:
                self._zk.delete(path, version=version)
        except (NodeExistsError, ZkBadVersion, NoNodeError):
            raise AclRaceLost(path) from None
        prefix, note = acl_change_notification(r.pattern)
        self._zk.create(prefix, note, sequence=True, makepath=True)
        return [path]

    # --- topics ----------------------------------------------------------------------------------
    def _create_topic(self, r: TopicRecord, reads: ZnodeReads) -> list[str]:
        t = r.topic
        tx = self._zk.transaction()
        tx.create(_topic_path(t.name), topic_znode(t))
        tx.create(f"{_topic_path(t.name)}/partitions", b"")
        items = sorted(t.partitions.items())
        _create_states(tx, t.name, items[:PARTITIONS_PER_MULTI])
        self._put_topic_configs(tx, t.name, t.configs)  # a znode left by a deletion Kafka-style is replaced
        results = tx.commit()
        if isinstance(results[0], NodeExistsError):
            raise TopicExistsError(t.name)
        _raise_first(results, f"creating topic {t.name}")
        self._create_rest(t.name, items[PARTITIONS_PER_MULTI:])
        return [_topic_path(t.name)]

    def _delete_topic(self, r: RemoveTopicRecord, reads: ZnodeReads) -> list[str]:
        path = _topic_path(r.name)
        for _ in range(10):
            try:
                parts = self._zk.get_children(f"{path}/partitions")
            except NoNodeError:
                parts = []
                if self._zk.exists(path) is None:
                    raise NoSuchTopicError(r.name) from None
            if len(parts) > PARTITIONS_PER_MULTI:  # beyond one request's size: the partitions first
                self._delete_partitions(path, parts[PARTITIONS_PER_MULTI:])
                parts = parts[:PARTITIONS_PER_MULTI]
            tx = self._zk.transaction()
            _delete_partitions_in(tx, path, parts)
            if self._zk.exists(f"{path}/partitions") is not None:
                tx.delete(f"{path}/partitions")
            tx.delete(path)
            if self._zk.exists(f"{CONFIG_TOPICS}/{r.name}") is not None:
                tx.delete(f"{CONFIG_TOPICS}/{r.name}")
            results = tx.commit()
            if not any(isinstance(x, Exception) for x in results):
                return [TOPICS]
            if any(isinstance(x, NotEmptyError | NoNodeError) for x in results):
                continue  # partitions added, or the topic deleted, meanwhile: look again
            _raise_first(results, f"deleting topic {r.name}")
        raise MetadataError(f"deleting topic {r.name}: it kept changing")

    def _topic_configs(self, r: TopicConfigsRecord, reads: ZnodeReads) -> list[str]:
        tx = self._zk.transaction()
        tx.check(_topic_path(r.name), -1)  # the topic is still there
        config_path = self._put_topic_configs(tx, r.name, r.configs)
        results = tx.commit()
        if isinstance(results[0], NoNodeError):
            raise NoSuchTopicError(r.name)
        _raise_first(results, f"setting configs of topic {r.name}")
        return [config_path]

    def _put_topic_configs(self, tx: Any, name: str, configs: dict[str, str]) -> str:
        """Add the writing of the topic's config znode to `tx` (set when it exists, else created); its path."""
        path = f"{CONFIG_TOPICS}/{name}"
        if self._zk.exists(path) is not None:
            tx.set_data(path, config_znode(configs))
        else:
            tx.create(path, config_znode(configs))
        return path

    def _add_partitions(self, r: PartitionsRecord, reads: ZnodeReads) -> list[str]:
        added = sorted(r.partitions.items())
        tx = self._assignment(r.name, r.partitions, reads)
        _create_states(tx, r.name, added[:PARTITIONS_PER_MULTI])
        self._commit_assignment(r.name, tx)
        self._create_rest(r.name, added[PARTITIONS_PER_MULTI:])
        return [_topic_path(r.name)]

    def _reassign(self, r: AssignmentRecord, reads: ZnodeReads) -> list[str]:
        self._commit_assignment(r.name, self._assignment(r.name, r.partitions, reads))
        return [_topic_path(r.name)]

    def _assignment(self, name: str, partitions: dict[int, PartitionState], reads: ZnodeReads) -> Any:
        """A multi rewriting the topic znode with `partitions`' assignments, conditional on its version read."""
        cur = reads.topic(name)
        assert cur is not None, f"{name}: decided without its topic"
        meta = TopicMetadata(name, cur.topic_id, {**cur.partitions, **partitions})
        tx = self._zk.transaction()
        tx.set_data(_topic_path(name), topic_znode(meta), version=reads.topic_version(name))
        return tx

    def _commit_assignment(self, name: str, tx: Any) -> None:
        results = tx.commit()
        if isinstance(results[0], ZkBadVersion):
            raise BadVersionError(f"{name}: the topic's assignment changed meanwhile")
        if isinstance(results[0], NoNodeError):
            raise NoSuchTopicError(name)
        _raise_first(results, f"changing topic {name}")

    def _create_rest(self, name: str, items: list[tuple[int, PartitionState]]) -> None:
        """The partition states beyond the first multi (its size is bounded by jute.maxbuffer), pipelined.
        Readers that saw the assignment before them watch for their creation (zk_topic_reader)."""
        pending = []
        for i in range(0, len(items), PARTITIONS_PER_MULTI):
            tx = self._zk.transaction()
            _create_states(tx, name, items[i:i + PARTITIONS_PER_MULTI])
            pending.append(self._call(tx.commit_async))
        for r in pending:
            _raise_first(r.get(), f"creating the partition states of topic {name}")

    def _delete_partitions(self, path: str, parts: list[str]) -> None:
        pending = []
        for i in range(0, len(parts), PARTITIONS_PER_MULTI):
            tx = self._zk.transaction()
            _delete_partitions_in(tx, path, parts[i:i + PARTITIONS_PER_MULTI])
            pending.append(self._call(tx.commit_async))
        for r in pending:
            r.get()  # a failure (deleted meanwhile) shows in the final multi, which is retried

    # --- partition states ---------------------------------------------------------------------------
    def write_states(self, updates: Sequence[StateUpdate], datas: list[bytes], controller_epoch: int | None,
                     check: int | None) -> list[ZnodeStat | MetadataError]:
        """Each update on its own, written optimistically in chunks: one multi per STATE_MULTI_CHUNK updates
        (fenced when `check` is the /controller_epoch version to check), every chunk sent before any answer
        is awaited. ZooKeeper applies a multi whole or not at all, so a chunk that fails changed nothing:
        its updates are then sent again one multi each, and only the ones that lose their own race fail.
        A controller's 1,000-partition batch thus costs a couple of round trips, not 1,000 (kazoo's
        per-request overhead, ~0.3 ms, dominated that). Per update, the new stat or its error."""
        chunks = [list(range(i, min(i + STATE_MULTI_CHUNK, len(updates))))
                  for i in range(0, len(updates), STATE_MULTI_CHUNK)]
        sent = [(idx, self._commit_states(updates, datas, idx, check)) for idx in chunks]
        out: list[ZnodeStat | MetadataError | None] = [None] * len(updates)
        retry: list[int] = []
        for idx, r in sent:
            res = r.get()
            if check is not None and _failed(res[0]):
                for i in idx:
                    out[i] = ControllerMovedError(f"controller epoch {controller_epoch} was superseded")
            elif any(isinstance(x, Exception) for x in res):
                retry.extend(idx) if len(idx) > 1 else self._state_result(updates, out, idx[0], res[-1])
            else:
                for i, stat in zip(idx, res[-len(idx):], strict=True):
                    out[i] = stat
        for i, r in [(i, self._commit_states(updates, datas, [i], check)) for i in retry]:
            res = r.get()
            if check is not None and _failed(res[0]):
                out[i] = ControllerMovedError(f"controller epoch {controller_epoch} was superseded")
            else:
                self._state_result(updates, out, i, res[-1])
        assert all(r is not None for r in out)
        return out  # type: ignore[return-value]

    def _commit_states(self, updates: Sequence[StateUpdate], datas: list[bytes], idx: list[int],
                       check: int | None) -> Any:
        tx = self._zk.transaction()
        if check is not None:
            tx.check(CONTROLLER_EPOCH, check)
        for i in idx:
            u = updates[i]
            tx.set_data(_state_path(u.topic, u.partition), datas[i], version=u.expected_version)
        return self._call(tx.commit_async)

    @staticmethod
    def _state_result(updates: Sequence[StateUpdate], out: list[Any], i: int, res: Any) -> None:
        u = updates[i]
        name = f"{u.topic}-{u.partition}"
        if isinstance(res, ZkBadVersion):
            out[i] = BadVersionError(f"{name}: the state changed since version {u.expected_version}")
        elif isinstance(res, NoNodeError):
            out[i] = NoSuchTopicError(name)
        elif isinstance(res, Exception):
            out[i] = MetadataError(f"{name}: ZooKeeper answered {type(res).__name__}")
        else:
            out[i] = res
