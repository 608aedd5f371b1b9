"""A KRaft broker's side of its membership (Kafka's BrokerLifecycleManager): it registers with the active
controller, heartbeats every `broker.heartbeat.interval.ms`, and shuts down through the heartbeat.

- Registration (BrokerRegistration) names this incarnation (a new random id per start), its listeners
  (the inter-broker one first: the controller records it as the one brokers reach each other on), its
  rack and the metadata.version it supports. The answer's broker epoch is the offset of its
  RegisterBrokerRecord. A broker killed and restarted at once finds its previous incarnation's
  session still open and is refused (DUPLICATE_BROKER_REGISTRATION) until that session ends
  (`broker.session.timeout.ms`); it keeps trying until `initial.broker.registration.timeout.ms`.
- A registered broker is fenced until a heartbeat reports that it replayed the metadata up to its own
  registration; the controller then unfences it and it becomes live. The start waits for that.
- A heartbeat answered with an unknown or stale epoch (the registration is gone) registers again.
- A controlled shutdown sets `want_shut_down` on the heartbeats: the controller moves this broker's
  leaderships away and answers `should_shut_down` once none is left (it is fenced then).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from gregor.metadata.kraft_channel import ControllerChannel, NoControllerError
from gregor.metadata.kraft_records import METADATA_VERSION, METADATA_VERSION_FEATURE
from gregor.metadata.store import BrokerInfo, MetadataError
from gregor.protocol.errors import ErrorCode
from gregor.protocol.messages.kraft_controller import BROKER_HEARTBEAT, BROKER_REGISTRATION

log = logging.getLogger("gregor.metadata.kraft")

SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
SECURITY_PROTOCOL_NAMES = {v: k for k, v in SECURITY_PROTOCOL_IDS.items()}
REGISTRATION_VERSION, HEARTBEAT_VERSION = 3, 1


class BrokerLifecycle:
    def __init__(self, node_id: int, cluster_id: str, channel: ControllerChannel, heartbeat_interval_ms: int,
                 registration_timeout_ms: int, metadata_offset: Callable[[], int],
                 wait_until: Callable[[Callable[[], bool], float], Awaitable[bool]],
                 registered: Callable[[int, int], bool]) -> None:
        """`metadata_offset()`: the last offset replayed here; `wait_until(predicate, timeout_s)`: wait on the
        store's replay; `registered(broker_id, epoch)`: the store shows that registration unfenced."""
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.channel = channel
        self.interval_s = heartbeat_interval_ms / 1000
        self.registration_timeout_s = registration_timeout_ms / 1000
        self._offset = metadata_offset
        self._wait_until = wait_until
        self._registered = registered
        self.broker_epoch = -1
        self.incarnation_id = uuid.uuid4()
        self.info: BrokerInfo | None = None
        self.fenced = True
        self.want_shut_down = False
        self.should_shut_down = False
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._answered = asyncio.Event()

    # --- registration --------------------------------------------------------------------------------
    async def register(self, info: BrokerInfo) -> int:
        """Register and wait until unfenced (live). Raises MetadataError when the controller refuses (another
        cluster, an id in use by a live broker past the timeout) or cannot be reached in time."""
        self.info = info
        deadline = time.monotonic() + self.registration_timeout_s
        self.broker_epoch = await self._register(deadline)
        if self._task is None:
            self._task = asyncio.create_task(self._heartbeats(), name=f"broker-{self.node_id}-heartbeats")
        epoch = self.broker_epoch
        # The controller unfences a broker whose heartbeat shows its own registration replayed: heartbeat as
        # soon as it is, not a heartbeat interval later.
        await self._wait_until(lambda: self._offset() >= epoch, max(0.0, deadline - time.monotonic()))
        self._wake.set()
        if not await self._wait_until(lambda: self._registered(self.node_id, epoch),
                                      max(0.0, deadline - time.monotonic())):
            raise MetadataError(f"broker {self.node_id} registered (epoch {epoch}) but was not unfenced within "
                                f"{self.registration_timeout_s:g} s (initial.broker.registration.timeout.ms)")
        log.info("broker %d registered with the controller quorum: broker epoch %d", self.node_id, epoch)
        return epoch

    async def _register(self, deadline: float) -> int:
        assert self.info is not None
        info = self.info
        listeners = sorted(info.endpoints, key=lambda e: (e[1], e[2]) != (info.host, info.port))  # inter-broker first
        protocols = dict(info.protocols)
        body: dict[str, Any] = {
            "broker_id": self.node_id, "cluster_id": self.cluster_id, "incarnation_id": self.incarnation_id,
            "listeners": [{"name": n, "host": h, "port": p,
                           "security_protocol": SECURITY_PROTOCOL_IDS.get(protocols.get(n, "PLAINTEXT"), 0)}
                          for n, h, p in listeners],
            "features": [{"name": METADATA_VERSION_FEATURE, "min_supported_version": METADATA_VERSION,
                          "max_supported_version": METADATA_VERSION}],
            "rack": info.rack, "log_dirs": [], "previous_broker_epoch": self.broker_epoch,
        }
        warned = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise MetadataError(f"broker {self.node_id} could not register with the controller quorum within "
                                    f"{self.registration_timeout_s:g} s (initial.broker.registration.timeout.ms)")
            try:
                resp = await self.channel.call(BROKER_REGISTRATION, REGISTRATION_VERSION, body, remaining, "lifecycle")
            except NoControllerError as e:
                raise MetadataError(f"broker {self.node_id} could not register: {e}") from None
            if resp.error_code == ErrorCode.NONE:
                return int(resp.broker_epoch)
            if resp.error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION:
                if not warned:
                    log.warning("broker id %d is registered by another incarnation whose session is still open (this "
                                "broker's before a crash, or another live broker): retrying until it ends",
                                self.node_id)
                    warned = True
                await asyncio.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
                continue
            name = ErrorCode(resp.error_code).name
            if resp.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID:
                raise MetadataError(f"the controller quorum belongs to another cluster than {self.cluster_id} "
                                    "(INCONSISTENT_CLUSTER_ID): format this node with the quorum's cluster id")
            raise MetadataError(f"the controller refused broker {self.node_id}'s registration: {name}")

    # --- heartbeats ------------------------------------------------------------------------------------
    async def _heartbeats(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self._heartbeat()
            except asyncio.CancelledError:
                raise
            except NoControllerError as e:
                log.debug("broker %d: heartbeat: %s", self.node_id, e)
            except Exception:
                log.exception("broker %d: the heartbeat failed", self.node_id)

    async def _heartbeat(self) -> None:
        body = {"broker_id": self.node_id, "broker_epoch": self.broker_epoch,
                "current_metadata_offset": self._offset(), "want_fence": False,
                "want_shut_down": self.want_shut_down}
        resp = await self.channel.call(BROKER_HEARTBEAT, HEARTBEAT_VERSION, body, max(self.interval_s, 1.0),
                                       "lifecycle")
        if resp.error_code in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
            if self.want_shut_down:
                self.should_shut_down = True
            else:
                log.warning("broker %d: the controller does not know registration %d (%s): registering again",
                            self.node_id, self.broker_epoch, ErrorCode(resp.error_code).name)
                self.broker_epoch = await self._register(time.monotonic() + self.registration_timeout_s)
                self._wake.set()
        elif resp.error_code == ErrorCode.NONE:
            if resp.is_fenced != self.fenced:
                log.info("broker %d is %s by the controller", self.node_id, "fenced" if resp.is_fenced else "unfenced")
            self.fenced = resp.is_fenced
            self.should_shut_down = self.should_shut_down or resp.should_shut_down
        self._answered.set()

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Heartbeat with want_shut_down until the controller says shut down (True) or `timeout_s` passes."""
        self.want_shut_down = True
        deadline = time.monotonic() + timeout_s
        while not self.should_shut_down and self._task is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._answered.clear()
            self._wake.set()
            try:
                await asyncio.wait_for(self._answered.wait(), remaining)
            except TimeoutError:
                return False
            if not self.should_shut_down:
                await asyncio.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        return self.should_shut_down

    async def stop(self, fence_timeout_s: float = 3.0) -> None:
        """Stop heartbeating; a registered broker that is not fenced yet asks to be (want_fence) first, so its
        next start registers at once instead of waiting out this session (a clean stop's last step, as
        the ZooKeeper mode's registration ends with its session)."""
        if self._task is None:
            return
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task = None
        if self.should_shut_down:
            log.info("broker %d: fenced by the controller at its stop (its controlled shutdown)", self.node_id)
            return
        if self.broker_epoch < 0:
            return
        body = {"broker_id": self.node_id, "broker_epoch": self.broker_epoch,
                "current_metadata_offset": self._offset(), "want_fence": True, "want_shut_down": False}
        try:
            resp = await self.channel.call(BROKER_HEARTBEAT, HEARTBEAT_VERSION, body, fence_timeout_s, "lifecycle")
        except MetadataError as e:
            log.info("broker %d: not fenced at its stop (%s): its session ends after broker.session.timeout.ms",
                     self.node_id, e)
            return
        if resp.error_code == ErrorCode.NONE and resp.is_fenced:
            log.info("broker %d: fenced by the controller at its stop", self.node_id)
