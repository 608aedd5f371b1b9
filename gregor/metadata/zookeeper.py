"""The cluster's metadata store: Apache ZooKeeper (through kazoo), in Kafka's znode layout and JSON formats.

Znodes (under the `zookeeper.connect` chroot, created if missing, as Kafka does):
- /cluster/id                  {"version":"1","id":<22-char base64url>}, created by the first broker
- /brokers/ids/<id>            ephemeral {"version":5,"host","port","jmx_port":-1,"timestamp","endpoints",
                               "listener_security_protocol_map","rack"?}; the broker epoch is its czxid
- /controller                  ephemeral {"version":1,"brokerid","timestamp"}
- /controller_epoch            persistent, the epoch as text; created with the /controller znode in one multi
- /brokers/topics/<t>          {"version":3,"topic_id","partitions":{"0":[1,2]},"adding_replicas","removing_replicas"}
- /brokers/topics/<t>/partitions/<p>/state
                               {"controller_epoch","leader","version":1,"leader_epoch","isr","leader_recovery_state":0}
                               PartitionState.version is this znode's stat.version: writes are conditional on it
- /config/topics/<t>           {"version":1,"config":{...}}
- /config/brokers/<id>, /config/brokers/<default>   dynamic broker configs, same format (watched)
- /latest_producer_id_block    {"version":1,"broker","block_start":"n","block_end":"n"} (block_end inclusive)

Not written: /admin/delete_topics (a topic is deleted here at once, its znodes removed in one multi, and
every broker drops its replicas when the deletion event reaches it; Kafka's controller-driven two-phase
deletion is not needed without a controller-to-broker StopReplica), /config/changes notifications
(brokers watch /config/topics/<t> itself), /isr_change_notification (brokers watch the state znodes).

Events. ZooKeeper watches are one-shot and fire on kazoo's thread, where no broker code may run: each
firing only queues the path. ONE reader thread drains the queue, reads the current data (pipelined with
kazoo's async calls, re-arming the watches), compares it with its image (by the znodes' mzxid, so a
repeated read publishes nothing) and publishes MetadataEvents numbered by a local counter that only it
increments. Reads are serial on one session, and ZooKeeper answers a session's requests in order, so
each key's events never go backwards. Read-your-writes: every write method, once ZooKeeper acknowledged
it, queues a re-read of what it wrote with a barrier and waits for the reader, so the version it returns
holds the write (TopicAdmin waits on it: a client sees its own CreateTopics in Metadata at once).
Partition-state writes skip that second round: ZooKeeper's answer carries the new stat, so the writer
publishes the states it wrote itself, under the image's lock (which orders every publication), and the
watches' re-reads that follow find nothing newer by mzxid.

Pipelining: reads and multis are sent with kazoo's async calls, at most zookeeper.max.in.flight.requests
(Kafka's default 10) at a time, as Kafka's ZooKeeperClient does. kazoo's per-request cost (~0.3 ms of
Python) is what bounds throughput: a 1,000-partition topic loads in ~0.5-1 s, so a broker's start with
100,000 partitions would read for about a minute (every broker reads every state znode here, where a
Kafka broker had its controller's UpdateMetadata).

Session. SUSPENDED (disconnected, the session still alive) changes nothing: kazoo drops its watches
when the connection drops, so on reconnection the reader reads everything again with its watches and
publishes only what changed meanwhile. LOST (expired) publishes SESSION "lost": the
registration and any controllership are gone. When kazoo connects again it is with a new session: the
reader registers the broker again (a new epoch), re-reads everything, publishes the full picture and
then SESSION "restored".
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError as ZkBadVersion,
)
from kazoo.exceptions import (
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    ZookeeperError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import WatchedEvent, ZnodeStat

from gregor.config import BrokerConfig
from gregor.metadata.store import (
    BROKER_CONFIGS,
    BROKERS,
    CONFIGS,
    CREATED,
    DELETED,
    PARTITIONS,
    SESSION,
    SESSION_LOST,
    SESSION_RESTORED,
    STATE,
    AddPartitions,
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
    SetTopicConfigs,
    StateUpdate,
    TopicExistsError,
    TopicMetadata,
)

log = logging.getLogger("gregor.metadata.zookeeper")

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
BROKER_IDS, TOPICS, CONFIG_TOPICS = "/brokers/ids", "/brokers/topics", "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONTROLLER, CONTROLLER_EPOCH = "/controller", "/controller_epoch"
CLUSTER_ID, PRODUCER_ID_BLOCK = "/cluster/id", "/latest_producer_id_block"
PERSISTENT_PATHS = (BROKER_IDS, TOPICS, CONFIG_TOPICS, CONFIG_BROKERS, "/cluster")
# Partitions created or deleted per multi (~250 bytes each), so a request stays under ZooKeeper's 1 MB
# jute.maxbuffer, beyond which the server drops the connection.
PARTITIONS_PER_MULTI = 2000
# Partition-state writes per multi: ~150 bytes each, well under ZooKeeper's 1 MB request limit (jute.maxbuffer).
STATE_MULTI_CHUNK = 500


def _topic_path(t: str) -> str:
    return f"{TOPICS}/{t}"


def _state_path(t: str, p: int) -> str:
    return f"{TOPICS}/{t}/partitions/{p}/state"


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _topic_id_text(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: the 16 bytes in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def _topic_id_parse(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def topic_znode(t: TopicMetadata) -> bytes:
    parts = sorted(t.partitions.items())
    return _dumps({"version": 3, "topic_id": _topic_id_text(t.topic_id),
                   "partitions": {str(p): s.replicas for p, s in parts},
                   "adding_replicas": {str(p): s.adding_replicas for p, s in parts if s.adding_replicas},
                   "removing_replicas": {str(p): s.removing_replicas for p, s in parts if s.removing_replicas}})


def state_znode(s: PartitionState, controller_epoch: int | None = None) -> bytes:
    return _dumps({"controller_epoch": s.controller_epoch if controller_epoch is None else controller_epoch,
                   "leader": s.leader, "version": 1, "leader_epoch": s.leader_epoch, "isr": s.isr,
                   "leader_recovery_state": 0})


def config_znode(configs: dict[str, str]) -> bytes:
    return _dumps({"version": 1, "config": configs})


def _parse_assignment(data: bytes) -> tuple[uuid.UUID, dict[int, tuple[list[int], list[int], list[int]]]]:
    doc = json.loads(data)
    adding, removing = doc.get("adding_replicas") or {}, doc.get("removing_replicas") or {}
    tid = doc.get("topic_id")
    return (_topic_id_parse(tid) if tid else uuid.UUID(int=0),
            {int(p): (list(r), list(adding.get(p, [])), list(removing.get(p, []))) for p, r in doc["partitions"].items()})


def parse_connect(connect: str) -> tuple[str, str]:
    """'h1:p1,h2:p2/chroot' -> ('h1:p1,h2:p2', '/chroot' or '')."""
    hosts, slash, chroot = connect.partition("/")
    chroot = ("/" + chroot).rstrip("/") if slash else ""
    return hosts, chroot


@dataclasses.dataclass
class _Topic:
    """The reader's image of one topic with the znode versions that built it."""

    meta: TopicMetadata
    # Partitions in the assignment whose state znode did not exist yet when read (a creation larger than
    # one multi writes them after the topic znode): an exists watch brings each in once it does.
    pending: dict[int, tuple[list[int], list[int], list[int]]] = dataclasses.field(default_factory=dict)
    assignment_mzxid: int = -1
    config_mzxid: int = -1
    state_mzxid: dict[int, int] = dataclasses.field(default_factory=dict)


class ZooKeeperMetadataStore(MetadataStore):
    """The MetadataStore contract on ZooKeeper; see the module doc for the layout, events and session."""

    def __init__(self, config: BrokerConfig) -> None:
        """Connects (a clear error naming the address if ZooKeeper cannot be reached within
        zookeeper.connection.timeout.ms), creates the chroot, the persistent paths and /cluster/id if
        missing, reads everything with its watches, then starts the reader."""
        super().__init__()
        connect: str = config.get("zookeeper.connect") or ""
        broker_id = config.broker_id
        session_timeout_ms: int = config.get("zookeeper.session.timeout.ms")
        connection_timeout_ms: int | None = config.get("zookeeper.connection.timeout.ms")
        self._connect = connect
        self._broker_id = broker_id
        hosts, self._chroot = parse_connect(connect)
        if not hosts:
            raise MetadataError(f"zookeeper.connect {connect!r} names no server")
        self._zk = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000.0)
        self._session_timeout_s = session_timeout_ms / 1000.0
        timeout_s = (connection_timeout_ms or session_timeout_ms) / 1000.0
        try:
            self._zk.start(timeout=timeout_s)
        except KazooTimeoutError:
            self._zk.stop()
            self._zk.close()
            raise MetadataError(f"cannot connect to ZooKeeper at {hosts} within {timeout_s:g} s "
                                f"(zookeeper.connect={connect}, zookeeper.connection.timeout.ms)") from None
        if self._chroot:  # Kafka creates its chroot; kazoo cannot while it is its root, so it is set after
            self._zk.ensure_path(self._chroot)
            self._zk.chroot = self._chroot
        self._lock = threading.Lock()  # the image below (the reader writes it, snapshot() copies it)
        self._version = 0
        self._brokers: dict[int, BrokerInfo] = {}
        self._controller = -1
        self._topics: dict[str, _Topic] = {}
        self._broker_configs: dict[str, dict[str, str]] = {}  # /config/brokers/<entity>, the non-empty ones
        self._registration: BrokerInfo | None = None
        self._controller_epoch: tuple[int, int] | None = None  # (epoch, /controller_epoch zk version) we hold
        self._queue: queue.Queue[tuple[Any, ...]] = queue.Queue()
        # zookeeper.max.in.flight.requests, as Kafka's ZooKeeperClient: pipelined requests wait for a permit,
        # released when ZooKeeper answers (on kazoo's callback thread, which never waits for one).
        self._in_flight = threading.BoundedSemaphore(config.get("zookeeper.max.in.flight.requests"))
        self._closed = False
        self._session_lost = False
        try:
            for path in PERSISTENT_PATHS:
                self._zk.ensure_path(path)
            self._cluster_id = self._ensure_cluster_id()
            self._reload()
        except BaseException:
            self._zk.stop()
            self._zk.close()
            raise
        self._zk.add_listener(self._on_session_state)
        self._reader = threading.Thread(target=self._run_reader, name="zk-metadata-reader", daemon=True)
        self._reader.start()

    def _ensure_cluster_id(self) -> str:
        """The first broker creates /cluster/id; a racing one reads the winner's."""
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        try:
            self._zk.create(CLUSTER_ID, _dumps({"version": "1", "id": cid}), makepath=True)
            return cid
        except NodeExistsError:
            data, _ = self._zk.get(CLUSTER_ID)
            return str(json.loads(data)["id"])

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One pipelined kazoo request, within zookeeper.max.in.flight.requests."""
        self._in_flight.acquire()
        try:
            r = fn(*args, **kwargs)
        except BaseException:
            self._in_flight.release()
            raise
        r.rawlink(lambda _: self._in_flight.release())
        return r

    # --- reads -------------------------------------------------------------------------
    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def version(self) -> int:
        return self._version

    @property
    def session_id(self) -> int:
        """The current ZooKeeper session's id (tests close it from another client to expire it)."""
        return int(self._zk.client_id[0]) if self._zk.client_id else 0

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        return self._zk.client_id

    def snapshot(self) -> MetadataImage:
        with self._lock:
            return MetadataImage(self._version, self._cluster_id, self._brokers_tuple(), self._controller,
                                 {n: t.meta.copy() for n, t in self._topics.items()},
                                 {e: dict(c) for e, c in self._broker_configs.items()})

    def _brokers_tuple(self) -> tuple[BrokerInfo, ...]:
        return tuple(sorted(self._brokers.values(), key=lambda b: b.broker_id))

    # --- the reader ----------------------------------------------------------------------
    def _on_watch(self, event: WatchedEvent) -> None:
        """kazoo's thread: only queue the path (a read on the reader thread follows)."""
        if event.path is not None and not self._closed:
            self._queue.put(("path", event.path))

    def _on_session_state(self, state: str) -> None:
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
            with self._lock:
                self._controller_epoch = None
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
        if CONFIG_BROKERS in paths:
            self._read_broker_configs(None)
        else:
            entities = {p.split("/")[3] for p in paths if p.startswith(CONFIG_BROKERS + "/") and p.count("/") == 3}
            if entities:
                self._read_broker_configs(entities)
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
        reads = {int(i): self._call(self._zk.get_async, f"{BROKER_IDS}/{i}") for i in ids}
        ctl = self._call(self._zk.get_async, CONTROLLER, watch=self._on_watch)
        ex = self._call(self._zk.exists_async, CONTROLLER, watch=self._on_watch)  # a watch even while it is absent
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
        assign = {n: self._call(self._zk.get_async, _topic_path(n), watch=self._on_watch) for n in names}
        confs = {n: self._call(self._zk.get_async, f"{CONFIG_TOPICS}/{n}", watch=self._on_watch) for n in names}
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
            state_reads[n] = {p: self._call(self._zk.get_async, _state_path(n, p), watch=self._on_watch)
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
        checks = [(p, self._call(self._zk.exists_async, _state_path(name, p), watch=self._on_watch)) for p in missing]
        for p, r in checks:
            if r.get() is not None:
                self._queue.put(("path", _state_path(name, p)))

    def _read_configs(self, names: set[str]) -> None:
        reads = {n: self._call(self._zk.get_async, f"{CONFIG_TOPICS}/{n}", watch=self._on_watch) for n in names}
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

    def _read_broker_configs(self, entities: set[str] | None) -> None:
        """Dynamic broker configs: the named entities, or all of them (and the children watch) for None;
        publishes BROKER_CONFIGS for each that changed (a removed znode or an empty one: no configs)."""
        if entities is None:
            entities = set(self._zk.get_children(CONFIG_BROKERS, watch=self._on_watch))
            with self._lock:
                entities |= set(self._broker_configs)
        reads = {e: self._call(self._zk.get_async, f"{CONFIG_BROKERS}/{e}", watch=self._on_watch) for e in entities}
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

    def _read_states(self, states: dict[str, set[int]]) -> None:
        reads = {(n, p): self._call(self._zk.get_async, _state_path(n, p), watch=self._on_watch)
                 for n, ps in states.items() for p in ps}
        results = {}
        for key, r in reads.items():
            try:
                results[key] = r.get()
            except NoNodeError:
                continue
        self._apply_states(results)

    def _apply_states(self, results: dict[tuple[str, int], tuple[bytes, ZnodeStat]]) -> None:
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

    def _reload(self) -> None:
        """Read everything and set every watch: at start, and on a new session, where every topic is
        published again as read now (CREATED replaces a cached topic) and the ones gone as DELETED."""
        self._read_brokers()
        self._read_broker_configs(None)
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
        names = set(self._zk.get_children(TOPICS, watch=self._on_watch))
        with self._lock:
            gone = [n for n in self._topics if n not in names]
            states = {n: set(t.meta.partitions) for n, t in self._topics.items() if n in names}
        for n in gone:
            self._topic_gone(n)
        self._read_topics(names)
        self._read_states(states)

    def _restore(self) -> None:
        """A new session: register again (a new broker epoch), re-read everything, publish, then "restored"."""
        reg = self._registration
        if reg is not None:
            try:
                self._create_registration(reg)
            except MetadataError as e:
                log.error("re-registering broker %d after the session expired failed: %s", reg.broker_id, e)
        self._reload()
        with self._lock:
            self._publish_locked(SESSION, session=SESSION_RESTORED)
        log.info("ZooKeeper session re-established: broker registered again, metadata reloaded")

    def _sync(self, paths: Sequence[str]) -> int:
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

    # --- brokers -----------------------------------------------------------------------
    def register_broker(self, info: BrokerInfo) -> int:
        epoch = self._create_registration(info)
        self._registration = info
        self._sync([BROKER_IDS])
        return epoch

    def _create_registration(self, info: BrokerInfo) -> int:
        path = f"{BROKER_IDS}/{info.broker_id}"
        doc: dict[str, Any] = {
            "version": 5, "host": info.host, "port": info.port, "jmx_port": -1,
            "timestamp": str(int(time.time() * 1000)),
            "endpoints": [f"PLAINTEXT://{info.host}:{info.port}"],
            "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
        }
        if info.rack is not None:
            doc["rack"] = info.rack
        try:
            self._zk.create(path, _dumps(doc), ephemeral=True, makepath=True)
        except NodeExistsError:
            try:
                _, stat = self._zk.get(path)
            except NoNodeError:  # gone meanwhile: try once more
                return self._create_registration(info)
            if stat.ephemeralOwner != self.session_id and self._wait_for_expiry(path, stat.ephemeralOwner):
                return self._create_registration(info)
            if stat.ephemeralOwner != self.session_id:
                raise MetadataError(
                    f"broker id {info.broker_id} is already registered in ZooKeeper at {self._connect} "
                    f"({path}, by another live session): broker.id must be unique in a cluster") from None
            return int(stat.czxid)
        _, stat = self._zk.get(path)
        return int(stat.czxid)

    def _wait_for_expiry(self, path: str, owner: int) -> bool:
        """A registration of our id held by another session: after a kill -9 and a quick restart it is our
        previous incarnation's, gone once ZooKeeper expires that session. Wait for that, up to 1.5 session
        timeouts plus 2 s (Kafka refuses to start at once; a restart after a crash should just work). True
        if the znode went away; a live duplicate broker keeps it, and the caller reports that."""
        deadline = time.monotonic() + 1.5 * self._session_timeout_s + 2.0
        log.warning("%s is held by another ZooKeeper session (0x%x), probably this broker's before a crash: waiting "
                    "up to %.1f s for it to expire", path, owner, deadline - time.monotonic())
        while time.monotonic() < deadline:
            try:
                _, stat = self._zk.get(path)
            except NoNodeError:
                return True
            if stat.ephemeralOwner != owner:
                return False
            time.sleep(0.1)
        return False

    def unregister_broker(self, broker_id: int) -> None:
        self._registration = None if broker_id == self._broker_id else self._registration
        try:
            self._zk.delete(f"{BROKER_IDS}/{broker_id}")
        except NoNodeError:
            return
        self._sync([BROKER_IDS])

    # --- the controller ------------------------------------------------------------------
    def elect_controller(self, broker_id: int) -> int | None:
        """Kafka's registerControllerAndIncrementControllerEpoch: create /controller and bump
        /controller_epoch in one multi, conditional on the epoch's version."""
        try:
            self._zk.create(CONTROLLER_EPOCH, b"0")
        except NodeExistsError:
            pass
        while True:
            data, stat = self._zk.get(CONTROLLER_EPOCH)
            epoch = int(data) + 1
            tx = self._zk.transaction()
            tx.create(CONTROLLER, _dumps({"version": 1, "brokerid": broker_id,
                                          "timestamp": str(int(time.time() * 1000))}), ephemeral=True)
            tx.set_data(CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)
            results = tx.commit()
            if isinstance(results[0], NodeExistsError):
                held = self._controller_held()
                self._sync([CONTROLLER])
                return held[0] if held is not None and held[1] == broker_id else None
            if isinstance(results[1], ZkBadVersion):
                continue  # another broker bumped the epoch in between (and lost /controller since): retry
            _raise_first(results, "electing the controller")
            self._controller_epoch = (epoch, stat.version + 1)
            self._sync([CONTROLLER])
            return epoch

    def _controller_held(self) -> tuple[int, int] | None:
        """(our epoch, broker id) when this session holds /controller at the epoch we elected."""
        try:
            data, stat = self._zk.get(CONTROLLER)
        except NoNodeError:
            return None
        if stat.ephemeralOwner != self.session_id or self._controller_epoch is None:
            return None
        return self._controller_epoch[0], int(json.loads(data)["brokerid"])

    def resign_controller(self, broker_id: int, controller_epoch: int) -> None:
        held = self._controller_held()
        if held is None or held != (controller_epoch, broker_id) or self._controller_epoch is None:
            return
        tx = self._zk.transaction()
        tx.check(CONTROLLER_EPOCH, self._controller_epoch[1])
        tx.delete(CONTROLLER)
        results = tx.commit()
        self._controller_epoch = None
        if not any(isinstance(r, Exception) for r in results):
            self._sync([CONTROLLER])

    # --- partition states ----------------------------------------------------------------
    def update_partition_states(self, updates: Sequence[StateUpdate],
                                controller_epoch: int | None = None) -> list[int | MetadataError]:
        """Each update on its own, written optimistically in chunks: one multi per STATE_MULTI_CHUNK updates
        (fenced: one check of /controller_epoch at the version read at election, then the conditional sets),
        every chunk sent before any answer is awaited. ZooKeeper applies a multi whole or not at all, so a
        chunk that fails changed nothing: its updates are then sent again one multi each, and only the ones
        that lose their own race fail. A controller's 1,000-partition batch thus costs a couple of round
        trips, not 1,000 (kazoo's per-request overhead, ~0.3 ms, dominated that)."""
        fence = self._controller_epoch
        if controller_epoch is not None and (fence is None or fence[0] != controller_epoch):
            return [ControllerMovedError(f"controller epoch {controller_epoch} is not this broker's "
                                         f"({fence[0] if fence else 'none'})") for _ in updates]
        check = fence[1] if controller_epoch is not None and fence is not None else None
        datas = [state_znode(u.state, controller_epoch) for u in updates]
        chunks = [list(range(i, min(i + STATE_MULTI_CHUNK, len(updates))))
                  for i in range(0, len(updates), STATE_MULTI_CHUNK)]
        sent = [(idx, self._commit_states(updates, datas, idx, check)) for idx in chunks]
        out: list[int | MetadataError | None] = [None] * len(updates)
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
        written: dict[tuple[str, int], tuple[bytes, ZnodeStat]] = {}
        results: list[int | MetadataError] = []
        for i, (u, r) in enumerate(zip(updates, out, strict=True)):
            if isinstance(r, ZnodeStat):
                written[(u.topic, u.partition)] = (datas[i], r)
                results.append(int(r.version))
            else:
                assert r is not None
                results.append(r)  # type: ignore[arg-type]
        if written:  # what ZooKeeper acknowledged, published now as if read: the watches' re-reads (which
            self._apply_states(written)  # re-arm them) find nothing newer by mzxid, under the same lock
        return results

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

    # --- topics --------------------------------------------------------------------------
    def apply(self, changes: Sequence[Change]) -> list[int | MetadataError]:
        """The writes one by one, then one re-read of everything they touched: every successful change
        gets the version after that read, which holds them all."""
        results: list[int | MetadataError | None] = []
        paths: list[str] = []
        for ch in changes:
            try:
                paths.extend(self._apply_one(ch))
                results.append(None)
            except MetadataError as e:
                results.append(e)
        version = self._sync(paths) if paths else self._version
        return [version if r is None else r for r in results]

    def _apply_one(self, ch: Change) -> list[str]:
        """Write one change; returns the paths the reader must re-read."""
        if isinstance(ch, SetBrokerConfigs):
            path = f"{CONFIG_BROKERS}/{ch.entity}"
            try:
                self._zk.set(path, config_znode(ch.configs))
            except NoNodeError:
                try:
                    self._zk.create(path, config_znode(ch.configs))
                except NodeExistsError:  # created meanwhile by another broker: ours is the later write
                    self._zk.set(path, config_znode(ch.configs))
            return [CONFIG_BROKERS, path]
        if isinstance(ch, CreateTopic):
            t = ch.topic
            tx = self._zk.transaction()
            tx.create(_topic_path(t.name), topic_znode(t))
            tx.create(f"{_topic_path(t.name)}/partitions", b"")
            items = sorted(t.partitions.items())
            _create_states(tx, t.name, items[:PARTITIONS_PER_MULTI])
            config_path = f"{CONFIG_TOPICS}/{t.name}"
            if self._zk.exists(config_path) is not None:  # left by a deletion Kafka-style: replaced
                tx.set_data(config_path, config_znode(t.configs))
            else:
                tx.create(config_path, config_znode(t.configs))
            results = tx.commit()
            if isinstance(results[0], NodeExistsError):
                raise TopicExistsError(t.name)
            _raise_first(results, f"creating topic {t.name}")
            self._create_rest(t.name, items[PARTITIONS_PER_MULTI:])
            return [_topic_path(t.name)]
        path = _topic_path(ch.name)
        if isinstance(ch, DeleteTopic):
            for _ in range(10):
                try:
                    parts = self._zk.get_children(f"{path}/partitions")
                except NoNodeError:
                    parts = []
                    if self._zk.exists(path) is None:
                        raise NoSuchTopicError(ch.name) from None
                if len(parts) > PARTITIONS_PER_MULTI:  # beyond one request's size: the partitions first
                    self._delete_partitions(path, parts[PARTITIONS_PER_MULTI:])
                    parts = parts[:PARTITIONS_PER_MULTI]
                tx = self._zk.transaction()
                for p in parts:
                    tx.delete(f"{path}/partitions/{p}/state")
                    tx.delete(f"{path}/partitions/{p}")
                if self._zk.exists(f"{path}/partitions") is not None:
                    tx.delete(f"{path}/partitions")
                tx.delete(path)
                if self._zk.exists(f"{CONFIG_TOPICS}/{ch.name}") is not None:
                    tx.delete(f"{CONFIG_TOPICS}/{ch.name}")
                results = tx.commit()
                if not any(isinstance(r, Exception) for r in results):
                    return [TOPICS]
                if any(isinstance(r, NotEmptyError | NoNodeError) for r in results):
                    continue  # partitions added, or the topic deleted, meanwhile: look again
                _raise_first(results, f"deleting topic {ch.name}")
            raise MetadataError(f"deleting topic {ch.name}: it kept changing")
        try:
            data, stat = self._zk.get(path)
        except NoNodeError:
            raise NoSuchTopicError(ch.name) from None
        tid, parts = _parse_assignment(data)
        if isinstance(ch, SetTopicConfigs):
            tx = self._zk.transaction()
            tx.check(path, -1)
            config_path = f"{CONFIG_TOPICS}/{ch.name}"
            if self._zk.exists(config_path) is not None:
                tx.set_data(config_path, config_znode(ch.configs))
            else:
                tx.create(config_path, config_znode(ch.configs))
            results = tx.commit()
            if isinstance(results[0], NoNodeError):
                raise NoSuchTopicError(ch.name)
            _raise_first(results, f"setting configs of topic {ch.name}")
            return [config_path]
        meta = TopicMetadata(ch.name, tid, {p: PartitionState(r, -1, adding_replicas=a, removing_replicas=rm)
                                            for p, (r, a, rm) in parts.items()})
        tx = self._zk.transaction()
        if isinstance(ch, AddPartitions):
            if any(p in parts for p in ch.partitions):
                raise BadVersionError(f"{ch.name} has {len(parts)} partitions now")
            meta.partitions.update(ch.partitions)
            tx.set_data(path, topic_znode(meta), version=stat.version)
            added = sorted(ch.partitions.items())
            _create_states(tx, ch.name, added[:PARTITIONS_PER_MULTI])
        elif isinstance(ch, ReassignPartitions):
            missing = [p for p in ch.partitions if p not in parts]
            if missing:
                raise NoSuchTopicError(f"{ch.name} has no partitions {missing}")
            for p, s in ch.partitions.items():
                cur = meta.partitions[p]
                cur.replicas, cur.adding_replicas, cur.removing_replicas = (
                    list(s.replicas), list(s.adding_replicas), list(s.removing_replicas))
            tx.set_data(path, topic_znode(meta), version=stat.version)
        else:
            raise MetadataError(f"unknown change {ch!r}")
        results = tx.commit()
        if isinstance(results[0], ZkBadVersion):
            raise BadVersionError(f"{ch.name}: the topic's assignment changed meanwhile")
        if isinstance(results[0], NoNodeError):
            raise NoSuchTopicError(ch.name)
        _raise_first(results, f"changing topic {ch.name}")
        if isinstance(ch, AddPartitions):
            self._create_rest(ch.name, added[PARTITIONS_PER_MULTI:])
        return [path]

    def _create_rest(self, name: str, items: list[tuple[int, PartitionState]]) -> None:
        """The partition states beyond the first multi (its size is bounded by jute.maxbuffer), pipelined.
        Readers that saw the assignment before them watch for their creation (see _read_topics)."""
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
            for p in parts[i:i + PARTITIONS_PER_MULTI]:
                tx.delete(f"{path}/partitions/{p}/state")
                tx.delete(f"{path}/partitions/{p}")
            pending.append(self._call(tx.commit_async))
        for r in pending:
            r.get()  # a failure (deleted meanwhile) shows in the final multi, which is retried

    # --- producer ids ----------------------------------------------------------------------
    def allocate_producer_ids(self, block_size: int) -> tuple[int, int]:
        """Kafka's ZooKeeper-mode ProducerIdManager: a conditional update loop on /latest_producer_id_block."""
        if block_size <= 0:
            raise ValueError(f"producer id block size {block_size} must be positive")
        while True:
            try:
                data, stat = self._zk.get(PRODUCER_ID_BLOCK)
            except NoNodeError:
                data, stat = b"", None
            first = int(json.loads(data)["block_end"]) + 1 if data else 0
            if first > 2**63 - 1 - block_size:
                raise MetadataError("producer ids are exhausted")
            doc = _dumps({"version": 1, "broker": self._broker_id, "block_start": str(first),
                          "block_end": str(first + block_size - 1)})
            try:
                if stat is None:
                    self._zk.create(PRODUCER_ID_BLOCK, doc)
                else:
                    self._zk.set(PRODUCER_ID_BLOCK, doc, version=stat.version)
            except (NodeExistsError, ZkBadVersion):
                continue  # another broker took a block meanwhile
            return first, block_size

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(("stop",))
        self._reader.join(10)
        try:
            self._zk.stop()
        finally:
            self._zk.close()


def _parse_broker(bid: int, data: bytes, stat: ZnodeStat) -> BrokerInfo:
    doc = json.loads(data)
    host, port = doc.get("host"), doc.get("port")
    for ep in doc.get("endpoints") or []:  # Kafka's v2+ registrations may leave host/port empty
        if ep.startswith("PLAINTEXT://"):
            h, _, p = ep[len("PLAINTEXT://"):].rpartition(":")
            host, port = h, int(p)
            break
    return BrokerInfo(bid, str(host), int(port), doc.get("rack"), int(stat.czxid))


def _parse_state(data: bytes, stat: ZnodeStat, replicas: list[int], adding: list[int],
                 removing: list[int]) -> PartitionState:
    doc = json.loads(data)
    return PartitionState(list(replicas), int(doc["leader"]), int(doc["leader_epoch"]), list(doc["isr"]),
                          int(doc["controller_epoch"]), int(stat.version), list(adding), list(removing))


def _create_states(tx: Any, name: str, items: list[tuple[int, PartitionState]]) -> None:
    for p, s in items:
        tx.create(f"{_topic_path(name)}/partitions/{p}", b"")
        tx.create(_state_path(name, p), state_znode(s))


def _failed(r: Any) -> bool:
    return isinstance(r, Exception) and not isinstance(r, RolledBackError)


def _raise_first(results: list[Any], what: str) -> None:
    """A multi's first real failure (the others are RolledBackError) as a MetadataError."""
    for r in results:
        if isinstance(r, Exception) and not isinstance(r, RolledBackError):
            if isinstance(r, ZookeeperError | KazooException):
                raise MetadataError(f"{what}: ZooKeeper answered {type(r).__name__}")
            raise MetadataError(f"{what}: {r}")
