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
watches are zk_watcher.py's ZooKeeperWatcher (topics read by zk_topic_reader.py, configs, ACLs and
notifications by zk_config_reader.py); a change is decided by gregor.metadata.applier, as in every store,
against the znodes it reads, and written by zk_writer.py's ZooKeeperWriter, conditional on the versions
read; this module's store holds the session, the registration and the controllership, and composes them.

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
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError as ZkBadVersion
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat

from gregor.configdef import Settings, setting
from gregor.metadata.applier import decide
from gregor.metadata.store import (
    AlterAcls,
    BadVersionError,
    BrokerInfo,
    Change,
    ControllerMovedError,
    MetadataError,
    MetadataImage,
    MetadataStore,
    StateUpdate,
)
from gregor.metadata.zk_watcher import ZooKeeperWatcher
from gregor.metadata.zk_writer import AclRaceLost, ZnodeReads, ZooKeeperWriter
from gregor.metadata.zk_znodes import (
    BROKER_IDS,
    CLUSTER_ID,
    CONTROLLER,
    CONTROLLER_EPOCH,
    LOG_DIR_EVENT_PREFIX,
    LOG_DIR_EVENTS,
    PERSISTENT_PATHS,
    PRODUCER_ID_BLOCK,
    _dumps,
    _raise_first,
    next_producer_id,
    parse_connect,
    state_znode,
)

__all__ = ["ZooKeeperMetadataStore", "ZooKeeperSettings", "parse_connect"]

log = logging.getLogger("gregor.metadata.zookeeper")

# Conditional ACL znode writes retried before a change is refused (each lost race means another broker's
# write landed, so this only runs out under a storm of concurrent CreateAcls/DeleteAcls on one pattern).
ACL_WRITE_ATTEMPTS = 20


@dataclass(frozen=True, slots=True)
class ZooKeeperSettings(Settings):
    broker_id: int = setting("broker.id")
    connect: str | None = setting("zookeeper.connect")
    session_timeout_ms: int = setting("zookeeper.session.timeout.ms")
    connection_timeout_ms: int | None = setting("zookeeper.connection.timeout.ms")
    max_in_flight_requests: int = setting("zookeeper.max.in.flight.requests")


class ZooKeeperMetadataStore(MetadataStore):
    """The MetadataStore contract on ZooKeeper: the session, this broker's registration and the
    controllership; the image and events are the watcher's, the znode writes the writer's. See the module
    doc for the layout, events and session."""

    def __init__(self, settings: ZooKeeperSettings) -> None:
        """Connects (a clear error naming the address if ZooKeeper cannot be reached within
        zookeeper.connection.timeout.ms), creates the chroot, the persistent paths and /cluster/id if
        missing, reads everything with its watches, then starts the reader."""
        super().__init__()
        connect = settings.connect or ""
        session_timeout_ms = settings.session_timeout_ms
        self._connect = connect
        self._broker_id = settings.broker_id
        hosts, self._chroot = parse_connect(connect)
        if not hosts:
            raise MetadataError(f"zookeeper.connect {connect!r} names no server")
        self._zk = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000.0)
        self._session_timeout_s = session_timeout_ms / 1000.0
        timeout_s = (settings.connection_timeout_ms or session_timeout_ms) / 1000.0
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
            self._watcher = ZooKeeperWatcher(self._zk, self._cluster_id, settings.max_in_flight_requests,
                                             self._publish, self._session_lost, self._new_session)
            self._watcher.reload()
        except BaseException:
            self._zk.stop()
            self._zk.close()
            raise
        self._writer = ZooKeeperWriter(self._zk, self._watcher.call)
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
        """Conditional writes in pipelined multis (ZooKeeperWriter.write_states), fenced by one check of
        /controller_epoch at the version read at election when `controller_epoch` is given."""
        fence = self._controller_epoch
        if controller_epoch is not None and (fence is None or fence[0] != controller_epoch):
            return [ControllerMovedError(f"controller epoch {controller_epoch} is not this broker's "
                                         f"({fence[0] if fence else 'none'})") for _ in updates]
        check = fence[1] if controller_epoch is not None and fence is not None else None
        datas = [state_znode(u.state, controller_epoch) for u in updates]
        out = self._writer.write_states(updates, datas, controller_epoch, check)
        written: dict[tuple[str, int], tuple[bytes, ZnodeStat]] = {}
        results: list[int | MetadataError] = []
        for i, (u, r) in enumerate(zip(updates, out, strict=True)):
            if isinstance(r, MetadataError):
                results.append(r)
            else:
                written[(u.topic, u.partition)] = (datas[i], r)
                results.append(int(r.version))
        if written:  # what ZooKeeper acknowledged, published now as if read: the watches' re-reads (which
            self._watcher.apply_states(written)  # re-arm them) find nothing newer by mzxid, under the same lock
        return results

    # --- changes ---------------------------------------------------------------------------
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
        """Decide the change against the znodes as read now and write it conditional on their versions;
        returns the paths the reader must re-read. An ACL change that lost a race to another broker's
        (Kafka's AclAuthorizer read-modify-write) is decided again from a new read."""
        for _ in range(ACL_WRITE_ATTEMPTS if isinstance(ch, AlterAcls) else 1):
            reads = ZnodeReads(self._zk)
            try:
                return self._writer.write(decide(ch, reads), reads)
            except AclRaceLost:
                continue
        assert isinstance(ch, AlterAcls)
        raise BadVersionError(f"the ACLs of {ch.pattern} kept changing")

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
            first = next_producer_id(data)
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
