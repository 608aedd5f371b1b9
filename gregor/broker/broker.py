"""The broker: composes config, storage, metadata (store and cache), topic admin, replica manager and network.

Lifecycle: `__init__` only scans the log dirs (directory listings and checkpoint files).
`start()` binds the listeners and registers with the metadata store at once, then loads the
logs (recovering after a crash) on a worker thread: the broker answers within moments of
listening, reporting partitions still loading as Kafka does (Metadata: LEADER_NOT_AVAILABLE;
Produce, Fetch, ListOffsets: NOT_LEADER_OR_FOLLOWER; group APIs: COORDINATOR_LOAD_IN_PROGRESS),
so clients retry. Once every log is loaded, the partitions come online, the group coordinator
replays __consumer_offsets, the periodic jobs (retention, flush, checkpoints) start and
"all logs loaded" is logged. Only logs that need recovery are loaded first: after a clean shutdown
the logs are opened by their first request, or on one background thread after that ("every log
open"), so 10,000 partitions serve within a second. `shutdown()` stops accepting, lets in-flight requests finish, answers
parked fetches, flushes and writes recovery checkpoints with a clean-shutdown marker.

Metadata is read from `metadata_cache`, on the loop; the store is written only through
`topic_admin` (off the loop) and its changes come back as events applied to the cache.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import resource
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from gregor.admin.topic_admin import TopicAdmin
from gregor.api import throttling
from gregor.api.dispatcher import Dispatcher
from gregor.api.handlers import HANDLERS
from gregor.broker.metrics_endpoint import MetricsServer
from gregor.broker.txn_wiring import build_txn_coordinator
from gregor.config import BrokerConfig, ConfigError
from gregor.config.dynamic import (
    ALTER_LOG_DIRS_IO,
    CLEANER,
    CONNECTION_LIMITS,
    FETCHERS,
    LISTENER_TLS,
    THROTTLES,
    TOPIC_DEFAULTS,
    DynamicBrokerConfig,
    listener_key,
)
from gregor.controller.controller import Controller
from gregor.coordinator.group.coordinator import OFFSETS_TOPIC, GroupCoordinator, append_via
from gregor.coordinator.group.group_configs import store_name
from gregor.coordinator.internal_topic import InternalTopic
from gregor.coordinator.transaction.coordinator import TransactionCoordinator
from gregor.coordinator.transaction.producer_ids import ProducerIdManager
from gregor.coordinator.transaction.state_manager import TRANSACTION_STATE_TOPIC
from gregor.metadata.cache import MetadataCache
from gregor.metadata.embedded import EmbeddedMetadataStore
from gregor.metadata.store import (
    BROKER_CONFIGS,
    DEFAULT_ENTITY,
    SESSION,
    SESSION_RESTORED,
    BrokerInfo,
    CreateTopic,
    MetadataStore,
    SetBrokerConfigs,
    TopicMetadata,
)
from gregor.metrics.registry import BrokerMetrics
from gregor.network.socket_server import SocketServer
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.replication.replica_manager import ReplicaManager, log_config_for
from gregor.security.authorizer import create_authorizer
from gregor.security.quotas import ClientQuotaManager
from gregor.security.sasl.listener import build_sasl_listeners
from gregor.security.tls import ServerTls, TlsSettings
from gregor.storage.config import CleanerConfig
from gregor.storage.log_manager import LogManager

log = logging.getLogger("gregor.broker")


def _now_ms() -> int:
    return int(time.time() * 1000)


class Broker:
    def __init__(self, config: BrokerConfig, store: MetadataStore | None = None) -> None:
        self.config = config
        t0 = time.monotonic()
        self._owns_store = store is None  # a store handed in (in-process clusters in tests) is its owner's to close
        if store is None and config.get("zookeeper.connect"):
            if "broker.id" not in config.explicit:
                raise ConfigError("broker.id must be set explicitly when zookeeper.connect is set (each broker of a "
                                  "cluster needs its own id)")
            try:  # kazoo is the `cluster` extra: a lone broker runs without it
                from gregor.metadata.zookeeper import ZooKeeperMetadataStore
            except ModuleNotFoundError as e:
                raise ConfigError(f"zookeeper.connect needs the ZooKeeper client ({e}): run scripts/install.sh "
                                  "cluster (or pip install 'gregor[cluster]')") from None
            store = ZooKeeperMetadataStore(config)
        self.broker_epoch = -1  # this registration's epoch (the znode's czxid); renewed with the session
        self.store = store or EmbeddedMetadataStore(
            config.log_dirs[0], config.broker_id,
            snapshot_bytes=config.get("metadata.log.max.record.bytes.between.snapshots"))
        self.metadata_cache = MetadataCache()
        self.metadata_cache.load(self.store.snapshot())
        # authorizer.class.name: None (no authorization) unless set; it reads the cache's ACL index.
        self.authorizer = create_authorizer(config.get("authorizer.class.name"), config.get("super.users"),
                                            config.get("allow.everyone.if.no.acl.found"))
        if self.authorizer is not None:
            self.authorizer.attach(self.metadata_cache.acls)
        # Logs open with their topics' configs, so the cleaner never sees a compacted log as delete-only.
        topic_configs = {name: log_config_for(config, t.configs, name)
                         for name, t in self.metadata_cache.topics().items()}
        self.log_manager = LogManager(config.log_dirs, config.log_config, topic_configs,
                                      cleaner_config=CleanerConfig.from_broker(config.get),
                                      load=False, open_files_max=config.get("log.segment.open.files.max"))
        self.log_manager.mover.rate_bytes_per_s = config.get(ALTER_LOG_DIRS_IO)
        log.info("scanned the log dirs in %.0f ms", (time.monotonic() - t0) * 1000)
        self.topic_admin = TopicAdmin(self.store, self.metadata_cache, config)
        self.dynamic_config = DynamicBrokerConfig(config)
        self.replica_manager = ReplicaManager(config, self.store, self.log_manager, self.metadata_cache)
        self.replica_manager.on_log_dir_failure = self._on_log_dir_failure
        self.controller = Controller(config, self.store, self.metadata_cache)
        self.producer_ids = ProducerIdManager(self.store)
        commits = append_via(self.replica_manager, config.get("offsets.commit.required.acks"),
                             config.get("offsets.commit.timeout.ms"))
        self.group_coordinator = GroupCoordinator(config, commits, self._read_offsets_partition)
        self.offsets_topic = InternalTopic(
            OFFSETS_TOPIC, self.topic_admin, self.metadata_cache, config.get("offsets.topic.num.partitions"),
            config.get("offsets.topic.replication.factor"),
            {"cleanup.policy": "compact", "segment.bytes": str(config.get("offsets.topic.segment.bytes"))})
        self.txn_topic = InternalTopic(
            TRANSACTION_STATE_TOPIC, self.topic_admin, self.metadata_cache,
            config.get("transaction.state.log.num.partitions"), config.get("transaction.state.log.replication.factor"),
            {"cleanup.policy": "compact", "segment.bytes": str(config.get("transaction.state.log.segment.bytes"))},
            min_isr=config.get("transaction.state.log.min.isr"))
        self.txn_coordinator = build_txn_coordinator(self, self._read_txn_partition)
        self.quotas = ClientQuotaManager(throttling.quota_settings(config))  # before the dispatcher, which reads it
        self.dispatcher = Dispatcher(self, HANDLERS)
        self.socket_server = SocketServer(
            self.dispatcher,
            max_request_bytes=config.get("socket.request.max.bytes"),
            max_queued_requests=config.get("queued.max.requests"),
            max_connections=config.get("max.connections"),
            max_connections_per_ip=config.get("max.connections.per.ip"),
            max_connections_per_ip_overrides=config.get("max.connections.per.ip.overrides"),
            connections_max_idle_ms=config.get("connections.max.idle.ms"),
            max_queued_request_bytes=config.get("queued.max.request.bytes"),
            max_response_bytes=config.get("queued.max.response.bytes"),
            max_connection_response_bytes=config.get("queued.max.response.bytes.per.connection"),
            send_buffer_bytes=config.get("socket.send.buffer.bytes"),
            receive_buffer_bytes=config.get("socket.receive.buffer.bytes"),
        )
        self.socket_server.set_listener_limits(self.dynamic_config.listener_connection_limits())
        self.bound_ports: list[int] = []
        # The Prometheus endpoint's counters (gregor.metrics.registry): None when metrics.port is unset, and
        # then every hot-path hook is one `is None` test.
        self.metrics: BrokerMetrics | None = BrokerMetrics() if config.get("metrics.port") >= 0 else None
        self.metrics_server: MetricsServer | None = None
        self.socket_server.metrics = self.metrics
        self.replica_manager.metrics = self.metrics
        self.replica_manager.isr.metrics = self.metrics
        if self.metrics is not None:
            self.log_manager.on_flush = self.metrics.log_flush.observe
        # A TLS context per TLS listener, built now so a bad key store is a startup error naming it.
        self.listener_tls: dict[str, ServerTls] = {
            spec.name: ServerTls(TlsSettings.from_config(config, spec.name), f"listener {spec.name}")
            for spec in config.listener_specs if spec.uses_tls}
        # What each SASL listener serves (gregor.security.sasl), checked now: a listener that cannot authenticate is a startup error.
        self.sasl_listeners = build_sasl_listeners(config, self.metadata_cache.entity_configs)
        self._load_task: asyncio.Future[None] | None = None
        self._cleaner_reconfig: asyncio.Future[None] | None = None  # a log cleaner restart with new settings
        self._shutting_down = False
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()
        self._offsets_loaded = False  # the coordinators replayed what they lead, after the logs loaded

    # --- lifecycle -------------------------------------------------------------------
    async def start(self) -> None:
        bound: dict[str, int] = {}
        for spec in self.config.listener_specs:
            bound[spec.name] = await self.socket_server.listen(spec, self.listener_tls.get(spec.name))
            self.bound_ports.append(bound[spec.name])
        endpoints = tuple((a.name, a.host or "127.0.0.1", a.port or bound[a.name]) for a in self.config.advertised_specs)
        inter = next((e for e in endpoints if e[0] == self.config.inter_broker_listener), endpoints[0])
        protocols = tuple((s.name, s.protocol) for s in self.config.listener_specs)
        # Registered on the loop, once, before anything is read: a request accepted meanwhile must find this
        # broker in the cache, so the cache catches up from the store right after (attach), not by event.
        self.broker_epoch = self.store.register_broker(BrokerInfo(
            self.config.broker_id, inter[1], inter[2], self.config.get("broker.rack") or None,
            endpoints=endpoints, protocols=protocols))
        self.metadata_cache.attach(self.store, asyncio.get_running_loop())
        self.metadata_cache.add_listener(self.replica_manager.on_metadata_change)
        self.metadata_cache.add_listener(self._follow_coordinator_leadership)  # after the replica manager's
        self.metadata_cache.add_listener(self._on_session_change)
        self.metadata_cache.add_listener(self._on_broker_configs)
        # KIP-848 group configs (GROUP resources), read at each heartbeat and session timer.
        self.group_coordinator.consumer.group_configs = (
            lambda group_id: self.metadata_cache.entity_configs("groups", store_name(group_id)))
        if self.authorizer is not None:
            self.metadata_cache.add_listener(self.authorizer.on_metadata_change)
        self.metadata_cache.add_listener(throttling.follow_quota_configs(self.quotas, self.metadata_cache))
        self._rotate_password_secret()
        self._apply_dynamic_configs()
        self.controller.start()
        self.replica_manager.sync_all()  # new partitions only: the ones on disk are still loading
        self.replica_manager.start_replication()
        self._load_task = asyncio.ensure_future(self._load_logs())
        if self.metrics is not None:
            self.metrics_server = MetricsServer(self)
            await self.metrics_server.start(self.config.get("metrics.host"), self.config.get("metrics.port"))
        log.info(
            "Gregor broker %d started: listening on %s (cluster id %s)",
            self.config.broker_id,
            ", ".join(f"{s.name}://{s.host}:{p}" for s, p in zip(self.config.listener_specs, self.bound_ports, strict=True)),
            self.metadata_cache.cluster_id,
        )

    async def _load_logs(self) -> None:
        """Load the logs that need recovery off the event loop, then bring the partitions online; then
        open the logs of a clean shutdown that no request opened first (in the background: each is opened
        by its first user meanwhile, so 10,000 clean logs serve within a second of the start)."""
        t0 = time.monotonic()
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, functools.partial(self.log_manager.load_logs, open_lazy=False))
        except Exception:  # not one bad log (those go offline): something systemic; stop cleanly
            log.exception("loading the logs failed; stopping the broker")
            self.request_stop()
            return
        if self.log_manager.loading or self._shutting_down:  # stopped early by a shutdown
            return
        self.replica_manager.on_logs_loaded()
        self._offsets_loaded = True
        self.group_coordinator.load(self._offsets_partitions_led())
        self.txn_coordinator.follow_leadership(self.txn_topic.led(self.replica_manager))
        self._every(self.config.get("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
                    self._abort_timed_out_txns)
        self._every(self.config.get("transaction.remove.expired.transaction.cleanup.interval.ms"),
                    self._expire_transactional_ids)
        self._every(self.config.get("log.retention.check.interval.ms"), self._retention)
        # Kafka checks flush.ms every log.flush.scheduler.interval.ms (default: never); we check at
        # least every second, which also flushes rolled segments (Kafka schedules those one by one).
        flush_ms = min(self.config.get("log.flush.scheduler.interval.ms"), 2**31)
        self._every(max(1, min(flush_ms, 1000)), self._flush)
        self._every(self.config.get("replica.high.watermark.checkpoint.interval.ms"), self._checkpoint)
        self._every(self.config.get("offsets.retention.check.interval.ms"), self._expire_offsets)
        self._every(self.config.get("producer.id.expiration.check.interval.ms"), self._expire_producers)
        if self.listener_tls and self.config.get("gregor.ssl.reload.check.interval.ms") > 0:
            self._every(self.config.get("gregor.ssl.reload.check.interval.ms"), self._reload_tls)
        log.info("all logs loaded: %d logs online, %d offline, in %.0f ms", len(self.log_manager.all_logs()),
                 len(self.log_manager.offline), (time.monotonic() - t0) * 1000)
        try:
            opened = await loop.run_in_executor(None, self.log_manager.open_lazy_logs)
        except Exception:  # one bad log goes offline inside; anything else is logged, the broker serves on
            log.exception("opening the logs of the last clean shutdown failed")
            return
        if self._shutting_down:
            return
        self.replica_manager.take_offline_logs()
        log.info("every log open: %d opened in the background, %d offline, in %.0f ms", opened,
                 len(self.log_manager.offline), (time.monotonic() - t0) * 1000)

    def request_stop(self) -> None:
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def shutdown(self) -> None:
        log.info("shutting down")
        self.replica_manager.retiring = True
        await self.controller.controlled_shutdown()
        self._shutting_down = True
        self.socket_server.stop_accepting()
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        await self.replica_manager.stop_replication()
        self.metadata_cache.detach(self.store)  # its logs close below: no listener may act on them after
        self.replica_manager.shutdown()
        self.group_coordinator.shutdown()
        self.txn_coordinator.shutdown()
        await self.socket_server.drain(timeout_s=5.0)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # Stops a load in progress after the log being opened (waits for it, off the loop). On a thread of
        # its own: the shared executor may hold a queue of log work (a restart's background opening of
        # 10,000 logs) that would run first, only to be refused once the log manager is shut down.
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="log-shutdown") as pool:
            await asyncio.get_running_loop().run_in_executor(pool, self.log_manager.shutdown)
        if self._load_task is not None:
            await asyncio.gather(self._load_task, return_exceptions=True)
        await self.controller.stop()
        await asyncio.get_running_loop().run_in_executor(None, self._close_metadata)
        log.info("shut down cleanly")

    def _close_metadata(self) -> None:
        self.topic_admin.close()  # the writes under way finish first
        self.store.unregister_broker(self.config.broker_id)  # the registration goes last: others see this broker until its logs are closed
        if self._owns_store:
            self.store.close()

    def _on_log_dir_failure(self, log_dir: str, partitions: list[tuple[str, int]]) -> None:
        """A log dir failed (on the loop): on a cluster the controller is told, so it moves the leadership of
        these partitions and takes this broker out of their ISRs (Kafka's log dir event notification)."""
        if not partitions:
            return

        def notify() -> None:
            try:
                self.store.notify_log_dir_failure(self.config.broker_id, partitions)
            except Exception:  # the store unreachable: followers' ISR shrink still takes this broker out
                log.exception("could not tell the controller that log dir %s failed", log_dir)

        asyncio.get_running_loop().run_in_executor(None, notify)

    def _on_broker_configs(self, kind: str, entity: str) -> None:
        if kind == BROKER_CONFIGS and entity in (DEFAULT_ENTITY, str(self.config.broker_id)):
            self._apply_dynamic_configs()

    def _rotate_password_secret(self) -> None:
        """With password.encoder.old.secret set, this broker's stored dynamic passwords are decoded with it and
        written back under password.encoder.secret (Kafka's rotation at start; the cluster default holds
        no passwords). Synchronous: the start waits for it, as for the registration."""
        mine = str(self.config.broker_id)
        rewritten = self.dynamic_config.reencoded(self.metadata_cache.broker_configs(mine))
        if rewritten is not None:
            (result,) = self.store.apply([SetBrokerConfigs(mine, rewritten)])
            if isinstance(result, int):
                log.info("broker %d: dynamic passwords re-encrypted with the new password.encoder.secret",
                         self.config.broker_id)
            else:
                log.error("broker %d: dynamic passwords not re-encrypted: %s", self.config.broker_id, result)

    def _apply_dynamic_configs(self) -> None:
        """This broker's dynamic configs over the cluster default's, applied at once (dynamic_config)."""
        changed = self.dynamic_config.update(self.metadata_cache.broker_configs(DEFAULT_ENTITY),
                                             self.metadata_cache.broker_configs(str(self.config.broker_id)))
        d = self.dynamic_config
        if ALTER_LOG_DIRS_IO in changed:
            self.log_manager.mover.rate_bytes_per_s = d.get(ALTER_LOG_DIRS_IO)
        if changed & THROTTLES:
            self.replica_manager.set_replication_throttles(d.get("leader.replication.throttled.rate"),
                                                           d.get("follower.replication.throttled.rate"))
        if changed & TOPIC_DEFAULTS:
            defaults = d.topic_defaults()
            if defaults is not None and defaults != self.config.log_config:
                log.info("broker %d: topic config defaults changed: %s", self.config.broker_id,
                         ", ".join(f"{n}={d.get(n)}" for n in sorted(changed & TOPIC_DEFAULTS)))
                self.config.log_config = defaults  # what every topic without an override reads
                self.replica_manager.refresh_log_configs()
        if changed & CLEANER and (cleaner := d.cleaner()) is not None:
            log.info("broker %d: log cleaner settings: %s", self.config.broker_id,
                     ", ".join(f"{n}={d.get(n)}" for n in sorted(CLEANER)))
            # The cleaner threads stop (a clean is aborted) and start again: off the loop, in order.
            self._cleaner_reconfig = asyncio.ensure_future(asyncio.get_running_loop().run_in_executor(
                None, functools.partial(self.log_manager.reconfigure_cleaner, cleaner)))
        tls_changed = {lk[0] for n in changed if (lk := listener_key(n)) is not None and lk[1] in LISTENER_TLS}
        for name, tls in self.listener_tls.items():
            if name.lower() in tls_changed:  # new connections get the new stores; no value is logged
                tls.reload(TlsSettings.from_config(d, name))
        if changed & FETCHERS:
            self.replica_manager.fetcher_manager.resize(d.get("num.replica.fetchers"))
        if any((lk := listener_key(n)) is not None and lk[1] == "max.connections" for n in changed):
            limits = d.listener_connection_limits()
            log.info("broker %d: listener connection limits: %s", self.config.broker_id,
                     ", ".join(f"{k.upper()}={v}" for k, v in sorted(limits.items())) or "none")
            self.socket_server.set_listener_limits(limits)
        if changed & CONNECTION_LIMITS:
            log.info("broker %d: connection limits: %s", self.config.broker_id,
                     ", ".join(f"{n}={d.get(n)}" for n in sorted(CONNECTION_LIMITS)))
            self.socket_server.set_connection_limits(d.get("max.connections"), d.get("max.connections.per.ip"),
                                                     d.get("max.connections.per.ip.overrides"))

    def _on_session_change(self, kind: str, what: str) -> None:
        """The store registered this broker again on a new ZooKeeper session: a new broker epoch."""
        if kind == SESSION and what == SESSION_RESTORED:
            me = next((b for b in self.metadata_cache.brokers() if b.broker_id == self.config.broker_id), None)
            if me is not None:
                self.broker_epoch = me.epoch
                log.info("registered again after the ZooKeeper session expired: broker epoch %d", me.epoch)

    # --- periodic jobs ---------------------------------------------------------------
    def _every(self, interval_ms: int, job: Callable[[], Awaitable[None]]) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(interval_ms / 1000.0)
                try:
                    await job()
                except Exception:
                    log.exception("periodic job %s failed", job.__name__)

        self._tasks.append(asyncio.ensure_future(loop()))

    async def _reload_tls(self) -> None:
        for tls in self.listener_tls.values():
            tls.reload_if_changed()

    async def _retention(self) -> None:
        # On the loop thread: segment deletion changes what reads see, and it is quick.
        self.log_manager.cleanup_logs(_now_ms())

    async def _flush(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.flush_dirty_logs, _now_ms())

    async def _checkpoint(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.checkpoint)

    async def _expire_offsets(self) -> None:
        self.group_coordinator.expire_offsets()

    async def _abort_timed_out_txns(self) -> None:
        self.txn_coordinator.abort_timed_out()

    async def _expire_transactional_ids(self) -> None:
        self.txn_coordinator.expire_ids()

    async def _expire_producers(self) -> None:
        # On the loop thread, where appends update the state; a dict scan per log, no I/O.
        expiration_ms, now = self.config.get("producer.id.expiration.ms"), _now_ms()
        for lg in self.log_manager.all_logs():
            lg.remove_expired_producers(now, expiration_ms)

    # --- the coordinators follow the leadership of their internal topics ------------------------
    def _offsets_partitions_led(self) -> set[int]:
        return set(self.offsets_topic.led(self.replica_manager))

    def _follow_coordinator_leadership(self, kind: str, topic: str) -> None:
        """A cache listener (after the replica manager's, so each Partition knows whether it leads): the
        coordinator of a group is the leader of its __consumer_offsets partition, as in Kafka; of a
        transactional id, the leader of its __transaction_state partition."""
        if not self._offsets_loaded or self._shutting_down:
            return
        if topic in (OFFSETS_TOPIC, "", "lost", "restored"):
            self.group_coordinator.follow_leadership(self._offsets_partitions_led())
        if topic in (TRANSACTION_STATE_TOPIC, "", "lost", "restored"):
            self.txn_coordinator.follow_leadership(self.txn_topic.led(self.replica_manager))

    # --- helpers for handlers --------------------------------------------------------
    def group_coordinator_ready(self) -> GroupCoordinator:
        """The coordinator, once __consumer_offsets exists (created on first use, as Kafka does) and the
        logs are loaded (until then COORDINATOR_LOAD_IN_PROGRESS: clients retry). The offsets topic's logs
        are created in the background; the one a group writes to first is created then (one log, not fifty)."""
        if self.log_manager.loading:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "the broker is loading its logs")
        self.offsets_topic.ensure()
        return self.group_coordinator

    def offsets_topic_creation(self) -> asyncio.Future[None] | None:
        """None once __consumer_offsets exists; else a future done when the creation under way (started now
        if none is) ends, whether it succeeded or not. FindCoordinator waits on it rather than failing."""
        return self.offsets_topic.creation()

    def txn_topic_creation(self) -> asyncio.Future[None] | None:
        return self.txn_topic.creation()

    def txn_coordinator_ready(self) -> TransactionCoordinator:
        """The transaction coordinator, once __transaction_state exists (created on first use) and the
        logs are loaded."""
        if self.log_manager.loading:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "the broker is loading its logs")
        self.txn_topic.ensure()
        return self.txn_coordinator

    def _read_offsets_partition(self, p: int) -> Iterator[memoryview]:
        return self.offsets_topic.read_partition(self.replica_manager, self.log_manager, p)

    def _read_txn_partition(self, p: int) -> Iterator[memoryview]:
        return self.txn_topic.read_partition(self.replica_manager, self.log_manager, p)

    async def auto_create_topics(self, names: list[str]) -> dict[str, TopicMetadata | KafkaError]:
        """Metadata's auto topic creation: with the broker's defaults and limits (max.broker.partitions and
        the open-file budget apply as to CreateTopics), in one store write. `__consumer_offsets` is created
        as the group coordinator needs it, as Kafka does; other internal topics are refused by TopicAdmin."""
        out: dict[str, TopicMetadata | KafkaError] = {}
        prepared: list[TopicMetadata] = []
        for name in names:
            internal = {OFFSETS_TOPIC: self.offsets_topic, TRANSACTION_STATE_TOPIC: self.txn_topic}.get(name)
            if internal is not None:
                pending = internal.creation()
                if pending is not None:
                    await pending
                t = self.metadata_cache.topic(name)
                out[name] = t if t is not None else KafkaError(
                    ErrorCode.LEADER_NOT_AVAILABLE, f"{name} is being created")
                continue
            try:
                prepared.append(self.topic_admin.prepare_topic(name))
            except KafkaError as e:
                out[name] = e
        errors = await self.topic_admin.write([CreateTopic(t) for t in prepared])
        for t, err in zip(prepared, errors, strict=True):
            out[t.name] = err if err is not None else (self.metadata_cache.topic(t.name) or t)
        for name, v in out.items():  # created meanwhile by another request: that is the topic
            if isinstance(v, KafkaError) and v.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                existing = self.metadata_cache.topic(name)
                out[name] = existing if existing is not None else KafkaError(
                    ErrorCode.LEADER_NOT_AVAILABLE, f"Topic {name} is being created")
        return out


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit, as a broker needs a descriptor per partition and per
    connection; returns (old soft, new soft). The partition limits count on what this leaves."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20) if soft != resource.RLIM_INFINITY else soft
    if soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        except (ValueError, OSError) as e:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, hard, e)
            return soft, soft
        log.info("raised the open-file limit (RLIMIT_NOFILE) from %d to %d", soft, hard)
        return soft, hard
    return soft, soft


async def run_broker(config: BrokerConfig, on_started: Callable[[Broker], Any] | None = None) -> None:
    """Start a broker, serve until SIGTERM/SIGINT, then shut down cleanly."""
    import signal

    raise_open_file_limit()  # before the logs open
    broker = Broker(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before start: a signal during start still stops cleanly
        loop.add_signal_handler(sig, broker.request_stop)
    await broker.start()
    if on_started is not None:
        on_started(broker)
    await broker.wait_stopped()
    await broker.shutdown()
