"""Applies the dynamic broker configs (gregor.config.dynamic) to the components they reconfigure.

The cluster default and this broker's own dynamic configs arrive as BROKER_CONFIGS events from the
metadata cache; `apply` layers them (DynamicBrokerConfig.update) and hands each component a fresh view
of what changed: the replication throttles and fetcher count to the replica manager, the log dir move
rate and the cleaner settings to the log manager, the topic config defaults to every log without an
override, the TLS stores of listeners, and the connection limits to the socket server (Kafka's
reconfigurables).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from gregor.config import BrokerConfig
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
from gregor.configdef import PropertySource, Settings, setting
from gregor.metadata.cache import MetadataCache
from gregor.metadata.store import BROKER_CONFIGS, DEFAULT_ENTITY, MetadataStore, SetBrokerConfigs
from gregor.network.socket_server import ConnectionLimits, SocketServer
from gregor.replication.replica_manager import ReplicaManager
from gregor.security.tls import ServerTls, TlsSettings
from gregor.storage.log_manager import LogManager

log = logging.getLogger("gregor.broker")


@dataclass(frozen=True, slots=True)
class ReplicationDynamicSettings(Settings):
    """The dynamic settings of replication and log dir moves (built from DynamicBrokerConfig on change)."""

    leader_throttled_rate: int = setting("leader.replication.throttled.rate")
    follower_throttled_rate: int = setting("follower.replication.throttled.rate")
    num_replica_fetchers: int = setting("num.replica.fetchers")
    alter_log_dirs_io_bytes_per_s: int = setting(ALTER_LOG_DIRS_IO)


def _values(d: PropertySource, names: frozenset[str] | set[str]) -> str:
    """`name=value, ...` for a log line (no password is among the names logged here)."""
    return ", ".join(f"{n}={d.get(n)}" for n in sorted(names))


class DynamicConfigApplier:
    """Applies this broker's dynamic configs as they change (see the module's docstring)."""

    def __init__(self, config: BrokerConfig, dynamic_config: DynamicBrokerConfig, store: MetadataStore,
                 metadata_cache: MetadataCache, log_manager: LogManager, replica_manager: ReplicaManager,
                 socket_server: SocketServer, listener_tls: Mapping[str, ServerTls]) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.dynamic = dynamic_config
        self.store = store
        self.cache = metadata_cache
        self.log_manager = log_manager
        self.replica_manager = replica_manager
        self.socket_server = socket_server
        self.listener_tls = listener_tls
        self.cleaner_reconfig: asyncio.Future[None] | None = None  # a log cleaner restart with new settings

    def on_metadata_change(self, kind: str, entity: str) -> None:
        """A metadata cache listener: the cluster default's or this broker's dynamic configs changed."""
        if kind == BROKER_CONFIGS and entity in (DEFAULT_ENTITY, str(self.broker_id)):
            self.apply()

    def rotate_password_secret(self) -> None:
        """With password.encoder.old.secret set, this broker's stored dynamic passwords are decoded with it and
        written back under password.encoder.secret (Kafka's rotation at start; the cluster default holds
        no passwords). Synchronous: the start waits for it, as for the registration."""
        mine = str(self.broker_id)
        rewritten = self.dynamic.reencoded(self.cache.broker_configs(mine))
        if rewritten is not None:
            (result,) = self.store.apply([SetBrokerConfigs(mine, rewritten)])
            if isinstance(result, int):
                log.info("broker %d: dynamic passwords re-encrypted with the new password.encoder.secret",
                         self.broker_id)
            else:
                log.error("broker %d: dynamic passwords not re-encrypted: %s", self.broker_id, result)

    def apply(self) -> None:
        """This broker's dynamic configs over the cluster default's, applied at once."""
        d = self.dynamic
        changed = d.update(self.cache.broker_configs(DEFAULT_ENTITY), self.cache.broker_configs(str(self.broker_id)))
        replication = ReplicationDynamicSettings.from_config(d)
        if ALTER_LOG_DIRS_IO in changed:
            self.log_manager.mover.rate_bytes_per_s = replication.alter_log_dirs_io_bytes_per_s
        if changed & THROTTLES:
            self.replica_manager.set_replication_throttles(replication.leader_throttled_rate,
                                                           replication.follower_throttled_rate)
        if changed & TOPIC_DEFAULTS:
            defaults = d.topic_defaults()
            if defaults is not None and defaults != self.config.log_config:
                log.info("broker %d: topic config defaults changed: %s", self.broker_id,
                         _values(d, changed & TOPIC_DEFAULTS))
                self.config.log_config = defaults  # what every topic without an override reads
                self.replica_manager.refresh_log_configs(defaults)
        if changed & CLEANER and (cleaner := d.cleaner()) is not None:
            log.info("broker %d: log cleaner settings: %s", self.broker_id, _values(d, CLEANER))
            # The cleaner threads stop (a clean is aborted) and start again: off the loop, in order.
            self.cleaner_reconfig = asyncio.ensure_future(asyncio.get_running_loop().run_in_executor(
                None, functools.partial(self.log_manager.reconfigure_cleaner, cleaner)))
        tls_changed = {lk[0] for n in changed if (lk := listener_key(n)) is not None and lk[1] in LISTENER_TLS}
        for name, tls in self.listener_tls.items():
            if name.lower() in tls_changed:  # new connections get the new stores; no value is logged
                tls.reload(TlsSettings.from_config(d, name))
        if changed & FETCHERS:
            self.replica_manager.fetcher_manager.resize(replication.num_replica_fetchers)
        if any((lk := listener_key(n)) is not None and lk[1] == "max.connections" for n in changed):
            limits = d.listener_connection_limits()
            log.info("broker %d: listener connection limits: %s", self.broker_id,
                     ", ".join(f"{k.upper()}={v}" for k, v in sorted(limits.items())) or "none")
            self.socket_server.set_listener_limits(limits)
        if changed & CONNECTION_LIMITS:
            log.info("broker %d: connection limits: %s", self.broker_id, _values(d, CONNECTION_LIMITS))
            self.socket_server.set_connection_limits(ConnectionLimits.from_config(d))
