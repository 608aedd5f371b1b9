"""What the controller's parts share: its settings, its activation, its one lock, its tasks, cache waits and
fenced writes.

The Controller (controller.py) is the event-driven core; LeaderElections (leaders.py), Reassignments
(reassignment.py) and the stopping broker's ControlledShutdown (shutdown.py) each get this context, not
the Controller, so they depend on what they use and none of them imports another.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from gregor.configdef import Settings, setting
from gregor.metadata.cache import MetadataCache
from gregor.metadata.store import (
    BadVersionError,
    ControllerMovedError,
    MetadataError,
    MetadataStore,
    PartitionState,
    ReassignPartitions,
    StateUpdate,
)
from gregor.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("gregor.controller")

TopicPartition = tuple[str, int]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ControllerSettings(Settings):
    broker_id: int = setting("broker.id")
    socket_timeout_ms: int = setting("controller.socket.timeout.ms")
    auto_leader_rebalance_enable: bool = setting("auto.leader.rebalance.enable")
    leader_imbalance_per_broker_percentage: int = setting("leader.imbalance.per.broker.percentage")
    leader_imbalance_check_interval_seconds: int = setting("leader.imbalance.check.interval.seconds")


class ControllerContext:
    """One controller's identity and activation (`active`, `epoch`), the lock that runs its operations one
    at a time (Kafka's single controller event thread), the brokers in a controlled shutdown, its tasks,
    waits on the metadata cache, and its writes: through the store on ONE writer thread, every
    partition-state write fenced by the controller epoch."""

    def __init__(self, settings: ControllerSettings, store: MetadataStore, cache: MetadataCache) -> None:
        self.settings = settings
        self.broker_id = settings.broker_id
        self.store = store
        self.cache = cache
        self.active = False
        self.epoch = -1  # the controller epoch while active
        self.lock = asyncio.Lock()  # one controller operation at a time
        self.shutting_down: set[int] = set()  # brokers in a controlled shutdown (Kafka's shuttingDownBrokerIds)
        # Called when a write lost a version race to a leader's ISR change (the controller decides again).
        self.on_raced: Callable[[], None] = lambda: None
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="controller-writer")
        self._tasks: set[asyncio.Future[Any]] = set()
        self._waiters: list[asyncio.Future[None]] = []
        self.stopped = False

    @property
    def timeout_s(self) -> float:
        """controller.socket.timeout.ms, the bound of every wait for the cache."""
        return self.settings.socket_timeout_ms / 1000

    # --- activation ------------------------------------------------------------------------------
    def require_active(self) -> None:
        if not self.active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"Broker {self.broker_id} is not the controller")

    def deactivate(self, why: str) -> None:
        if self.active:
            log.warning("controller %d: no longer the controller (epoch %d): %s", self.broker_id, self.epoch, why)
        self.active = False
        self.shutting_down.clear()

    def eligible(self) -> set[int]:
        """The brokers that may lead: live and not in a controlled shutdown (Kafka's liveBrokerIds)."""
        return {b.broker_id for b in self.cache.brokers()} - self.shutting_down

    # --- tasks ------------------------------------------------------------------------------------
    def spawn(self, coro: Awaitable[Any]) -> None:
        if self.stopped:
            if asyncio.iscoroutine(coro):
                coro.close()
            return
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("controller %d: a controller operation failed", self.broker_id, exc_info=task.exception())

    async def cancel_tasks(self) -> None:
        """Stop spawning, cancel the tasks and wait for them to end."""
        self.stopped = True
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        """End the writer thread (after the store call in flight, if any)."""
        await asyncio.get_running_loop().run_in_executor(None, self._writer.shutdown)

    async def off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """A blocking store call on the writer thread (the store's writes are ordered there)."""
        return await asyncio.get_running_loop().run_in_executor(self._writer, fn, *args)

    # --- waits on the cache ------------------------------------------------------------------------
    def cache_changed(self) -> None:
        """Wake every wait (after each metadata event, on the loop)."""
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
        self._waiters.clear()

    async def wait_cache(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until `done()` holds for the cache (checked after each event), at most `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await asyncio.wait_for(fut, remaining)
            except TimeoutError:
                return done()
        return True

    # --- writes ---------------------------------------------------------------------------------
    async def write_states(self, updates: dict[TopicPartition, tuple[PartitionState, int]], redecide: bool = True
                           ) -> dict[TopicPartition, int | MetadataError]:
        """Write new states (each conditional on the version it was computed from), fenced by the
        controller epoch, in one store call; return once the cache holds every written state (bounded by
        controller.socket.timeout.ms). ControllerMovedError deactivates this controller. A write that
        lost a version race calls `on_raced` (`redecide`; an election retries its own instead)."""
        if not updates or not self.active:
            return {}
        batch = [StateUpdate(t, p, s, v) for (t, p), (s, v) in updates.items()]
        results = await self.off_loop(self.store.update_partition_states, batch, self.epoch)
        out: dict[TopicPartition, int | MetadataError] = {}
        pending: list[tuple[str, int, int]] = []
        for u, r in zip(batch, results, strict=True):
            out[(u.topic, u.partition)] = r
            if isinstance(r, ControllerMovedError):
                self.deactivate(str(r))
            elif isinstance(r, BadVersionError):
                log.info("controller %d: %s-%d changed meanwhile (%s); it is decided again",
                         self.broker_id, u.topic, u.partition, r)
            elif isinstance(r, int):
                pending.append((u.topic, u.partition, r))

        def applied() -> bool:
            while pending:
                t, p, v = pending[-1]
                s = self.cache.partition_state(t, p)
                if s is not None and s.version < v:
                    return False
                pending.pop()
            return True

        if not await self.wait_cache(applied, self.timeout_s):
            log.warning("controller %d: the cache did not show %d written partition states within %.0f s",
                        self.broker_id, len(pending), self.timeout_s)
        if redecide and self.active and any(isinstance(r, BadVersionError) for r in out.values()):
            self.on_raced()  # decide the raced partitions again from the newer states
        return out

    async def write_assignments(self, topic: str, parts: dict[int, PartitionState]) -> bool:
        """Write assignments (ReassignPartitions) and wait for the cache; False if the store refused."""
        if not self.active:
            return False
        try:
            (r,) = await self.off_loop(self.store.apply, [ReassignPartitions(topic, parts)])
        except MetadataError as e:
            log.warning("controller %d: writing the assignment of %s failed: %s", self.broker_id, topic, e)
            return False
        if isinstance(r, MetadataError):
            log.warning("controller %d: writing the assignment of %s failed: %s", self.broker_id, topic, r)
            return False
        await self.cache.wait_for(r)
        return True
