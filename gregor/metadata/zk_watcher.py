"""The read side of the ZooKeeper metadata store: the broker's image of the cluster, kept by watches.

ZooKeeper watches are one-shot and fire on kazoo's thread, where no broker code may run: each firing
only queues the path. ONE reader thread (this class) drains the queue, reads the current data
(pipelined with kazoo's async calls, re-arming the watches), compares it with its image (by the znodes'
mzxid, so a repeated read publishes nothing) and publishes MetadataEvents numbered by a local counter
that only it increments. The store (zookeeper.py) writes, then asks for a re-read of what it wrote
(`sync`) so that the version it returns holds the write; partition-state writes hand their acknowledged
stats straight to `apply_states`. Session changes come in through `on_session_state` (a kazoo
listener); what the store must do about them (forget its controllership, register again) it is told
through two callbacks, so the image and the writes stay in their own classes. See zookeeper.py's module
doc for the znodes, the events and the session rules.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import WatchedEvent, ZnodeStat

from gregor.metadata.store import (
    ACLS,
    BROKER_CONFIGS,
    BROKERS,
    CONFIGS,
    CREATED,
    DELETED,
    ENTITY_CONFIGS,
    LOG_DIR_FAILURE,
    PARTITIONS,
    SESSION,
    SESSION_LOST,
    SESSION_RESTORED,
    STATE,
    BrokerInfo,
    LogDirFailure,
    MetadataEvent,
    MetadataImage,
    PartitionState,
    TopicMetadata,
)
from gregor.metadata.zk_znodes import (
    ACL_CHANGE_PREFIX,
    ACL_CHANGES,
    ACL_EXT_CHANGES,
    ACL_LITERAL,
    ACL_PREFIXED,
    BROKER_IDS,
    CHANGE_EXPIRATION_MS,
    CONFIG_BROKERS,
    CONFIG_CHANGE_PREFIX,
    CONFIG_CHANGES,
    CONFIG_CLIENTS,
    CONFIG_GROUPS,
    CONFIG_ROOT,
    CONFIG_TOPICS,
    CONFIG_USERS,
    CONTROLLER,
    INTERNAL_TOPICS,
    LOG_DIR_EVENT_PREFIX,
    LOG_DIR_EVENTS,
    TOPICS,
    _parse_assignment,
    _parse_broker,
    _parse_state,
    _state_path,
    _Topic,
    _topic_path,
    acl_path,
    acl_pattern_of,
    parse_acl_change,
    parse_acl_znode,
)
from gregor.security.acl import AccessControlEntry, ResourcePattern

log = logging.getLogger("gregor.metadata.zookeeper")


class ZooKeeperWatcher:
    """The image of the cluster (brokers, controller, topics, dynamic broker configs) and the thread that
    keeps it from watches. The image is guarded by one lock; events are published in version order."""

    def __init__(self, zk: KazooClient, cluster_id: str, max_in_flight: int, publish: Callable[[MetadataEvent], None],
                 on_session_lost: Callable[[], None], on_new_session: Callable[[], None]) -> None:
        """`publish` hands an event to the store's subscribers; `on_session_lost` runs on the reader thread
        when the session expired (before anything else of that batch); `on_new_session` when kazoo connected
        with a new session (the store registers the broker again), before the image is re-read."""
        self._zk = zk
        self._cluster_id = cluster_id
        self._publish = publish
        self._on_session_lost = on_session_lost
        self._on_new_session = on_new_session
        self._lock = threading.Lock()
        self._version = 0
        self._brokers: dict[int, BrokerInfo] = {}
        self._controller = -1
        self._topics: dict[str, _Topic] = {}
        self._broker_configs: dict[str, dict[str, str]] = {}  # /config/brokers/<entity>, the non-empty ones
        self._entity_configs: dict[str, dict[str, str]] = {}  # /config/<entity path> (users, clients), non-empty
        self._log_dir_events: set[str] = set()  # the /log_dir_event_notification children published
        # /kafka-acl... znodes with ACLs: their entries and mzxid.
        self._acls: dict[ResourcePattern, tuple[frozenset[AccessControlEntry], int]] = {}
        # The sequence number of the last change notification read, per notification root (_notifications).
        self._seen: dict[str, int] = {CONFIG_CHANGES: -1, ACL_CHANGES: -1, ACL_EXT_CHANGES: -1}
        self._queue: queue.Queue[tuple[Any, ...]] = queue.Queue()
        # zookeeper.max.in.flight.requests, as Kafka's ZooKeeperClient: pipelined requests wait for a permit,
        # released when ZooKeeper answers (on kazoo's callback thread, which never waits for one).
        self._in_flight = threading.BoundedSemaphore(max_in_flight)
        self._closed = False
        self._session_lost = False
        self._reader = threading.Thread(target=self._run_reader, name="zk-metadata-reader", daemon=True)

    def start(self) -> None:
        """Start the reader (after the first `reload`, which the caller runs on its own thread)."""
        self._reader.start()

    def stop(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(("stop",))
        if self._reader.is_alive():
            self._reader.join(10)

    @property
    def version(self) -> int:
        return self._version

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One pipelined kazoo request, within zookeeper.max.in.flight.requests."""
        self._in_flight.acquire()
        try:
            r = fn(*args, **kwargs)
        except BaseException:
            self._in_flight.release()
            raise
        r.rawlink(lambda _: self._in_flight.release())
        return r


    def snapshot(self) -> MetadataImage:
        with self._lock:
            return MetadataImage(self._version, self._cluster_id, self._brokers_tuple(), self._controller,
                                 {n: t.meta.copy() for n, t in self._topics.items()},
                                 {e: dict(c) for e, c in self._broker_configs.items()},
                                 {e: dict(c) for e, c in self._entity_configs.items()},
                                 acls={p: e for p, (e, _) in self._acls.items()})

    def _brokers_tuple(self) -> tuple[BrokerInfo, ...]:
        return tuple(sorted(self._brokers.values(), key=lambda b: b.broker_id))

    # --- the reader ----------------------------------------------------------------------
    def _on_watch(self, event: WatchedEvent) -> None:
        """kazoo's thread: only queue the path (a read on the reader thread follows)."""
        if event.path is not None and not self._closed:
            self._queue.put(("path", event.path))

    def on_session_state(self, state: str) -> None:
        """kazoo's thread: queue LOST and the CONNECTED after it; SUSPENDED changes nothing."""
        if state == KazooState.LOST:
            self._session_lost = True
            self._queue.put(("lost",))
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            self._queue.put(("restored",))
        elif state == KazooState.CONNECTED:  # the same session again: kazoo dropped every watch meanwhile
            self._queue.put(("resync",))

    def _run_reader(self) -> None:
        while True:
            batch = [self._queue.get()]
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if any(item[0] == "stop" for item in batch):
                for item in batch:
                    if item[0] == "sync":
                        item[1].set()
                return
            try:
                self._process(batch)
            except KazooException as e:  # connection loss mid-read: the same reads again once connected
                if self._closed:
                    return
                log.warning("reading ZooKeeper metadata failed (%s: %s); retrying", type(e).__name__, e)
                time.sleep(0.2)
                for item in batch:
                    if item[0] != "lost":  # published already (first, before any read)
                        self._queue.put(item)
            except Exception:  # a znode this code cannot parse: reported, not retried forever
                log.exception("could not apply ZooKeeper metadata changes %s", [i for i in batch if i[0] == "path"][:20])
                for item in batch:
                    if item[0] == "sync":
                        item[1].set()

    def _process(self, batch: list[tuple[Any, ...]]) -> None:
        paths: set[str] = set()
        syncs: list[threading.Event] = []
        if any(item[0] == "lost" for item in batch):  # first: nothing read in this batch can undo it
            self._on_session_lost()
            with self._lock:
                self._publish_locked(SESSION, session=SESSION_LOST)
            log.warning("ZooKeeper session expired: this broker is no longer registered")
        for item in batch:
            kind = item[0]
            if kind == "restored":
                self._restore()
            elif kind == "resync":
                self._resync()
            elif kind == "path":
                paths.add(item[1])
            elif kind == "sync":
                syncs.append(item[1])
                paths.update(item[2])
        self._read_paths(paths)
        for ev in syncs:
            ev.set()

    def _read_paths(self, paths: set[str]) -> None:
        """Turn changed paths into reads (all pipelined) and events."""
        if not paths:
            return
        if BROKER_IDS in paths or any(p.startswith(BROKER_IDS + "/") for p in paths) or CONTROLLER in paths:
            self._read_brokers()
        if CONFIG_CHANGES in paths:
            self._read_config_changes()
        if LOG_DIR_EVENTS in paths:
            self._read_log_dir_events()
        entity_paths = {p[len(CONFIG_ROOT) + 1:] for p in paths
                        if p.startswith((CONFIG_USERS + "/", CONFIG_CLIENTS + "/", CONFIG_GROUPS + "/"))}
        if entity_paths:
            self._read_entity_configs(entity_paths)
        if CONFIG_BROKERS in paths:
            self._read_broker_configs(None)
        else:
            entities = {p.split("/")[3] for p in paths if p.startswith(CONFIG_BROKERS + "/") and p.count("/") == 3}
            if entities:
                self._read_broker_configs(entities)
        for root in (ACL_CHANGES, ACL_EXT_CHANGES):
            if root in paths:
                self._read_acl_changes(root)
        acl_patterns = {ap for ap in map(acl_pattern_of, paths) if ap is not None}
        if acl_patterns:
            self._read_acls(acl_patterns)
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
            names = set(self._zk.get_children(TOPICS, watch=self._on_watch))
            with self._lock:
                gone = [n for n in self._topics if n not in names]
                full.update(n for n in names if n not in self._topics)
            for n in gone:
                self._topic_gone(n)
        self._read_topics(full)
        with self._lock:
            known = set(self._topics)
        configs -= full
        self._read_configs({n for n in configs if n in known})
        # A state or config of a topic not known yet: its topic's read (children watch) brings it.
        self._read_states({n: ps for n, ps in states.items() if n in known and n not in full})

    def _read_brokers(self) -> None:
        ids = self._zk.get_children(BROKER_IDS, watch=self._on_watch)
        reads = {int(i): self.call(self._zk.get_async, f"{BROKER_IDS}/{i}") for i in ids}
        ctl = self.call(self._zk.get_async, CONTROLLER, watch=self._on_watch)
        ex = self.call(self._zk.exists_async, CONTROLLER, watch=self._on_watch)  # a watch even while it is absent
        brokers: dict[int, BrokerInfo] = {}
        for bid, r in reads.items():
            try:
                data, stat = r.get()
            except NoNodeError:
                continue
            brokers[bid] = _parse_broker(bid, data, stat)
        try:
            controller = int(json.loads(ctl.get()[0])["brokerid"])
        except NoNodeError:
            controller = -1
        ex.get()
        with self._lock:
            if brokers != self._brokers or controller != self._controller:
                self._brokers, self._controller = brokers, controller
                self._publish_locked(BROKERS, brokers=self._brokers_tuple(), controller_id=controller)

    def _topic_gone(self, name: str) -> None:
        with self._lock:
            if self._topics.pop(name, None) is not None:
                self._publish_locked(DELETED, topic=name)

    def _read_topics(self, names: set[str]) -> None:
        """Whole topics (assignment, config, every state), pipelined; publishes CREATED or PARTITIONS."""
        if not names:
            return
        assign = {n: self.call(self._zk.get_async, _topic_path(n), watch=self._on_watch) for n in names}
        confs = {n: self.call(self._zk.get_async, f"{CONFIG_TOPICS}/{n}", watch=self._on_watch) for n in names}
        state_reads: dict[str, dict[int, Any]] = {}
        assignments: dict[str, tuple[uuid.UUID, dict[int, tuple[list[int], list[int], list[int]]], ZnodeStat]] = {}
        for n, r in assign.items():
            try:
                data, stat = r.get()
            except NoNodeError:
                self._topic_gone(n)
                continue
            tid, parts = _parse_assignment(data)
            assignments[n] = (tid, parts, stat)
            with self._lock:
                cur = self._topics.get(n)
                known = set(cur.meta.partitions) if cur is not None else set()
            state_reads[n] = {p: self.call(self._zk.get_async, _state_path(n, p), watch=self._on_watch)
                              for p in parts if p not in known}
        for n, (tid, parts, stat) in assignments.items():
            try:
                cdata, cstat = confs[n].get()
                configs, cmzxid = {str(k): str(v) for k, v in json.loads(cdata).get("config", {}).items()}, cstat.mzxid
            except NoNodeError:
                configs, cmzxid = {}, -1
            new_states: dict[int, tuple[PartitionState, int]] = {}
            missing: dict[int, tuple[list[int], list[int], list[int]]] = {}
            for p, r in state_reads[n].items():
                try:
                    sdata, sstat = r.get()
                except NoNodeError:  # written after its topic znode (a large creation): watched for
                    missing[p] = parts[p]
                    continue
                replicas, adding, removing = parts[p]
                new_states[p] = (_parse_state(sdata, sstat, replicas, adding, removing), sstat.mzxid)
            with self._lock:
                cur = self._topics.get(n)
                if cur is not None and cur.meta.topic_id != tid:  # deleted and created again in between
                    self._topics.pop(n)
                    self._publish_locked(DELETED, topic=n)
                    cur = None
                if cur is None:
                    meta = TopicMetadata(n, tid, {p: s for p, (s, _) in new_states.items()}, configs, n in INTERNAL_TOPICS)
                    self._topics[n] = _Topic(meta, missing, stat.mzxid, cmzxid, {p: z for p, (_, z) in new_states.items()})
                    self._publish_locked(CREATED, topic=n, snapshot=meta.copy())
                    self._watch_missing(n, missing)
                    continue
                cur.pending.update(missing)
                self._watch_missing(n, missing)
                changed = False
                if cmzxid != cur.config_mzxid:
                    cur.meta.configs, cur.config_mzxid = configs, cmzxid
                    self._publish_locked(CONFIGS, topic=n, snapshot=cur.meta.copy())
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
                    self._publish_locked(PARTITIONS, topic=n, snapshot=cur.meta.copy())

    def _watch_missing(self, name: str, missing: dict[int, Any]) -> None:
        """An exists watch on each missing state znode; one created meanwhile is queued for a read now."""
        checks = [(p, self.call(self._zk.exists_async, _state_path(name, p), watch=self._on_watch)) for p in missing]
        for p, r in checks:
            if r.get() is not None:
                self._queue.put(("path", _state_path(name, p)))

    def _read_configs(self, names: set[str]) -> None:
        reads = {n: self.call(self._zk.get_async, f"{CONFIG_TOPICS}/{n}", watch=self._on_watch) for n in names}
        for n, r in reads.items():
            try:
                data, stat = r.get()
                configs, mzxid = {str(k): str(v) for k, v in json.loads(data).get("config", {}).items()}, stat.mzxid
            except NoNodeError:
                configs, mzxid = {}, -1
            with self._lock:
                cur = self._topics.get(n)
                if cur is not None and mzxid != cur.config_mzxid:
                    cur.meta.configs, cur.config_mzxid = configs, mzxid
                    self._publish_locked(CONFIGS, topic=n, snapshot=cur.meta.copy())

    # --- Kafka's change notifications (ZkNodeChangeNotificationListener) ----------------------------------
    def _notifications(self, root: str, all_read: bool = False) -> list[tuple[str, bytes]]:
        """The sequential notifications under `root` (/config/changes, /kafka-acl-changes,
        /kafka-acl-extended-changes) newer than the last one read, oldest first, as (name, data); sets the
        children watch. With `all_read` (a full re-read of what they point to: start, new session,
        reconnection) every one is taken as read and none returned. Either way, as Kafka's listener does,
        the notifications older than CHANGE_EXPIRATION_MS (15 minutes: every broker read them long ago) are
        deleted; a broker that was away longer reads everything again on its new session."""
        prefix = NOTIFICATION_PREFIX[root]
        try:
            children = sorted((c for c in self._zk.get_children(root, watch=self._on_watch) if c.startswith(prefix)),
                              key=lambda c: _change_seq(c, prefix))
        except NoNodeError:
            children = []
        seen = self._seen[root]
        new = [] if all_read else [c for c in children if _change_seq(c, prefix) > seen]
        reads = {c: self.call(self._zk.get_async, f"{root}/{c}") for c in new}
        out: list[tuple[str, bytes]] = []
        for c, r in reads.items():
            try:
                out.append((c, r.get()[0]))
            except NoNodeError:  # purged meanwhile by another broker
                continue
        if children:
            self._seen[root] = max(seen, _change_seq(children[-1], prefix))
        self._purge_notifications(root, children)
        return out

    def _purge_notifications(self, root: str, children: list[str]) -> None:
        """Delete the expired notifications, oldest first: sequence order is creation order, so the first one
        younger than CHANGE_EXPIRATION_MS ends the walk (one read when nothing is due)."""
        now_ms = time.time() * 1000
        for c in children:
            try:
                st = self.call(self._zk.exists_async, f"{root}/{c}").get()
            except NoNodeError:
                continue
            if st is None:
                continue
            if now_ms - st.ctime <= CHANGE_EXPIRATION_MS:
                break
            self.call(self._zk.delete_async, f"{root}/{c}")  # another broker may win: errors ignored

    def _read_config_changes(self) -> None:
        """New /config/changes notifications: re-read each entity they name."""
        paths: set[str] = set()
        for _, data in self._notifications(CONFIG_CHANGES):
            try:
                path = str(json.loads(data).get("entity_path", ""))
            except (ValueError, AttributeError):  # not ours to read
                continue
            if path.startswith(("users/", "clients/", "groups/")):
                paths.add(path)
        if paths:
            self._read_entity_configs(paths)

    def _read_log_dir_events(self) -> None:
        """Log dir failure notifications (and the children watch): each new one published with its broker
        and partitions, each gone one (the controller handled it) published as gone."""
        children = {c for c in self._zk.get_children(LOG_DIR_EVENTS, watch=self._on_watch)
                    if c.startswith(LOG_DIR_EVENT_PREFIX)}
        new = sorted(children - self._log_dir_events)
        gone = sorted(self._log_dir_events - children)
        reads = [(c, self.call(self._zk.get_async, f"{LOG_DIR_EVENTS}/{c}")) for c in new]
        events: list[tuple[str, LogDirFailure | None]] = [(c, None) for c in gone]
        for c, r in reads:
            try:
                doc = json.loads(r.get()[0])
                failure = LogDirFailure(int(doc["broker"]), tuple((str(t), int(p)) for t, p in doc.get("partitions", ())))
            except NoNodeError:
                continue
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring the log dir event %s: not one this broker can read", c)
                continue
            events.append((c, failure))
        self._log_dir_events = children
        with self._lock:
            for c, failure in events:
                self._publish_locked(LOG_DIR_FAILURE, entity=c, log_dir_failure=failure)

    def _all_entity_paths(self) -> set[str]:
        out: set[str] = set()
        for kind, root in (("users", CONFIG_USERS), ("clients", CONFIG_CLIENTS), ("groups", CONFIG_GROUPS)):
            try:
                names = self._zk.get_children(root)
            except NoNodeError:
                continue
            for n in names:
                out.add(f"{kind}/{n}")
                if kind == "users":
                    try:
                        out.update(f"users/{n}/clients/{c}" for c in self._zk.get_children(f"{root}/{n}/clients"))
                    except NoNodeError:
                        pass
        return out

    def _read_entity_configs(self, paths: set[str] | None) -> None:
        """User/client configs at `paths` (entity paths), or all of them for None; publishes ENTITY_CONFIGS
        for each that changed (a removed or empty znode: no configs)."""
        if paths is None:
            paths = self._all_entity_paths()
            with self._lock:
                paths |= set(self._entity_configs)
            self._notifications(CONFIG_CHANGES, all_read=True)
        reads = {p: self.call(self._zk.get_async, f"{CONFIG_ROOT}/{p}") for p in paths}
        for p, r in reads.items():
            try:
                configs = {str(k): str(v) for k, v in (json.loads(r.get()[0] or b"{}").get("config") or {}).items()}
            except (NoNodeError, ValueError):
                configs = {}
            with self._lock:
                if configs != self._entity_configs.get(p, {}):
                    if configs:
                        self._entity_configs[p] = configs
                    else:
                        self._entity_configs.pop(p, None)
                    self._publish_locked(ENTITY_CONFIGS, entity=p, configs=dict(configs))

    def _read_broker_configs(self, entities: set[str] | None) -> None:
        """Dynamic broker configs: the named entities, or all of them (and the children watch) for None;
        publishes BROKER_CONFIGS for each that changed (a removed znode or an empty one: no configs)."""
        if entities is None:
            entities = set(self._zk.get_children(CONFIG_BROKERS, watch=self._on_watch))
            with self._lock:
                entities |= set(self._broker_configs)
        reads = {e: self.call(self._zk.get_async, f"{CONFIG_BROKERS}/{e}", watch=self._on_watch) for e in entities}
        for e, r in reads.items():
            try:
                configs = {str(k): str(v) for k, v in json.loads(r.get()[0]).get("config", {}).items()}
            except NoNodeError:
                configs = {}
            with self._lock:
                if configs != self._broker_configs.get(e, {}):
                    if configs:
                        self._broker_configs[e] = configs
                    else:
                        self._broker_configs.pop(e, None)
                    self._publish_locked(BROKER_CONFIGS, entity=e, configs=dict(configs))

    # --- ACLs: the znodes, found again through Kafka's change notifications ---------------------------
    def _read_all_acls(self) -> None:
        """Every ACL znode and the notification watches (start, new session, reconnection); publishes what
        changed. Notifications already there are taken as read (their patterns are read anyway) and the
        expired ones deleted."""
        patterns: set[ResourcePattern] = set()
        for root in (ACL_LITERAL, ACL_PREFIXED):
            types = self._zk.get_children(root)
            reads = {t: self.call(self._zk.get_children_async, f"{root}/{t}") for t in types}
            for t, r in reads.items():
                try:
                    names = r.get()
                except NoNodeError:
                    continue
                patterns.update(ap for ap in (acl_pattern_of(f"{root}/{t}/{n}") for n in names) if ap is not None)
        with self._lock:
            patterns |= set(self._acls)
        for root in (ACL_CHANGES, ACL_EXT_CHANGES):
            self._notifications(root, all_read=True)
        self._read_acls(patterns)

    def _read_acl_changes(self, root: str) -> None:
        """New notifications under `root`: the patterns they name are read again."""
        patterns: set[ResourcePattern] = set()
        for c, data in self._notifications(root):
            ap = parse_acl_change(root, data)
            if ap is None:
                log.warning("ignoring the unreadable ACL change notification %s/%s: %r", root, c, data[:200])
            else:
                patterns.add(ap)
        self._read_acls(patterns)

    def _read_acls(self, patterns: set[ResourcePattern]) -> None:
        """Read the patterns' znodes; publish ACLS for each whose ACLs changed (a removed znode: none left)."""
        reads = {ap: self.call(self._zk.get_async, acl_path(ap)) for ap in patterns}
        for ap, r in reads.items():
            try:
                data, stat = r.get()
                entries, mzxid = parse_acl_znode(data), stat.mzxid
            except NoNodeError:
                entries, mzxid = frozenset(), -1
            with self._lock:
                cur = self._acls.get(ap)
                if cur is None and not entries:
                    continue
                if cur is not None and mzxid != -1 and mzxid <= cur[1]:
                    continue  # not newer than what was published
                if entries:
                    self._acls[ap] = (entries, mzxid)
                else:
                    self._acls.pop(ap, None)
                self._publish_locked(ACLS, acl_pattern=ap, acls=entries)

    def _read_states(self, states: dict[str, set[int]]) -> None:
        reads = {(n, p): self.call(self._zk.get_async, _state_path(n, p), watch=self._on_watch)
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
        with self._lock:
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
                    self._publish_locked(PARTITIONS, topic=n, snapshot=self._topics[n].meta.copy())
                else:
                    self._publish_locked(STATE, topic=n, partitions=parts)

    def _publish_locked(self, kind: str, **fields: Any) -> None:
        self._version += 1
        self._publish(MetadataEvent(self._version, kind, **fields))

    def reload(self) -> None:
        """Read everything and set every watch: at start, and on a new session, where every topic is
        published again as read now (CREATED replaces a cached topic) and the ones gone as DELETED."""
        self._read_brokers()
        self._read_broker_configs(None)
        self._read_entity_configs(None)
        self._read_all_acls()
        self._read_log_dir_events()
        names = set(self._zk.get_children(TOPICS, watch=self._on_watch))
        with self._lock:
            old = set(self._topics)
            self._topics = {}
        self._read_topics(names)
        with self._lock:
            for n in sorted(old - set(self._topics)):
                self._publish_locked(DELETED, topic=n)

    def _resync(self) -> None:
        """After a disconnection of the same session: kazoo forgot every watch (it fires them with no path
        when the connection drops), and changes made meanwhile were never signalled. Everything is read
        again with its watch; only what changed is published (by mzxid), so nothing else moves."""
        self._read_brokers()
        self._read_broker_configs(None)
        self._read_entity_configs(None)
        self._read_all_acls()
        self._read_log_dir_events()
        names = set(self._zk.get_children(TOPICS, watch=self._on_watch))
        with self._lock:
            gone = [n for n in self._topics if n not in names]
            states = {n: set(t.meta.partitions) for n, t in self._topics.items() if n in names}
        for n in gone:
            self._topic_gone(n)
        self._read_topics(names)
        self._read_states(states)

    def _restore(self) -> None:
        """A new session: the store registers the broker again (a new broker epoch), then everything is
        re-read and published, then "restored"."""
        self._on_new_session()
        self.reload()
        with self._lock:
            self._publish_locked(SESSION, session=SESSION_RESTORED)
        log.info("ZooKeeper session re-established: broker registered again, metadata reloaded")

    def sync(self, paths: Sequence[str]) -> int:
        """Have the reader re-read `paths` (and anything queued before) and publish; returns the version after."""
        if threading.current_thread() is self._reader:
            self._read_paths(set(paths))
            return self._version
        done = threading.Event()
        self._queue.put(("sync", done, tuple(paths)))
        while not done.wait(0.5):
            if self._closed or not self._reader.is_alive():
                break
        return self._version


# The sequential notification roots a broker reads, with their znodes' name prefix.
NOTIFICATION_PREFIX = {CONFIG_CHANGES: CONFIG_CHANGE_PREFIX, ACL_CHANGES: ACL_CHANGE_PREFIX,
                       ACL_EXT_CHANGES: ACL_CHANGE_PREFIX}


def _change_seq(name: str, prefix: str) -> int:
    """acl_changes_0000000042 -> 42, config_change_0000000007 -> 7 (-1 for a name not of that form)."""
    tail = name[len(prefix):] if name.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else -1
