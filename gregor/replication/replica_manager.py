"""The replica manager: this broker's partitions, their leadership, and the data path.

It turns metadata (which partitions this broker hosts, who leads them, at what epoch) into a
Partition per hosted replica with its local log, and serves the data path for the handlers:
appends as leader (`append_records`, waiting for acks=all on the high watermark through the
purgatory), reads for consumers below the HW and for followers up to the LEO (`fetch_messages`,
parked for fetch.min.bytes), offsets by timestamp and by leader epoch. A follower's fetch records
its LEO and may advance the HW; every HW move, append and leadership change lets the one
purgatory re-check the operations parked on that partition.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from gregor.config import BrokerConfig
from gregor.metadata.cache import MetadataCache
from gregor.metadata.store import (
    BROKER_CONFIGS,
    BROKERS,
    SESSION,
    SESSION_LOST,
    MetadataStore,
    TopicMetadata,
)
from gregor.metrics.registry import BrokerMetrics
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import BatchHeader
from gregor.replication.delayed import DelayedFetch, DelayedProduce, FetchPartitionStatus, ProducePartitionStatus
from gregor.replication.isr_manager import IsrManager
from gregor.replication.log_work import LogWorkQueue
from gregor.replication.partition import FETCH_LOG_END, AppendResult, Partition, ReadResult
from gregor.replication.purgatory import Clock, Purgatory, PurgatoryFullError, TopicPartition
from gregor.replication.quota import ReplicationQuota
from gregor.replication.replica_fetcher import ReplicaFetcherManager
from gregor.storage.config import LONG_MAX, LogConfig
from gregor.storage.errors import StorageError
from gregor.storage.log import Log
from gregor.storage.log_manager import LogManager, LogOfflineError

log = logging.getLogger("gregor.replica")

T = TypeVar("T")


class AppendEntry(NamedTuple):
    """One partition's validated record set for `append_records`."""

    topic: str
    partition: int
    records: memoryview
    headers: list[BatchHeader]
    client: bool = True  # False: a coordinator's own write (sequence numbers not checked, as Kafka's origin)


@dataclass(frozen=True, slots=True)
class FetchPartition:
    """One partition of a Fetch request."""

    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1


@dataclass(frozen=True, slots=True)
class FetchParams:
    """A Fetch request's own parameters. `limits()` gives (bytes the response may carry, whether its
    first batch may exceed that: KIP-74), asked at each read since it depends on the connection."""

    replica_id: int  # >= 0: a follower; -1: a consumer
    max_wait_ms: int
    min_bytes: int
    isolation_level: int
    limits: Callable[[], tuple[int, bool]]
    # A consumer's Fetch v11+ (KIP-392): its client.rack ("" when unset). Such a consumer may read from a
    # follower; None (older versions, followers) reads from leaders only.
    client_rack: str | None = None


_reported: set[tuple[str, str, str]] = set()


def log_config_for(config: BrokerConfig, overrides: Mapping[str, str], topic: str | None = None) -> LogConfig:
    """A topic's configs: its stored overrides over the broker's defaults, checked by the one
    topic-config table. A stored override that does not validate (an older version's bounds, an
    edited metadata store) is not allowed to stop the broker: it is reported once, naming the
    topic and key, and that key keeps its default."""
    invalid: list[tuple[str, object, str]] = []
    cfg = LogConfig.from_properties(overrides, config.log_config, invalid)
    for key, raw, why in invalid:
        if topic is not None and (topic, key, str(raw)) not in _reported:
            _reported.add((topic, key, str(raw)))
            log.warning("topic %s: stored config %s=%s is ignored, using the default %s (%s)",
                        topic, key, raw, config.log_config.to_properties().get(key, "none"), why)
    return cfg


def valid_overrides(config: BrokerConfig, overrides: Mapping[str, str]) -> dict[str, str]:
    """The stored overrides that are in effect (those that validate)."""
    invalid: list[tuple[str, object, str]] = []
    LogConfig.from_properties(overrides, config.log_config, invalid)
    bad = {key for key, _, _ in invalid}
    return {k: v for k, v in overrides.items() if k not in bad}


def effective_topic_configs(config: BrokerConfig, overrides: Mapping[str, str], topic: str | None = None
                            ) -> dict[str, object]:
    """Every topic config's value for a topic: its override, else the broker default."""
    return log_config_for(config, overrides, topic).values()


class ReplicaManager:
    """This broker's partitions. Metadata changes register and unregister partitions on the event loop
    at once; creating and deleting their logs (files, directories, fsyncs) is queued on `log_work`
    (log_work.LogWorkQueue: executor threads, in slices), so a CreateTopics, CreatePartitions or
    DeleteTopics of thousands of partitions, or a restart after a crash in the middle of one, never
    stops the loop answering others. Log work is chained per topic (a deletion finishes before a
    re-creation of the same name starts); `log_work_done(topic)` is a future admin responses wait on.
    The `partitions` table is this class's alone: the queue only reads it (the dict is shared, never
    rebound)."""

    def __init__(self, config: BrokerConfig, store: MetadataStore, log_manager: LogManager,
                 metadata_cache: MetadataCache, clock: Clock | None = None) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.store = store
        self.metadata_cache = metadata_cache  # what metadata is read from, on the loop
        self.log_manager = log_manager
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.metrics: BrokerMetrics | None = None  # the broker's, when metrics.port is set
        # Hosted partitions without a Partition yet: logs still loading at startup, and logs that
        # failed to load or be created (offline, with the reason).
        self.loading: set[tuple[str, int]] = set()
        self.offline: dict[tuple[str, int], str] = {}
        self._deleted_while_loading: set[str] = set()
        # Until the logs are loaded: with a log dir offline since the start, a hosted partition with no log
        # in the online dirs may have it in the offline one, so it is offline too rather than created empty
        # (Kafka creates a log only for a new partition, LeaderAndIsr's isNew, when a dir is offline).
        self._starting = True
        self._loop: asyncio.AbstractEventLoop | None = None
        log_manager.on_dir_failure = self._dir_failed
        log_manager.mover.on_caught_up = self._move_caught_up
        # Told (dir, partitions) on the loop when a log dir fails (the broker tells the controller).
        self.on_log_dir_failure: Callable[[str, list[TopicPartition]], None] | None = None
        # One purgatory for DelayedProduce and DelayedFetch, keyed by partition.
        self.purgatory = Purgatory(config.get("gregor.purgatory.max.operations"), clock)
        # Creating and deleting logs, on executor threads, chained per topic.
        self.log_work = LogWorkQueue(log_manager, self.partitions, self._set_offline)
        # Replication throttles (a reassignment's copying), set by dynamic broker configs (set_replication_throttles).
        samples, sample_s = config.get("replication.quota.window.num"), config.get("replication.quota.window.size.seconds")
        self.leader_quota = ReplicationQuota(config.get("leader.replication.throttled.rate"), samples, sample_s)
        self.follower_quota = ReplicationQuota(config.get("follower.replication.throttled.rate"), samples, sample_s)
        # Replication: followers fetch from their leaders; leaders write their own ISR changes.
        self.fetcher_manager = ReplicaFetcherManager(config, metadata_cache, self.partitions.get, self._after_progress,
                                                     self.follower_quota)
        self.fetcher_manager.on_storage_error = lambda key, e: self.storage_failure(key[0], key[1], e)
        self.session_lost = False
        # A controlled shutdown under way: a follower the controller took out of a partition's ISR stops
        # fetching it (Kafka's StopReplica), so its leader cannot take the stopping broker back in.
        self.retiring = False
        self.lag_time_max_ms: int = config.get("replica.lag.time.max.ms")
        self.rack_selector = config.get("replica.selector.class") is not None  # KIP-392
        self.isr = IsrManager(self.broker_id, self.partitions, store, metadata_cache, self.lag_time_max_ms,
                              lambda: self.session_lost, self._after_progress, self.purgatory.check_and_complete)

    # --- metadata -> local state -----------------------------------------------------
    def sync_all(self) -> None:
        """Bring local partitions in line with the store (at startup and after any change)."""
        topics = self.metadata_cache.topics()
        for t in topics.values():
            self.sync_topic(t)
        for (name, p) in list(self.partitions):
            t = topics.get(name)
            if t is None or p not in t.partitions:
                self.remove_partition(name, p, delete=True)
        if self.log_manager.loading:
            return
        stray: dict[str, int] = {}
        for (name, p) in self.log_manager.logs():
            if (name, p) not in self.partitions and (name, p) not in self.offline:
                stray[name] = stray.get(name, 0) + 1
        for name, n in sorted(stray.items()):
            # Left alone, not deleted: a lost or replaced metadata file must not cost the data. A DeleteTopics
            # interrupted by a crash leaves these behind too.
            log.warning("%d logs of %s are not in the metadata: not served, not deleted", n, name)

    def sync_topic(self, t: TopicMetadata, only: Collection[int] | None = None) -> None:
        """Register the topic's partitions hosted here (`only` those, when a state event names the ones it
        changed: a 1,000-partition topic's failover is 1,000 events) and queue the creation of their missing logs. A log
        found on disk is the partition's, unless it belongs to an earlier topic of the same name whose
        deletion is still under way (then the partition waits for that and starts empty). Logs left by a
        deletion a crash cut short are adopted, as before: telling them apart needs topic ids in the logs."""
        cfg = log_config_for(self.config, t.configs, t.name)
        min_isr = cfg.min_insync_replicas
        compression_type = cfg.compression_type
        missing: list[int] = []
        states = t.partitions.items() if only is None else [(p, t.partitions[p]) for p in only if p in t.partitions]
        for p, state in states:
            if self.broker_id not in state.replicas:
                if (t.name, p) in self.partitions:  # reassigned away: stop fetching, delete the log
                    log.info("%s-%d: no longer a replica here (replicas %s): removing it", t.name, p, state.replicas)
                    self.remove_partition(t.name, p, delete=True)
                continue
            key = (t.name, p)
            part = self.partitions.get(key)
            if part is None:
                if self.log_manager.is_loading(t.name, p):  # on disk, not loaded yet: never create a new one
                    self.loading.add(key)
                    continue
                if self.log_manager.is_offline(t.name, p):
                    self.offline[key] = self.log_manager.offline[key]
                    continue
                if self._starting and self.log_manager.offline_dirs and not self.log_manager.knows(t.name, p):
                    if key not in self.offline:
                        log.error("%s-%d: no log in the online log dirs and %s offline: the partition is offline",
                                  t.name, p, ", ".join(self.log_manager.offline_dirs))
                    self.offline[key] = f"its log may be in an offline log dir ({', '.join(self.log_manager.offline_dirs)})"
                    continue
                self.loading.discard(key)
                self.offline.pop(key, None)
                lg = None if self.log_work.is_deleting(t.name) else self.log_manager.get_log(t.name, p)
                part = self.partitions[key] = Partition(
                    t.name, p, lg, state, self.broker_id, min_isr, compression_type,
                    open_log=self._open_log_now, log_config=cfg, now_ms=int(time.time() * 1000))
                part.fenced = self.session_lost
                self._follow_state(part)
                if lg is None:
                    missing.append(p)
                elif lg.config != cfg:
                    lg.update_config(cfg)
            else:
                part.apply_state(state, int(time.time() * 1000))
                self._follow_state(part)
                self.isr.drop_unassigned(part)
                # A new leader or epoch answers what waits on the partition; an ISR change may move the HW.
                self.purgatory.check_and_complete(key)
                part.min_insync_replicas = min_isr
                part.compression_type = compression_type
                part.log_config = cfg
                if part.has_log and part.log.config != cfg:
                    part.log.update_config(cfg)
        if missing:
            self.log_work.queue_creation(t.name, missing, cfg)

    def refresh_log_configs(self) -> None:
        """The broker's topic defaults changed (a dynamic config, self.config.log_config replaced):
        re-derive every topic's LogConfig and apply it to its logs now; a topic's own overrides win."""
        self.log_manager.default_config = self.config.log_config
        for name, t in self.metadata_cache.topics().items():
            cfg = log_config_for(self.config, t.configs, name)
            if self.log_manager.topic_config(name) != cfg:
                self.log_manager.update_topic_config(name, cfg)
            for p in t.partitions:
                part = self.partitions.get((name, p))
                if part is None:
                    continue
                part.min_insync_replicas = cfg.min_insync_replicas
                part.compression_type = cfg.compression_type
                part.log_config = cfg
                if part.has_log and part.log.config != cfg:
                    part.log.update_config(cfg)

    def on_logs_loaded(self) -> None:
        """Every log on disk is loaded: bring their partitions online, and delete the logs of
        topics deleted while they were loading."""
        for topic in self._deleted_while_loading:
            if self.metadata_cache.topic(topic) is None:
                doomed = sorted(p for (name, p) in self.log_manager.logs() if name == topic)
                if doomed:
                    self.log_work.queue_deletion(topic, doomed)
        self._deleted_while_loading.clear()
        self.loading.clear()
        self.sync_all()
        self._starting = False
        if self.offline and self.log_manager.offline_dirs and self.on_log_dir_failure is not None:
            # Replicas lost with a dir that failed before this start: the controller moves them too (Kafka's
            # controller learns them from the LeaderAndIsr answers of a restarted broker).
            self.on_log_dir_failure(", ".join(self.log_manager.offline_dirs), sorted(self.offline))

    def is_loading(self, topic: str, p: int) -> bool:
        return (topic, p) in self.loading

    def set_replication_throttles(self, leader_rate: int, follower_rate: int) -> None:
        """leader/follower.replication.throttled.rate as the dynamic broker configs have them now."""
        if (leader_rate, follower_rate) != (self.leader_quota.rate, self.follower_quota.rate):
            log.info("broker %d: replication throttles: leader %s, follower %s bytes/s", self.broker_id,
                     leader_rate if leader_rate < LONG_MAX else "unlimited",
                     follower_rate if follower_rate < LONG_MAX else "unlimited")
        self.leader_quota.set_rate(leader_rate)
        self.follower_quota.set_rate(follower_rate)
        if follower_rate >= LONG_MAX:
            self.fetcher_manager.wake_all()  # partitions held back by the throttle fetch again now

    def on_metadata_change(self, event: str, topic: str) -> None:
        if event == BROKER_CONFIGS:  # the broker applies its dynamic configs (Broker._apply_dynamic_configs)
            return
        if event == BROKERS:  # a leader we follow may have come or gone
            for part in self.partitions.values():
                if part.leader_id != self.broker_id:
                    self._follow_state(part)
            return
        if event == SESSION:
            self._on_session(topic)
            return
        if event == "deleted":
            if self.log_manager.loading:
                self._deleted_while_loading.add(topic)
                self.loading = {tp for tp in self.loading if tp[0] != topic}
            for key in [k for k in self.offline if k[0] == topic]:
                del self.offline[key]
            # Every log the topic has or may still get from creation work in flight: a topic re-created
            # under the same name afterwards must start from empty logs, never find these.
            doomed = {p for (name, p) in self.partitions if name == topic}
            doomed.update(p for (name, p) in self.log_manager.logs() if name == topic)
            for p in doomed:
                self.remove_partition(topic, p, delete=False)
            self.log_work.queue_deletion(topic, sorted(doomed))
            return
        t = self.metadata_cache.topic(topic)
        if t is not None:
            self.sync_topic(t, self.metadata_cache.changed_partitions)

    def remove_partition(self, topic: str, p: int, delete: bool) -> None:
        self.fetcher_manager.remove_partition((topic, p))
        part = self.partitions.pop((topic, p), None)
        if part is None:
            return
        self.purgatory.complete_all((topic, p))
        if delete:
            self.log_work.queue_deletion(topic, [p])

    # --- log creation and deletion, off the event loop (log_work.LogWorkQueue) ---------
    def log_work_done(self, topic: str) -> asyncio.Future[None] | None:
        """A future done when the log work queued so far on `topic` is done; None when nothing is queued."""
        return self.log_work.done(topic)

    def _open_log_now(self, part: Partition) -> Log:
        """Create a partition's log on the calling thread (the first request for it came before the
        background work). Refused while a deletion of the topic's earlier logs is under way."""
        if self.log_work.is_deleting(part.topic):
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"the logs of an earlier topic {part.topic} are still being deleted")
        try:
            lg = self.log_manager.get_or_create_log(part.topic, part.index, part.log_config)
        except LogOfflineError as e:  # on disk since a clean shutdown, and it would not open
            self._set_offline(part.topic, part.index, e)
            raise
        part.attach_log(lg)
        return lg

    def take_offline_logs(self) -> None:
        """Partitions whose logs failed to open in the log manager's background opening (after a clean
        shutdown logs are opened after the broker serves) go offline, as if they had failed at startup."""
        for (topic, p), why in list(self.log_manager.offline.items()):
            if (topic, p) in self.partitions:
                self._set_offline(topic, p, LogOfflineError(why))

    def _dir_failed(self, d: str, tps: list[TopicPartition]) -> None:
        """LogManager.on_dir_failure, on any thread: handled on the loop (`_on_dir_failure`)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._on_dir_failure(d, tps)
        else:
            loop.call_soon_threadsafe(self._on_dir_failure, d, tps)

    def _on_dir_failure(self, d: str, tps: list[TopicPartition]) -> None:
        """A log dir failed: its partitions stop (parked requests answered, fetchers stopped) and answer
        KAFKA_STORAGE_ERROR; the broker is told (on a cluster it tells the controller, to move leaders)."""
        why = f"log dir {d} is offline"
        for topic, p in tps:
            self._set_offline(topic, p, LogOfflineError(why))
        cb = self.on_log_dir_failure
        if cb is not None:
            cb(d, tps)

    def _move_caught_up(self, tp: TopicPartition) -> None:
        """A future replica caught up (on the mover's thread): the swap runs on the loop, between appends."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(self._complete_move, tp)

    def _complete_move(self, tp: TopicPartition) -> None:
        new = self.log_manager.swap_future(*tp)
        part = self.partitions.get(tp)
        if part is None:
            return
        if new is not None:
            part.replace_log(new)
        elif tp in self.log_manager.offline:
            self._set_offline(tp[0], tp[1], LogOfflineError(self.log_manager.offline[tp]))

    def storage_failure(self, topic: str, p: int, e: BaseException) -> None:
        """An error met on the partition's log: an I/O error fails its whole log dir (LogManager.maybe_fail_dir)."""
        d = self.log_manager.dir_of(topic, p)
        if d is not None:
            self.log_manager.maybe_fail_dir(d, e)

    def _set_offline(self, topic: str, p: int, e: Exception) -> None:
        key = (topic, p)
        if key not in self.offline:
            log.error("partition %s-%d is offline: %s", topic, p, e)
        self.offline[key] = str(e)
        self.remove_partition(topic, p, delete=False)

    # --- data path -------------------------------------------------------------------
    def get_partition(self, topic: str, p: int) -> Partition:
        """The hosted partition, its log created now if the background work has not reached it yet."""
        part = self.partitions.get((topic, p))
        if part is None:
            if (topic, p) in self.loading:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{p} is loading")
            if (topic, p) in self.offline:
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{p} is offline: {self.offline[(topic, p)]}")
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if not part.has_log:
            self._open_log_now(part)
        return part

    def get_leader_partition(self, topic: str, p: int) -> Partition:
        part = self.get_partition(topic, p)
        if not part.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return part

    def _hosted(self, key: TopicPartition) -> Partition | None:
        return self.partitions.get(key)

    def _after_progress(self, key: TopicPartition) -> None:
        """An append or a HW move on `key`: let the operations parked on it re-check."""
        self.purgatory.check_and_complete(key)

    def append_records(self, timeout_ms: int, required_acks: int, entries: Sequence[AppendEntry]
                       ) -> list[AppendResult] | asyncio.Future[list[AppendResult]]:
        """Append each entry's validated batches as leader, in order; a partition's failure is its
        result's error, never the others'. The results come at once, unless they have to wait: for
        acks=all, until the HW passed every appended batch (DelayedProduce, REQUEST_TIMED_OUT after
        `timeout_ms`); and for any acks, until a flush.messages fsync an append made due has run on
        an executor thread (the event loop goes on serving others meanwhile). Then a Future."""
        now_ms = int(time.time() * 1000)
        results: list[AppendResult] = []
        waiting: list[ProducePartitionStatus] = []
        flushes: list[tuple[AppendResult, asyncio.Future[None], str, int]] = []
        for topic, p, records, headers, client in entries:
            key = (topic, p)
            try:
                part = self.get_partition(topic, p)
                res = part.append_records_to_leader(records, headers, required_acks, now_ms, defer_flush=True,
                                                    client=client)
            except (KafkaError, StorageError, OSError) as e:
                results.append(append_error(topic, p, e))
                if not isinstance(e, KafkaError):
                    self.storage_failure(topic, p, e)
                continue
            results.append(res)
            if client and self.metrics is not None:  # Kafka's BytesInPerSec / MessagesInPerSec
                self.metrics.record_append(topic, len(records), res.last_offset - res.base_offset + 1)
            if res.flush_due:
                flushes.append((res, part.flush_after_append(
                    res.last_offset + 1, self._after_progress,
                    self.metrics.log_flush.observe if self.metrics is not None else None), topic, p))
            self._after_progress(key)
            if required_acks == -1:
                waiting.append(ProducePartitionStatus(key, part, res.last_offset + 1, res))
        if not waiting and not flushes:
            return results
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[list[AppendResult]] = loop.create_future()
        left = len(flushes) + (1 if waiting else 0)

        def one_done() -> None:
            nonlocal left
            left -= 1
            if left == 0 and not fut.done():
                fut.set_result(results)

        for res, flushed, topic, p in flushes:
            def on_flushed(f: asyncio.Future[None], res: AppendResult = res, topic: str = topic, p: int = p) -> None:
                if (exc := f.exception()) is not None:
                    res.error, res.message = ErrorCode.KAFKA_STORAGE_ERROR, f"flush failed: {exc}"
                    self.storage_failure(topic, p, exc)
                one_done()
            flushed.add_done_callback(on_flushed)
        if waiting:
            op = DelayedProduce(timeout_ms, waiting, self._hosted, one_done)
            try:
                self.purgatory.try_complete_else_watch(op, [s.key for s in waiting])
            except PurgatoryFullError as e:
                op.on_expiration()
                for s in waiting:
                    if s.result.error == ErrorCode.REQUEST_TIMED_OUT:
                        s.result.message = str(e)
                one_done()
        if fut.done():
            return fut.result()
        return fut

    def read_from_local_log(self, params: FetchParams, requests: Sequence[FetchPartition]) -> list[ReadResult]:
        """One read of every requested partition, in order, within the response budget (`params.limits`,
        asked now: it depends on what the connection has queued). The first partition with data may
        exceed it by one batch (KIP-74), when the budget allows. A follower's fetch moves its LEO."""
        budget, may_exceed = params.limits()
        isolation = FETCH_LOG_END if params.replica_id >= 0 else params.isolation_level
        now_ms = int(time.time() * 1000)
        total = 0
        out: list[ReadResult] = []
        for fp in requests:
            part: Partition | None = None
            throttled = False
            try:
                part = self.get_partition(fp.topic, fp.partition)
                max_bytes = min(fp.partition_max_bytes, max(budget - total, 0))
                one_batch = total == 0 and may_exceed
                if params.replica_id >= 0 and self.leader_quota.active:
                    # A reassignment's copying to a replica outside the ISR, paced (leader.replication.throttled.*):
                    # past the rate it gets no records this time, its fetch state still moves.
                    throttled = (params.replica_id not in part.isr
                                 and part.log_config is not None
                                 and part.log_config.throttles(fp.partition, self.broker_id, leader_side=True))
                    if throttled and self.leader_quota.exceeded():
                        max_bytes, one_batch = 0, False
                preferred = (self._preferred_read_replica(part, fp.fetch_offset, params.client_rack)
                             if params.client_rack and self.rack_selector and part.is_leader else None)
                if preferred is not None:  # KIP-392: no records, the consumer goes to `preferred`
                    part.check_leader_epoch(fp.current_leader_epoch)
                    hw = part.high_watermark
                    res, moved = ReadResult(ErrorCode.NONE, b"", hw, part.log.last_stable_offset,
                                            part.log.log_start_offset, preferred_read_replica=preferred), False
                else:
                    res, moved = part.fetch_records(params.replica_id, fp.fetch_offset, max_bytes, isolation,
                                                    one_batch, now_ms, fp.current_leader_epoch, fp.last_fetched_epoch,
                                                    fetch_only_from_leader=params.client_rack is None)
                if throttled:
                    self.leader_quota.record(len(res.records))
            except KafkaError as e:
                res, moved = ReadResult(e.code), False
            except StorageError as e:  # its log could not be opened or created, or closed under a deletion
                res, moved = ReadResult(ErrorCode[e.error]), False
                self.storage_failure(fp.topic, fp.partition, e)
            except OSError as e:
                res, moved = ReadResult(ErrorCode.KAFKA_STORAGE_ERROR), False
                self.storage_failure(fp.topic, fp.partition, e)
            if moved:
                self._after_progress((fp.topic, fp.partition))
            if params.replica_id >= 0 and part is not None and res.error == ErrorCode.NONE:
                if params.replica_id not in part.isr:
                    self.isr.maybe_expand(part, params.replica_id)
                if (f := part.followers.get(params.replica_id)) is not None:
                    f.last_sent_high_watermark = res.high_watermark
            total += len(res.records)
            out.append(res)
        return out

    def _preferred_read_replica(self, part: Partition, fetch_offset: int, rack: str) -> int | None:
        """Kafka's RackAwareReplicaSelector (replica.selector.class): the leader itself when it is in the
        consumer's rack, else the in-sync follower in that rack furthest ahead that holds `fetch_offset`;
        None (the leader serves) when there is none. Only ISR members are offered, so the consumer is
        never sent to a replica that is falling behind."""
        me = self.metadata_cache.broker(self.broker_id)
        if me is not None and me.rack == rack:
            return None
        best: tuple[int, int] | None = None
        for r in part.replicas:
            if r == self.broker_id or r not in part.isr:
                continue
            info = self.metadata_cache.broker(r)
            f = part.followers.get(r)
            if info is None or info.rack != rack or f is None or f.log_end_offset < fetch_offset:
                continue
            if best is None or f.log_end_offset > best[1]:
                best = (r, f.log_end_offset)
        return None if best is None else best[0]

    def _high_watermarks_sent(self, replica_id: int, requests: Sequence[FetchPartition]) -> list[int]:
        out = []
        for fp in requests:
            part = self.partitions.get((fp.topic, fp.partition))
            f = part.followers.get(replica_id) if part is not None else None
            out.append(f.last_sent_high_watermark if f is not None else 2**63 - 1)
        return out

    def fetch_messages(self, params: FetchParams, requests: Sequence[FetchPartition],
                       respond: Callable[[list[ReadResult]], T]) -> T | asyncio.Future[T]:
        """Read now; answer at once when there is enough (fetch.min.bytes), nothing to wait for, an
        error or a diverging epoch, or no wait allowed. Otherwise park a DelayedFetch: it reads again
        (and `respond`s, in a Future) when enough is visible, the partitions change hands, or at
        max wait."""
        hw_watch = params.replica_id >= 0 and self.rack_selector
        # While followers serve consumers (KIP-392) a follower must learn a new HW at once, not at its next
        # fetch's max wait: a fetch that will tell it a HW it has not been sent yet is answered now.
        told = self._high_watermarks_sent(params.replica_id, requests) if hw_watch else None
        results = self.read_from_local_log(params, requests)
        nbytes = sum(len(r.records) for r in results)
        if told is not None and any(r.high_watermark > hw for r, hw in zip(results, told, strict=True)):
            return respond(results)
        if (params.max_wait_ms <= 0 or not requests or nbytes >= params.min_bytes
                or any(r.error != ErrorCode.NONE or r.diverging_epoch is not None or r.preferred_read_replica >= 0
                       for r in results)):
            return respond(results)
        isolation = FETCH_LOG_END if params.replica_id >= 0 else params.isolation_level
        statuses = []
        for fp, r in zip(requests, results, strict=True):
            key = (fp.topic, fp.partition)
            part = self.partitions.get(key)
            if part is None:
                continue
            end_offset, end_bytes = part.end_offset_for(isolation)
            statuses.append(FetchPartitionStatus(key, part, part.leader_epoch, end_offset, end_bytes,
                                                 len(r.records), fp.partition_max_bytes, part.is_leader,
                                                 part.high_watermark if hw_watch else -1))
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()

        def done() -> None:
            if fut.done():
                return
            try:
                fut.set_result(respond(self.read_from_local_log(params, requests)))
            except Exception as e:  # surfaced to the connection, which logs and closes
                fut.set_exception(e)

        op = DelayedFetch(params.max_wait_ms, params.min_bytes, isolation, statuses, self._hosted, done)
        try:
            if self.purgatory.try_complete_else_watch(op, [s.key for s in statuses]):
                return fut.result()
        except PurgatoryFullError:
            return respond(results)
        return fut

    def fetch_offset_for_timestamp(self, topic: str, p: int, timestamp: int, isolation: int,
                                   current_leader_epoch: int, fetch_only_from_leader: bool) -> tuple[int, int, int]:
        """ListOffsets for one partition: (timestamp, offset, leader epoch). Raises KafkaError/StorageError."""
        part = self.get_partition(topic, p)
        return part.fetch_offset_for_timestamp(timestamp, isolation, current_leader_epoch, fetch_only_from_leader)

    def last_offset_for_leader_epoch(self, topic: str, p: int, current_leader_epoch: int, leader_epoch: int,
                                     fetch_only_from_leader: bool) -> tuple[int, int]:
        """OffsetForLeaderEpoch for one partition: (epoch, end offset). Raises KafkaError/StorageError."""
        part = self.get_partition(topic, p)
        return part.last_offset_for_leader_epoch(current_leader_epoch, leader_epoch, fetch_only_from_leader)

    def shutdown(self) -> None:
        """Answer every parked request (the broker is stopping)."""
        self.purgatory.shutdown()

    # --- replication: leader/follower transitions ---------------------------------------
    def _follow_state(self, part: Partition) -> None:
        """After a state change of `part`, on the loop: as leader, nothing is fetched; as follower of a live
        leader, fetch from it at its epoch (a new leader re-targets the fetch, a new epoch un-pauses it);
        leader offline (-1), not live, or our session lost: nothing is fetched; nor, during this broker's
        controlled shutdown, a partition whose ISR no longer holds it."""
        key = (part.topic, part.index)
        leader = part.leader_id
        if (leader == self.broker_id or leader < 0 or self.session_lost
                or self.metadata_cache.broker(leader) is None
                or (self.retiring and self.broker_id not in part.isr)):
            self.fetcher_manager.remove_partition(key)
        else:
            self.fetcher_manager.add_partition(key, leader, part.leader_epoch)

    def _on_session(self, what: str) -> None:
        """SESSION "lost": stop leading (appends and follower fetches answer NOT_LEADER_OR_FOLLOWER, parked
        produces complete so) and stop fetching, until "restored": then the cache's fresh states drive the
        transitions again. A broker frozen past its session never acknowledges a write after it thaws."""
        lost = what == SESSION_LOST
        if lost == self.session_lost:
            return
        self.session_lost = lost
        log.warning("broker %d: metadata session %s: %s", self.broker_id, what,
                    "refusing to lead and to fetch" if lost else "resuming from the current metadata")
        for key, part in self.partitions.items():
            part.fenced = lost
            self.purgatory.check_and_complete(key)
        if lost:
            self.fetcher_manager.remove_all()
        else:
            self.sync_all()

    # --- replication: the ISR, written by the leader (isr_manager.IsrManager) ----------------
    def start_replication(self) -> None:
        """Start the leader's ISR shrink check on the running loop."""
        self._loop = asyncio.get_running_loop()
        self.isr.start()

    async def stop_replication(self) -> None:
        """Stop the ISR check and the fetchers; ISR writes in flight finish on their thread."""
        await self.isr.stop()
        await self.fetcher_manager.shutdown()

    def maybe_shrink_isr(self, now_ms: int) -> None:
        self.isr.maybe_shrink(now_ms)

    def under_replicated(self) -> list[TopicPartition]:
        """Partitions this broker leads whose ISR is smaller than their replicas."""
        return self.isr.under_replicated()

    def offline_partitions(self) -> list[TopicPartition]:
        """Hosted partitions with no leader, or whose log is offline here."""
        out = [k for k, p in self.partitions.items() if p.leader_id < 0]
        out.extend(self.offline)
        return out


def append_error(topic: str, p: int, e: BaseException) -> AppendResult:
    """A failed append's result: Kafka's error for it, and the reason."""
    if isinstance(e, KafkaError):
        return AppendResult(e.code, message=e.message)
    if isinstance(e, StorageError):
        return AppendResult(ErrorCode[e.error], message=str(e))
    log.error("append to %s-%d failed: %s", topic, p, e)
    return AppendResult(ErrorCode.KAFKA_STORAGE_ERROR, message=str(e))
