"""The stopping broker's side of a controlled shutdown (Kafka's KafkaServer.controlledShutdown).

Before a broker stops serving it asks the controller to move its leaderships away and take it out of
the ISRs it follows, so clients fail over to live leaders without waiting for its session to end. The
request goes to the controller the cache names (ControlledShutdown v3 over a BrokerClient, bounded by
`controller.socket.timeout.ms`), or straight to the local controller when this broker is the
controller; up to `controlled.shutdown.max.retries` attempts `controlled.shutdown.retry.backoff.ms`
apart while partitions remain; then a bounded wait until this broker's own cache shows the
leaderships gone (the controller answers once its cache holds the writes, this cache may lag).
In KRaft mode the metadata store carries it instead: the broker heartbeats with want_shut_down until
the active controller moved its leaderships and fenced it (should_shut_down), with the same retries.

A stopping controller keeps its controllership until its registration ends (see Controller.stop):
its successor then never sees the stopping broker as a live broker it could elect.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gregor.client.broker_client import BrokerClient, BrokerConnectionError
from gregor.configdef import Settings, setting
from gregor.controller.context import ControllerContext, TopicPartition
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.messages.cluster_admin import CONTROLLED_SHUTDOWN
from gregor.security.inter_broker import ClientSecurity

log = logging.getLogger("gregor.controller.shutdown")

# The local controller's side of a controlled shutdown: (broker id, broker epoch) -> (error, remaining).
HandleLocally = Callable[[int, int], Awaitable[tuple[int, list[TopicPartition]]]]


@dataclass(frozen=True, slots=True)
class ControlledShutdownSettings(Settings):
    enable: bool = setting("controlled.shutdown.enable")
    max_retries: int = setting("controlled.shutdown.max.retries")
    retry_backoff_ms: int = setting("controlled.shutdown.retry.backoff.ms")
    socket_timeout_ms: int = setting("controller.socket.timeout.ms")


class ControlledShutdown:
    """Runs one broker's controlled shutdown against whichever broker is the controller."""

    def __init__(self, settings: ControlledShutdownSettings, local: ControllerContext, handle_locally: HandleLocally,
                 security: ClientSecurity) -> None:
        """`local` is this broker's own controller (its cache, whether it is active, its cache waits),
        `handle_locally` its side of the request when it is the controller; `security` is how this broker
        connects to the controller (the broker's inter-broker ClientSecurity)."""
        self.settings = settings
        self.local = local
        self.cache = local.cache
        self.broker_id = local.broker_id
        self._handle_locally = handle_locally
        self._security = security

    async def run(self) -> bool:
        """Skipped (False) when `controlled.shutdown.enable` is false, no other broker is live or this
        broker is no longer registered. True when the controller left nothing led here."""
        if not self.settings.enable:
            return False
        if not any(b.broker_id != self.broker_id for b in self.cache.brokers()):
            return False  # a lone broker: nobody to hand over to
        if self.cache.broker(self.broker_id) is None:
            return False  # not registered (any more): the controller already treated this broker as gone
        t0 = time.monotonic()
        timeout_s = self.settings.socket_timeout_ms / 1000
        backoff_s = self.settings.retry_backoff_ms / 1000
        attempts = max(1, self.settings.max_retries)
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
        if not await self.local.wait_cache(self._moved, timeout_s):
            log.warning("controlled shutdown: this broker's cache still shows leaderships after %.0f s", timeout_s)
        log.info("controlled shutdown succeeded in %.0f ms", (time.monotonic() - t0) * 1000)
        return True

    async def _attempt(self, timeout_s: float) -> tuple[int, list[TopicPartition]]:
        """One ControlledShutdown to the current controller: (error code, partitions still led here). A store
        that carries the shutdown itself (KRaft: heartbeats with want_shut_down to the active controller,
        as Kafka's KRaft brokers do) answers instead of the request."""
        me = self.cache.broker(self.broker_id)
        epoch = me.epoch if me is not None else -1
        carried = await self.local.store.controlled_shutdown(self.broker_id, epoch, timeout_s)
        if carried is not None:
            return carried
        cid = self.cache.controller_id
        if cid == self.broker_id and self.local.active:
            return await self._handle_locally(self.broker_id, epoch)
        target = self.cache.broker(cid) if cid != -1 else None
        if target is None:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "no controller is known")
        client = BrokerClient(target.host, target.port, f"broker-{self.broker_id}-controlled-shutdown",
                              connect_timeout_s=timeout_s, security=self._security)
        try:
            resp = await client.request(CONTROLLED_SHUTDOWN, 3, {"broker_id": self.broker_id, "broker_epoch": epoch},
                                        timeout_s)
        finally:
            client.close()
        return resp.error_code, [(r.topic_name, r.partition_index) for r in resp.remaining_partitions]

    def _moved(self) -> bool:
        return not any(s.leader == self.broker_id and len(s.replicas) > 1
                       for t in self.cache.topics().values() for s in t.partitions.values())
