"""Topic administration: the one place that decides topic layout and writes it to the metadata store.

Kafka's ZooKeeper-mode AdminManager is the model: admin requests (CreateTopics, DeleteTopics,
CreatePartitions, config changes, Metadata's auto topic creation) arrive at any broker and are
validated and written here, by every broker. This is not the controller: elections, partition state
and ISR changes are gregor/controller/'s.

Checks run on the event loop against the MetadataCache plus the writes still in flight (reserved
names and partition counts), so two requests racing for one name or for the last partitions of a
broker's budget cannot both pass. Writes go to the store on one writer thread (they block on fsync,
or on ZooKeeper), and an operation completes only once the cache has applied its version, so the
response that follows never names a topic Metadata does not show.
"""

from __future__ import annotations

import asyncio
import random
import re
import resource
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from gregor.config import ConfigError, validate_topic_configs
from gregor.configdef import Settings, setting
from gregor.metadata.cache import MetadataCache, collision_key
from gregor.metadata.store import (
    AddPartitions,
    BadVersionError,
    BrokerInfo,
    Change,
    CreateTopic,
    DeleteTopic,
    MetadataError,
    MetadataStore,
    NoSuchTopicError,
    PartitionState,
    SetTopicConfigs,
    TopicExistsError,
    TopicMetadata,
)
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.storage.config import LogConfig
from gregor.storage.segment_files import default_open_files_capacity

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

# The open-file budget for partitions: a hosted partition holds at most one descriptor (its active
# segment's .log file; indexes are read into memory, other segments open lazily), and all of them go
# through the bounded LRU of segment files (see partition_fd_budget). The rest of RLIMIT_NOFILE is kept for connections (a quarter of the limit, or max.connections if
# smaller) and for the files the broker opens besides logs (checkpoints, metadata, the cleaner,
# executor threads, the interpreter's own): FIXED_FD_RESERVE.
FDS_PER_PARTITION = 1
FIXED_FD_RESERVE = 256


def open_file_limit() -> int:
    """This process's soft RLIMIT_NOFILE (the broker raises it to the hard limit at start)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 2**31 - 1


def partition_fd_budget(max_connections: int, nofile: int | None = None, open_files_max: int | None = None
                        ) -> tuple[int, int]:
    """(partitions the open-file limit allows, descriptors reserved for everything else). Segment files
    are held open through a bounded LRU (log.segment.open.files.max, `open_files_max`, default what the
    LogManager would take): the descriptors partitions actually need are min(partitions, that bound), so
    when the bound fits beside the reserve any number of partitions fits (100,000 under a limit of
    20,000); only a bound above what the limit leaves makes each partition count, as before."""
    limit = open_file_limit() if nofile is None else nofile
    reserved = min(max_connections, limit // 4) + FIXED_FD_RESERVE
    cache = default_open_files_capacity() if open_files_max is None else open_files_max
    if cache + reserved <= limit:
        return 2**31 - 1, reserved
    return max(0, (limit - reserved) // FDS_PER_PARTITION), reserved


def validate_topic_name(name: str | None) -> None:
    """Kafka's rules: 1-249 chars of [a-zA-Z0-9._-], not '.' or '..'."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters",
        )
    if not _LEGAL_TOPIC.fullmatch(name):  # fullmatch: '$' would let a trailing newline through
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
        )


@dataclass(frozen=True, slots=True)
class TopicAdminSettings(Settings):
    broker_id: int = setting("broker.id")
    num_partitions: int = setting("num.partitions")
    default_replication_factor: int = setting("default.replication.factor")
    delete_topic_enable: bool = setting("delete.topic.enable")
    max_broker_partitions: int = setting("max.broker.partitions")
    max_connections: int = setting("max.connections")


class TopicAdmin:
    def __init__(self, store: MetadataStore, cache: MetadataCache, settings: TopicAdminSettings,
                 topic_defaults: Callable[[], LogConfig], open_files_max: int | None = None) -> None:
        """`topic_defaults()`: the broker's topic config defaults now (dynamic), which a topic's own
        configs are validated over. `open_files_max`: the capacity of the broker's cache of open segment
        files (its LogManager's)."""
        self.store = store
        self._open_files_max = open_files_max
        self.cache = cache
        self.settings = settings
        self._topic_defaults = topic_defaults
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="metadata-writer")
        # Writes in flight: their names (and collision keys) and replicas per broker, held until the cache has them.
        self._pending_names: dict[str, str] = {}  # collision key -> name
        self._pending_replicas: dict[int, int] = {}
        # Placement's start broker and replica shift: random like Kafka's AdminUtils; tests fix them here.
        self.placement_start: int | None = None
        self._rng = random.Random()

    # --- checks (on the loop, no I/O) --------------------------------------------------------
    def prepare_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        assignment: dict[int, list[int]] | None = None,
        configs: dict[str, str | None] | None = None,
        internal_allowed: bool = False,
        reserve: bool = True,
    ) -> TopicMetadata:
        """Check a creation and lay the topic out; with `reserve`, hold its name and partitions until
        `write` releases them. Internal topics are the broker's own (`internal_allowed` is for it alone):
        a client creating `__consumer_offsets` with its own layout would break the group coordinator."""
        validate_topic_name(name)
        if name in INTERNAL_TOPICS and not internal_allowed:
            raise KafkaError(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"Topic {name} is a Kafka internal topic: the broker creates it when it is first needed, "
                "clients may not create it.",
            )
        key = collision_key(name)
        if self.cache.topic(name) is not None or self._pending_names.get(key) == name:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        other = self.cache.colliding_topic(name) or self._pending_names.get(key)
        if other is not None:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {other}")
        try:  # the one topic-config table: what is stored here is what the logs load at restart
            stored_configs = validate_topic_configs(dict(configs or {}), self._topic_defaults())
        except ConfigError as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
        brokers = [b.broker_id for b in self.cache.brokers()]
        if assignment:
            if num_partitions != -1 or replication_factor != -1:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST,
                    "Both numPartitions or replicationFactor and replicasAssignment were set. Both cannot be used at the same time.",
                )
            layout = self._check_assignment(assignment, brokers, expected_start=0)
        else:
            n = self.settings.num_partitions if num_partitions == -1 else num_partitions
            rf = self.settings.default_replication_factor if replication_factor == -1 else replication_factor
            if n <= 0:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Number of partitions was set to an invalid non-positive value: {n}.")
            check_replication_factor(rf, len(brokers))
            self._check_count_before_layout(n, rf, len(brokers))
            layout = self._assign(0, n, rf)
        self.check_partition_limits(len(layout), layout)
        partitions = {p: initial_state(r, brokers) for p, r in layout.items()}
        topic = TopicMetadata(name, uuid.uuid4(), partitions, stored_configs, internal=name in INTERNAL_TOPICS)
        if reserve:
            self._reserve(name, layout, 1)
        return topic

    def prepare_delete(self, name: str) -> DeleteTopic:
        if name in INTERNAL_TOPICS:
            raise KafkaError(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"Topic {name} is a kafka internal topic and is not allowed to be marked for deletion.",
            )
        if not self.settings.delete_topic_enable:
            raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
        if self.cache.topic(name) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        return DeleteTopic(name)

    def prepare_partitions(self, name: str, count: int, assignment: list[list[int]] | None,
                           reserve: bool = True) -> AddPartitions:
        if name in INTERNAL_TOPICS:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic {name} is a Kafka internal topic: its number of partitions cannot be changed "
                "(offsets.topic.num.partitions fixes it when the broker creates it).",
            )
        topic = self.cache.topic(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        current = len(topic.partitions)
        if count < current:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {current} partitions, which is higher than the requested {count}.",
            )
        if count == current:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
        brokers = [b.broker_id for b in self.cache.brokers()]
        rf = len(topic.partitions[0].replicas)
        if assignment is not None:
            if len(assignment) != count - current:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Increasing the number of partitions by {count - current} but {len(assignment)} assignments provided.",
                )
            layout = self._check_assignment(
                {current + i: r for i, r in enumerate(assignment)}, brokers, expected_start=current, expected_rf=rf
            )
        else:
            self._check_count_before_layout(count - current, rf, len(brokers))
            check_replication_factor(rf, len(brokers))
            # Kafka continues the topic's layout: the new partitions start after partition 0's first replica.
            first_replica = topic.partitions[0].replicas[0]
            ordered = sorted(brokers)
            start = next((i for i, b in enumerate(ordered) if b >= first_replica), 0)
            layout = self._assign(current, count - current, rf, start_index=start)
        self.check_partition_limits(count - current, layout)
        if reserve:
            self._reserve(None, layout, 1)
        return AddPartitions(name, {p: initial_state(r, brokers) for p, r in layout.items()})

    def prepare_configs(self, name: str, configs: dict[str, str]) -> SetTopicConfigs:
        if self.cache.topic(name) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist.")
        if name in INTERNAL_TOPICS:
            # Kafka lets an admin alter them; here they are the broker's, like their partitions: one
            # min.insync.replicas=4096 (found by the fuzzer) stopped every group from storing its state.
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"The configs of internal topic {name} are the broker's (its offsets.topic.* "
                             "properties); clients may not alter them.")
        try:
            stored_configs = validate_topic_configs(dict(configs), self._topic_defaults())
        except ConfigError as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
        return SetTopicConfigs(name, stored_configs)

    def _reserve(self, name: str | None, layout: dict[int, list[int]], sign: int) -> None:
        if name is not None:
            if sign > 0:
                self._pending_names[collision_key(name)] = name
            else:
                self._pending_names.pop(collision_key(name), None)
        for replicas in layout.values():
            for b in replicas:
                self._pending_replicas[b] = self._pending_replicas.get(b, 0) + sign

    def _release(self, change: Change) -> None:
        if isinstance(change, CreateTopic):
            self._reserve(change.topic.name, {p: s.replicas for p, s in change.topic.partitions.items()}, -1)
        elif isinstance(change, AddPartitions):
            self._reserve(None, {p: s.replicas for p, s in change.partitions.items()}, -1)

    # --- writes ----------------------------------------------------------------------------------
    async def write(self, changes: Sequence[Change]) -> list[KafkaError | None]:
        """Write prepared changes in one store call (one fsync) off the loop; per change its error or None,
        once the cache holds every change that succeeded. Releases the changes' reservations."""
        if not changes:
            return []
        try:
            try:
                results = await asyncio.get_running_loop().run_in_executor(self._writer, self.store.apply, list(changes))
            except MetadataError as e:  # the store cannot write at all
                return [KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"The metadata store failed: {e}")] * len(changes)
            versions = [r for r in results if isinstance(r, int)]
            if versions:
                await self.cache.wait_for(max(versions))
        finally:
            for ch in changes:
                self._release(ch)
        return [None if isinstance(r, int) else _kafka_error(ch, r) for ch, r in zip(changes, results, strict=True)]

    async def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                           configs: dict[str, str | None] | None = None, internal_allowed: bool = False) -> TopicMetadata:
        """Check, write and wait for one topic; raises KafkaError."""
        topic = self.prepare_topic(name, num_partitions, replication_factor, None, configs, internal_allowed)
        (err,) = await self.write([CreateTopic(topic)])
        if err is not None:
            raise err
        created = self.cache.topic(name)
        return created if created is not None else topic

    def close(self) -> None:
        """Finish the writes under way (the broker has stopped taking requests)."""
        self._writer.shutdown(wait=True)

    # --- limits ----------------------------------------------------------------------
    def hosted_partitions(self) -> dict[int, int]:
        """Partitions per broker (each replica is a log there, and about one open file), counting
        creations still being written."""
        counts = self.cache.hosted_partitions()
        for b, n in self._pending_replicas.items():
            if n:
                counts[b] = counts.get(b, 0) + n
        return counts

    def _check_count_before_layout(self, adding: int, rf: int, n_brokers: int) -> None:
        """A count no broker could take is refused before a layout of that size is built in memory
        (a request may ask for 2**31 - 1 partitions)."""
        cap = self.settings.max_broker_partitions
        least_per_broker = -(-adding * rf // max(n_brokers, 1))
        if least_per_broker > cap:
            raise KafkaError(
                ErrorCode.POLICY_VIOLATION,
                f"Creating {adding} partitions would put at least {least_per_broker} on a broker, above its limit of "
                f"{cap} (max.broker.partitions).",
            )

    def check_partition_limits(self, adding: int, layout: dict[int, list[int]]) -> None:
        """Refuse (POLICY_VIOLATION) a creation that would take a broker past max.broker.partitions, or
        this broker past the partitions its open-file limit can hold: past those, logs fail to open with
        EMFILE and the broker could not start again. Validate-only requests are checked the same way."""
        new: dict[int, int] = {}
        for replicas in layout.values():
            for b in replicas:
                new[b] = new.get(b, 0) + 1
        if not new:
            return
        hosted = self.hosted_partitions()
        cap = self.settings.max_broker_partitions
        for b in sorted(new):
            current = hosted.get(b, 0)
            if current + new[b] > cap:
                raise KafkaError(
                    ErrorCode.POLICY_VIOLATION,
                    f"Creating {adding} partitions would bring broker {b} to {current + new[b]} partitions, above "
                    f"its limit of {cap} (max.broker.partitions); it hosts {current}.",
                )
        me = self.settings.broker_id
        if me not in new:
            return
        current = hosted.get(me, 0)
        budget, reserved = partition_fd_budget(self.settings.max_connections, open_files_max=self._open_files_max)
        if current + new[me] > budget:
            raise KafkaError(
                ErrorCode.POLICY_VIOLATION,
                f"Creating {adding} partitions would bring broker {me} to {current + new[me]} partitions, above the "
                f"{budget} its open-file limit allows (RLIMIT_NOFILE {open_file_limit()}, about {FDS_PER_PARTITION} "
                f"file per partition, {reserved} kept for connections (max.connections) and other files); it hosts "
                f"{current}. Raise the broker's open-file limit (ulimit -n) to host more.",
            )

    # --- assignment ------------------------------------------------------------------
    def _assign(self, first: int, count: int, rf: int, start_index: int | None = None) -> dict[int, list[int]]:
        """Kafka's replica placement over the live brokers (the cache's brokers are the live ones),
        rack-aware when every broker has a rack. `start_index` fixes where the first replicas start
        (CreatePartitions continues a topic's layout); otherwise `placement_start` (tests) or random."""
        if start_index is None:
            start_index = self.placement_start
        return assign_replicas(list(self.cache.brokers()), count, rf, first, start_index, self._rng)

    @staticmethod
    def _check_assignment(
        assignment: dict[int, list[int]], brokers: list[int], expected_start: int, expected_rf: int | None = None
    ) -> dict[int, list[int]]:
        ids = sorted(assignment)
        if ids != list(range(expected_start, expected_start + len(ids))):
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Partitions must be consecutive and start at 0.")
        rfs = {len(r) for r in assignment.values()}
        if len(rfs) != 1 or 0 in rfs:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "All partitions must have the same, non-zero number of replicas.")
        if expected_rf is not None and rfs != {expected_rf}:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Replication factor must be {expected_rf}.")
        known = set(brokers)
        for p, replicas in assignment.items():
            if len(set(replicas)) != len(replicas):
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Duplicate brokers in the assignment of partition {p}.")
            missing = [b for b in replicas if b not in known]
            if missing:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unknown broker(s) {missing} in partition {p}.")
        return {p: list(r) for p, r in assignment.items()}


def check_replication_factor(rf: int, n_brokers: int) -> None:
    """Kafka's refusals of a replication factor: not positive, or more than the brokers there are."""
    if rf <= 0:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if rf > n_brokers:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"Replication factor: {rf} larger than available brokers: {n_brokers}.")


def initial_state(replicas: list[int], live: Sequence[int]) -> PartitionState:
    """A new partition's state, as Kafka's controller writes it: the first live replica leads, the live
    replicas are the ISR, leader epoch 0 (leader -1 and an empty ISR if none is live)."""
    alive = set(live)
    isr = [b for b in replicas if b in alive]
    return PartitionState(list(replicas), isr[0] if isr else -1, 0, isr)


class PlacementError(KafkaError):
    """A placement that cannot be made (Kafka's AdminOperationException in AdminUtils)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_REPLICATION_FACTOR, message)


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    """The broker index of a partition's replica j+1: the second replica sits `shift`+1 places after
    the first (never on it), the later ones follow it."""
    return (first + 1 + (shift + j) % (n - 1)) % n


def rack_alternated(racks: dict[int, str]) -> list[int]:
    """Brokers ordered so racks alternate (Kafka's getRackAlternatedBrokerList): racks in name order,
    each rack's brokers in id order, one broker per rack in turn; with 3 racks of 2 brokers
    a:{1,2} b:{3,4} c:{5,6} this is 1,3,5,2,4,6."""
    by_rack: dict[str, list[int]] = {}
    for b in sorted(racks):
        by_rack.setdefault(racks[b], []).append(b)
    queues = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    depth = 0
    while len(out) < len(racks):
        for q in queues:
            if depth < len(q):
                out.append(q[depth])
        depth += 1
    return out


def assign_replicas(brokers: Sequence[BrokerInfo], count: int, rf: int, first_partition: int = 0,
                    start_index: int | None = None, rng: random.Random | None = None) -> dict[int, list[int]]:
    """Kafka's replica assignment (AdminUtils.assignReplicasToBrokers), as partition -> replicas.

    Partition p's first replica (its preferred leader) is broker (p + start) mod n, so leaders go
    round-robin over the brokers; the other replicas follow it at a shift that grows by one after
    every n partitions, so the followers of one leader are not always the same brokers. When every
    broker has a rack the brokers are taken in rack-alternating order and a replica is skipped while
    its rack (or broker) already holds one of the partition's replicas, unless every rack (broker)
    does: a partition's replicas land on distinct racks whenever there are at least rf racks. A
    random start (and shift) spreads the leaders of small topics over the cluster; `start_index`
    fixes both (tests, and CreatePartitions continuing a topic)."""
    n = len(brokers)
    check_replication_factor(rf, n)
    if count <= 0:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Number of partitions was set to an invalid non-positive value: {count}.")
    with_rack = [b for b in brokers if b.rack is not None]
    if with_rack and len(with_rack) != n:
        raise PlacementError("Not all brokers have rack information for replica rack aware assignment.")
    rng = rng or random.Random()
    start = start_index if start_index is not None and start_index >= 0 else rng.randrange(n)
    shift = start_index if start_index is not None and start_index >= 0 else rng.randrange(n)
    out: dict[int, list[int]] = {}
    if not with_rack:
        ordered = sorted(b.broker_id for b in brokers)
        for p in range(first_partition, first_partition + count):
            if p > 0 and p % n == 0:
                shift += 1
            first = (p + start) % n
            out[p] = [ordered[first]] + [ordered[_replica_index(first, shift, j, n)] for j in range(rf - 1)]
        return out
    racks = {b.broker_id: b.rack for b in brokers if b.rack is not None}
    ordered = rack_alternated(racks)
    n_racks = len(set(racks.values()))
    for p in range(first_partition, first_partition + count):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        leader = ordered[first]
        replicas = [leader]
        used_racks = {racks[leader]}
        used = {leader}
        k = 0
        while len(replicas) < rf:
            b = ordered[_replica_index(first, shift * n_racks, k, n)]
            k += 1
            if (racks[b] not in used_racks or len(used_racks) == n_racks) and (b not in used or len(used) == n):
                replicas.append(b)
                used_racks.add(racks[b])
                used.add(b)
        out[p] = replicas
    return out


def _kafka_error(change: Change, e: MetadataError) -> KafkaError:
    """Kafka's error for a change the store refused (a race lost after the checks on the loop)."""
    if isinstance(e, TopicExistsError):
        return KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{e}' already exists.")
    if isinstance(e, NoSuchTopicError):
        return KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{e}' does not exist.")
    if isinstance(e, BadVersionError) and isinstance(change, AddPartitions):
        return KafkaError(ErrorCode.INVALID_PARTITIONS, f"The partitions of topic '{change.name}' changed meanwhile: {e}")
    return KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"The metadata store refused the change: {e}")
