"""The embedded store's files: a snapshot of its MetadataState plus a journal of the records written since.

Rewriting the whole file on every change cost 270 ms at 10,000 partitions, so a change is one appended
journal record, fsynced before the write returns (one fsync per `append`, however many records it
holds). Once the journal holds `metadata.log.max.record.bytes.between.snapshots` bytes, a background
thread folds it into the snapshot file (tmp, fsync, rename), as Kafka's metadata log is folded into
snapshots; a clean close does the same, so the snapshot alone describes a cleanly stopped broker.

Files: `gregor-metadata.json`, the snapshot (format 2: format 1's document plus `metadata_version`,
partitions as the journal writes them; a format 1 file, with a dict per partition and no
`metadata_version`, loads as version 0), and `gregor-metadata.journal`, one record a line:
`<crc32 of the JSON, 8 hex digits> <JSON>`, each with its metadata version. Loading replays the records
newer than the snapshot (gregor.metadata.applier.replay); a record cut short by a crash (or otherwise
unreadable) ends the replay with a warning and is cut off, since it was never acknowledged.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
import uuid
import zlib
from collections.abc import Sequence
from typing import Any

from gregor.metadata.applier import MetadataState, replay
from gregor.metadata.records import (
    AclsRecord,
    AssignmentRecord,
    BrokerConfigsRecord,
    EntityConfigsRecord,
    PartitionsRecord,
    PartitionStateRecord,
    Record,
    RemoveTopicRecord,
    TopicConfigsRecord,
    TopicRecord,
)
from gregor.metadata.store import MetadataError, PartitionState, TopicMetadata
from gregor.security.acl import acls_from_json, acls_to_json
from gregor.storage.files import fsync_dir

FILE_NAME = "gregor-metadata.json"
JOURNAL_NAME = "gregor-metadata.journal"

log = logging.getLogger("gregor.metadata")


class MetadataJournal:
    """Loads a MetadataState from the snapshot and the journal, appends records durably, and folds the
    journal into the snapshot. The state it loaded is the one it snapshots later: its owner changes it
    only under `lock`, which compaction holds too."""

    def __init__(self, data_dir: str, snapshot_bytes: int, lock: threading.Lock) -> None:
        os.makedirs(data_dir, exist_ok=True)
        self._dir = data_dir
        self._path = os.path.join(data_dir, FILE_NAME)
        self._journal_path = os.path.join(data_dir, JOURNAL_NAME)
        self._snapshot_bytes = snapshot_bytes
        self._lock = lock
        self.state = MetadataState()
        self.cluster_id = ""
        self._journal_bytes = 0
        self.failed: str | None = None  # a journal write failed: memory is ahead of disk, refuse writes
        self._compactor: threading.Thread | None = None
        self._closed = False
        self._load()
        self._journal_fd = os.open(self._journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        fsync_dir(self._dir)

    def check_writable(self) -> None:
        if self.failed is not None:
            raise MetadataError(self.failed)

    # --- loading ---------------------------------------------------------------------
    def _load(self) -> None:
        if not os.path.exists(self._path):
            self.cluster_id = _new_cluster_id()
            if os.path.exists(self._journal_path):  # changes to a snapshot that is gone: kept aside, not applied
                aside = f"{self._journal_path}.orphaned-{int(time.time())}"
                log.warning("%s has no %s beside it: starting with empty metadata; the journal is kept as %s",
                            self._journal_path, FILE_NAME, aside)
                os.replace(self._journal_path, aside)
            self._write_snapshot()
            return
        with open(self._path, encoding="utf-8") as fh:
            doc = json.load(fh)
        state = self.state
        self.cluster_id = doc["cluster_id"]
        state.version = int(doc.get("metadata_version", 0))
        state.broker_configs = {str(e): dict(c) for e, c in doc.get("broker_configs", {}).items()}
        state.entity_configs = {str(e): dict(c) for e, c in doc.get("entity_configs", {}).items()}
        for a in doc.get("acls", []):
            state.set_acls(*acls_from_json(a))
        for t in doc.get("topics", []):
            state.topics[t["name"]] = _topic_from_journal(t)
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
            doc = _parse_line(data[pos:end]) if end >= 0 else None
            if doc is None:
                log.warning("metadata journal %s: the record at byte %d is incomplete or corrupt (a write a crash cut "
                            "short, which was never acknowledged, or a damaged file): ignoring it and the %d bytes "
                            "after it",
                            self._journal_path, pos, len(data) - pos)
                with open(self._journal_path, "r+b") as fh:
                    fh.truncate(pos)
                    os.fsync(fh.fileno())
                break
            pos = end + 1
            if doc["v"] <= self.state.version:  # already in the snapshot (a crash between snapshot and truncation)
                continue
            replay(self.state, self._decode(doc))
            self.state.version = doc["v"]
            replayed += 1
        self._journal_bytes = pos
        if replayed:
            log.info("metadata: replayed %d journal records, now at version %d", replayed, self.state.version)

    def _decode(self, doc: dict[str, Any]) -> Record:
        op = doc["op"]
        if op == "create":
            return TopicRecord(_topic_from_journal(doc["topic"]))
        if op == "delete":
            return RemoveTopicRecord(doc["name"])
        if op == "partitions":
            return PartitionsRecord(doc["name"], _partitions_from_journal(doc["partitions"]))
        if op == "state":  # a reassignment or a state change: either way the partitions' new states
            return PartitionStateRecord(doc["name"], _partitions_from_journal(doc["partitions"]))
        if op == "configs":
            return TopicConfigsRecord(doc["name"], dict(doc["configs"]))
        if op == "broker_configs":
            return BrokerConfigsRecord(doc["entity"], dict(doc["configs"]))
        if op == "entity_configs":
            return EntityConfigsRecord.at(doc["path"], dict(doc["configs"]))
        if op == "acls":
            return AclsRecord(*acls_from_json(doc["acls"]))
        raise MetadataError(f"metadata journal {self._journal_path}: unknown record {op!r}")

    # --- writing -----------------------------------------------------------------------
    def append(self, records: Sequence[tuple[int, Record]]) -> None:
        """Append (version, record) pairs to the journal and fsync: they are durable when this returns.
        A failed write leaves memory ahead of the disk: every later append is refused (MetadataError)."""
        lines = []
        for v, r in records:
            payload = _encode(v, r).encode()
            lines.append(b"%08x %s\n" % (zlib.crc32(payload), payload))
        data = b"".join(lines)
        try:
            view = memoryview(data)
            while view:
                n = os.write(self._journal_fd, view)
                view = view[n:]
            os.fsync(self._journal_fd)
        except OSError as e:
            self.failed = f"writing the metadata journal {self._journal_path} failed: {e}"
            log.error("%s; metadata changes are refused until the broker restarts", self.failed)
            raise MetadataError(self.failed) from e
        self._journal_bytes += len(data)
        if self._journal_bytes >= self._snapshot_bytes and (self._compactor is None or not self._compactor.is_alive()):
            self._compact_in_background()

    def _write_snapshot(self) -> None:
        """Everything at the state's version into the snapshot file (tmp, fsync, rename). Each topic is encoded
        by its own json.dumps call so this thread gives the GIL back to the event loop between topics."""
        s = self.state
        head = json.dumps({"version": 2, "cluster_id": self.cluster_id, "metadata_version": s.version,
                           "broker_configs": s.broker_configs, "entity_configs": s.entity_configs,
                           "acls": [acls_to_json(p, e) for p, e in s.acl_entries.items()]})
        tmp = self._path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(head[:-1] + ', "topics": [')
            for i, t in enumerate(s.topics.values()):
                if i:
                    fh.write(",\n")
                fh.write(_topic_json(t))
            fh.write("]}\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._path)
        fsync_dir(self._dir)

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
                    if not self._closed and self.failed is None:
                        self._compact_locked()
            except OSError as e:  # the journal still holds everything: retried at the next threshold
                log.error("metadata: folding the journal into %s failed: %s", self._path, e)

        self._compactor = threading.Thread(target=run, name="metadata-snapshot", daemon=True)
        self._compactor.start()

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
                if self._journal_bytes and self.failed is None:
                    self._compact_locked()
            finally:
                os.close(self._journal_fd)


# --- encoding -----------------------------------------------------------------------------------
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


def _partitions_from_journal(rows: list[list[Any]] | dict[str, dict[str, Any]]) -> dict[int, PartitionState]:
    if isinstance(rows, dict):  # the first snapshot format: {"<id>": {<PartitionState's fields>}}
        return {int(p): PartitionState(**s) for p, s in rows.items()}
    out = {}
    for r in rows:
        if len(r) == 2:
            out[int(r[0])] = PartitionState(list(r[1]), r[1][0], 0, list(r[1]), 0, 0)
        else:
            out[int(r[0])] = PartitionState(list(r[1]), r[2], r[3], list(r[4]), r[5], r[6],
                                            list(r[7]) if len(r) > 7 else [], list(r[8]) if len(r) > 8 else [])
    return out


def _json(head: dict[str, Any], **json_fields: str) -> str:
    """`head` plus fields already encoded as JSON text."""
    text = json.dumps(head, separators=(",", ":"))
    return text[:-1] + "".join(f',"{k}":{v}' for k, v in json_fields.items()) + "}"


def _topic_json(t: TopicMetadata) -> str:
    return _json({"name": t.name, "topic_id": str(t.topic_id), "internal": t.internal, "configs": t.configs},
                 partitions=_partitions_to_journal(t.partitions))


def _topic_from_journal(d: dict[str, Any]) -> TopicMetadata:
    return TopicMetadata(d["name"], uuid.UUID(d["topic_id"]), _partitions_from_journal(d["partitions"]),
                         dict(d.get("configs", {})), bool(d.get("internal", False)))


def _encode(v: int, r: Record) -> str:
    """A record as its journal line's JSON (the format every earlier version wrote)."""
    if isinstance(r, TopicRecord):
        return _json({"v": v, "op": "create"}, topic=_topic_json(r.topic))
    if isinstance(r, RemoveTopicRecord):
        return _json({"v": v, "op": "delete", "name": r.name})
    if isinstance(r, PartitionsRecord):
        return _json({"v": v, "op": "partitions", "name": r.name}, partitions=_partitions_to_journal(r.partitions))
    if isinstance(r, AssignmentRecord | PartitionStateRecord):
        return _json({"v": v, "op": "state", "name": r.name}, partitions=_partitions_to_journal(r.partitions))
    if isinstance(r, TopicConfigsRecord):
        return _json({"v": v, "op": "configs", "name": r.name, "configs": r.configs})
    if isinstance(r, BrokerConfigsRecord):
        return _json({"v": v, "op": "broker_configs", "entity": r.entity, "configs": r.configs})
    if isinstance(r, EntityConfigsRecord):
        return _json({"v": v, "op": "entity_configs", "path": r.path, "configs": r.configs})
    return _json({"v": v, "op": "acls", "acls": acls_to_json(r.pattern, r.entries)})


def _parse_line(line: bytes) -> dict[str, Any] | None:
    """A journal line's JSON, or None when it is torn or corrupt."""
    if len(line) < 10 or line[8:9] != b" ":
        return None
    payload = line[9:]
    try:
        if int(line[:8], 16) != zlib.crc32(payload):
            return None
        doc = json.loads(payload)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("v"), int) else None


def _new_cluster_id() -> str:
    """Kafka's cluster ids are 16 random bytes in URL-safe base64 without padding (22 chars)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
