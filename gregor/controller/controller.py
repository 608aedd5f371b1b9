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
shutdown.ControlledShutdown, and what they share (activation, lock, tasks, cache waits, fenced writes)
is context.ControllerContext; this class is the event-driven core):
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
from collections.abc import Callable, Iterable

from gregor.controller import election
from gregor.controller.context import ControllerContext, ControllerSettings, TopicPartition
from gregor.controller.leaders import LeaderElections
from gregor.controller.reassignment import Reassignments
from gregor.controller.shutdown import ControlledShutdown, ControlledShutdownSettings
from gregor.metadata.cache import MetadataCache
from gregor.metadata.store import (
    BROKERS,
    LOG_DIR_FAILURE,
    SESSION,
    SESSION_LOST,
    MetadataError,
    MetadataStore,
    PartitionState,
)
from gregor.protocol.errors import ErrorCode
from gregor.security.inter_broker import ClientSecurity

__all__ = ["Controller", "ControllerSettings"]

log = logging.getLogger("gregor.controller")


class Controller:
    """The event-driven core: election of the controller, failover, broker changes, the controller's
    side of ControlledShutdown and of log dir failures; ElectLeaders, rebalancing and reassignments are
    its parts' (each given the ControllerContext)."""

    def __init__(self, settings: ControllerSettings, store: MetadataStore, cache: MetadataCache,
                 unclean_default: Callable[[], bool], shutdown: ControlledShutdownSettings,
                 security: ClientSecurity) -> None:
        """`unclean_default()`: the topics' default unclean.leader.election.enable now (a dynamic topic
        default); `shutdown` and `security`: this broker's controlled shutdown, and how it reaches the
        controller."""
        self._ctx = ctx = ControllerContext(settings, store, cache)
        ctx.on_raced = self._schedule_brokers
        self.settings = settings
        self.broker_id = settings.broker_id
        self.store = store
        self.cache = cache
        self._unclean_default = unclean_default
        self._live: dict[int, int] = {}  # broker id -> broker epoch, as the last broker-change pass saw them
        self._electing = False
        self._brokers_pending = False
        self._rebalance_task: asyncio.Task[None] | None = None
        self.leaders = LeaderElections(ctx)
        self.reassignments = Reassignments(ctx)
        self._shutdown = ControlledShutdown(shutdown, ctx, self.handle_controlled_shutdown, security)

    @property
    def active(self) -> bool:
        return self._ctx.active

    @property
    def epoch(self) -> int:
        """The controller epoch while active."""
        return self._ctx.epoch

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Listen to the cache and try to become the controller (on the loop, after the cache is attached)."""
        self.cache.add_listener(self.on_metadata_change)
        self.reassignments.index_all()
        self._ctx.spawn(self._elect())
        self._rebalance_task = asyncio.ensure_future(self._rebalance_loop())

    def stand(self, epoch: int) -> None:
        """The store made this broker the controller of `epoch` by its own election (KRaft: the quorum's
        leader became active): act as it, leaving a previous epoch's controllership first."""
        if self._rebalance_task is None:  # not started: start() stands for it
            return
        if self.active and self.epoch != epoch:
            self._ctx.deactivate(f"the quorum moved on to epoch {epoch}")
        if not self._ctx.stopped:
            self._ctx.spawn(self._stand())

    async def _stand(self) -> None:
        while self._electing:  # an election under way may have asked the store before it made this broker active
            await asyncio.sleep(0.01)
        await self._elect()

    async def stop(self) -> None:
        """Stop acting and end the writer. The controllership is not given up here: it ends with this
        broker's registration (unregister_broker, or the ZooKeeper session closing), which the broker
        does next, so the successor is elected once this broker is no longer live (see the module doc)."""
        self._ctx.stopped = True
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
        await self._ctx.cancel_tasks()
        if self._rebalance_task is not None:
            await asyncio.gather(self._rebalance_task, return_exceptions=True)
        if self.active:
            log.info("controller %d: stopped acting as the controller (epoch %d); the controllership ends with "
                     "this broker's registration", self.broker_id, self.epoch)
        self._ctx.active = False
        await self._ctx.close()

    async def controlled_shutdown(self) -> bool:
        """The stopping broker's controlled shutdown (gregor.controller.shutdown): True when the controller
        left nothing led here. Called first in Broker.shutdown(), while the broker still serves."""
        return await self._shutdown.run()

    # --- events (on the loop, after ReplicaManager) ----------------------------------------------
    def on_metadata_change(self, kind: str, topic: str) -> None:
        ctx = self._ctx
        ctx.cache_changed()
        if kind == SESSION:
            if topic == SESSION_LOST:
                ctx.deactivate("the metadata store's session was lost")
            elif self.cache.controller_id == -1:
                ctx.spawn(self._elect())
            return
        if kind == LOG_DIR_FAILURE:
            if self.active and topic in self.cache.log_dir_failures:
                ctx.spawn(self.handle_log_dir_failure(topic))
            return
        if kind == BROKERS:
            cid = self.cache.controller_id
            if self.active and cid not in (-1, self.broker_id):
                ctx.deactivate(f"broker {cid} is the controller now")
            if cid == -1:
                if self.active:
                    ctx.deactivate("the controllership went away")
                ctx.spawn(self._elect())
            elif self.active and {b.broker_id: b.epoch for b in self.cache.brokers()} != self._live:
                self._schedule_brokers()
            return
        self.reassignments.on_event(kind, topic)

    # --- election ------------------------------------------------------------------------------
    async def _elect(self) -> None:
        ctx = self._ctx
        if self._electing or self.active:
            return
        self._electing = True
        try:
            while True:
                try:
                    epoch = await ctx.off_loop(self.store.elect_controller, self.broker_id)
                except MetadataError as e:  # not registered (any more), or the store is unreachable
                    log.info("controller %d: cannot stand for controller: %s", self.broker_id, e)
                    return
                if ctx.stopped:
                    return
                if epoch is not None:
                    break
                # Another broker won. If the cache still shows no controller, the winner may have gone again
                # before its event arrived (that event found this election under way): stand again.
                await asyncio.sleep(0.05)
                if self.cache.controller_id != -1 or ctx.stopped:
                    return
            async with ctx.lock:
                ctx.active, ctx.epoch = True, epoch
                ctx.shutting_down.clear()
                log.info("controller %d: elected controller with epoch %d", self.broker_id, epoch)
                t0 = time.monotonic()
                changed = await self._on_brokers_changed_locked()
                await self.reassignments.resume_all_locked()
                for name in sorted(self.cache.log_dir_failures):  # notified before this controller took over
                    ctx.spawn(self.handle_log_dir_failure(name))
                log.info("controller %d: failover done in %.0f ms: %d partition states written", self.broker_id,
                         (time.monotonic() - t0) * 1000, changed)
        finally:
            self._electing = False

    # --- broker changes ------------------------------------------------------------------------------
    def _schedule_brokers(self) -> None:
        if not self._brokers_pending:
            self._brokers_pending = True
            self._ctx.spawn(self._on_brokers_changed())

    async def _on_brokers_changed(self) -> None:
        async with self._ctx.lock:
            self._brokers_pending = False
            if self.active:
                await self._on_brokers_changed_locked()

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
        self._ctx.shutting_down &= live - bounced
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
                new, was_unclean = election.after_broker_change(s, live, self._ctx.shutting_down, unclean, self._ctx.epoch)
                if new is not None:
                    updates[(name, p)] = (new, s.version)
                    if was_unclean:
                        log.warning("controller %d: unclean leader election for %s-%d: broker %d leads from "
                                    "outside the ISR %s; records acknowledged by the old ISR may be lost",
                                    self.broker_id, name, p, new.leader, s.isr)
        if updates:
            await self._ctx.write_states(updates)
            offline = sum(1 for s, _ in updates.values() if s.leader == election.NO_LEADER)
            if offline:
                log.warning("controller %d: %d partitions have no leader (no live ISR replica)", self.broker_id, offline)
        return len(updates)

    # --- controlled shutdown (the controller's side) -------------------------------------------------
    async def handle_controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[int, list[TopicPartition]]:
        """Move `broker_id`'s leaderships away and take it out of the ISRs it follows; returns (error
        code, the partitions it still leads). Kafka's errors: NOT_CONTROLLER, BROKER_NOT_AVAILABLE for
        an unknown broker, STALE_BROKER_EPOCH when the request is from an earlier registration."""
        async with self._ctx.lock:
            if not self.active:
                return ErrorCode.NOT_CONTROLLER, []
            info = self.cache.broker(broker_id)
            if info is None:
                return ErrorCode.BROKER_NOT_AVAILABLE, []
            if broker_epoch != -1 and broker_epoch != info.epoch:
                return ErrorCode.STALE_BROKER_EPOCH, []
            t0 = time.monotonic()
            self._ctx.shutting_down.add(broker_id)
            live = {b.broker_id for b in self.cache.brokers()}
            updates: dict[TopicPartition, tuple[PartitionState, int]] = {}
            for name, t in self.cache.topics().items():
                for p, s in t.partitions.items():
                    new = election.controlled_shutdown(s, broker_id, live, self._ctx.shutting_down, self._ctx.epoch)
                    if new is not None:
                        updates[(name, p)] = (new, s.version)
            await self._ctx.write_states(updates)
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
        async with self._ctx.lock:
            failure = self.cache.log_dir_failures.get(name)
            if not self.active or failure is None:
                return
            live = {b.broker_id for b in self.cache.brokers()}
            updates: dict[TopicPartition, tuple[PartitionState, int]] = {}
            for t, p in failure.partitions:
                s = self.cache.partition_state(t, p)
                if s is None:
                    continue
                new = election.controlled_shutdown(s, failure.broker, live, self._ctx.shutting_down | {failure.broker},
                                                   self._ctx.epoch)
                if new is not None:
                    updates[(t, p)] = (new, s.version)
            await self._ctx.write_states(updates)
            if not self.active:
                return
            log.warning("controller %d: broker %d lost a log dir: %d of its %d offline replicas moved or left the ISR",
                        self.broker_id, failure.broker, len(updates), len(failure.partitions))
            await self._ctx.off_loop(self.store.delete_log_dir_event, name)

    # --- ElectLeaders and rebalancing (leaders.LeaderElections) -------------------------------------------
    async def elect_leaders(self, election_type: int, partitions: Iterable[TopicPartition] | None
                            ) -> dict[TopicPartition, tuple[int, str | None]]:
        """ElectLeaders (see LeaderElections.elect_leaders). Raises KafkaError(NOT_CONTROLLER)."""
        return await self.leaders.elect_leaders(election_type, partitions)

    async def rebalance(self) -> int:
        """One automatic rebalance pass (see LeaderElections.rebalance): the leaderships moved."""
        return await self.leaders.rebalance()

    async def _rebalance_loop(self) -> None:
        interval_s = self.settings.leader_imbalance_check_interval_seconds
        while True:
            await asyncio.sleep(interval_s)
            if self.active and self.settings.auto_leader_rebalance_enable:
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
