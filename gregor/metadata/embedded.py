"""A metadata store for a lone broker: in memory, persisted in the log dir as a snapshot plus a journal.

It makes `gregor serve` work with nothing else installed, behind the same interface the
ZooKeeper store will implement. Rewriting the whole file on every change cost 270 ms at 10,000
partitions, so a change is now one appended journal record, fsynced before the write returns
(one fsync per `apply`, however many changes it holds). Once the journal holds
`metadata.log.max.record.bytes.between.snapshots` bytes, a background thread folds it into the
snapshot file (tmp, fsync, rename), as Kafka's metadata log is folded into snapshots; a clean
close does the same, so the snapshot alone describes a cleanly stopped broker.

Files: `gregor-metadata.json`, the snapshot (format 2: format 1's document plus `metadata_version`,
partitions as the journal writes them; a format 1 file, with a dict per partition and no
`metadata_version`, loads as version 0), and `gregor-metadata.journal`, one record a
line: `<crc32 of the JSON, 8 hex digits> <JSON>`, each with its metadata version. Loading replays
the records newer than the snapshot; a record cut short by a crash (or otherwise unreadable) ends
the replay with a warning and is cut off, since it was never acknowledged.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import os
import threading
import time
import uuid
import zlib
from collections.abc import Sequence
from typing import Any

from gregor.metadata.store import (
    ACLS,
    BROKER_CONFIGS,
    BROKERS,
    CONFIGS,
    CREATED,
    DELETED,
    ENTITY_CONFIGS,
    PARTITIONS,
    STATE,
    AddPartitions,
    AlterAcls,
    BadVersionError,
    BrokerInfo,
    Change,
    ControllerMovedError,
    CreateTopic,
    DeleteTopic,
    MetadataError,
    MetadataEvent,
    MetadataImage,
    MetadataStore,
    NoSuchTopicError,
    PartitionState,
    ReassignPartitions,
    SetBrokerConfigs,
    SetEntityConfigs,
    SetTopicConfigs,
    StateUpdate,
    TopicExistsError,
    TopicMetadata,
)
from gregor.security.acl import AccessControlEntry, ResourcePattern, acls_from_json, acls_to_json

FILE_NAME = "gregor-metadata.json"
JOURNAL_NAME = "gregor-metadata.journal"
PRODUCER_ID_BLOCK_FILE = "gregor-producer-id-block.json"
DEFAULT_SNAPSHOT_BYTES = 20 * 1024 * 1024  # metadata.log.max.record.bytes.between.snapshots

log = logging.getLogger("gregor.metadata")


class EmbeddedMetadataStore(MetadataStore):
    def __init__(self, data_dir: str, broker_id: int, snapshot_bytes: int = DEFAULT_SNAPSHOT_BYTES) -> None:
        super().__init__()
        os.makedirs(data_dir, exist_ok=True)
        self._dir = data_dir
        self._path = os.path.join(data_dir, FILE_NAME)
        self._journal_path = os.path.join(data_dir, JOURNAL_NAME)
        self._broker_id = broker_id
        self._snapshot_bytes = snapshot_bytes
        self._lock = threading.Lock()  # every read and write of the state below
        self._brokers: dict[int, BrokerInfo] = {}
        self._controller = broker_id  # a lone broker is its own controller once registered
        self._controller_epoch = 0
        self._topics: dict[str, TopicMetadata] = {}
        self._broker_configs: dict[str, dict[str, str]] = {}  # dynamic broker configs by entity
        self._entity_configs: dict[str, dict[str, str]] = {}  # user/client configs by entity path
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}  # the non-empty patterns
        self._cluster_id = ""
        self._version = 0
        self._journal_bytes = 0
        self._failed: str | None = None  # a journal write failed: memory is ahead of disk, refuse writes
        self._compactor: threading.Thread | None = None
        self._closed = False
        self._load()
        self._journal_fd = os.open(self._journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _fsync_dir(self._dir)

    # --- loading ---------------------------------------------------------------------
    def _load(self) -> None:
        if not os.path.exists(self._path):
            self._cluster_id = _new_cluster_id()
            if os.path.exists(self._journal_path):  # changes to a snapshot that is gone: kept aside, not applied
                aside = f"{self._journal_path}.orphaned-{int(time.time())}"
                log.warning("%s has no %s beside it: starting with empty metadata; the journal is kept as %s",
                            self._journal_path, FILE_NAME, aside)
                os.replace(self._journal_path, aside)
            self._write_snapshot()
            return
        with open(self._path, encoding="utf-8") as fh:
            doc = json.load(fh)
        self._cluster_id = doc["cluster_id"]
        self._version = int(doc.get("metadata_version", 0))
        self._broker_configs = {str(e): dict(c) for e, c in doc.get("broker_configs", {}).items()}
        self._entity_configs = {str(e): dict(c) for e, c in doc.get("entity_configs", {}).items()}
        for a in doc.get("acls", []):
            self._set_acls(*acls_from_json(a))
        for t in doc.get("topics", []):
            rows = t["partitions"]
            parts = ({int(p): PartitionState(**s) for p, s in rows.items()} if isinstance(rows, dict)  # format 1
                     else _partitions_from_journal(rows))
            self._topics[t["name"]] = TopicMetadata(
                t["name"], uuid.UUID(t["topic_id"]), parts, dict(t.get("configs", {})), t.get("internal", False)
            )
        self._replay_journal()

    def _replay_journal(self) -> None:
        try:
            with open(self._journal_path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return
        pos = replayed = 0
        while pos < len(data):
            end = data.find(b"\n", pos)
            record = _parse_record(data[pos:end]) if end >= 0 else None
            if record is None:
                log.warning("metadata journal %s: the record at byte %d is incomplete or corrupt (a write a crash cut "
                            "short, which was never acknowledged, or a damaged file): ignoring it and the %d bytes "
                            "after it",
                            self._journal_path, pos, len(data) - pos)
                with open(self._journal_path, "r+b") as fh:
                    fh.truncate(pos)
                    os.fsync(fh.fileno())
                break
            pos = end + 1
            if record["v"] <= self._version:  # already in the snapshot (a crash between snapshot and truncation)
                continue
            self._replay(record)
            self._version = record["v"]
            replayed += 1
        self._journal_bytes = pos
        if replayed:
            log.info("metadata: replayed %d journal records, now at version %d", replayed, self._version)

    def _replay(self, r: dict[str, Any]) -> None:
        op = r["op"]
        if op == "create":
            t = _topic_from_journal(r["topic"])
            self._topics[t.name] = t
        elif op == "delete":
            self._topics.pop(r["name"], None)
        elif op == "partitions":
            self._topics[r["name"]].partitions.update(_partitions_from_journal(r["partitions"]))
        elif op == "configs":
            self._topics[r["name"]].configs = dict(r["configs"])
        elif op == "state":
            self._topics[r["name"]].partitions.update(_partitions_from_journal(r["partitions"]))
        elif op == "broker_configs":
            self._set_broker_configs(r["entity"], dict(r["configs"]))
        elif op == "entity_configs":
            self._set_entity_configs(r["path"], dict(r["configs"]))
        elif op == "acls":
            self._set_acls(*acls_from_json(r["acls"]))
        else:
            raise MetadataError(f"metadata journal {self._journal_path}: unknown record {op!r}")

    # --- persistence -----------------------------------------------------------------
    def _write_snapshot(self) -> None:
        """Everything at self._version into the snapshot file (tmp, fsync, rename). Each topic is encoded
        by its own json.dumps call so this thread gives the GIL back to the event loop between topics."""
        head = json.dumps({"version": 2, "cluster_id": self._cluster_id, "metadata_version": self._version,
                           "broker_configs": self._broker_configs, "entity_configs": self._entity_configs,
                           "acls": [acls_to_json(p, e) for p, e in self._acls.items()]})
        tmp = self._path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(head[:-1] + ', "topics": [')
            for i, t in enumerate(self._topics.values()):
                if i:
                    fh.write(",\n")
                fh.write(_record({"name": t.name, "topic_id": str(t.topic_id), "internal": t.internal,
                                  "configs": t.configs}, partitions=_partitions_to_journal(t.partitions)))
            fh.write("]}\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._path)
        _fsync_dir(self._dir)

    def _compact_locked(self) -> None:
        """Fold the journal into the snapshot. Safe at every step: records the new snapshot holds are
        skipped at load by their version if the truncation after it never happened."""
        self._write_snapshot()
        os.ftruncate(self._journal_fd, 0)
        os.fsync(self._journal_fd)
        self._journal_bytes = 0

    def _compact_in_background(self) -> None:
        def run() -> None:
            try:
                with self._lock:
                    if not self._closed and self._failed is None:
                        self._compact_locked()
            except OSError as e:  # the journal still holds everything: retried at the next threshold
                log.error("metadata: folding the journal into %s failed: %s", self._path, e)

        self._compactor = threading.Thread(target=run, name="metadata-snapshot", daemon=True)
        self._compactor.start()

    def _append(self, records: list[str]) -> None:
        """Append records (JSON text) to the journal and fsync: the write is durable when this returns."""
        lines = []
        for r in records:
            payload = r.encode()
            lines.append(b"%08x %s\n" % (zlib.crc32(payload), payload))
        data = b"".join(lines)
        try:
            view = memoryview(data)
            while view:
                n = os.write(self._journal_fd, view)
                view = view[n:]
            os.fsync(self._journal_fd)
        except OSError as e:
            self._failed = f"writing the metadata journal {self._journal_path} failed: {e}"
            log.error("%s; metadata changes are refused until the broker restarts", self._failed)
            raise MetadataError(self._failed) from e
        self._journal_bytes += len(data)
        if self._journal_bytes >= self._snapshot_bytes and (self._compactor is None or not self._compactor.is_alive()):
            self._compact_in_background()

    # --- reads -------------------------------------------------------------------------
    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def version(self) -> int:
        return self._version

    def snapshot(self) -> MetadataImage:
        with self._lock:
            return MetadataImage(self._version, self._cluster_id, self._brokers_tuple(), self._controller_id(),
                                 {name: t.copy() for name, t in self._topics.items()},
                                 {e: dict(c) for e, c in self._broker_configs.items()},
                                 {e: dict(c) for e, c in self._entity_configs.items()}, acls=dict(self._acls))

    def _brokers_tuple(self) -> tuple[BrokerInfo, ...]:
        return tuple(sorted(self._brokers.values(), key=lambda b: b.broker_id))

    def _controller_id(self) -> int:
        return self._controller if self._controller in self._brokers else -1

    def register_broker(self, info: BrokerInfo) -> int:
        """Live registrations are not persisted, as with ephemeral znodes. Several brokers may register
        with one embedded store (in-process clusters in tests); the broker epoch is the version."""
        with self._lock:
            self._version += 1
            self._brokers[info.broker_id] = dataclasses.replace(info, epoch=self._version)
            self._publish_brokers()
            return self._version

    def unregister_broker(self, broker_id: int) -> None:
        with self._lock:
            if self._brokers.pop(broker_id, None) is None:
                return
            if self._controller == broker_id:  # its ephemeral /controller goes with it
                self._controller = -1
            self._version += 1
            self._publish_brokers()

    def _publish_brokers(self) -> None:
        self._publish(MetadataEvent(self._version, BROKERS, brokers=self._brokers_tuple(),
                                    controller_id=self._controller_id()))

    def elect_controller(self, broker_id: int) -> int | None:
        with self._lock:
            if self._controller_id() not in (-1, broker_id):
                return None
            if broker_id not in self._brokers:
                raise MetadataError(f"broker {broker_id} is not registered")
            self._controller = broker_id
            # Not persisted (a lone broker's epochs start above every partition state's controller epoch).
            self._controller_epoch = max([self._controller_epoch] + [
                s.controller_epoch for t in self._topics.values() for s in t.partitions.values()]) + 1
            self._version += 1
            self._publish_brokers()
            return self._controller_epoch

    def resign_controller(self, broker_id: int, controller_epoch: int) -> None:
        with self._lock:
            if self._controller == broker_id and self._controller_epoch == controller_epoch:
                self._controller = -1
                self._version += 1
                self._publish_brokers()

    def apply(self, changes: Sequence[Change]) -> list[int | MetadataError]:
        with self._lock:
            if self._failed is not None:
                raise MetadataError(self._failed)
            results: list[int | MetadataError] = []
            records: list[str] = []
            events: list[MetadataEvent] = []
            for ch in changes:
                try:
                    record, event = self._apply_one(ch, self._version + 1)
                except MetadataError as e:
                    results.append(e)
                    continue
                self._version += 1
                records.append(record)
                events.append(event)
                results.append(self._version)
            if records:
                self._append(records)
            for ev in events:  # only once durable
                self._publish(ev)
            return results

    def _set_broker_configs(self, entity: str, configs: dict[str, str]) -> None:
        if configs:
            self._broker_configs[entity] = configs
        else:
            self._broker_configs.pop(entity, None)

    def _set_entity_configs(self, path: str, configs: dict[str, str]) -> None:
        if configs:
            self._entity_configs[path] = configs
        else:
            self._entity_configs.pop(path, None)

    def _set_acls(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry]) -> None:
        if entries:
            self._acls[pattern] = entries
        else:
            self._acls.pop(pattern, None)

    def _apply_one(self, ch: Change, v: int) -> tuple[str, MetadataEvent]:
        if isinstance(ch, SetEntityConfigs):
            self._set_entity_configs(ch.path, dict(ch.configs))
            record = _record({"v": v, "op": "entity_configs", "path": ch.path, "configs": ch.configs})
            return record, MetadataEvent(v, ENTITY_CONFIGS, entity=ch.path, configs=dict(ch.configs))
        if isinstance(ch, AlterAcls):
            entries = (self._acls.get(ch.pattern, frozenset()) - ch.remove) | ch.add
            self._set_acls(ch.pattern, entries)
            record = _record({"v": v, "op": "acls", "acls": acls_to_json(ch.pattern, entries)})
            return record, MetadataEvent(v, ACLS, acl_pattern=ch.pattern, acls=entries)
        if isinstance(ch, SetBrokerConfigs):
            self._set_broker_configs(ch.entity, dict(ch.configs))
            record = _record({"v": v, "op": "broker_configs", "entity": ch.entity, "configs": ch.configs})
            return record, MetadataEvent(v, BROKER_CONFIGS, entity=ch.entity, configs=dict(ch.configs))
        if isinstance(ch, CreateTopic):
            t = ch.topic
            if t.name in self._topics:
                raise TopicExistsError(t.name)
            mine = t.copy()  # the given object is the caller's; it travels on in the event (apply's contract)
            self._topics[t.name] = mine
            return _topic_record(v, mine), MetadataEvent(v, CREATED, t.name, t)
        cur = self._topics.get(ch.name)
        if cur is None:
            raise NoSuchTopicError(ch.name)
        if isinstance(ch, DeleteTopic):
            del self._topics[ch.name]
            return _record({"v": v, "op": "delete", "name": ch.name}), MetadataEvent(v, DELETED, ch.name, None)
        if isinstance(ch, AddPartitions):
            if any(p in cur.partitions for p in ch.partitions):  # a concurrent addition won the race
                raise BadVersionError(f"{ch.name} has {len(cur.partitions)} partitions now")
            added = {p: s.copy() for p, s in ch.partitions.items()}
            cur.partitions.update(added)
            record = _record({"v": v, "op": "partitions", "name": ch.name}, partitions=_partitions_to_journal(added))
            return record, MetadataEvent(v, PARTITIONS, ch.name, cur.copy())
        if isinstance(ch, ReassignPartitions):
            missing = [p for p in ch.partitions if p not in cur.partitions]
            if missing:
                raise NoSuchTopicError(f"{ch.name} has no partitions {missing}")
            changed = {}
            for p, s in ch.partitions.items():
                new = cur.partitions[p].copy()  # the state (leader, epoch, ISR, version) stays the store's
                new.replicas, new.adding_replicas, new.removing_replicas = (
                    list(s.replicas), list(s.adding_replicas), list(s.removing_replicas))
                cur.partitions[p] = changed[p] = new
            record = _record({"v": v, "op": "state", "name": ch.name}, partitions=_partitions_to_journal(changed))
            return record, MetadataEvent(v, PARTITIONS, ch.name, cur.copy())
        if not isinstance(ch, SetTopicConfigs):
            raise MetadataError(f"unknown change {ch!r}")
        cur.configs = dict(ch.configs)
        record = _record({"v": v, "op": "configs", "name": ch.name, "configs": cur.configs})
        return record, MetadataEvent(v, CONFIGS, ch.name, cur.copy())

    def update_partition_states(self, updates: Sequence[StateUpdate],
                                controller_epoch: int | None = None) -> list[int | MetadataError]:
        with self._lock:
            if self._failed is not None:
                raise MetadataError(self._failed)
            results: list[int | MetadataError] = []
            records: list[str] = []
            events: list[MetadataEvent] = []
            for u in updates:
                if controller_epoch is not None and (controller_epoch != self._controller_epoch
                                                     or self._controller_id() == -1):
                    results.append(ControllerMovedError(
                        f"controller epoch {controller_epoch} is not the current {self._controller_epoch}"))
                    continue
                t = self._topics.get(u.topic)
                if t is None or u.partition not in t.partitions:
                    results.append(NoSuchTopicError(f"{u.topic}-{u.partition}"))
                    continue
                cur = t.partitions[u.partition]
                if cur.version != u.expected_version:
                    results.append(BadVersionError(
                        f"{u.topic}-{u.partition}: version {cur.version}, expected {u.expected_version}"))
                    continue
                new = u.state.copy()  # the assignment is not the state's to change (ReassignPartitions is)
                new.replicas, new.adding_replicas, new.removing_replicas = (
                    list(cur.replicas), list(cur.adding_replicas), list(cur.removing_replicas))
                new.version = u.expected_version + 1
                t.partitions[u.partition] = new
                self._version += 1
                records.append(_record({"v": self._version, "op": "state", "name": u.topic},
                                       partitions=_partitions_to_journal({u.partition: new})))
                events.append(MetadataEvent(self._version, STATE, u.topic, partitions={u.partition: new.copy()}))
                results.append(new.version)
            if records:
                self._append(records)
            for ev in events:  # only once durable
                self._publish(ev)
            return results

    def close(self) -> None:
        """Fold the journal into the snapshot (a cleanly stopped broker leaves one self-contained file)."""
        compactor = self._compactor
        if compactor is not None:
            compactor.join()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._journal_bytes and self._failed is None:
                    self._compact_locked()
            finally:
                os.close(self._journal_fd)

    # --- producer id blocks: a file of its own, like ZooKeeper's /latest_producer_id_block ---------
    def allocate_producer_ids(self, block_size: int) -> tuple[int, int]:
        """The block after the last one handed out, recorded (tmp, fsync, rename) before it is used."""
        if block_size <= 0:
            raise ValueError(f"producer id block size {block_size} must be positive")
        path = os.path.join(os.path.dirname(self._path), PRODUCER_ID_BLOCK_FILE)
        with self._lock:
            try:
                with open(path, encoding="utf-8") as fh:
                    doc = json.load(fh)
                first = int(doc["block_start"]) + int(doc["block_length"])
            except FileNotFoundError:
                first = 0
            if first > 2**63 - 1 - block_size:
                raise MetadataError("producer ids are exhausted")
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump({"version": 1, "broker": self._broker_id, "block_start": first,
                           "block_length": block_size}, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        return first, block_size


# --- journal encoding ---------------------------------------------------------------------------
# A partition is [id, replicas, leader, leader epoch, isr, controller epoch, version(, adding, removing)], or [id, replicas]
# for a new partition (leader the first replica, isr the replicas, epochs and version 0): a third of the
# bytes and of the encoding time, which is most of a 10,000-partition creation's cost here.
_ROWS_PER_DUMPS = 2000  # json.dumps holds the GIL for a whole call: encode large topics in slices


def _partitions_to_journal(parts: dict[int, PartitionState]) -> str:
    rows = [[p, s.replicas] if (s.leader_epoch == 0 and s.controller_epoch == 0 and s.version == 0 and s.replicas
                                and s.leader == s.replicas[0] and s.isr == s.replicas)
            else [p, s.replicas, s.leader, s.leader_epoch, s.isr, s.controller_epoch, s.version]
            + ([s.adding_replicas, s.removing_replicas] if s.adding_replicas or s.removing_replicas else [])
            for p, s in sorted(parts.items())]
    return "[" + ",".join(json.dumps(rows[i:i + _ROWS_PER_DUMPS], separators=(",", ":"))[1:-1]
                          for i in range(0, len(rows), _ROWS_PER_DUMPS)) + "]"


def _partitions_from_journal(rows: list[list[Any]]) -> dict[int, PartitionState]:
    out = {}
    for r in rows:
        if len(r) == 2:
            out[int(r[0])] = PartitionState(list(r[1]), r[1][0], 0, list(r[1]), 0, 0)
        else:
            out[int(r[0])] = PartitionState(list(r[1]), r[2], r[3], list(r[4]), r[5], r[6],
                                            list(r[7]) if len(r) > 7 else [], list(r[8]) if len(r) > 8 else [])
    return out


def _record(head: dict[str, Any], **json_fields: str) -> str:
    """A journal record: `head` plus fields already encoded as JSON text."""
    text = json.dumps(head, separators=(",", ":"))
    return text[:-1] + "".join(f',"{k}":{v}' for k, v in json_fields.items()) + "}"


def _topic_record(v: int, t: TopicMetadata) -> str:
    topic = _record({"name": t.name, "topic_id": str(t.topic_id), "internal": t.internal, "configs": t.configs},
                    partitions=_partitions_to_journal(t.partitions))
    return _record({"v": v, "op": "create"}, topic=topic)


def _topic_from_journal(d: dict[str, Any]) -> TopicMetadata:
    return TopicMetadata(d["name"], uuid.UUID(d["topic_id"]), _partitions_from_journal(d["partitions"]),
                         dict(d.get("configs", {})), bool(d.get("internal", False)))


def _parse_record(line: bytes) -> dict[str, Any] | None:
    """A journal line's record, or None when it is torn or corrupt."""
    if len(line) < 10 or line[8:9] != b" ":
        return None
    payload = line[9:]
    try:
        if int(line[:8], 16) != zlib.crc32(payload):
            return None
        record = json.loads(payload)
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("v"), int) else None


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _new_cluster_id() -> str:
    """Kafka's cluster ids are 16 random bytes in URL-safe base64 without padding (22 chars)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
