"""The stopping broker's side of a controlled shutdown (Kafka's KafkaServer.controlledShutdown).

Before a broker stops serving it asks the controller to move its leaderships away and take it out of
the ISRs it follows, so clients fail over to live leaders without waiting for its session to end. The
request goes to the controller the cache names (ControlledShutdown v3 over a BrokerClient, bounded by
`controller.socket.timeout.ms`), or straight to the local controller when this broker is the
controller; up to `controlled.shutdown.max.retries` attempts `controlled.shutdown.retry.backoff.ms`
apart while partitions remain; then a bounded wait until this broker's own cache shows the
leaderships gone (the controller answers once its cache holds the writes, this cache may lag).

A stopping controller keeps its controllership until its registration ends (see Controller.stop):
its successor then never sees the stopping broker as a live broker it could elect.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from gregor.client.broker_client import BrokerClient, BrokerConnectionError
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.messages.cluster_admin import CONTROLLED_SHUTDOWN
from gregor.security.inter_broker import client_security

if TYPE_CHECKING:
    from gregor.controller.controller import Controller

log = logging.getLogger("gregor.controller.shutdown")

TopicPartition = tuple[str, int]


class ControlledShutdown:
    """Runs one broker's controlled shutdown against whichever broker is the controller."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller  # this broker's own: to handle the request locally, and for cache waits
        self.config = controller.config
        self.cache = controller.cache
        self.broker_id = controller.broker_id

    async def run(self) -> bool:
        """Skipped (False) when `controlled.shutdown.enable` is false, no other broker is live or this
        broker is no longer registered. True when the controller left nothing led here."""
        if not self.config.get("controlled.shutdown.enable"):
            return False
        if not any(b.broker_id != self.broker_id for b in self.cache.brokers()):
            return False  # a lone broker: nobody to hand over to
        if self.cache.broker(self.broker_id) is None:
            return False  # not registered (any more): the controller already treated this broker as gone
        t0 = time.monotonic()
        timeout_s = self.config.get("controller.socket.timeout.ms") / 1000
        backoff_s = self.config.get("controlled.shutdown.retry.backoff.ms") / 1000
        attempts = max(1, self.config.get("controlled.shutdown.max.retries"))
        remaining: list[TopicPartition] = []
        ok = False
        for attempt in range(1, attempts + 1):
            try:
                error, remaining = await self._attempt(timeout_s)
                if error == ErrorCode.NONE and not remaining:
                    ok = True
                    break
                why = f"error {ErrorCode(error).name}" if error != ErrorCode.NONE else f"{len(remaining)} partitions remain"
            except (BrokerConnectionError, TimeoutError, KafkaError) as e:
                why = str(e)
            log.warning("controlled shutdown attempt %d of %d failed: %s", attempt, attempts, why)
            if attempt < attempts:
                await asyncio.sleep(backoff_s)
        if not ok:
            log.warning("controlled shutdown failed after %d attempts (%d partitions still led here); stopping anyway",
                        attempts, len(remaining))
            return False
        if not await self.controller.wait_cache(self._moved, timeout_s):
            log.warning("controlled shutdown: this broker's cache still shows leaderships after %.0f s", timeout_s)
        log.info("controlled shutdown succeeded in %.0f ms", (time.monotonic() - t0) * 1000)
        return True

    async def _attempt(self, timeout_s: float) -> tuple[int, list[TopicPartition]]:
        """One ControlledShutdown to the current controller: (error code, partitions still led here)."""
        me = self.cache.broker(self.broker_id)
        epoch = me.epoch if me is not None else -1
        cid = self.cache.controller_id
        if cid == self.broker_id and self.controller.active:
            return await self.controller.handle_controlled_shutdown(self.broker_id, epoch)
        target = self.cache.broker(cid) if cid != -1 else None
        if target is None:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "no controller is known")
        client = BrokerClient(target.host, target.port, f"broker-{self.broker_id}-controlled-shutdown",
                              connect_timeout_s=timeout_s, security=client_security(self.config))
        try:
            resp = await client.request(CONTROLLED_SHUTDOWN, 3, {"broker_id": self.broker_id, "broker_epoch": epoch},
                                        timeout_s)
        finally:
            client.close()
        return resp.error_code, [(r.topic_name, r.partition_index) for r in resp.remaining_partitions]

    def _moved(self) -> bool:
        return not any(s.leader == self.broker_id and len(s.replicas) > 1
                       for t in self.cache.topics().values() for s in t.partitions.values())
