"""The replica manager: this broker's partitions, their leadership, appends, reads, HW.

It turns metadata (which partitions this broker hosts, who leads them, at what epoch)
into local logs, and serves the data path: Produce appends as leader, Fetch reads below
the high watermark. The high watermark is kept apart from the log end offset: it is the
minimum LEO over the ISR, which on a lone broker is the leader's own LEO; replication
will add follower LEOs and delayed produce without changing the callers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from gregor.config import BrokerConfig
from gregor.metadata.store import MetadataStore, PartitionState, TopicMetadata
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import BatchHeader
from gregor.server.purgatory import Purgatory
from gregor.storage.config import LogConfig
from gregor.storage.errors import StorageError
from gregor.storage.log import Log
from gregor.storage.log_manager import LogManager, LogOfflineError

log = logging.getLogger("gregor.replica")

# Partitions whose logs one executor call creates or deletes: the loop attaches each slice's logs
# between calls, so the first partitions are served from disk while later ones are still created.
LOG_WORK_SLICE = 64


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


@dataclass(slots=True)
class AppendResult:
    error: ErrorCode
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    message: str | None = None


class Partition:
    """One hosted partition: its log and the leader/ISR state this broker last learnt.

    The log may not exist yet: partitions are registered as soon as the metadata names them, and
    their logs are created in the background (ReplicaManager); `log` creates a missing one at once
    through `open_log` when a request needs it first."""

    def __init__(self, topic: str, index: int, log_: Log | None, state: PartitionState, broker_id: int,
                 min_insync_replicas: int, compression_type: str = "producer",
                 open_log: Callable[[Partition], Log] | None = None, log_config: LogConfig | None = None) -> None:
        self.topic = topic
        self.index = index
        self._log = log_
        self._open_log = open_log
        self.log_config = log_config  # what a log created later opens with
        self.broker_id = broker_id
        self.min_insync_replicas = min_insync_replicas
        self.compression_type = compression_type  # a topic config; "producer" keeps what clients send
        self.follower_log_end_offsets: dict[int, int] = {}  # filled by follower fetches (replication)
        self.apply_state(state)

    @property
    def log(self) -> Log:
        lg = self._log
        if lg is None:
            if self._open_log is None:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "the partition has no log")
            lg = self._open_log(self)
        return lg

    @property
    def has_log(self) -> bool:
        return self._log is not None

    def attach_log(self, log_: Log) -> None:
        """The log created for this partition (in the background or on first use)."""
        if self._log is None:
            self._log = log_
            if self.log_config is not None and log_.config != self.log_config:
                log_.update_config(self.log_config)
            self.maybe_increment_high_watermark()

    def apply_state(self, state: PartitionState) -> None:
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.replicas = list(state.replicas)
        self.isr = list(state.isr)
        self.maybe_increment_high_watermark()

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    def check_leader_epoch(self, requested: int) -> None:
        """Fetch/ListOffsets v9+/v4+ carry the client's idea of the epoch; -1 means unknown."""
        if requested < 0 or requested == self.leader_epoch:
            return
        if requested < self.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
        raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    def append_as_leader(self, records: memoryview, headers: list[BatchHeader], required_acks: int,
                         now_ms: int) -> AppendResult:
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"The size of the current ISR {len(self.isr)} is insufficient to satisfy the min.isr requirement of {self.min_insync_replicas}",
            )
        info = self.log.append_as_leader(records, headers, self.leader_epoch, now_ms)
        self.maybe_increment_high_watermark()
        return AppendResult(ErrorCode.NONE, info.first_offset, info.log_append_time_ms, info.log_start_offset)

    def maybe_increment_high_watermark(self) -> bool:
        """HW = min LEO over the ISR (never moving back). A follower's LEO is known once it fetches;
        a lone broker's ISR is itself, so its HW is its LEO, including right after crash recovery."""
        if not self.is_leader or self._log is None:
            return False
        new_hw = min([self.log.log_end_offset] +
                     [self.follower_log_end_offsets.get(r, 0) for r in self.isr if r != self.broker_id])
        if new_hw > self.log.high_watermark:
            self.log.update_high_watermark(new_hw)
            return True
        return False


class ReplicaManager:
    """This broker's partitions. Metadata changes register and unregister partitions on the event loop
    at once; creating and deleting their logs (files, directories, fsyncs) runs on executor threads in
    slices of LOG_WORK_SLICE partitions, so a CreateTopics, CreatePartitions or DeleteTopics of
    thousands of partitions, or a restart after a crash in the middle of one, never stops the loop
    answering others. Log work is chained per topic (a deletion finishes before a re-creation of the
    same name starts); `log_work_done(topic)` is a future admin responses wait on."""

    def __init__(self, config: BrokerConfig, store: MetadataStore, log_manager: LogManager) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.store = store
        self.log_manager = log_manager
        self.partitions: dict[tuple[str, int], Partition] = {}
        # Hosted partitions without a Partition yet: logs still loading at startup, and logs that
        # failed to load or be created (offline, with the reason).
        self.loading: set[tuple[str, int]] = set()
        self.offline: dict[tuple[str, int], str] = {}
        self._deleted_while_loading: set[str] = set()
        self.fetch_purgatory = Purgatory()
        self._log_work: dict[str, asyncio.Future[None]] = {}  # topic -> the last queued log work on it
        self._deleting: dict[str, int] = {}  # topic -> deletions of its logs queued or running

    # --- metadata -> local state -----------------------------------------------------
    def sync_all(self) -> None:
        """Bring local partitions in line with the store (at startup and after any change)."""
        topics = self.store.topics()
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

    def sync_topic(self, t: TopicMetadata) -> None:
        """Register the topic's partitions hosted here and queue the creation of their missing logs. A log
        found on disk is the partition's, unless it belongs to an earlier topic of the same name whose
        deletion is still under way (then the partition waits for that and starts empty). Logs left by a
        deletion a crash cut short are adopted, as before: telling them apart needs topic ids in the logs."""
        cfg = log_config_for(self.config, t.configs, t.name)
        min_isr = cfg.min_insync_replicas
        compression_type = cfg.compression_type
        missing: list[int] = []
        for p, state in t.partitions.items():
            if self.broker_id not in state.replicas:
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
                self.loading.discard(key)
                self.offline.pop(key, None)
                lg = None if self._deleting.get(t.name) else self.log_manager.get_log(t.name, p)
                self.partitions[key] = Partition(t.name, p, lg, state, self.broker_id, min_isr, compression_type,
                                                 open_log=self._open_log_now, log_config=cfg)
                if lg is None:
                    missing.append(p)
                elif lg.config != cfg:
                    lg.update_config(cfg)
            else:
                part.apply_state(state)
                part.min_insync_replicas = min_isr
                part.compression_type = compression_type
                part.log_config = cfg
                if part.has_log and part.log.config != cfg:
                    part.log.update_config(cfg)
        if missing:
            self._queue_creation(t.name, missing, cfg)

    def on_logs_loaded(self) -> None:
        """Every log on disk is loaded: bring their partitions online, and delete the logs of
        topics deleted while they were loading."""
        for topic in self._deleted_while_loading:
            if self.store.topic(topic) is None:
                doomed = sorted(p for (name, p) in self.log_manager.logs() if name == topic)
                if doomed:
                    self._queue_deletion(topic, doomed)
        self._deleted_while_loading.clear()
        self.loading.clear()
        self.sync_all()

    def is_loading(self, topic: str, p: int) -> bool:
        return (topic, p) in self.loading

    def on_metadata_change(self, event: str, topic: str) -> None:
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
            self._queue_deletion(topic, sorted(doomed))
            return
        t = self.store.topic(topic)
        if t is not None:
            self.sync_topic(t)

    def remove_partition(self, topic: str, p: int, delete: bool) -> None:
        part = self.partitions.pop((topic, p), None)
        if part is None:
            return
        self.fetch_purgatory.complete_all((topic, p))
        if delete:
            self._queue_deletion(topic, [p])

    # --- log creation and deletion, off the event loop -------------------------------
    def log_work_done(self, topic: str) -> asyncio.Future[None] | None:
        """A future done when the log work queued so far on `topic` is done; None when nothing is queued."""
        fut = self._log_work.get(topic)
        return None if fut is None or fut.done() else asyncio.shield(fut)

    def _open_log_now(self, part: Partition) -> Log:
        """Create a partition's log on the calling thread (the first request for it came before the
        background work). Refused while a deletion of the topic's earlier logs is under way."""
        if self._deleting.get(part.topic):
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

    def _chain(self, topic: str, work: Callable[[], Awaitable[None]]) -> None:
        """Run `work` after the log work already queued on `topic`."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (tools, tests of the storage layer): do it now
            asyncio.run(work())
            return
        prev = self._log_work.get(topic)

        async def run() -> None:
            if prev is not None:
                await asyncio.wait([prev])
            try:
                await work()
            except StorageError as e:  # the log manager shut down under it (broker stopping), or a disk error
                log.warning("log work on topic %s stopped: %s", topic, e)
            except Exception:
                log.exception("log work on topic %s failed", topic)

        fut = loop.create_task(run())
        self._log_work[topic] = fut

        def forget(f: asyncio.Future[None]) -> None:
            if self._log_work.get(topic) is f:
                del self._log_work[topic]

        fut.add_done_callback(forget)

    def _queue_creation(self, topic: str, ps: list[int], cfg: LogConfig) -> None:
        # A log left by a clean shutdown is not this work's: its first user opens it, or the log manager's
        # one background thread (this work, spread over every topic's chain, took the GIL from the loop for
        # seconds after a restart of 10,000 partitions).
        ps = [p for p in ps if not self.log_manager.is_unopened(topic, p)]
        if not ps:
            return

        async def create() -> None:
            loop = asyncio.get_running_loop()
            t0 = time.monotonic()
            for i in range(0, len(ps), LOG_WORK_SLICE):
                todo = [p for p in ps[i:i + LOG_WORK_SLICE] if self._wants_log(topic, p)]
                if not todo:
                    continue
                # The Partitions these logs are for: if the topic is deleted (and perhaps re-created) while
                # the executor works, the logs belong to the deleted topic, whose deletion (queued after this
                # work) closes them; a re-created topic's Partition must never be handed one (fuzz finding:
                # a Fetch then met a closed log).
                owners = {p: self.partitions.get((topic, p)) for p in todo}
                logs = await loop.run_in_executor(None, self._create_logs, topic, todo, cfg)
                for p, lg in logs:
                    part = self.partitions.get((topic, p))
                    if part is None or part is not owners[p]:
                        continue
                    if isinstance(lg, Exception):  # one partition's failure must not stop the others
                        self._set_offline(topic, p, lg)
                        continue
                    part.attach_log(lg)
            created = sum(1 for p in ps if self.partitions.get((topic, p)) is not None)  # some on first use
            if created:
                log.info("created %d log%s of %s in %.0f ms", created, "s" if created > 1 else "", topic,
                         (time.monotonic() - t0) * 1000)

        self._chain(topic, create)

    def _wants_log(self, topic: str, p: int) -> bool:
        part = self.partitions.get((topic, p))
        return part is not None and not part.has_log

    def _create_logs(self, topic: str, ps: list[int], cfg: LogConfig) -> list[tuple[int, Log | Exception]]:
        """One slice's logs in one call: the log manager fsyncs the parent dir once for all of them (and
        opens, rather than creates, the logs it holds on disk unopened since a clean start)."""
        out = self.log_manager.get_or_create_logs(topic, ps, cfg)
        if self.log_manager.closed:
            raise StorageError("the log manager is shut down")
        return out

    def _set_offline(self, topic: str, p: int, e: Exception) -> None:
        key = (topic, p)
        if key not in self.offline:
            log.error("partition %s-%d is offline: %s", topic, p, e)
        self.offline[key] = str(e)
        self.remove_partition(topic, p, delete=False)

    def _queue_deletion(self, topic: str, ps: list[int]) -> None:
        """Delete the topic's logs `ps` once the log work queued before on the topic is done. Until then no
        log of the topic is created on first use (it could be one of these, about to be deleted)."""
        self._deleting[topic] = self._deleting.get(topic, 0) + 1

        async def delete() -> None:
            try:
                loop = asyncio.get_running_loop()
                t0 = time.monotonic()
                for i in range(0, len(ps), LOG_WORK_SLICE):
                    await loop.run_in_executor(None, self._delete_logs, topic, ps[i:i + LOG_WORK_SLICE])
                if len(ps) > 1:
                    log.info("deleted %d logs of %s in %.0f ms", len(ps), topic, (time.monotonic() - t0) * 1000)
            finally:
                left = self._deleting[topic] - 1
                if left:
                    self._deleting[topic] = left
                else:
                    del self._deleting[topic]

        self._chain(topic, delete)

    def _delete_logs(self, topic: str, ps: list[int]) -> None:
        for p in ps:
            self.log_manager.delete_log(topic, p)

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

    def append(self, topic: str, p: int, records: memoryview, headers: list[BatchHeader], required_acks: int) -> AppendResult:
        part = self.get_leader_partition(topic, p)
        result = part.append_as_leader(records, headers, required_acks, int(time.time() * 1000))
        self.fetch_purgatory.on_progress((topic, p), len(records))
        return result
