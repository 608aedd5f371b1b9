"""A KRaft controller-only node (`process.roles=controller`): no broker part, no client listener.

It runs the quorum member (broker/kraft_node.py: the metadata log, the controller listener, the quorum
controller answering the brokers) and, because there is no Broker here to run it, the partition-leader
Controller (gregor.controller.controller) on a metadata cache of its own fed by the replayed log. The
active controller of the quorum is then the one that elects partition leaders, moves leaderships off
fenced and stopping brokers, runs reassignments and ElectLeaders (forwarded to it by the brokers in
Envelopes, gregor.api.forwarding), exactly as a combined node's broker part does for it.

The unclean leader election default a controller applies is the cluster's dynamic default (or this
node's) when one is set in the metadata, else this node's static `unclean.leader.election.enable`.
"""

from __future__ import annotations

import asyncio
import logging

from gregor.api.forwarding import EnvelopeAnswerer
from gregor.broker.kraft_node import KRaftNode
from gregor.config import BrokerConfig
from gregor.controller.controller import Controller, ControllerSettings
from gregor.controller.shutdown import ControlledShutdownSettings
from gregor.metadata.cache import MetadataCache
from gregor.metadata.store import DEFAULT_ENTITY
from gregor.security.inter_broker import ClientSecurity

log = logging.getLogger("gregor.broker.controller")

UNCLEAN = "unclean.leader.election.enable"


class ControllerOnlyNode:
    """Build on a started KRaftNode with the controller role only; `await start()`, `await shutdown()` (before
    the KRaftNode's)."""

    def __init__(self, config: BrokerConfig, node: KRaftNode) -> None:
        if node.controller is None:
            raise ValueError("a controller-only node needs the controller role")
        self.config = config
        self.node = node
        self.cache = MetadataCache()
        self.cache.load(node.store.snapshot())
        # The security is the stopping broker's side of a controlled shutdown, which a node without a broker
        # never runs; the Controller takes it for that side only.
        self.controller = Controller(ControllerSettings.from_config(config), node.store, self.cache,
                                     self._unclean_default, ControlledShutdownSettings.from_config(config),
                                     ClientSecurity.from_config(config))

    def _unclean_default(self) -> bool:
        for entity in (str(self.node.node_id), DEFAULT_ENTITY):
            raw = self.cache.broker_configs(entity).get(UNCLEAN)
            if raw is not None:
                return raw.strip().lower() == "true"
        return bool(self.config.log_config.unclean_leader_election_enable)

    async def start(self) -> None:
        node, quorum = self.node, self.node.controller
        assert quorum is not None
        self.cache.attach(node.store, asyncio.get_running_loop())
        quorum.shutdown_handler = self.controller.handle_controlled_shutdown
        quorum.envelope_handler = EnvelopeAnswerer(self.controller, self.cache)
        node.store.on_activation.append(self.controller.stand)  # later activations; the first is start()'s
        self.controller.start()
        name = self.config.controller_listener_names[0]
        host, port = node.listen or ("", 0)
        log.info("Gregor controller %d started: listening on %s://%s:%d (cluster id %s)", node.node_id, name,
                 host, node.server.port if node.server is not None else port, node.cluster_id)

    async def shutdown(self) -> None:
        await self.controller.stop()
        self.cache.detach(self.node.store)
        log.info("controller %d: stopped", self.node.node_id)
