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

Code: the znodes' paths and JSON are zk_znodes.py; the image and the reader thread that keeps it from
watches are zk_watcher.py's ZooKeeperWatcher; this module's store writes and composes the watcher.

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
import json
import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError as ZkBadVersion,
)
from kazoo.exceptions import (
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat

from gregor.config import BrokerConfig
from gregor.metadata.store import (
    AddPartitions,
    AlterAcls,
    BadVersionError,
    BrokerInfo,
    Change,
    ControllerMovedError,
    CreateTopic,
    DeleteTopic,
    MetadataError,
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
from gregor.metadata.zk_watcher import ZooKeeperWatcher
from gregor.metadata.zk_znodes import (  # noqa: F401 - the layout's names are imported from here too
    BROKER_IDS,
    CLUSTER_ID,
    CONFIG_BROKERS,
    CONFIG_CHANGE_PREFIX,
    CONFIG_CHANGES,
    CONFIG_ROOT,
    CONFIG_TOPICS,
    CONTROLLER,
    CONTROLLER_EPOCH,
    INTERNAL_TOPICS,
    LOG_DIR_EVENT_PREFIX,
    LOG_DIR_EVENTS,
    PARTITIONS_PER_MULTI,
    PERSISTENT_PATHS,
    PRODUCER_ID_BLOCK,
    STATE_MULTI_CHUNK,
    TOPICS,
    _create_states,
    _dumps,
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
    parse_connect,
    state_znode,
    topic_znode,
)

log = logging.getLogger("gregor.metadata.zookeeper")

# Conditional ACL znode writes retried before a change is refused (each lost race means another broker's
# write landed, so this only runs out under a storm of concurrent CreateAcls/DeleteAcls on one pattern).
ACL_WRITE_ATTEMPTS = 20


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
        self._registration: BrokerInfo | None = None
        self._controller_epoch: tuple[int, int] | None = None  # (epoch, /controller_epoch zk version) we hold
        self._closed = False
        try:
            for path in PERSISTENT_PATHS:
                self._zk.ensure_path(path)
            self._cluster_id = self._ensure_cluster_id()
            self._watcher = ZooKeeperWatcher(self._zk, self._cluster_id, config.get("zookeeper.max.in.flight.requests"),
                                             self._publish, self._session_lost, self._new_session)
            self._watcher.reload()
        except BaseException:
            self._zk.stop()
            self._zk.close()
            raise
        self._zk.add_listener(self._watcher.on_session_state)
        self._watcher.start()

    def _ensure_cluster_id(self) -> str:
        """The first broker creates /cluster/id; a racing one reads the winner's."""
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        try:
            self._zk.create(CLUSTER_ID, _dumps({"version": "1", "id": cid}), makepath=True)
            return cid
        except NodeExistsError:
            data, _ = self._zk.get(CLUSTER_ID)
            return str(json.loads(data)["id"])

    # --- reads: the watcher's image ------------------------------------------------------
    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def version(self) -> int:
        return self._watcher.version

    @property
    def session_id(self) -> int:
        """The current ZooKeeper session's id (tests close it from another client to expire it)."""
        return int(self._zk.client_id[0]) if self._zk.client_id else 0

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        return self._zk.client_id

    def snapshot(self) -> MetadataImage:
        return self._watcher.snapshot()

    # --- session callbacks (on the watcher's reader thread) ----------------------------------
    def _session_lost(self) -> None:
        self._controller_epoch = None  # the /controller ephemeral went with the session

    def _new_session(self) -> None:
        reg = self._registration
        if reg is not None:
            try:
                self._create_registration(reg)
            except MetadataError as e:
                log.error("re-registering broker %d after the session expired failed: %s", reg.broker_id, e)

    # --- brokers -----------------------------------------------------------------------
    def register_broker(self, info: BrokerInfo) -> int:
        epoch = self._create_registration(info)
        self._registration = info
        self._watcher.sync([BROKER_IDS])
        return epoch

    def _create_registration(self, info: BrokerInfo) -> int:
        path = f"{BROKER_IDS}/{info.broker_id}"
        doc: dict[str, Any] = {
            "version": 5, "host": info.host, "port": info.port, "jmx_port": -1,
            "timestamp": str(int(time.time() * 1000)),
            "endpoints": [f"{n}://{h}:{p}" for n, h, p in info.endpoints] or [f"PLAINTEXT://{info.host}:{info.port}"],
            "listener_security_protocol_map": dict(info.protocols) or {"PLAINTEXT": "PLAINTEXT"},
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
        self._watcher.sync([BROKER_IDS])

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
                self._watcher.sync([CONTROLLER])
                return held[0] if held is not None and held[1] == broker_id else None
            if isinstance(results[1], ZkBadVersion):
                continue  # another broker bumped the epoch in between (and lost /controller since): retry
            _raise_first(results, "electing the controller")
            self._controller_epoch = (epoch, stat.version + 1)
            self._watcher.sync([CONTROLLER])
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
            self._watcher.sync([CONTROLLER])

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
            self._watcher.apply_states(written)  # re-arm them) find nothing newer by mzxid, under the same lock
        return results

    def _commit_states(self, updates: Sequence[StateUpdate], datas: list[bytes], idx: list[int],
                       check: int | None) -> Any:
        tx = self._zk.transaction()
        if check is not None:
            tx.check(CONTROLLER_EPOCH, check)
        for i in idx:
            u = updates[i]
            tx.set_data(_state_path(u.topic, u.partition), datas[i], version=u.expected_version)
        return self._watcher.call(tx.commit_async)

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
        version = self._watcher.sync(paths) if paths else self._watcher.version
        return [version if r is None else r for r in results]

    def _apply_one(self, ch: Change) -> list[str]:
        """Write one change; returns the paths the reader must re-read."""
        if isinstance(ch, SetEntityConfigs):
            path = f"{CONFIG_ROOT}/{ch.path}"
            data = config_znode(ch.configs)
            if ch.entity_type == "groups" and not ch.configs:
                try:  # a group's configs removed (DeleteGroups, or every config deleted): no znode is left behind
                    self._zk.delete(path)
                except NoNodeError:
                    pass
            else:
                try:
                    self._zk.set(path, data)
                except NoNodeError:
                    try:
                        self._zk.create(path, data, makepath=True)
                    except NodeExistsError:
                        self._zk.set(path, data)
            note = json.dumps({"version": 2, "entity_path": ch.path}).encode()
            # Deleted by the readers after 15 minutes (zk_watcher._notifications), as Kafka's brokers do.
            self._zk.create(f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}", note, sequence=True, makepath=True)
            return [path]
        if isinstance(ch, AlterAcls):
            return self._alter_acls(ch)
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

    def _alter_acls(self, ch: AlterAcls) -> list[str]:
        """Read-modify-write of one pattern's znode, conditional on its version (created if absent, deleted
        when empty), retried when another broker changed it meanwhile, as Kafka's AclAuthorizer does; then
        the change notification every broker watches."""
        path = acl_path(ch.pattern)
        for _ in range(ACL_WRITE_ATTEMPTS):
            try:
                data, stat = self._zk.get(path)
                cur, version = parse_acl_znode(data), stat.version
            except NoNodeError:
                cur, version = frozenset(), None
            new = (cur - ch.remove) | ch.add
            if new == cur:
                return [path]
            try:
                if version is None:
                    self._zk.create(path, acl_znode(new), makepath=True)
                elif new:
                    self._zk.set(path, acl_znode(new), version=version)
                else:
                    self._zk.delete(path, version=version)
                break
            except (NodeExistsError, ZkBadVersion, NoNodeError):
                continue  # lost a race with another writer: read again
        else:
            raise BadVersionError(f"the ACLs of {ch.pattern} kept changing")
        prefix, note = acl_change_notification(ch.pattern)
        self._zk.create(prefix, note, sequence=True, makepath=True)
        return [path]

    def _create_rest(self, name: str, items: list[tuple[int, PartitionState]]) -> None:
        """The partition states beyond the first multi (its size is bounded by jute.maxbuffer), pipelined.
        Readers that saw the assignment before them watch for their creation (see _read_topics)."""
        pending = []
        for i in range(0, len(items), PARTITIONS_PER_MULTI):
            tx = self._zk.transaction()
            _create_states(tx, name, items[i:i + PARTITIONS_PER_MULTI])
            pending.append(self._watcher.call(tx.commit_async))
        for r in pending:
            _raise_first(r.get(), f"creating the partition states of topic {name}")

    def _delete_partitions(self, path: str, parts: list[str]) -> None:
        pending = []
        for i in range(0, len(parts), PARTITIONS_PER_MULTI):
            tx = self._zk.transaction()
            for p in parts[i:i + PARTITIONS_PER_MULTI]:
                tx.delete(f"{path}/partitions/{p}/state")
                tx.delete(f"{path}/partitions/{p}")
            pending.append(self._watcher.call(tx.commit_async))
        for r in pending:
            r.get()  # a failure (deleted meanwhile) shows in the final multi, which is retried

    # --- log dir failures (JBOD) ----------------------------------------------------------------
    def notify_log_dir_failure(self, broker_id: int, partitions: Sequence[tuple[str, int]]) -> None:
        """Kafka's LogDirEventNotification: a sequential znode the controller watches (module zk_znodes)."""
        doc = _dumps({"version": 1, "broker": broker_id, "event": 1,
                      "partitions": [[t, p] for t, p in sorted(partitions)]})
        self._zk.create(f"{LOG_DIR_EVENTS}/{LOG_DIR_EVENT_PREFIX}", doc, sequence=True, makepath=True)

    def delete_log_dir_event(self, name: str) -> None:
        try:
            self._zk.delete(f"{LOG_DIR_EVENTS}/{name}")
        except NoNodeError:
            pass

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
        self._watcher.stop()
        try:
            self._zk.stop()
        finally:
            self._zk.close()
