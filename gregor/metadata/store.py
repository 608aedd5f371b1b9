"""The one metadata interface: brokers, controller, topics, partition state, topic configs.

Everything the broker knows about the cluster is written through `MetadataStore` and read from
the `MetadataCache` (gregor.metadata.cache) on the event loop. A lone broker uses
`EmbeddedMetadataStore` (gregor.metadata.embedded); a cluster uses `ZooKeeperMetadataStore`
(gregor.metadata.zookeeper) with the same methods and Kafka's znode layout (/brokers/ids, /controller,
/brokers/topics/<t>, /brokers/topics/<t>/partitions/<p>/state, /config/topics/<t>), where every
partition-state update is conditional on the version read, as here. How a `Change` is checked
against the state and what it writes is not a store's own: every store applies it through
gregor.metadata.applier and only persists the records that returns.

The contract both stores keep:
- Writes are blocking calls (file or network I/O): callers run them off the event loop (TopicAdmin
  uses one writer thread). A write is durable before it returns, and it returns the metadata version
  that holds it.
- Every change becomes one `MetadataEvent` with a metadata version that only grows. Events are
  delivered to subscribers by `loop.call_soon_threadsafe` on the subscriber's event loop, in
  version order, never by calling broker code on the writing thread. The ZooKeeper store turns
  kazoo's watch callbacks (on kazoo's thread) into the same events (a topic's znode data is the
  new snapshot; the znode's mzxid orders them), so the broker cannot tell the stores apart.
- Events carry copies: a subscriber never shares a mutable object with the store's thread.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gregor.security.acl import AccessControlEntry, ResourcePattern


class MetadataError(Exception):
    """Base for store errors."""


class TopicExistsError(MetadataError):
    pass


class NoSuchTopicError(MetadataError):
    pass


class BadVersionError(MetadataError):
    """A conditional update lost a race: the znode (or record) changed since it was read."""


class ControllerMovedError(MetadataError):
    """A write fenced by a controller epoch that is no longer the current one: another broker became
    the controller meanwhile (ZooKeeper: the multi's check on /controller_epoch failed)."""


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str | None = None
    # The broker epoch: ZooKeeper's czxid of the registration znode (grows with each registration),
    # so a controlled shutdown request from a previous incarnation is recognised (STALE_BROKER_EPOCH).
    epoch: int = -1
    # Every advertised listener: (listener name, host, port). `host`/`port` above are the inter-broker
    # listener's (what other brokers connect to); clients are answered with their own listener's.
    endpoints: tuple[tuple[str, str, int], ...] = ()
    # listener name -> security protocol, for every endpoint (Kafka's listener_security_protocol_map).
    protocols: tuple[tuple[str, str], ...] = ()

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """The address of this broker's `listener`; a broker registered without endpoints (an old
        registration) has only its host and port, which serve every listener."""
        if not self.endpoints:
            return self.host, self.port
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


@dataclass
class PartitionState:
    """Kafka's /brokers/topics/<t>/partitions/<p>/state, plus the assignment."""

    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    controller_epoch: int = 0
    version: int = 0  # bumped on every write; updates are conditional on it
    # A reassignment under way (KIP-455, kept with the assignment in /brokers/topics/<t>): `replicas`
    # is then the union of the old and the target replicas, these the ones being added and removed.
    adding_replicas: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)

    def copy(self) -> PartitionState:
        return PartitionState(list(self.replicas), self.leader, self.leader_epoch, list(self.isr),
                              self.controller_epoch, self.version, list(self.adding_replicas),
                              list(self.removing_replicas))


@dataclass
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionState]
    configs: dict[str, str] = field(default_factory=dict)  # topic-level overrides, as strings
    internal: bool = False

    def copy(self) -> TopicMetadata:
        """A copy sharing nothing mutable (a store's own object never crosses threads)."""
        return TopicMetadata(self.name, self.topic_id, {p: s.copy() for p, s in self.partitions.items()},
                             dict(self.configs), self.internal)


# --- changes (what a write asks for) -------------------------------------------------------
@dataclass(frozen=True)
class CreateTopic:
    topic: TopicMetadata


@dataclass(frozen=True)
class DeleteTopic:
    name: str


@dataclass(frozen=True)
class AddPartitions:
    name: str
    partitions: dict[int, PartitionState]


@dataclass(frozen=True)
class SetTopicConfigs:
    """Replace the topic's overrides wholesale."""

    name: str
    configs: dict[str, str]


@dataclass(frozen=True)
class ReassignPartitions:
    """Replace the assignment (replicas, adding_replicas, removing_replicas) of some partitions of a
    topic; their leader, epoch and ISR are the state znodes' and are not changed by this."""

    name: str
    partitions: dict[int, PartitionState]


@dataclass(frozen=True)
class SetBrokerConfigs:
    """Replace the dynamic configs of one broker (`entity` = its id as text) or of every broker
    (`entity` = DEFAULT_ENTITY, Kafka's cluster-wide default) wholesale; empty removes them."""

    entity: str
    configs: dict[str, str]


@dataclass(frozen=True)
class AlterAcls:
    """Add and remove access control entries of one resource pattern (ZooKeeper: one /kafka-acl znode,
    rewritten conditionally on its version, so concurrent changes through two brokers both land)."""

    pattern: ResourcePattern
    add: frozenset[AccessControlEntry] = frozenset()
    remove: frozenset[AccessControlEntry] = frozenset()


# Kafka's name for the cluster-wide default entity (the znode /config/brokers/<default>).
DEFAULT_ENTITY = "<default>"
ENTITY_TYPES = ("users", "clients", "groups")


@dataclass(frozen=True)
class SetEntityConfigs:
    """Replace the configs of a user, client or group entity wholesale (SCRAM credentials, quotas, KIP-848
    group configs); empty removes them. Kafka's /config/users/<user>, /config/clients/<client-id>,
    /config/users/<user>/clients/<client-id>, /config/groups/<group>: `entity_type` "users", "clients" or
    "groups", `entity` "alice", DEFAULT_ENTITY, "alice/clients/app" or a (sanitized) group id."""

    entity_type: str
    entity: str
    configs: dict[str, str]

    @property
    def path(self) -> str:
        return entity_path(self.entity_type, self.entity)


def entity_path(entity_type: str, entity: str) -> str:
    """`users`, `alice/clients/app` -> `users/alice/clients/app` (Kafka's entity path under /config)."""
    if entity_type not in ENTITY_TYPES:
        raise ValueError(f"unknown entity type {entity_type!r}")
    parts = entity.split("/")
    if not entity or any(not x for x in parts) or (len(parts) not in (1, 3)) or (len(parts) == 3 and (
            entity_type != "users" or parts[1] != "clients")) or (entity_type == "groups" and len(parts) != 1):
        raise ValueError(f"invalid {entity_type} entity {entity!r}")
    return f"{entity_type}/{entity}"


Change = (CreateTopic | DeleteTopic | AddPartitions | SetTopicConfigs | ReassignPartitions | SetBrokerConfigs
          | SetEntityConfigs | AlterAcls)


@dataclass(frozen=True)
class StateUpdate:
    """One conditional partition-state write (leader, leader epoch, ISR, controller epoch): it succeeds
    only if the state's version is still `expected_version`."""

    topic: str
    partition: int
    state: PartitionState
    expected_version: int


# --- events (what subscribers see) ----------------------------------------------------------
# Kinds: the topic listeners' event names (ReplicaManager.on_metadata_change) plus "brokers".
CREATED, DELETED, PARTITIONS, CONFIGS, STATE, BROKERS = "created", "deleted", "partitions", "configs", "state", "brokers"
# A broker entity's dynamic configs changed: `entity` and its new `configs` (empty: none left).
BROKER_CONFIGS = "broker_configs"
# A user or client entity's configs changed: `entity` is its path ("users/alice", "clients/<default>",
# "users/alice/clients/app") and `configs` the new ones (empty: none left).
ENTITY_CONFIGS = "entity_configs"
# The ACLs of one resource pattern changed: `acl_pattern` and all its entries now (`acls`, empty: none left).
ACLS = "acls"
# The store's own session with the cluster (ZooKeeper): "lost" when it expired (this broker's
# registration and any controllership are gone: it must stop acting as leader or controller), then
# "restored" once it registered again and the cache was reloaded. The embedded store never loses it.
SESSION = "session"
SESSION_LOST, SESSION_RESTORED = "lost", "restored"
# A broker's log dir failed (JBOD): `entity` names the notification, `log_dir_failure` holds the broker and
# the partitions it took offline (None: the notification is gone, the controller handled it).
LOG_DIR_FAILURE = "log_dir_failure"


@dataclass(frozen=True)
class LogDirFailure:
    """Kafka's /log_dir_event_notification/log_dir_event_N: `broker` lost a log dir; `partitions` are the
    replicas it took offline (our addition: Kafka's controller asks the broker with LeaderAndIsr instead)."""

    broker: int
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class MetadataEvent:
    """One change at one metadata version. Topic events carry the topic's new snapshot (None when
    deleted); a partition-state change carries only the partitions that changed (`partitions`), so
    an ISR change of one partition costs O(1) however large its topic; broker events carry the live
    brokers and the controller id."""

    version: int
    kind: str
    topic: str | None = None
    snapshot: TopicMetadata | None = None
    brokers: tuple[BrokerInfo, ...] | None = None
    controller_id: int | None = None
    partitions: dict[int, PartitionState] | None = None
    session: str | None = None  # SESSION events: SESSION_LOST or SESSION_RESTORED
    entity: str | None = None  # BROKER_CONFIGS events: a broker id as text, or DEFAULT_ENTITY
    configs: dict[str, str] | None = None
    acl_pattern: ResourcePattern | None = None  # ACLS events
    acls: frozenset[AccessControlEntry] | None = None
    log_dir_failure: LogDirFailure | None = None  # LOG_DIR_FAILURE events


@dataclass(frozen=True)
class MetadataImage:
    """Everything at one version: what a cache starts from (copies, owned by the caller)."""

    version: int
    cluster_id: str
    brokers: tuple[BrokerInfo, ...]
    controller_id: int
    topics: dict[str, TopicMetadata]
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)  # entity -> dynamic configs
    entity_configs: dict[str, dict[str, str]] = field(default_factory=dict)  # entity path -> configs
    acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = field(default_factory=dict)


Subscriber = Callable[[MetadataEvent], None]


class MetadataStore(ABC):
    """Cluster metadata. Implementations persist changes before they return and publish each as an event."""

    def __init__(self) -> None:
        self._subscribers: list[tuple[asyncio.AbstractEventLoop, Subscriber]] = []
        self._sub_lock = threading.Lock()

    # --- events ------------------------------------------------------------------------
    def subscribe(self, loop: asyncio.AbstractEventLoop, fn: Subscriber) -> None:
        """Deliver every later event to `fn`, called on `loop`'s thread (never on the writer's)."""
        with self._sub_lock:
            self._subscribers.append((loop, fn))

    def unsubscribe(self, fn: Subscriber) -> None:
        """Deliver no more events to `fn` (a stopped broker sharing its store with others in one process)."""
        with self._sub_lock:
            self._subscribers = [(lp, f) for lp, f in self._subscribers if f != fn]

    def _publish(self, event: MetadataEvent) -> None:
        """Called by implementations in version order (under their write lock): call_soon_threadsafe
        keeps that order on the loop."""
        with self._sub_lock:
            subs = list(self._subscribers)
        for loop, fn in subs:
            if not loop.is_closed():
                loop.call_soon_threadsafe(fn, event)

    # --- reads (any thread; copies) -------------------------------------------------------
    @property
    @abstractmethod
    def cluster_id(self) -> str: ...

    @property
    @abstractmethod
    def version(self) -> int:
        """The metadata version of the last change written."""

    @abstractmethod
    def snapshot(self) -> MetadataImage:
        """A consistent copy of everything, at `version`."""

    # --- writes (blocking: off the event loop) ----------------------------------------------
    @abstractmethod
    def register_broker(self, info: BrokerInfo) -> int:
        """Register this broker as live (ZooKeeper: the ephemeral /brokers/ids/<id>, gone with the
        session). Returns the broker epoch. Raises MetadataError if another live broker has the id."""

    async def register_on_loop(self, info: BrokerInfo) -> int:
        """register_broker, called on the broker's event loop at start (a store whose registration is itself a
        conversation on that loop, KRaft's, overrides it)."""
        return self.register_broker(info)

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int, timeout_s: float
                                  ) -> tuple[int, list[tuple[str, int]]] | None:
        """The stopping broker's controlled shutdown, when the store carries it (KRaft: through the heartbeat):
        (error code, partitions still led here). None: the ControlledShutdown request to the controller."""
        return None

    @abstractmethod
    def unregister_broker(self, broker_id: int) -> None:
        """Remove a live registration (a clean shutdown's last step; ZooKeeper: delete the ephemeral)."""

    # --- the controller -------------------------------------------------------------------
    @abstractmethod
    def elect_controller(self, broker_id: int) -> int | None:
        """Try to become the controller (ZooKeeper: create the ephemeral /controller, then bump
        /controller_epoch conditionally). Returns the new controller epoch if `broker_id` is now the
        controller, None if another broker is. Every broker calls this at start and whenever the
        controller goes away (a BROKERS event with controller_id -1)."""

    @abstractmethod
    def resign_controller(self, broker_id: int, controller_epoch: int) -> None:
        """Give up the controllership if `broker_id` still holds it at `controller_epoch`."""

    @abstractmethod
    def update_partition_states(self, updates: Sequence[StateUpdate],
                                controller_epoch: int | None = None) -> list[int | MetadataError]:
        """Conditional writes of partition states, each on its own (one losing its race leaves the others):
        per update the state's new version, or BadVersionError / NoSuchTopicError. With `controller_epoch`
        (the controller's writes), each write is also fenced by it: ControllerMovedError once another
        controller was elected. A leader's ISR change passes None (Kafka's ZooKeeper-mode leaders write
        the ISR themselves, conditional on the version). Events follow as for any change."""

    @abstractmethod
    def apply(self, changes: Sequence[Change]) -> list[int | MetadataError]:
        """Apply each change on its own (one failing leaves the others), all durable before this returns:
        per change, the metadata version holding it, or its error (TopicExistsError, NoSuchTopicError).
        The objects in `changes` are handed over: the store may pass them on in events (to the caller's
        loop) but keeps none of them itself, so the caller must not change them afterwards."""

    def create_topic(self, topic: TopicMetadata) -> int:
        """Raises TopicExistsError."""
        return _one(self.apply([CreateTopic(topic)]))

    def delete_topic(self, name: str) -> int:
        """Raises NoSuchTopicError."""
        return _one(self.apply([DeleteTopic(name)]))

    def add_partitions(self, name: str, partitions: dict[int, PartitionState]) -> int:
        return _one(self.apply([AddPartitions(name, partitions)]))

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> int:
        return _one(self.apply([SetTopicConfigs(name, configs)]))

    def set_broker_configs(self, entity: str, configs: dict[str, str]) -> int:
        return _one(self.apply([SetBrokerConfigs(entity, dict(configs))]))

    def set_entity_configs(self, entity_type: str, entity: str, configs: dict[str, str]) -> int:
        """A user's or client's configs (see SetEntityConfigs); raises ValueError for a malformed entity."""
        entity_path(entity_type, entity)
        return _one(self.apply([SetEntityConfigs(entity_type, entity, dict(configs))]))
    def alter_acls(self, pattern: ResourcePattern, add: frozenset[AccessControlEntry] = frozenset(),
                   remove: frozenset[AccessControlEntry] = frozenset()) -> int:
        return _one(self.apply([AlterAcls(pattern, frozenset(add), frozenset(remove))]))

    def update_partition_state(self, name: str, partition: int, state: PartitionState, expected_version: int) -> int:
        """One conditional write without fencing; returns the new version or raises BadVersionError.
        `state.version` is set to the new version."""
        r = self.update_partition_states([StateUpdate(name, partition, state, expected_version)])[0]
        if isinstance(r, MetadataError):
            raise r
        state.version = r
        return r

    @abstractmethod
    def allocate_producer_ids(self, block_size: int) -> tuple[int, int]:
        """Reserve the next `block_size` producer ids for this broker: (first id, count). Durable
        before it returns, so no id is handed out twice, across restarts and (with ZooKeeper's
        /latest_producer_id_block, the next issue) across brokers."""

    def notify_log_dir_failure(self, broker_id: int, partitions: Sequence[tuple[str, int]]) -> None:  # noqa: B027
        """Tell the controller that `broker_id` took `partitions` offline (a failed log dir), so it moves their
        leadership and takes the broker out of their ISRs. A lone broker (the embedded store) has nobody
        to hand them to: nothing to do."""

    def delete_log_dir_event(self, name: str) -> None:  # noqa: B027
        """The controller handled the notification `name` (LOG_DIR_FAILURE events' `entity`)."""

    def close(self) -> None:  # noqa: B027 - optional hook, most stores hold nothing to release
        """Release connections or files."""


def _one(results: list[int | MetadataError]) -> int:
    r = results[0]
    if isinstance(r, MetadataError):
        raise r
    return r
