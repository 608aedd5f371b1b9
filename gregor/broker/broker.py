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

Everything the broker owns it creates here and shuts down in `shutdown()`, and hands to its users: the
request handlers get a `BrokerServices` (gregor.api.context), never the Broker. Its other jobs are in
rooms of their own: the coordinators (broker/coordinators.py), the dynamic configs (dynamic_configs.py),
the periodic jobs (periodic.py), auto topic creation (auto_topics.py), the metrics endpoint, the event
loop's stall detector (loop_monitor.py) and, for a broker that is its own process, the interpreter's
settings (interpreter.py: the GIL switch interval and the garbage collector's schedule).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import gc
import logging
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gregor.admin.topic_admin import TopicAdmin, TopicAdminSettings
from gregor.api import throttling
from gregor.api.context import ApiSettings, BrokerServices, Handler
from gregor.api.dispatcher import Dispatcher, supported_apis
from gregor.api.faults import FaultSettings, ProduceFaults
from gregor.api.fetch_session import FetchSessionCache, FetchSessionSettings
from gregor.api.handlers import HANDLERS
from gregor.api.produce_state import ProduceSettings, ProduceState
from gregor.broker.auto_topics import AutoTopicCreator, BrokerTopicConfigs
from gregor.broker.coordinators import BrokerCoordinators
from gregor.broker.dynamic_configs import DynamicConfigApplier, ReplicationDynamicSettings
from gregor.broker.interpreter import CollectorSchedule, tune_interpreter
from gregor.broker.loop_monitor import LoopMonitor, LoopMonitorSettings
from gregor.broker.metrics_endpoint import MetricsServer, MetricsSources
from gregor.broker.periodic import PeriodicJobs, PeriodicSettings
from gregor.broker.schema_registry import BrokerSchemaRegistry
from gregor.config import BrokerConfig, ConfigError
from gregor.config.dynamic import DynamicBrokerConfig
from gregor.config.kraft import BROKER_ROLE
from gregor.configdef import Settings, setting
from gregor.controller.controller import Controller, ControllerSettings
from gregor.controller.shutdown import ControlledShutdownSettings
from gregor.coordinator.group.coordinator import OFFSETS_TOPIC
from gregor.coordinator.transaction.producer_ids import ProducerIdManager
from gregor.coordinator.transaction.state_manager import TRANSACTION_STATE_TOPIC
from gregor.metadata.cache import MetadataCache
from gregor.metadata.embedded import EmbeddedMetadataStore
from gregor.metadata.store import SESSION, SESSION_RESTORED, BrokerInfo, MetadataStore
from gregor.metrics.registry import BrokerMetrics
from gregor.network.socket_server import ConnectionLimits, SocketServer, SocketServerSettings
from gregor.protocol.messages.raft import DESCRIBE_QUORUM
from gregor.replication.log_configs import log_config_for
from gregor.replication.replica_fetcher import ReplicaFetcherSettings
from gregor.replication.replica_manager import ReplicaManager, ReplicaManagerSettings
from gregor.security.authorizer import create_authorizer
from gregor.security.inter_broker import ClientSecurity
from gregor.security.quotas import ClientQuotaManager
from gregor.security.sasl.listener import build_sasl_listeners
from gregor.security.tls import ServerTls, TlsSettings
from gregor.storage.config import CleanerConfig
from gregor.storage.log_manager import LogManager

if TYPE_CHECKING:
    from gregor.api.context import DescribeQuorum, ForwardToController

log = logging.getLogger("gregor.broker")


@dataclass(frozen=True, slots=True)
class BrokerSettings(Settings):
    """What the broker itself reads to compose its components (theirs are in their own views)."""

    zookeeper_connect: str | None = setting("zookeeper.connect")
    snapshot_bytes: int = setting("metadata.log.max.record.bytes.between.snapshots")
    authorizer_class_name: str = setting("authorizer.class.name")
    super_users: str | None = setting("super.users")
    allow_everyone_if_no_acl_found: bool = setting("allow.everyone.if.no.acl.found")
    open_files_max: int = setting("log.segment.open.files.max")
    rack: str | None = setting("broker.rack")
    metrics_host: str = setting("metrics.host")
    metrics_port: int = setting("metrics.port")


class Broker:
    def __init__(self, config: BrokerConfig, store: MetadataStore | None = None,
                 describe_quorum: DescribeQuorum | None = None,
                 forward_to_controller: ForwardToController | None = None) -> None:
        """`describe_quorum`: KRaft mode's DescribeQuorum (broker/kraft_node.py); the API is served only with it.
        `forward_to_controller`: KRaft mode's forwarding of the controller's APIs (gregor.api.forwarding)."""
        self.config = config
        self._describe_quorum = describe_quorum
        self._forward_to_controller = forward_to_controller
        handlers = HANDLERS if describe_quorum is not None else {k: h for k, h in HANDLERS.items()
                                                                 if k != DESCRIBE_QUORUM.key}
        self.settings = s = BrokerSettings.from_config(config)
        t0 = time.monotonic()
        self._owns_store = store is None  # a store handed in (in-process clusters in tests) is its owner's to close
        if store is None and s.zookeeper_connect:
            if "broker.id" not in config.explicit:
                raise ConfigError("broker.id must be set explicitly when zookeeper.connect is set (each broker of a "
                                  "cluster needs its own id)")
            try:  # kazoo is the `cluster` extra: a lone broker runs without it
                from gregor.metadata.zookeeper import ZooKeeperMetadataStore, ZooKeeperSettings
            except ModuleNotFoundError as e:
                raise ConfigError(f"zookeeper.connect needs the ZooKeeper client ({e}): run scripts/install.sh "
                                  "cluster (or pip install 'gregor[cluster]')") from None
            store = ZooKeeperMetadataStore(ZooKeeperSettings.from_config(config))
        self.broker_epoch = -1  # this registration's epoch (the znode's czxid); renewed with the session
        self.store = store or EmbeddedMetadataStore(config.log_dirs[0], config.broker_id, snapshot_bytes=s.snapshot_bytes)
        self.metadata_cache = MetadataCache()
        self.metadata_cache.load(self.store.snapshot())
        # authorizer.class.name: None (no authorization) unless set; it reads the cache's ACL index.
        self.authorizer = create_authorizer(s.authorizer_class_name, s.super_users, s.allow_everyone_if_no_acl_found)
        if self.authorizer is not None:
            self.authorizer.attach(self.metadata_cache.acls)
        # Logs open with their topics' configs, so the cleaner never sees a compacted log as delete-only.
        topic_configs = {name: log_config_for(config.log_config, t.configs)
                         for name, t in self.metadata_cache.topics().items()}
        self.log_manager = LogManager(config.log_dirs, config.log_config, topic_configs,
                                      cleaner_config=CleanerConfig.from_broker(config.get),
                                      load=False, open_files_max=s.open_files_max)
        self.log_manager.mover.rate_bytes_per_s = ReplicationDynamicSettings.from_config(config).alter_log_dirs_io_bytes_per_s
        log.info("scanned the log dirs in %.0f ms", (time.monotonic() - t0) * 1000)
        self.topic_admin = TopicAdmin(self.store, self.metadata_cache, TopicAdminSettings.from_config(config),
                                      lambda: self.config.log_config,
                                      open_files_max=self.log_manager.segment_files.capacity)
        self.dynamic_config = DynamicBrokerConfig(config)
        # The one ClientSecurity of this broker: every inter-broker client (transaction markers, replica
        # fetchers, controlled shutdown) connects with it.
        self.client_security = ClientSecurity.from_config(config)
        self.replica_manager = ReplicaManager(
            ReplicaManagerSettings.from_config(config), ReplicaFetcherSettings.from_config(config), config.log_config,
            self.store, self.log_manager, self.metadata_cache, self.client_security)
        self.replica_manager.on_log_dir_failure = self._on_log_dir_failure
        self.controller = Controller(
            ControllerSettings.from_config(config), self.store, self.metadata_cache,
            lambda: bool(self.config.log_config.unclean_leader_election_enable),
            ControlledShutdownSettings.from_config(config), self.client_security)
        self.producer_ids = ProducerIdManager(self.store)
        self.coordinators = BrokerCoordinators(config, self.replica_manager, self.log_manager, self.topic_admin,
                                               self.metadata_cache, self.producer_ids, self.client_security)
        self.quotas = ClientQuotaManager(throttling.QuotaWindowSettings.from_config(config).quota_settings())
        # The Prometheus endpoint's counters (gregor.metrics.registry): None when metrics.port is unset, and
        # then every hot-path hook is one `is None` test.
        self.metrics: BrokerMetrics | None = BrokerMetrics() if s.metrics_port >= 0 else None
        self.metrics_server: MetricsServer | None = None
        self.replica_manager.metrics = self.metrics
        self.replica_manager.isr.metrics = self.metrics
        if self.metrics is not None:
            self.log_manager.on_flush = self.metrics.log_flush.observe
        self.loop_monitor = LoopMonitor(LoopMonitorSettings.from_config(config),
                                        self.metrics.loop_lag.observe if self.metrics is not None else None,
                                        self.metrics.record_gc if self.metrics is not None else None)
        # A TLS context per TLS listener, built now so a bad key store is a startup error naming it.
        self.listener_tls: dict[str, ServerTls] = {
            spec.name: ServerTls(TlsSettings.from_config(config, spec.name), f"listener {spec.name}")
            for spec in config.listener_specs if spec.uses_tls}
        # What each SASL listener serves (gregor.security.sasl), checked now: a listener that cannot authenticate is a startup error.
        self.sasl_listeners = build_sasl_listeners(config, self.metadata_cache.entity_configs)
        # The request path's own state: the Produce path's (its validation pool) and the fetch sessions.
        self.produce = ProduceState(ProduceSettings.from_config(config),
                                    ProduceFaults.from_settings(FaultSettings.from_config(config)))
        self.fetch_sessions = FetchSessionCache.from_settings(FetchSessionSettings.from_config(config))
        # schema.registry.listeners: the registry this broker runs; and the schema checks of its topics.
        self.schema_registry = BrokerSchemaRegistry(config, self.produce, self.authorizer, self.sasl_listeners,
                                                    self.metadata_cache.entity_configs, self.client_security)
        self.dispatcher = Dispatcher(self._services(handlers), handlers)
        self.socket_server = SocketServer(self.dispatcher, SocketServerSettings.from_config(config),
                                          ConnectionLimits.from_config(config), self.metrics)
        self.socket_server.set_listener_limits(self.dynamic_config.listener_connection_limits())
        self.dynamic_configs = DynamicConfigApplier(config, self.dynamic_config, self.store, self.metadata_cache,
                                                    self.log_manager, self.replica_manager, self.socket_server,
                                                    self.listener_tls)
        self.periodic = PeriodicJobs(PeriodicSettings.from_config(config), self.log_manager,
                                     self.coordinators.group_coordinator, self.coordinators.txn_coordinator,
                                     self.listener_tls)
        self.bound_ports: list[int] = []
        self._load_task: asyncio.Future[None] | None = None
        self._shutting_down = False
        self._stopped = asyncio.Event()

    def _services(self, handlers: dict[int, Handler]) -> BrokerServices:
        """What the request handlers may use (gregor.api.context)."""
        internal = {OFFSETS_TOPIC: self.coordinators.offsets_topic, TRANSACTION_STATE_TOPIC: self.coordinators.txn_topic}
        return BrokerServices(
            settings=ApiSettings.from_config(self.config), metadata_cache=self.metadata_cache,
            replica_manager=self.replica_manager, log_dirs=self.log_manager, topic_admin=self.topic_admin,
            controller=self.controller, coordinators=self.coordinators, producer_ids=self.producer_ids,
            authorizer=self.authorizer, quotas=self.quotas, dynamic_config=self.dynamic_config,
            topic_configs=BrokerTopicConfigs(self.config),
            auto_create_topics=AutoTopicCreator(self.topic_admin, self.metadata_cache, internal).create,
            sasl_listeners=self.sasl_listeners, metrics=self.metrics, supported_apis=supported_apis(handlers),
            produce=self.produce, fetch_sessions=self.fetch_sessions, describe_quorum=self._describe_quorum,
            forward_to_controller=self._forward_to_controller)

    # --- lifecycle -------------------------------------------------------------------
    async def start(self) -> None:
        bound: dict[str, int] = {}
        controllers = set(self.config.controller_listener_names) if self.config.process_roles else set()
        for spec in self.config.listener_specs:
            if spec.name in controllers:  # a KRaft controller's: its quorum node serves it (broker/kraft_node.py)
                continue
            bound[spec.name] = await self.socket_server.listen(spec, self.listener_tls.get(spec.name))
            self.bound_ports.append(bound[spec.name])
        endpoints = tuple((a.name, a.host or "127.0.0.1", a.port or bound[a.name]) for a in self.config.advertised_specs
                          if a.name not in controllers)
        inter = next((e for e in endpoints if e[0] == self.config.inter_broker_listener), endpoints[0])
        protocols = tuple((s.name, s.protocol) for s in self.config.listener_specs)
        # Registered on the loop, once, before anything is read: a request accepted meanwhile must find this
        # broker in the cache, so the cache catches up from the store right after (attach), not by event.
        self.broker_epoch = await self.store.register_on_loop(BrokerInfo(
            self.config.broker_id, inter[1], inter[2], self.settings.rack or None,
            endpoints=endpoints, protocols=protocols))
        self.metadata_cache.attach(self.store, asyncio.get_running_loop())
        self.metadata_cache.add_listener(self.replica_manager.on_metadata_change)
        self.metadata_cache.add_listener(self.coordinators.follow_leadership)  # after the replica manager's
        self.metadata_cache.add_listener(self._on_session_change)
        self.metadata_cache.add_listener(self.dynamic_configs.on_metadata_change)
        self.coordinators.start()
        if self.authorizer is not None:
            self.metadata_cache.add_listener(self.authorizer.on_metadata_change)
        self.metadata_cache.add_listener(throttling.follow_quota_configs(self.quotas, self.metadata_cache))
        self.dynamic_configs.rotate_password_secret()
        self.dynamic_configs.apply()
        self.controller.start()
        self.replica_manager.sync_all()  # new partitions only: the ones on disk are still loading
        self.replica_manager.start_replication()
        self._load_task = asyncio.ensure_future(self._load_logs())
        if self.metrics is not None:
            self.metrics_server = MetricsServer(MetricsSources(
                self.metrics, self.replica_manager, self.log_manager, self.controller, self.metadata_cache,
                self.coordinators.group_coordinator, tuple(spec.name for spec in self.config.listener_specs),
                lambda: self.socket_server.connections))
            await self.metrics_server.start(self.settings.metrics_host, self.settings.metrics_port)
        self.loop_monitor.start()  # last: a start that fails leaves no watchdog behind
        log.info(
            "Gregor broker %d started: listening on %s (cluster id %s)",
            self.config.broker_id,
            ", ".join(f"{s.name}://{s.host}:{p}" for s, p in zip(
                [x for x in self.config.listener_specs if x.name not in controllers], self.bound_ports, strict=True)),
            self.metadata_cache.cluster_id,
        )
        self.schema_registry.start(inter[1], inter[2])

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
        self.coordinators.on_logs_loaded()
        self.periodic.start()
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
        self.periodic.every_log_open(opened)
        log.info("every log open: %d opened in the background, %d offline, in %.0f ms", opened,
                 len(self.log_manager.offline), (time.monotonic() - t0) * 1000)

    def request_stop(self) -> None:
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def shutdown(self) -> None:
        log.info("shutting down")
        await self.schema_registry.stop()  # it reads and writes through this broker's listeners
        self.replica_manager.retiring = True
        await self.controller.controlled_shutdown()
        self._shutting_down = True
        self.coordinators.stop_following()
        self.socket_server.stop_accepting()
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        await self.replica_manager.stop_replication()
        self.metadata_cache.detach(self.store)  # its logs close below: no listener may act on them after
        self.replica_manager.shutdown()
        self.coordinators.shutdown()
        await self.socket_server.drain(timeout_s=5.0)
        self.produce.shutdown()  # no connection is left to produce
        await self.periodic.stop()
        # Stops a load in progress after the log being opened (waits for it, off the loop). On a thread of
        # its own: the shared executor may hold a queue of log work (a restart's background opening of
        # 10,000 logs) that would run first, only to be refused once the log manager is shut down.
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="log-shutdown") as pool:
            await asyncio.get_running_loop().run_in_executor(pool, self.log_manager.shutdown)
        if self._load_task is not None:
            await asyncio.gather(self._load_task, return_exceptions=True)
        await self.controller.stop()
        await asyncio.get_running_loop().run_in_executor(None, self._close_metadata)
        self.loop_monitor.stop()
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

    def _on_session_change(self, kind: str, what: str) -> None:
        """The store registered this broker again on a new ZooKeeper session: a new broker epoch."""
        if kind == SESSION and what == SESSION_RESTORED:
            me = next((b for b in self.metadata_cache.brokers() if b.broker_id == self.config.broker_id), None)
            if me is not None:
                self.broker_epoch = me.epoch
                log.info("registered again after the ZooKeeper session expired: broker epoch %d", me.epoch)


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
    if config.process_roles:
        await run_kraft_node(config, on_started)
        return
    broker = Broker(config)
    tune_interpreter()  # this process's interpreter is the broker's to tune, and its collector to schedule
    broker.periodic.collector = CollectorSchedule()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before start: a signal during start still stops cleanly
        loop.add_signal_handler(sig, broker.request_stop)
    await broker.start()
    if on_started is not None:
        on_started(broker)
    await broker.wait_stopped()
    await broker.shutdown()
    gc.freeze()


async def run_kraft_node(config: BrokerConfig, on_started: Callable[[Broker], Any] | None = None) -> None:
    """KRaft mode: the quorum member first (its directories formatted for this cluster and node), then, with
    the broker role, the broker on its store, and without it the partition-leader Controller alone
    (broker/controller_node.py); stopped in the reverse order (see broker/kraft_node.py)."""
    import signal

    from gregor.api.forwarding import EnvelopeAnswerer, Forwarder
    from gregor.broker.controller_node import ControllerOnlyNode
    from gregor.broker.kraft_node import KRaftNode

    node = KRaftNode(config)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped.set)
    starting = asyncio.ensure_future(node.start())
    stop_wait = asyncio.ensure_future(stopped.wait())
    await asyncio.wait({starting, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
    stop_wait.cancel()
    if not starting.done():  # stopped while waiting for the quorum
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await node.shutdown()
        return
    starting.result()
    if BROKER_ROLE not in config.process_roles:  # a controller-only node: its Controller elects partition leaders
        controller_only = ControllerOnlyNode(config, node)
        await controller_only.start()
        await stopped.wait()
        await controller_only.shutdown()
        await node.shutdown()
        return
    forward = Forwarder(node.channel, ApiSettings.from_config(config).request_timeout_ms / 1000)
    broker = Broker(config, store=node.store, describe_quorum=node.describe_quorum, forward_to_controller=forward)
    if node.controller is not None:  # a combined node: the broker's Controller acts for the quorum controller
        node.controller.shutdown_handler = broker.controller.handle_controlled_shutdown
        node.controller.envelope_handler = EnvelopeAnswerer(broker.controller, broker.metadata_cache)
    node.store.on_activation.append(broker.controller.stand)  # later activations; the first is the start's
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, broker.request_stop)
    if stopped.is_set():
        broker.request_stop()
    await broker.start()
    if on_started is not None:
        on_started(broker)
    await broker.wait_stopped()
    await broker.shutdown()
    await node.shutdown()
    # The process exits next: its last collections need not walk every object the broker holds again
    # (10,000 partitions: ~300,000 objects, most of a second of a clean shutdown's exit).
    gc.freeze()
