"""The topics part of the ZooKeeper watcher's image: assignments, partition states and topic configs.

Read from /brokers/topics/<t> (assignment), /brokers/topics/<t>/partitions/<p>/state and
/config/topics/<t>, each with its watch, pipelined; compared with the image by the znodes' mzxid, so a
repeated read publishes nothing. A topic new to the image is published whole (CREATED); new partitions
or a changed assignment as its whole snapshot (PARTITIONS); a config change as CONFIGS; changed states
as STATE, with only the partitions that changed (an ISR change costs O(1) however large the topic).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import ZnodeStat

from gregor.metadata.store import CONFIGS, CREATED, DELETED, PARTITIONS, STATE, PartitionState, TopicMetadata
from gregor.metadata.zk_reading import ReadContext
from gregor.metadata.zk_znodes import (
    CONFIG_TOPICS,
    INTERNAL_TOPICS,
    TOPICS,
    _parse_assignment,
    _parse_state,
    _state_path,
    _topic_path,
)

Assignment = tuple[list[int], list[int], list[int]]  # replicas, adding, removing


@dataclasses.dataclass
class _Topic:
    """The reader's image of one topic with the znode versions that built it."""

    meta: TopicMetadata
    # Partitions in the assignment whose state znode did not exist yet when read (a creation larger than
    # one multi writes them after the topic znode): an exists watch brings each in once it does.
    pending: dict[int, Assignment] = dataclasses.field(default_factory=dict)
    assignment_mzxid: int = -1
    config_mzxid: int = -1
    state_mzxid: dict[int, int] = dataclasses.field(default_factory=dict)


class TopicReader:
    """The topics of the image, kept from their znodes (called on the reader thread; the image under the
    context's lock)."""

    def __init__(self, ctx: ReadContext) -> None:
        self._ctx = ctx
        self._topics: dict[str, _Topic] = {}

    def copies(self) -> dict[str, TopicMetadata]:
        """Every topic, copied (under the lock)."""
        return {n: t.meta.copy() for n, t in self._topics.items()}

    def read_changed(self, paths: set[str]) -> None:
        """The topic znodes among changed `paths`: re-read and published."""
        topics_changed = TOPICS in paths
        full: set[str] = set()
        states: dict[str, set[int]] = {}
        configs: set[str] = set()
        for p in paths:
            parts = p.split("/")
            if p.startswith(TOPICS + "/") and len(parts) == 4:
                full.add(parts[3])
            elif p.startswith(TOPICS + "/") and len(parts) == 7 and parts[6] == "state":
                states.setdefault(parts[3], set()).add(int(parts[5]))
            elif p.startswith(CONFIG_TOPICS + "/") and len(parts) == 4:
                configs.add(parts[3])
        if topics_changed:
            names = set(self._ctx.zk.get_children(TOPICS, watch=self._ctx.on_watch))
            with self._ctx.lock:
                gone = [n for n in self._topics if n not in names]
                full.update(n for n in names if n not in self._topics)
            for n in gone:
                self._topic_gone(n)
        self._read_topics(full)
        with self._ctx.lock:
            known = set(self._topics)
        configs -= full
        self._read_configs({n for n in configs if n in known})
        # A state or config of a topic not known yet: its topic's read (children watch) brings it.
        self._read_states({n: ps for n, ps in states.items() if n in known and n not in full})

    def reload(self) -> None:
        """Every topic read again and published as read now (CREATED replaces a cached topic), the ones
        gone as DELETED: at start, and on a new session."""
        names = set(self._ctx.zk.get_children(TOPICS, watch=self._ctx.on_watch))
        with self._ctx.lock:
            old = set(self._topics)
            self._topics = {}
        self._read_topics(names)
        with self._ctx.lock:
            for n in sorted(old - set(self._topics)):
                self._ctx.publish_locked(DELETED, topic=n)

    def resync(self) -> None:
        """Every topic and state read again with its watch (after a disconnection of the same session);
        only what changed is published (by mzxid)."""
        names = set(self._ctx.zk.get_children(TOPICS, watch=self._ctx.on_watch))
        with self._ctx.lock:
            gone = [n for n in self._topics if n not in names]
            states = {n: set(t.meta.partitions) for n, t in self._topics.items() if n in names}
        for n in gone:
            self._topic_gone(n)
        self._read_topics(names)
        self._read_states(states)

    def _topic_gone(self, name: str) -> None:
        with self._ctx.lock:
            if self._topics.pop(name, None) is not None:
                self._ctx.publish_locked(DELETED, topic=name)

    def _read_topics(self, names: set[str]) -> None:
        """Whole topics (assignment, config, every state), pipelined; publishes CREATED or PARTITIONS."""
        if not names:
            return
        assign = {n: self._ctx.get_watched(_topic_path(n)) for n in names}
        confs = {n: self._ctx.get_watched(f"{CONFIG_TOPICS}/{n}") for n in names}
        state_reads: dict[str, dict[int, Any]] = {}
        assignments: dict[str, tuple[uuid.UUID, dict[int, Assignment], ZnodeStat]] = {}
        for n, r in assign.items():
            try:
                data, stat = r.get()
            except NoNodeError:
                self._topic_gone(n)
                continue
            tid, parts = _parse_assignment(data)
            assignments[n] = (tid, parts, stat)
            with self._ctx.lock:
                cur = self._topics.get(n)
                known = set(cur.meta.partitions) if cur is not None else set()
            state_reads[n] = {p: self._ctx.get_watched(_state_path(n, p))
                              for p in parts if p not in known}
        for n, (tid, parts, stat) in assignments.items():
            try:
                cdata, cstat = confs[n].get()
                configs, cmzxid = {str(k): str(v) for k, v in json.loads(cdata).get("config", {}).items()}, cstat.mzxid
            except NoNodeError:
                configs, cmzxid = {}, -1
            new_states: dict[int, tuple[PartitionState, int]] = {}
            missing: dict[int, Assignment] = {}
            for p, r in state_reads[n].items():
                try:
                    sdata, sstat = r.get()
                except NoNodeError:  # written after its topic znode (a large creation): watched for
                    missing[p] = parts[p]
                    continue
                replicas, adding, removing = parts[p]
                new_states[p] = (_parse_state(sdata, sstat, replicas, adding, removing), sstat.mzxid)
            with self._ctx.lock:
                cur = self._topics.get(n)
                if cur is not None and cur.meta.topic_id != tid:  # deleted and created again in between
                    self._topics.pop(n)
                    self._ctx.publish_locked(DELETED, topic=n)
                    cur = None
                if cur is None:
                    meta = TopicMetadata(n, tid, {p: s for p, (s, _) in new_states.items()}, configs, n in INTERNAL_TOPICS)
                    self._topics[n] = _Topic(meta, missing, stat.mzxid, cmzxid, {p: z for p, (_, z) in new_states.items()})
                    self._ctx.publish_locked(CREATED, topic=n, snapshot=meta.copy())
                    self._watch_missing(n, missing)
                    continue
                cur.pending.update(missing)
                self._watch_missing(n, missing)
                changed = False
                if cmzxid != cur.config_mzxid:
                    cur.meta.configs, cur.config_mzxid = configs, cmzxid
                    self._ctx.publish_locked(CONFIGS, topic=n, snapshot=cur.meta.copy())
                if stat.mzxid != cur.assignment_mzxid:
                    cur.assignment_mzxid = stat.mzxid
                    for p, (replicas, adding, removing) in parts.items():
                        s = cur.meta.partitions.get(p)
                        if s is not None and (s.replicas, s.adding_replicas, s.removing_replicas) != (replicas, adding, removing):
                            s.replicas, s.adding_replicas, s.removing_replicas = replicas, adding, removing
                            changed = True
                for p, (s, z) in new_states.items():
                    cur.meta.partitions[p] = s
                    cur.state_mzxid[p] = z
                    changed = True
                if changed:
                    self._ctx.publish_locked(PARTITIONS, topic=n, snapshot=cur.meta.copy())

    def _watch_missing(self, name: str, missing: dict[int, Any]) -> None:
        """An exists watch on each missing state znode; one created meanwhile is queued for a read now."""
        checks = [(p, self._ctx.exists_watched(_state_path(name, p))) for p in missing]
        for p, r in checks:
            if r.get() is not None:
                self._ctx.queue.put(("path", _state_path(name, p)))

    def _read_configs(self, names: set[str]) -> None:
        reads = {n: self._ctx.get_watched(f"{CONFIG_TOPICS}/{n}") for n in names}
        for n, r in reads.items():
            try:
                data, stat = r.get()
                configs, mzxid = {str(k): str(v) for k, v in json.loads(data).get("config", {}).items()}, stat.mzxid
            except NoNodeError:
                configs, mzxid = {}, -1
            with self._ctx.lock:
                cur = self._topics.get(n)
                if cur is not None and mzxid != cur.config_mzxid:
                    cur.meta.configs, cur.config_mzxid = configs, mzxid
                    self._ctx.publish_locked(CONFIGS, topic=n, snapshot=cur.meta.copy())

    def _read_states(self, states: dict[str, set[int]]) -> None:
        reads = {(n, p): self._ctx.get_watched(_state_path(n, p))
                 for n, ps in states.items() for p in ps}
        results = {}
        for key, r in reads.items():
            try:
                results[key] = r.get()
            except NoNodeError:
                continue
        self.apply_states(results)

    def apply_states(self, results: dict[tuple[str, int], tuple[bytes, ZnodeStat]]) -> None:
        """State znodes' data, read or just written: the ones newer than the image (by mzxid) become one
        STATE event per topic."""
        changed: dict[str, dict[int, PartitionState]] = {}
        appeared: set[str] = set()
        with self._ctx.lock:
            for (n, p), (data, stat) in results.items():
                cur = self._topics.get(n)
                if cur is None or cur.state_mzxid.get(p, -1) >= stat.mzxid:
                    continue
                old = cur.meta.partitions.get(p)
                if old is not None:
                    assignment = (old.replicas, old.adding_replicas, old.removing_replicas)
                elif p in cur.pending:
                    assignment = cur.pending.pop(p)
                    appeared.add(n)
                else:
                    continue
                s = _parse_state(data, stat, *assignment)
                cur.meta.partitions[p] = s
                cur.state_mzxid[p] = stat.mzxid
                changed.setdefault(n, {})[p] = s.copy()
            for n, parts in changed.items():
                if n in appeared:  # new partitions: the whole topic, as for AddPartitions
                    self._ctx.publish_locked(PARTITIONS, topic=n, snapshot=self._topics[n].meta.copy())
                else:
                    self._ctx.publish_locked(STATE, topic=n, partitions=parts)
