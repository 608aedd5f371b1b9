"""The broker's view of the metadata, kept on the event loop (Kafka's MetadataCache).

Handlers, the ReplicaManager and TopicAdmin read topics, partition states, brokers, the controller
id and the cluster id here, never from the store: the store is written on another thread (the
admin's writer thread, or kazoo's for ZooKeeper) and reading its objects from the loop would race
with those writes. The store delivers each change as a versioned `MetadataEvent` on the loop
(`loop.call_soon_threadsafe`); the cache applies events in version order, ignores one not newer
than what it holds (a repeat, or one already in the image it loaded), then tells its listeners,
on the loop. An admin operation waits with `wait_for(version)` until its own write is applied, so
a client never reads its own CreateTopics missing from Metadata.

Derived tables are kept as events arrive so admin checks stay O(1) per topic at 100,000
partitions: topics by id, names by Kafka's collision key, and replicas per broker.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping

from gregor.metadata.applier import put_or_remove
from gregor.metadata.store import (
    ACLS,
    BROKER_CONFIGS,
    BROKERS,
    DELETED,
    ENTITY_CONFIGS,
    LOG_DIR_FAILURE,
    SESSION,
    SESSION_RESTORED,
    BrokerInfo,
    LogDirFailure,
    MetadataEvent,
    MetadataImage,
    MetadataStore,
    PartitionState,
    TopicMetadata,
)
from gregor.security.acl import AclIndex

log = logging.getLogger("gregor.metadata")

# (event kind, topic name): ReplicaManager.on_metadata_change's signature. Listeners are also told
# (BROKERS, "") after the live brokers or the controller changed, and (SESSION, SESSION_LOST or
# SESSION_RESTORED) when the store's session with the cluster was lost or restored, and (BROKER_CONFIGS,
# entity) when the dynamic configs of a broker (its id as text) or of all (DEFAULT_ENTITY) changed, and
# (ENTITY_CONFIGS, path) when a user's or client's configs changed (path "users/alice", "clients/<default>").
Listener = Callable[[str, str], None]


def collision_key(name: str) -> str:
    """'.' and '_' collide in metric names, so Kafka refuses topics that differ only by them."""
    return name.replace(".", "_")


class MetadataCache:
    def __init__(self) -> None:
        self.version = -1
        self.cluster_id = ""
        self.controller_id = -1
        # While listeners are told of a STATE event: the partitions it changed (only those need a look;
        # a 1,000-partition topic's leader moves arrive as 1,000 events). None for every other event.
        self.changed_partitions: Collection[int] | None = None
        self.session = SESSION_RESTORED  # SESSION_LOST while the store has no session (ZooKeeper expired it)
        self.log_dir_failures: dict[str, LogDirFailure] = {}  # notifications not handled yet, by name
        self._brokers: tuple[BrokerInfo, ...] = ()
        self._broker_configs: dict[str, dict[str, str]] = {}
        self._entity_configs: dict[str, dict[str, str]] = {}  # "users/alice", "clients/app", ... -> configs
        # Every ACL, indexed for the authorizer (which reads this object; (ACLS, pattern) tells it of changes).
        self.acls = AclIndex()
        self._topics: dict[str, TopicMetadata] = {}
        self._by_id: dict[uuid.UUID, TopicMetadata] = {}
        self._by_collision_key: dict[str, str] = {}
        self._replicas_per_broker: dict[int, int] = {}
        self._listeners: list[Listener] = []
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []  # heap of (version, seq, future)
        self._seq = itertools.count()
        self._thread: int | None = None  # the loop's thread, once attached

    # --- feeding -------------------------------------------------------------------------
    def load(self, image: MetadataImage) -> None:
        """Start from (or jump to) a whole image; listeners are not told (nothing listens before start)."""
        self.version = image.version
        self.cluster_id = image.cluster_id
        self.controller_id = image.controller_id
        self._brokers = image.brokers
        self._broker_configs = {e: dict(c) for e, c in image.broker_configs.items()}
        self._entity_configs = {e: dict(c) for e, c in image.entity_configs.items()}
        self.acls.replace_all(image.acls)
        self._topics = {}
        self._by_id = {}
        self._by_collision_key = {}
        self._replicas_per_broker = {}
        for t in image.topics.values():
            self._put(t)
        self._wake()

    def attach(self, store: MetadataStore, loop: asyncio.AbstractEventLoop) -> None:
        """Subscribe to the store's events on `loop`, then catch up with anything written before that."""
        self._thread = threading.get_ident()
        store.subscribe(loop, self.apply)
        if store.version > self.version:
            self.load(store.snapshot())

    def detach(self, store: MetadataStore) -> None:
        """Stop taking the store's events (the broker is stopping: its listeners must not act on a
        partition whose log it already closed)."""
        store.unsubscribe(self.apply)

    def apply(self, event: MetadataEvent) -> None:
        """Apply one event (on the loop thread), unless it is not newer than the cache."""
        if self._thread is not None and threading.get_ident() != self._thread:
            raise RuntimeError("metadata events are applied on the event loop's thread only")
        if event.version <= self.version:
            log.debug("ignoring stale metadata event %d (at %d)", event.version, self.version)
            return
        self.version = event.version
        if event.kind == BROKERS:
            self._brokers = event.brokers or ()
            if event.controller_id is not None:
                self.controller_id = event.controller_id
            self._notify(BROKERS, "")
        elif event.kind in (BROKER_CONFIGS, ENTITY_CONFIGS):  # a broker entity, or a user/client/group path
            entity = event.entity or ""
            table = self._broker_configs if event.kind == BROKER_CONFIGS else self._entity_configs
            put_or_remove(table, entity, dict(event.configs or {}))
            self._notify(event.kind, entity)
        elif event.kind == ACLS and event.acl_pattern is not None:
            self.acls.set(event.acl_pattern, event.acls or ())
            self._notify(ACLS, str(event.acl_pattern))
        elif event.kind == LOG_DIR_FAILURE:  # a broker's failed log dir, for the controller to handle
            if event.log_dir_failure is not None:
                self.log_dir_failures[event.entity or ""] = event.log_dir_failure
            else:
                self.log_dir_failures.pop(event.entity or "", None)
            self._notify(LOG_DIR_FAILURE, event.entity or "")
        elif event.kind == SESSION:  # the store's session was lost or restored: listeners get its state
            self.session = event.session or ""
            self._notify(SESSION, self.session)
        elif event.partitions is not None:  # partition states changed in place: the cache owns its objects
            t = self._topics.get(event.topic or "")
            if t is None:
                log.warning("metadata event %d changes partitions of unknown topic %s", event.version, event.topic)
            else:
                self._count([t.partitions[p] for p in event.partitions if p in t.partitions], -1)
                t.partitions.update(event.partitions)
                self._count(event.partitions.values(), 1)
                self.changed_partitions = event.partitions.keys()
                try:
                    self._notify(event.kind, t.name)
                finally:
                    self.changed_partitions = None
        elif event.topic is not None:
            old = self._topics.get(event.topic)
            if old is not None:
                self._unindex(old)
            if event.kind != DELETED and event.snapshot is not None:
                self._put(event.snapshot)  # an existing name keeps its place in the order of topics
            elif old is not None:
                del self._topics[event.topic]
            self._notify(event.kind, event.topic)
        self._wake()

    def _notify(self, kind: str, topic: str) -> None:
        for fn in list(self._listeners):
            try:
                fn(kind, topic)
            except Exception:  # one listener's bug must not stop the others or the cache
                log.exception("metadata listener %r failed on %s %s", fn, kind, topic)

    def _put(self, t: TopicMetadata) -> None:
        self._topics[t.name] = t
        self._by_id[t.topic_id] = t
        self._by_collision_key[collision_key(t.name)] = t.name
        self._count(t.partitions.values(), 1)

    def _unindex(self, old: TopicMetadata) -> None:
        if self._by_id.get(old.topic_id) is old:
            del self._by_id[old.topic_id]
        if self._by_collision_key.get(collision_key(old.name)) == old.name:
            del self._by_collision_key[collision_key(old.name)]
        self._count(old.partitions.values(), -1)

    def _count(self, states: Iterable[PartitionState], sign: int) -> None:
        counts = self._replicas_per_broker
        for s in states:
            for b in s.replicas:
                counts[b] = counts.get(b, 0) + sign

    # --- listeners and waiting --------------------------------------------------------------
    def add_listener(self, fn: Listener) -> None:
        """`fn(kind, topic)` after each topic event is applied, on the loop."""
        self._listeners.append(fn)

    def wait_for(self, version: int) -> asyncio.Future[None]:
        """A future done once the cache holds `version` (at once if it does)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if version <= self.version:
            fut.set_result(None)
        else:
            heapq.heappush(self._waiters, (version, next(self._seq), fut))
        return fut

    def _wake(self) -> None:
        while self._waiters and self._waiters[0][0] <= self.version:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(None)

    # --- reads -------------------------------------------------------------------------------
    def topics(self) -> Mapping[str, TopicMetadata]:
        return self._topics

    def topic(self, name: str) -> TopicMetadata | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self._by_id.get(topic_id)

    def partition_state(self, name: str, partition: int) -> PartitionState | None:
        t = self._topics.get(name)
        return None if t is None else t.partitions.get(partition)

    def colliding_topic(self, name: str) -> str | None:
        """An existing topic whose name collides with `name` ('.' against '_'), or None."""
        return self._by_collision_key.get(collision_key(name))

    def hosted_partitions(self) -> dict[int, int]:
        """Replicas per broker (each is a log there, and about one open file)."""
        return {b: n for b, n in self._replicas_per_broker.items() if n}

    def entity_configs(self, entity_type: str, entity: str) -> dict[str, str]:
        """A user's or client's configs (SCRAM credentials, quotas); see store.SetEntityConfigs."""
        return dict(self._entity_configs.get(f"{entity_type}/{entity}", {}))

    def entities(self, entity_type: str) -> dict[str, dict[str, str]]:
        """Every entity of a type with configs, by entity ("alice", "<default>", "alice/clients/app")."""
        prefix = entity_type + "/"
        return {p[len(prefix):]: dict(c) for p, c in self._entity_configs.items() if p.startswith(prefix)}

    def broker_configs(self, entity: str) -> dict[str, str]:
        """The dynamic configs of a broker (its id as text) or of all brokers (DEFAULT_ENTITY): a copy."""
        return dict(self._broker_configs.get(entity, {}))

    def brokers(self) -> list[BrokerInfo]:
        return list(self._brokers)

    def broker(self, broker_id: int) -> BrokerInfo | None:
        return next((b for b in self._brokers if b.broker_id == broker_id), None)
