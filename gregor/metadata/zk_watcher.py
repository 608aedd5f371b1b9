"""The read side of the ZooKeeper metadata store: the broker's image of the cluster, kept by watches.

ZooKeeper watches are one-shot and fire on kazoo's thread, where no broker code may run: each firing
only queues the path (zk_reading.ReadContext). ONE reader thread (this class) drains the queue, reads
the current data (pipelined with kazoo's async calls, re-arming the watches), compares it with its
image (by the znodes' mzxid, so a repeated read publishes nothing) and publishes MetadataEvents numbered
by a local counter that only it increments. The image has three parts: the live brokers and the
controller (here), the topics (zk_topic_reader.TopicReader) and the configs, ACLs and notifications
(zk_config_reader.ConfigReader). The store (zookeeper.py) writes, then asks for a re-read of what it
wrote (`sync`) so that the version it returns holds the write; partition-state writes hand their
acknowledged stats straight to `apply_states`. Session changes come in through `on_session_state` (a
kazoo listener); what the store must do about them (forget its controllership, register again) it is
told through two callbacks, so the image and the writes stay in their own classes. See zookeeper.py's
module doc for the znodes, the events and the session rules.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import ZnodeStat

from gregor.metadata.store import (
    BROKERS,
    SESSION,
    SESSION_LOST,
    SESSION_RESTORED,
    BrokerInfo,
    MetadataEvent,
    MetadataImage,
)
from gregor.metadata.zk_config_reader import ConfigReader
from gregor.metadata.zk_reading import ReadContext
from gregor.metadata.zk_topic_reader import TopicReader
from gregor.metadata.zk_znodes import BROKER_IDS, CONTROLLER, _parse_broker

log = logging.getLogger("gregor.metadata.zookeeper")


class ZooKeeperWatcher:
    """The image of the cluster (brokers, controller, topics, configs, ACLs) and the thread that keeps it
    from watches. The image is guarded by one lock; events are published in version order."""

    def __init__(self, zk: KazooClient, cluster_id: str, max_in_flight: int, publish: Callable[[MetadataEvent], None],
                 on_session_lost: Callable[[], None], on_new_session: Callable[[], None]) -> None:
        """`publish` hands an event to the store's subscribers; `on_session_lost` runs on the reader thread
        when the session expired (before anything else of that batch); `on_new_session` when kazoo connected
        with a new session (the store registers the broker again), before the image is re-read."""
        self._ctx = ReadContext(zk, max_in_flight, publish)
        self._zk = zk
        self._cluster_id = cluster_id
        self._on_session_lost = on_session_lost
        self._on_new_session = on_new_session
        self._brokers: dict[int, BrokerInfo] = {}
        self._controller = -1
        self._topics = TopicReader(self._ctx)
        self._configs = ConfigReader(self._ctx)
        self._session_lost = False
        self._reader = threading.Thread(target=self._run_reader, name="zk-metadata-reader", daemon=True)

    def start(self) -> None:
        """Start the reader (after the first `reload`, which the caller runs on its own thread)."""
        self._reader.start()

    def stop(self) -> None:
        if self._ctx.closed:
            return
        self._ctx.closed = True
        self._ctx.queue.put(("stop",))
        if self._reader.is_alive():
            self._reader.join(10)

    @property
    def version(self) -> int:
        return self._ctx.version

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One pipelined kazoo request, within zookeeper.max.in.flight.requests."""
        return self._ctx.call(fn, *args, **kwargs)

    def snapshot(self) -> MetadataImage:
        with self._ctx.lock:
            return MetadataImage(self._ctx.version, self._cluster_id, self._brokers_tuple(), self._controller,
                                 self._topics.copies(),
                                 {e: dict(c) for e, c in self._configs.broker_configs.items()},
                                 {e: dict(c) for e, c in self._configs.entity_configs.items()},
                                 acls=self._configs.acls())

    def _brokers_tuple(self) -> tuple[BrokerInfo, ...]:
        return tuple(sorted(self._brokers.values(), key=lambda b: b.broker_id))

    # --- the reader ----------------------------------------------------------------------
    def on_session_state(self, state: str) -> None:
        """kazoo's thread: queue LOST and the CONNECTED after it; SUSPENDED changes nothing."""
        if state == KazooState.LOST:
            self._session_lost = True
            self._ctx.queue.put(("lost",))
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            self._ctx.queue.put(("restored",))
        elif state == KazooState.CONNECTED:  # the same session again: kazoo dropped every watch meanwhile
            self._ctx.queue.put(("resync",))

    def _run_reader(self) -> None:
        q = self._ctx.queue
        while True:
            batch = [q.get()]
            while True:
                try:
                    batch.append(q.get_nowait())
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
                if self._ctx.closed:
                    return
                log.warning("reading ZooKeeper metadata failed (%s: %s); retrying", type(e).__name__, e)
                time.sleep(0.2)
                for item in batch:
                    if item[0] != "lost":  # published already (first, before any read)
                        q.put(item)
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
            with self._ctx.lock:
                self._ctx.publish_locked(SESSION, session=SESSION_LOST)
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
        self._configs.read_changed(paths)
        self._topics.read_changed(paths)

    def _read_brokers(self) -> None:
        zk, call, watch = self._zk, self._ctx.call, self._ctx.on_watch
        ids = zk.get_children(BROKER_IDS, watch=watch)
        reads = {int(i): call(zk.get_async, f"{BROKER_IDS}/{i}") for i in ids}
        ctl = call(zk.get_async, CONTROLLER, watch=watch)
        ex = call(zk.exists_async, CONTROLLER, watch=watch)  # a watch even while it is absent
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
        with self._ctx.lock:
            if brokers != self._brokers or controller != self._controller:
                self._brokers, self._controller = brokers, controller
                self._ctx.publish_locked(BROKERS, brokers=self._brokers_tuple(), controller_id=controller)

    def apply_states(self, results: dict[tuple[str, int], tuple[bytes, ZnodeStat]]) -> None:
        """State znodes' data just written (see TopicReader.apply_states)."""
        self._topics.apply_states(results)

    def reload(self) -> None:
        """Read everything and set every watch: at start, and on a new session, where every topic is
        published again as read now (CREATED replaces a cached topic) and the ones gone as DELETED."""
        self._read_brokers()
        self._configs.reload()
        self._topics.reload()

    def _resync(self) -> None:
        """After a disconnection of the same session: kazoo forgot every watch (it fires them with no path
        when the connection drops), and changes made meanwhile were never signalled. Everything is read
        again with its watch; only what changed is published (by mzxid), so nothing else moves."""
        self._read_brokers()
        self._configs.reload()
        self._topics.resync()

    def _restore(self) -> None:
        """A new session: the store registers the broker again (a new broker epoch), then everything is
        re-read and published, then "restored"."""
        self._on_new_session()
        self.reload()
        with self._ctx.lock:
            self._ctx.publish_locked(SESSION, session=SESSION_RESTORED)
        log.info("ZooKeeper session re-established: broker registered again, metadata reloaded")

    def sync(self, paths: Sequence[str]) -> int:
        """Have the reader re-read `paths` (and anything queued before) and publish; returns the version after."""
        if threading.current_thread() is self._reader:
            self._read_paths(set(paths))
            return self._ctx.version
        done = threading.Event()
        self._ctx.queue.put(("sync", done, tuple(paths)))
        while not done.wait(0.5):
            if self._ctx.closed or not self._reader.is_alive():
                break
        return self._ctx.version
