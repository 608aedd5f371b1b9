"""The controller: one broker of the cluster elects partition leaders and writes their states.

Every broker runs a `Controller` on its event loop; the one that wins `store.elect_controller` is
active (Kafka's ZooKeeper-mode KafkaController). It reads the MetadataCache, never the store, and
writes through the store on ONE writer thread, each partition-state write fenced by its controller
epoch: a deposed controller's writes fail with ControllerMovedError and it stops at once, as it does
on a SESSION "lost" event. Brokers learn the results through the store's watches (events into their
caches), not through controller-to-broker requests.

What it does (all decisions are gregor.controller.election's and .reassignment's pure rules; the
reassignment bookkeeping is reassignment.Reassignments, ElectLeaders and rebalancing are
leaders.LeaderElections, the stopping broker's side of a controlled shutdown is
shutdown.ControlledShutdown; this class is the event-driven core):
- At activation (Kafka's onControllerFailover) it rebuilds from the cache: every partition whose leader
  is not live gets a new leader, dead replicas leave the ISRs, reassignments under way resume.
- When the live brokers change it applies the same rules to every partition, in one batched write
  (one `update_partition_states` call per event, for all partitions).
- ControlledShutdown, ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments
  (gregor.api.handlers.cluster_admin call the methods below); automatic preferred-leader rebalancing
  every `leader.imbalance.check.interval.seconds`.
- On the stopping broker's side, `controlled_shutdown()` asks the controller to move its leaderships
  before the broker stops serving.

Controller work runs one operation at a time (an asyncio lock: Kafka's single controller event thread),
so two of its decisions never race on the versions they read. A write can still lose a race with a
leader's ISR change: a broker pass is then run again from the newer states, and an election
(ElectLeaders, rebalance) retries the raced partitions from their fresh state, a bounded number of
times (leaders.ELECTION_RACE_RETRIES) (Kafka's controller retries on a ZooKeeper version conflict).

A stopping controller does not resign: its controllership ends with its registration (the ZooKeeper
session closing removes /controller and /brokers/ids/<id> together, as in Kafka), so its successor
never sees it as a live broker it could elect between the two.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gregor.config import BrokerConfig
from gregor.controller import election
from gregor.controller.leaders import LeaderElections
from gregor.controller.reassignment import Reassignments
from gregor.controller.shutdown import ControlledShutdown
from gregor.metadata.cache import MetadataCache
from gregor.metadata.store import (
    BROKERS,
    LOG_DIR_FAILURE,
    SESSION,
    SESSION_LOST,
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


class Controller:
    """The event-driven core: election of the controller, failover, broker changes, the controller's
    side of ControlledShutdown, ElectLeaders and rebalancing; fenced writes and cache waits for the
    helpers (Reassignments, ControlledShutdown)."""

    def __init__(self, config: BrokerConfig, store: MetadataStore, cache: MetadataCache) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.store = store
        self.cache = cache
        self.active = False
        self.epoch = -1  # the controller epoch while active
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="controller-writer")
        self.lock = asyncio.Lock()  # one controller operation at a time
        self._tasks: set[asyncio.Future[Any]] = set()
        self._live: dict[int, int] = {}  # broker id -> broker epoch, as the last broker-change pass saw them
        self._shutting_down: set[int] = set()  # brokers in a controlled shutdown (Kafka's shuttingDownBrokerIds)
        self._electing = False
        self._brokers_pending = False
        self._waiters: list[asyncio.Future[None]] = []
        self._stopped = False
        self._rebalance_task: asyncio.Task[None] | None = None
        self.leaders = LeaderElections(self)
        self.reassignments = Reassignments(self)
        self._shutdown = ControlledShutdown(self)

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Listen to the cache and try to become the controller (on the loop, after the cache is attached)."""
        self.cache.add_listener(self.on_metadata_change)
        self.reassignments.index_all()
        self.spawn(self._elect())
        self._rebalance_task = asyncio.ensure_future(self._rebalance_loop())

    async def stop(self) -> None:
        """Stop acting and end the writer. The controllership is not given up here: it ends with this
        broker's registration (unregister_broker, or the ZooKeeper session closing), which the broker
        does next, so the successor is elected once this broker is no longer live (see the module doc)."""
        self._stopped = True
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._rebalance_task is not None:
            await asyncio.gather(self._rebalance_task, return_exceptions=True)
        if self.active:
            log.info("controller %d: stopped acting as the controller (epoch %d); the controllership ends with "
                     "this broker's registration", self.broker_id, self.epoch)
        self.active = False
        await asyncio.get_running_loop().run_in_executor(None, self._writer.shutdown)

    async def controlled_shutdown(self) -> bool:
        """The stopping broker's controlled shutdown (gregor.controller.shutdown): True when the controller
        left nothing led here. Called first in Broker.shutdown(), while the broker still serves."""
        return await self._shutdown.run()

    def spawn(self, coro: Awaitable[Any]) -> None:
        if self._stopped:
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

    def require_active(self) -> None:
        if not self.active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"Broker {self.broker_id} is not the controller")

    def eligible(self) -> set[int]:
        """The brokers that may lead: live and not in a controlled shutdown (Kafka's liveBrokerIds)."""
        return {b.broker_id for b in self.cache.brokers()} - self._shutting_down

    def _deactivate(self, why: str) -> None:
        if self.active:
            log.warning("controller %d: no longer the controller (epoch %d): %s", self.broker_id, self.epoch, why)
        self.active = False
        self._shutting_down.clear()

    # --- events (on the loop, after ReplicaManager) ----------------------------------------------
    def on_metadata_change(self, kind: str, topic: str) -> None:
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
        self._waiters.clear()
        if kind == SESSION:
            if topic == SESSION_LOST:
                self._deactivate("the metadata store's session was lost")
            elif self.cache.controller_id == -1:
                self.spawn(self._elect())
            return
        if kind == LOG_DIR_FAILURE:
            if self.active and topic in self.cache.log_dir_failures:
                self.spawn(self.handle_log_dir_failure(topic))
            return
        if kind == BROKERS:
            cid = self.cache.controller_id
            if self.active and cid not in (-1, self.broker_id):
                self._deactivate(f"broker {cid} is the controller now")
            if cid == -1:
                if self.active:
                    self._deactivate("the controllership went away")
                self.spawn(self._elect())
            elif self.active and {b.broker_id: b.epoch for b in self.cache.brokers()} != self._live:
                self._schedule_brokers()
            return
        self.reassignments.on_event(kind, topic)

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

    # --- election ------------------------------------------------------------------------------
    async def _elect(self) -> None:
        if self._electing or self.active:
            return
        self._electing = True
        try:
            loop = asyncio.get_running_loop()
            while True:
                try:
                    epoch = await loop.run_in_executor(self._writer, self.store.elect_controller, self.broker_id)
                except MetadataError as e:  # not registered (any more), or the store is unreachable
                    log.info("controller %d: cannot stand for controller: %s", self.broker_id, e)
                    return
                if self._stopped:
                    return
                if epoch is not None:
                    break
                # Another broker won. If the cache still shows no controller, the winner may have gone again
                # before its event arrived (that event found this election under way): stand again.
                await asyncio.sleep(0.05)
                if self.cache.controller_id != -1 or self._stopped:
                    return
            async with self.lock:
                self.active, self.epoch = True, epoch
                self._shutting_down.clear()
                log.info("controller %d: elected controller with epoch %d", self.broker_id, epoch)
                t0 = time.monotonic()
                changed = await self._on_brokers_changed_locked()
                await self.reassignments.resume_all_locked()
                for name in sorted(self.cache.log_dir_failures):  # notified before this controller took over
                    self.spawn(self.handle_log_dir_failure(name))
                log.info("controller %d: failover done in %.0f ms: %d partition states written", self.broker_id,
                         (time.monotonic() - t0) * 1000, changed)
        finally:
            self._electing = False

    # --- writes ---------------------------------------------------------------------------------
    async def write_states(self, updates: dict[TopicPartition, tuple[PartitionState, int]], redecide: bool = True
                           ) -> dict[TopicPartition, int | MetadataError]:
        """Write new states (each conditional on the version it was computed from), fenced by the
        controller epoch, in one store call; return once the cache holds every written state (bounded by
        controller.socket.timeout.ms). ControllerMovedError deactivates this controller. A write that
        lost a version race schedules a broker pass over the newer states (`redecide`; an election
        retries its own instead)."""
        if not updates or not self.active:
            return {}
        batch = [StateUpdate(t, p, s, v) for (t, p), (s, v) in updates.items()]
        results = await asyncio.get_running_loop().run_in_executor(
            self._writer, self.store.update_partition_states, batch, self.epoch)
        out: dict[TopicPartition, int | MetadataError] = {}
        pending: list[tuple[str, int, int]] = []
        for u, r in zip(batch, results, strict=True):
            out[(u.topic, u.partition)] = r
            if isinstance(r, ControllerMovedError):
                self._deactivate(str(r))
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

        timeout_s = self.config.get("controller.socket.timeout.ms") / 1000
        if not await self.wait_cache(applied, timeout_s):
            log.warning("controller %d: the cache did not show %d written partition states within %.0f s",
                        self.broker_id, len(pending), timeout_s)
        if redecide and self.active and any(isinstance(r, BadVersionError) for r in out.values()):
            self._schedule_brokers()  # decide the raced partitions again from the newer states
        return out

    async def write_assignments(self, topic: str, parts: dict[int, PartitionState]) -> bool:
        """Write assignments (ReassignPartitions) and wait for the cache; False if the store refused."""
        if not self.active:
            return False
        try:
            (r,) = await asyncio.get_running_loop().run_in_executor(
                self._writer, self.store.apply, [ReassignPartitions(topic, parts)])
        except MetadataError as e:
            log.warning("controller %d: writing the assignment of %s failed: %s", self.broker_id, topic, e)
            return False
        if isinstance(r, MetadataError):
            log.warning("controller %d: writing the assignment of %s failed: %s", self.broker_id, topic, r)
            return False
        await self.cache.wait_for(r)
        return True

    # --- broker changes ------------------------------------------------------------------------------
    def _schedule_brokers(self) -> None:
        if not self._brokers_pending:
            self._brokers_pending = True
            self.spawn(self._on_brokers_changed())

    async def _on_brokers_changed(self) -> None:
        async with self.lock:
            self._brokers_pending = False
            if self.active:
                await self._on_brokers_changed_locked()

    def _unclean_default(self) -> bool:
        return bool(self.config.log_config.unclean_leader_election_enable)

    async def _on_brokers_changed_locked(self) -> int:
        """Apply the broker-change rules to every partition against the live brokers now, in one write. A
        broker that registered again (a new broker epoch) since the last pass restarted meanwhile: as in
        Kafka, it is first treated as failed (its leaderships move, it leaves the ISRs), then as returned."""
        t0 = time.monotonic()
        epochs = {b.broker_id: b.epoch for b in self.cache.brokers()}
        live = set(epochs)
        gone, joined = set(self._live) - live, live - set(self._live)
        bounced = {b for b in live & set(self._live) if epochs[b] != self._live[b]}
        self._live = epochs
        self._shutting_down &= live - bounced
        changed = 0
        if bounced:
            changed += await self._apply_live(live - bounced)
        changed += await self._apply_live(live)
        if changed:
            log.info("controller %d: brokers %s gone, %s joined, %s restarted: %d partition states changed in %.0f ms",
                     self.broker_id, sorted(gone), sorted(joined), sorted(bounced), changed,
                     (time.monotonic() - t0) * 1000)
        return changed

    async def _apply_live(self, live: set[int]) -> int:
        default_unclean = self._unclean_default()
        updates: dict[TopicPartition, tuple[PartitionState, int]] = {}
        for name, t in self.cache.topics().items():
            unclean = election.unclean_enabled(t.configs, default_unclean)
            for p, s in t.partitions.items():
                new, was_unclean = election.after_broker_change(s, live, self._shutting_down, unclean, self.epoch)
                if new is not None:
                    updates[(name, p)] = (new, s.version)
                    if was_unclean:
                        log.warning("controller %d: unclean leader election for %s-%d: broker %d leads from "
                                    "outside the ISR %s; records acknowledged by the old ISR may be lost",
                                    self.broker_id, name, p, new.leader, s.isr)
        if updates:
            await self.write_states(updates)
            offline = sum(1 for s, _ in updates.values() if s.leader == election.NO_LEADER)
            if offline:
                log.warning("controller %d: %d partitions have no leader (no live ISR replica)", self.broker_id, offline)
        return len(updates)

    # --- controlled shutdown (the controller's side) -------------------------------------------------
    async def handle_controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[int, list[TopicPartition]]:
        """Move `broker_id`'s leaderships away and take it out of the ISRs it follows; returns (error
        code, the partitions it still leads). Kafka's errors: NOT_CONTROLLER, BROKER_NOT_AVAILABLE for
        an unknown broker, STALE_BROKER_EPOCH when the request is from an earlier registration."""
        async with self.lock:
            if not self.active:
                return ErrorCode.NOT_CONTROLLER, []
            info = self.cache.broker(broker_id)
            if info is None:
                return ErrorCode.BROKER_NOT_AVAILABLE, []
            if broker_epoch != -1 and broker_epoch != info.epoch:
                return ErrorCode.STALE_BROKER_EPOCH, []
            t0 = time.monotonic()
            self._shutting_down.add(broker_id)
            live = {b.broker_id for b in self.cache.brokers()}
            updates: dict[TopicPartition, tuple[PartitionState, int]] = {}
            for name, t in self.cache.topics().items():
                for p, s in t.partitions.items():
                    new = election.controlled_shutdown(s, broker_id, live, self._shutting_down, self.epoch)
                    if new is not None:
                        updates[(name, p)] = (new, s.version)
            await self.write_states(updates)
            if not self.active:
                return ErrorCode.NOT_CONTROLLER, []
            remaining = [(name, p) for name, t in self.cache.topics().items() for p, s in t.partitions.items()
                         if s.leader == broker_id and len(s.replicas) > 1]
            log.info("controller %d: controlled shutdown of broker %d: %d partition states changed, %d "
                     "leaderships remain, in %.0f ms", self.broker_id, broker_id, len(updates), len(remaining),
                     (time.monotonic() - t0) * 1000)
            return ErrorCode.NONE, remaining

    # --- a broker's failed log dir (JBOD) ------------------------------------------------------------------
    async def handle_log_dir_failure(self, name: str) -> None:
        """A broker took replicas offline (its log dir failed; the notification `name`): as Kafka's
        OfflineReplica transition, each partition it leads goes to the first other live ISR replica and it
        leaves the ISRs (the controlled-shutdown rule, for these partitions only; a partition with no other
        ISR member stays with it). Then the notification is deleted."""
        async with self.lock:
            failure = self.cache.log_dir_failures.get(name)
            if not self.active or failure is None:
                return
            live = {b.broker_id for b in self.cache.brokers()}
            updates: dict[TopicPartition, tuple[PartitionState, int]] = {}
            for t, p in failure.partitions:
                s = self.cache.partition_state(t, p)
                if s is None:
                    continue
                new = election.controlled_shutdown(s, failure.broker, live, self._shutting_down | {failure.broker},
                                                   self.epoch)
                if new is not None:
                    updates[(t, p)] = (new, s.version)
            await self.write_states(updates)
            if not self.active:
                return
            log.warning("controller %d: broker %d lost a log dir: %d of its %d offline replicas moved or left the ISR",
                        self.broker_id, failure.broker, len(updates), len(failure.partitions))
            await asyncio.get_running_loop().run_in_executor(self._writer, self.store.delete_log_dir_event, name)

    # --- ElectLeaders and rebalancing (leaders.LeaderElections) -------------------------------------------
    async def elect_leaders(self, election_type: int, partitions: Iterable[TopicPartition] | None
                            ) -> dict[TopicPartition, tuple[int, str | None]]:
        """ElectLeaders (see LeaderElections.elect_leaders). Raises KafkaError(NOT_CONTROLLER)."""
        return await self.leaders.elect_leaders(election_type, partitions)

    async def rebalance(self) -> int:
        """One automatic rebalance pass (see LeaderElections.rebalance): the leaderships moved."""
        return await self.leaders.rebalance()

    async def _rebalance_loop(self) -> None:
        interval_s = self.config.get("leader.imbalance.check.interval.seconds")
        while True:
            await asyncio.sleep(interval_s)
            if self.active and self.config.get("auto.leader.rebalance.enable"):
                try:
                    await self.rebalance()
                except Exception:
                    log.exception("controller %d: the leader rebalance failed", self.broker_id)

    # --- reassignment (reassignment.Reassignments) -------------------------------------------------------
    async def alter_reassignments(self, requests: dict[str, dict[int, list[int] | None]]
                                  ) -> dict[str, dict[int, tuple[int, str | None]]]:
        """AlterPartitionReassignments (see Reassignments.alter). Raises KafkaError(NOT_CONTROLLER)."""
        return await self.reassignments.alter(requests)

    def list_reassignments(self, topics: dict[str, list[int]] | None) -> dict[str, dict[int, PartitionState]]:
        """ListPartitionReassignments (see Reassignments.list_in_progress). Raises KafkaError(NOT_CONTROLLER)."""
        return self.reassignments.list_in_progress(topics)
