"""The replica manager: this broker's partitions, their leadership, and the data path.

It turns metadata (which partitions this broker hosts, who leads them, at what epoch) into a Partition
per hosted replica with its local log, and each Partition's role: as leader it serves the data path, as
follower it is fetched from its leader (Kafka's becomeLeaderOrFollower, here driven by every metadata
change). The rest is in rooms of its own, which this class composes and the handlers reach through it:
  append_path.AppendPath     appends as leader, acks=all waiting on the HW (DelayedProduce)
  read_path.ReadPath         reads for consumers and followers, fetch.min.bytes (DelayedFetch), KIP-392
  log_configs.TopicLogConfigs  each topic's configs over the broker's defaults
  log_dirs.LogDirEvents      failed log dirs and finished log moves, brought to the loop
  log_work.LogWorkQueue      creating and deleting logs off the loop
  isr_manager.IsrManager     the ISR as its leader keeps it
  replica_fetcher            the follower side: fetchers per leader
Every HW move, append and leadership change lets the one purgatory re-check the operations parked on
that partition.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TypeVar

from gregor.configdef import Settings, setting
from gregor.metadata.cache import MetadataCache
from gregor.metadata.store import BROKER_CONFIGS, BROKERS, SESSION, SESSION_LOST, MetadataStore, TopicMetadata
from gregor.metrics.registry import BrokerMetrics
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.replication.append_path import AppendEntry, AppendPath
from gregor.replication.isr_manager import IsrManager
from gregor.replication.log_configs import TopicLogConfigs
from gregor.replication.log_dirs import LogDirEvents
from gregor.replication.log_work import LogWorkQueue
from gregor.replication.partition import AppendResult, Partition, ReadResult
from gregor.replication.purgatory import Clock, Purgatory, TopicPartition
from gregor.replication.quota import ReplicationQuota
from gregor.replication.read_path import FetchParams, FetchPartition, ReadPath
from gregor.replication.replica_fetcher import ReplicaFetcherManager, ReplicaFetcherSettings
from gregor.security.inter_broker import ClientSecurity
from gregor.storage.config import LONG_MAX, LogConfig
from gregor.storage.log import Log
from gregor.storage.log_manager import LogManager, LogOfflineError

log = logging.getLogger("gregor.replica")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ReplicaManagerSettings(Settings):
    """What the replica manager reads of the broker's config. The throttled rates are dynamic: these are
    their values at start; a change reaches the manager through `set_replication_throttles`."""

    broker_id: int = setting("broker.id")
    purgatory_max_operations: int = setting("gregor.purgatory.max.operations")
    lag_time_max_ms: int = setting("replica.lag.time.max.ms")
    replica_selector_class: str | None = setting("replica.selector.class")
    leader_throttled_rate: int = setting("leader.replication.throttled.rate")
    follower_throttled_rate: int = setting("follower.replication.throttled.rate")
    quota_window_num: int = setting("replication.quota.window.num")
    quota_window_size_s: int = setting("replication.quota.window.size.seconds")


class ReplicaManager:
    """This broker's partitions. Metadata changes register and unregister partitions on the event loop
    at once; creating and deleting their logs (files, directories, fsyncs) is queued on `log_work`
    (log_work.LogWorkQueue: executor threads, in slices), so a CreateTopics, CreatePartitions or
    DeleteTopics of thousands of partitions, or a restart after a crash in the middle of one, never
    stops the loop answering others. Log work is chained per topic (a deletion finishes before a
    re-creation of the same name starts); `log_work_done(topic)` is a future admin responses wait on.
    The `partitions` table is this class's alone: the other parts only read it (the dict is shared,
    never rebound)."""

    def __init__(self, settings: ReplicaManagerSettings, fetcher_settings: ReplicaFetcherSettings,
                 topic_defaults: LogConfig, store: MetadataStore, log_manager: LogManager,
                 metadata_cache: MetadataCache, security: ClientSecurity, clock: Clock | None = None) -> None:
        """`topic_defaults`: the broker's topic config defaults (`refresh_log_configs` hands over new ones);
        `security`: how this broker's fetchers connect to their leaders."""
        self.broker_id = settings.broker_id
        self.store = store
        self.metadata_cache = metadata_cache  # what metadata is read from, on the loop
        self.log_manager = log_manager
        self.partitions: dict[TopicPartition, Partition] = {}
        # Hosted partitions without a Partition yet: logs still loading at startup, and logs that
        # failed to load or be created (offline, with the reason).
        self.loading: set[TopicPartition] = set()
        self.offline: dict[TopicPartition, str] = {}
        self._deleted_while_loading: set[str] = set()
        # Until the logs are loaded: with a log dir offline since the start, a hosted partition with no log
        # in the online dirs may have it in the offline one, so it is offline too rather than created empty
        # (Kafka creates a log only for a new partition, LeaderAndIsr's isNew, when a dir is offline).
        self._starting = True
        # Told (dir, partitions) on the loop when a log dir fails (the broker tells the controller).
        self.on_log_dir_failure: Callable[[str, list[TopicPartition]], None] | None = None
        self.dir_events = LogDirEvents(log_manager, self.partitions, self._set_offline, self._log_dir_failed)
        self.log_configs = TopicLogConfigs(topic_defaults, log_manager, metadata_cache, self.partitions)
        # One purgatory for DelayedProduce and DelayedFetch, keyed by partition.
        self.purgatory = Purgatory(settings.purgatory_max_operations, clock)
        # Creating and deleting logs, on executor threads, chained per topic.
        self.log_work = LogWorkQueue(log_manager, self.partitions, self._set_offline)
        # Replication throttles (a reassignment's copying), set by dynamic broker configs (set_replication_throttles).
        window = settings.quota_window_num, settings.quota_window_size_s
        self.leader_quota = ReplicationQuota(settings.leader_throttled_rate, *window)
        self.follower_quota = ReplicationQuota(settings.follower_throttled_rate, *window)
        # Replication: followers fetch from their leaders; leaders write their own ISR changes.
        self.fetcher_manager = ReplicaFetcherManager(fetcher_settings, security, metadata_cache, self.partitions.get,
                                                     self._after_progress, self.follower_quota)
        self.fetcher_manager.on_storage_error = lambda key, e: self.dir_events.storage_failure(key[0], key[1], e)
        self.session_lost = False
        # A controlled shutdown under way: a follower the controller took out of a partition's ISR stops
        # fetching it (Kafka's StopReplica), so its leader cannot take the stopping broker back in.
        self.retiring = False
        self.isr = IsrManager(self.broker_id, self.partitions, store, metadata_cache, settings.lag_time_max_ms,
                              lambda: self.session_lost, self._after_progress, self.purgatory.check_and_complete)
        self.appends = AppendPath(self.get_partition, self.partitions.get, self.purgatory, self._after_progress,
                                  self.dir_events.storage_failure)
        self.reads = ReadPath(self.broker_id, settings.replica_selector_class is not None, metadata_cache,
                              self.get_partition, self.partitions.get, self.purgatory, self.isr, self.leader_quota,
                              self._after_progress, self.dir_events.storage_failure)

    @property
    def metrics(self) -> BrokerMetrics | None:
        """The broker's metrics, when metrics.port is set (appends count bytes and messages in)."""
        return self.appends.metrics

    @metrics.setter
    def metrics(self, metrics: BrokerMetrics | None) -> None:
        self.appends.metrics = metrics

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
        cfg = self.log_configs.for_topic(t.name, t.configs)
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
                    t.name, p, lg, state, self.broker_id, cfg.min_insync_replicas, cfg.compression_type,
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
                part.update_log_config(cfg)
        if missing:
            self.log_work.queue_creation(t.name, missing, cfg)

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
        if self.offline and self.log_manager.offline_dirs:
            # Replicas lost with a dir that failed before this start: the controller moves them too (Kafka's
            # controller learns them from the LeaderAndIsr answers of a restarted broker).
            self._log_dir_failed(", ".join(self.log_manager.offline_dirs), sorted(self.offline))

    def remove_partition(self, topic: str, p: int, delete: bool) -> None:
        self.fetcher_manager.remove_partition((topic, p))
        part = self.partitions.pop((topic, p), None)
        if part is None:
            return
        self.purgatory.complete_all((topic, p))
        if delete:
            self.log_work.queue_deletion(topic, [p])

    # --- leader/follower transitions: what is fetched ----------------------------------
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

    # --- hosted partitions and their logs --------------------------------------------
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
        """Partitions whose logs failed to open in the background opening go offline (LogDirEvents)."""
        self.dir_events.take_offline_logs()

    def _set_offline(self, topic: str, p: int, e: Exception) -> None:
        key = (topic, p)
        if key not in self.offline:
            log.error("partition %s-%d is offline: %s", topic, p, e)
        self.offline[key] = str(e)
        self.remove_partition(topic, p, delete=False)

    def _log_dir_failed(self, d: str, tps: list[TopicPartition]) -> None:
        if self.on_log_dir_failure is not None:
            self.on_log_dir_failure(d, tps)

    # --- the data path (append_path, read_path) ------------------------------------------
    def _after_progress(self, key: TopicPartition) -> None:
        """An append or a HW move on `key`: let the operations parked on it re-check."""
        self.purgatory.check_and_complete(key)

    def append_records(self, timeout_ms: int, required_acks: int, entries: Sequence[AppendEntry]
                       ) -> list[AppendResult] | asyncio.Future[list[AppendResult]]:
        """Append as leader; the results, or a Future of them while acks=all or an fsync waits (AppendPath)."""
        return self.appends.append_records(timeout_ms, required_acks, entries)

    def fetch_messages(self, params: FetchParams, requests: Sequence[FetchPartition],
                       respond: Callable[[list[ReadResult]], T]) -> T | asyncio.Future[T]:
        """Read, answering now or once fetch.min.bytes is visible (ReadPath)."""
        return self.reads.fetch_messages(params, requests, respond)

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

    # --- configs changed at run time -------------------------------------------------------
    def refresh_log_configs(self, defaults: LogConfig) -> None:
        """The broker's topic defaults changed (a dynamic config): every topic's configs re-derived and
        applied to its logs now; a topic's own overrides win."""
        self.log_configs.refresh(defaults)

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

    # --- replication: the ISR, written by the leader (isr_manager.IsrManager) ----------------
    def start_replication(self) -> None:
        """Start the leader's ISR shrink check on the running loop; log dir events are applied on it."""
        self.dir_events.start()
        self.isr.start()

    async def stop_replication(self) -> None:
        """Stop the ISR check and the fetchers; ISR writes in flight finish on their thread."""
        await self.isr.stop()
        await self.fetcher_manager.shutdown()

    def under_replicated(self) -> list[TopicPartition]:
        """Partitions this broker leads whose ISR is smaller than their replicas."""
        return self.isr.under_replicated()
