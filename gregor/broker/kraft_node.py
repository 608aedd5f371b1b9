"""A KRaft node's metadata half: the quorum member (gregor.raft), the store that replays its log
(gregor.metadata.kraft), and on a controller the controller listener and the quorum controller. A
broker-only node is an observer of the quorum: it serves no controller listener and reaches the voters'
with the protocol its `listener.security.protocol.map` gives the controller listener. A controller-only
node has no broker part: broker/controller_node.py runs its partition-leader Controller.

The quorum must run before the broker part exists: its cache starts from the replayed metadata, and
it registers with an active controller that only a quorum can elect. So `start()` opens the metadata
log, serves the controller listener (a controller), starts the Raft member and waits until this node
has replayed what the quorum had committed when a leader became known; then the Broker is built on
the store (`Broker(config, store=node.store)`) and started. At a stop the broker goes first (its
controlled shutdown still needs the quorum), then this node (a leader resigns, so the others elect at
once).

The controller listener answers the quorum's APIs (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch on
`__cluster_metadata`, FetchSnapshot, DescribeQuorum) and the brokers' (registration, heartbeats,
AlterPartition, AllocateProducerIds, metadata writes), in plaintext or TLS as the listener is mapped
(`listener.security.protocol.map`, CONTROLLER:SSL), the node connecting to the other voters with its
own key store for that listener; or SASL (SASL_PLAINTEXT, SASL_SSL), a node logging in with
`sasl.mechanism.controller.protocol` and the listener's JAAS config, as brokers do on a SASL
inter-broker listener.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from typing import Any

from gregor.config import BrokerConfig, ConfigError
from gregor.config.kraft import CONTROLLER_ROLE
from gregor.controller.quorum_controller import QuorumController, QuorumControllerSettings
from gregor.metadata import bootstrap
from gregor.metadata.kraft import KRaftMetadataStore, KRaftSettings
from gregor.metadata.kraft_channel import ControllerChannel
from gregor.metadata.meta_properties import check_formatted, node_directories
from gregor.protocol.errors import ErrorCode
from gregor.protocol.messages.kraft_controller import CONTROLLER_APIS
from gregor.protocol.messages.raft import DESCRIBE_QUORUM
from gregor.protocol.schema import Struct
from gregor.raft.config import QuorumSettings, parse_voters
from gregor.raft.manager import RaftManager
from gregor.raft.metadata_log import MetadataLog
from gregor.raft.server import QuorumServer
from gregor.security.inter_broker import ClientSecurity
from gregor.security.sasl.listener import build_listener_sasl, scram_credential_lookup
from gregor.security.tls import TlsSettings, build_server_context

log = logging.getLogger("gregor.broker.kraft")


class KRaftNode:
    """See the module doc. Build, `await start()`, hand `store` to the Broker, `await shutdown()` last."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.roles = config.process_roles
        self.node_id: int = config.get("node.id")
        self.cluster_id = check_formatted(node_directories(config.log_dirs, config.get("metadata.log.dir")),
                                          self.node_id)
        self.quorum = qs = QuorumSettings.from_config(config)
        quorum_config = qs.quorum_config()
        name = config.controller_listener_names[0]
        spec = config.listener(name)  # a broker-only node's: how it connects to the controllers (no address)
        # the other voters are reached on their controller listeners, with this node's own credentials for it
        # (a key store for TLS; for SASL, sasl.mechanism.controller.protocol and the listener's JAAS login)
        security = (ClientSecurity.for_listener(config, name, "controller listener", controller=True)
                    if spec.uses_tls or spec.uses_sasl else None)
        self.metadata_log = MetadataLog.open(qs.log_directory(), qs.segment_bytes, qs.segment_ms)
        self.raft = RaftManager(quorum_config, self.metadata_log, self.metadata_log.directory, serve=False,
                                max_request_bytes=qs.max_request_bytes, max_connections=qs.max_connections,
                                client_id=f"raft-{self.node_id}", security=security)
        voters = {v: (e.host, e.port) for v, e in parse_voters(qs.voters).items()}
        self.channel = ControllerChannel(self.node_id, voters, self.leader_id, qs.retry_backoff_ms / 1000,
                                         security)
        self.store = KRaftMetadataStore(KRaftSettings.from_config(config), self.cluster_id, self.raft, self.channel)
        self.controller: QuorumController | None = None
        self.server: QuorumServer | None = None
        self.listen: tuple[str, int] | None = None
        self.server_tls: ssl.SSLContext | None = None
        if CONTROLLER_ROLE in self.roles:
            if spec.uses_tls:
                self.server_tls = build_server_context(TlsSettings.from_config(config, name), f"listener {name}")
            # the records a migration left for the first active controller (default: the feature levels)
            seed = bootstrap.read(qs.log_directory())
            self.controller = QuorumController(QuorumControllerSettings.from_config(config), self.store, seed)
            self.listen = (spec.host or "0.0.0.0", spec.port)
            sasl = None
            if spec.uses_sasl:  # SCRAM credentials are the replayed metadata's, read at each login
                store = self.store
                sasl = build_listener_sasl(config, name, scram_credential_lookup(
                    lambda kind, entity: dict(store.state.meta.entity_configs.get(f"{kind}/{entity}", {}))))
            self.server = QuorumServer(self._dispatch, qs.max_request_bytes, qs.max_connections,
                                       extra_apis=CONTROLLER_APIS, sasl=sasl)
        self.started_at = 0.0

    def leader_id(self) -> int:
        return self.raft.leader_and_epoch().leader_id

    async def _dispatch(self, api_key: int, version: int, body: Struct) -> dict[str, Any]:
        if api_key in CONTROLLER_APIS:
            assert self.controller is not None
            return await self.controller.handle(api_key, version, body)
        return await self.raft.handle_request(api_key, version, body)

    async def start(self, catch_up_timeout_s: float | None = None) -> None:
        """Start the quorum member and wait until a leader is known and this node replayed what was committed
        then (bounded by `initial.broker.registration.timeout.ms` unless given)."""
        t0 = time.monotonic()
        self.store.bind_loop()
        if self.controller is not None:
            self.controller.start()
        if self.server is not None and self.listen is not None:
            await self.server.start(*self.listen, ssl_context=self.server_tls)
        await self.raft.start()
        timeout_s = (catch_up_timeout_s if catch_up_timeout_s is not None
                     else self.store.settings.registration_timeout_ms / 1000)
        if not await self.store.wait_caught_up(timeout_s):
            await self.shutdown()
            raise ConfigError(f"node {self.node_id}: the controller quorum ({', '.join(self.quorum.voters)}) had no "
                              f"leader this node could follow within {timeout_s:g} s: are a majority of its voters "
                              "running?")
        self.started_at = time.monotonic()
        log.info("node %d (%s): the metadata quorum has leader %d; replayed up to offset %d in %.0f ms (cluster "
                 "id %s)", self.node_id, ",".join(sorted(self.roles)), self.leader_id(), self.store.next_offset - 1,
                 (self.started_at - t0) * 1000, self.cluster_id)

    async def describe_quorum(self, version: int, request: Struct) -> dict[str, Any]:
        """DescribeQuorum as the quorum's leader answers it (asked on its controller listener; again, within the
        request timeout, while the node asked is not the leader any more)."""
        timeout_s = self.quorum.request_timeout_ms / 1000
        deadline = time.monotonic() + timeout_s
        while True:
            resp = await self.channel.call(DESCRIBE_QUORUM, version, request.to_dict(),
                                           max(0.1, deadline - time.monotonic()), "describe")
            body = resp.to_dict()
            parts = [p for t in body.get("topics", []) for p in t.get("partitions", [])]
            if (not parts or parts[0]["error_code"] != ErrorCode.NOT_LEADER_OR_FOLLOWER
                    or time.monotonic() >= deadline):
                return body
            await asyncio.sleep(self.channel.retry_backoff_s)

    async def shutdown(self) -> None:
        if self.controller is not None:
            await self.controller.stop()
        await self.raft.shutdown()
        if self.server is not None:
            await self.server.close()
        self.store.close()
        log.info("node %d: the metadata quorum member stopped", self.node_id)

