"""The controller: one broker of the cluster elects partition leaders and writes their states.

Every broker runs a `Controller` on its event loop; the one that wins `store.elect_controller` is
active (Kafka's ZooKeeper-mode KafkaController). It reads the MetadataCache, never the store, and
writes through the store on ONE writer thread, each partition-state write fenced by its controller
epoch: a deposed controller's writes fail with ControllerMovedError and it stops at once, as it does
on a SESSION "lost" event. Brokers learn the results through the store's watches (events into their
caches), not through controller-to-broker requests.

What it does (all decisions are gregor.controller.election's and .reassignment's pure rules):
- At activation (Kafka's onControllerFailover) it rebuilds from the cache: every partition whose leader
  is not live gets a new leader, dead replicas leave the ISRs, reassignments under way resume.
- When the live brokers change it applies the same rules to every partition, in one batched write
  (one `update_partition_states` call per event, for all partitions).
- ControlledShutdown, ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments
  (gregor.server.handlers.cluster_admin call the methods below); automatic preferred-leader rebalancing
  every `leader.imbalance.check.interval.seconds`.
- On the stopping broker's side, `controlled_shutdown()` asks the controller to move its leaderships
  before the broker stops serving.

Controller work runs one operation at a time (an asyncio lock: Kafka's single controller event thread),
so two decisions never race on the versions they read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gregor.config import BrokerConfig
from gregor.controller import election, reassignment
from gregor.metadata.cache import MetadataCache
from gregor.metadata.store import (
    BROKERS,
    CREATED,
    DELETED,
    PARTITIONS,
    SESSION,
    SESSION_LOST,
    STATE,
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
    def __init__(self, config: BrokerConfig, store: MetadataStore, cache: MetadataCache) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.store = store
        self.cache = cache
        self.active = False
        self.epoch = -1  # the controller epoch while active
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="controller-writer")
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Future[Any]] = set()
        self._live: dict[int, int] = {}  # broker id -> broker epoch, as the last broker-change pass saw them
        self._shutting_down: set[int] = set()  # brokers in a controlled shutdown (Kafka's shuttingDownBrokerIds)
        self._electing = False
        self._brokers_pending = False
        self._reassign_pending: set[str] = set()
        self._reassigning: dict[str, set[int]] = {}  # topic -> partitions with a reassignment under way
        self._waiters: list[asyncio.Future[None]] = []
        self._stopped = False
        self._rebalance_task: asyncio.Task[None] | None = None

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Listen to the cache and try to become the controller (on the loop, after the cache is attached)."""
        self.cache.add_listener(self.on_metadata_change)
        self._index_reassignments()
        self._spawn(self._elect())
        self._rebalance_task = asyncio.ensure_future(self._rebalance_loop())

    async def stop(self) -> None:
        """Stop acting, give up the controllership (another broker takes over at once) and end the writer."""
        self._stopped = True
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._rebalance_task is not None:
            await asyncio.gather(self._rebalance_task, return_exceptions=True)
        loop = asyncio.get_running_loop()
        if self.active:
            epoch, self.active = self.epoch, False
            try:
                await loop.run_in_executor(self._writer, self.store.resign_controller, self.broker_id, epoch)
            except MetadataError as e:
                log.warning("controller %d: resigning failed: %s", self.broker_id, e)
        await loop.run_in_executor(None, self._writer.shutdown)

    def _spawn(self, coro: Awaitable[Any]) -> None:
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
                self._spawn(self._elect())
            return
        if kind == BROKERS:
            cid = self.cache.controller_id
            if self.active and cid not in (-1, self.broker_id):
                self._deactivate(f"broker {cid} is the controller now")
            if cid == -1:
                if self.active:
                    self._deactivate("the controllership went away")
                self._spawn(self._elect())
            elif self.active and {b.broker_id: b.epoch for b in self.cache.brokers()} != self._live:
                self._schedule_brokers()
            return
        if kind in (CREATED, PARTITIONS, DELETED):
            self._index_topic(topic)
        if self.active and topic in self._reassigning and kind in (STATE, PARTITIONS, CREATED):
            if topic not in self._reassign_pending:
                self._reassign_pending.add(topic)
                self._spawn(self._advance_reassignments(topic))

    def _index_topic(self, topic: str) -> None:
        t = self.cache.topic(topic)
        parts = {p for p, s in t.partitions.items() if reassignment.in_progress(s)} if t is not None else set()
        if parts:
            self._reassigning[topic] = parts
        else:
            self._reassigning.pop(topic, None)

    def _index_reassignments(self) -> None:
        self._reassigning = {}
        for name in self.cache.topics():
            self._index_topic(name)

    async def _wait_cache(self, done: Callable[[], bool], timeout_s: float) -> bool:
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
            async with self._lock:
                self.active, self.epoch = True, epoch
                self._shutting_down.clear()
                log.info("controller %d: elected controller with epoch %d", self.broker_id, epoch)
                t0 = time.monotonic()
                changed = await self._on_brokers_changed_locked()
                self._index_reassignments()
                for topic in list(self._reassigning):
                    await self._advance_reassignments_locked(topic)
                log.info("controller %d: failover done in %.0f ms: %d partition states written", self.broker_id,
                         (time.monotonic() - t0) * 1000, changed)
        finally:
            self._electing = False

    # --- writes ---------------------------------------------------------------------------------
    async def _write(self, updates: dict[TopicPartition, tuple[PartitionState, int]]) -> dict[TopicPartition, int | MetadataError]:
        """Write new states (each conditional on the version it was computed from), fenced by the
        controller epoch, in one store call; return once the cache holds every written state (bounded by
        controller.socket.timeout.ms). ControllerMovedError deactivates this controller."""
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
                log.info("controller %d: %s-%d changed meanwhile (%s); it is decided again on its event",
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
        if not await self._wait_cache(applied, timeout_s):
            log.warning("controller %d: the cache did not show %d written partition states within %.0f s",
                        self.broker_id, len(pending), timeout_s)
        if any(isinstance(r, BadVersionError) for r in out.values()) and self.active:
            self._schedule_brokers()  # decide the raced partitions again from the newer states
        return out

    async def _write_assignments(self, topic: str, parts: dict[int, PartitionState]) -> bool:
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
            self._spawn(self._on_brokers_changed())

    async def _on_brokers_changed(self) -> None:
        async with self._lock:
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
            await self._write(updates)
            offline = sum(1 for s, _ in updates.values() if s.leader == election.NO_LEADER)
            if offline:
                log.warning("controller %d: %d partitions have no leader (no live ISR replica)", self.broker_id, offline)
        return len(updates)

    # --- controlled shutdown (the controller's side) -------------------------------------------------
    async def handle_controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[int, list[TopicPartition]]:
        """Move `broker_id`'s leaderships away and take it out of the ISRs it follows; returns (error
        code, the partitions it still leads). Kafka's errors: NOT_CONTROLLER, BROKER_NOT_AVAILABLE for
        an unknown broker, STALE_BROKER_EPOCH when the request is from an earlier registration."""
        async with self._lock:
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
            await self._write(updates)
            if not self.active:
                return ErrorCode.NOT_CONTROLLER, []
            remaining = [(name, p) for name, t in self.cache.topics().items() for p, s in t.partitions.items()
                         if s.leader == broker_id and len(s.replicas) > 1]
            log.info("controller %d: controlled shutdown of broker %d: %d partition states changed, %d "
                     "leaderships remain, in %.0f ms", self.broker_id, broker_id, len(updates), len(remaining),
                     (time.monotonic() - t0) * 1000)
            return ErrorCode.NONE, remaining

    # --- controlled shutdown (the stopping broker's side) ----------------------------------------------
    async def controlled_shutdown(self) -> bool:
        """Ask the controller to move this broker's leaderships away, while it still serves (Kafka's
        KafkaServer.controlledShutdown): up to `controlled.shutdown.max.retries` attempts,
        `controlled.shutdown.retry.backoff.ms` apart, while partitions remain; then wait (bounded by
        `controller.socket.timeout.ms`) until this broker's cache shows the leaderships gone. Skipped when
        `controlled.shutdown.enable` is false or no other broker is live. True when nothing remains."""
        if not self.config.get("controlled.shutdown.enable"):
            return False
        if not any(b.broker_id != self.broker_id for b in self.cache.brokers()):
            return False  # a lone broker: nobody to hand over to
        if self.cache.broker(self.broker_id) is None:
            return False  # not registered (any more): the controller already treated this broker as gone
        from gregor.protocol.messages.cluster_admin import CONTROLLED_SHUTDOWN
        from gregor.server.broker_client import BrokerClient, BrokerConnectionError

        t0 = time.monotonic()
        timeout_s = self.config.get("controller.socket.timeout.ms") / 1000
        backoff_s = self.config.get("controlled.shutdown.retry.backoff.ms") / 1000
        attempts = max(1, self.config.get("controlled.shutdown.max.retries"))
        remaining: list[TopicPartition] = []
        ok = False
        for attempt in range(1, attempts + 1):
            me = self.cache.broker(self.broker_id)
            epoch = me.epoch if me is not None else -1
            cid = self.cache.controller_id
            try:
                if cid == self.broker_id and self.active:
                    error, remaining = await self.handle_controlled_shutdown(self.broker_id, epoch)
                else:
                    target = self.cache.broker(cid) if cid != -1 else None
                    if target is None:
                        raise KafkaError(ErrorCode.NOT_CONTROLLER, "no controller is known")
                    client = BrokerClient(target.host, target.port, f"broker-{self.broker_id}-controlled-shutdown",
                                          connect_timeout_s=timeout_s)
                    try:
                        resp = await client.request(CONTROLLED_SHUTDOWN, 3, {"broker_id": self.broker_id,
                                                                             "broker_epoch": epoch}, timeout_s)
                    finally:
                        client.close()
                    error = resp.error_code
                    remaining = [(r.topic_name, r.partition_index) for r in resp.remaining_partitions]
                if error == ErrorCode.NONE and not remaining:
                    ok = True
                    break
                why = f"error {ErrorCode(error).name}" if error != ErrorCode.NONE else f"{len(remaining)} partitions remain"
            except (BrokerConnectionError, TimeoutError, KafkaError) as e:
                why = str(e)
            log.warning("controlled shutdown attempt %d of %d failed: %s", attempt, attempts, why)
            if attempt < attempts:
                await asyncio.sleep(backoff_s)
        if ok:
            def moved() -> bool:
                return not any(s.leader == self.broker_id and len(s.replicas) > 1
                               for t in self.cache.topics().values() for s in t.partitions.values())
            if not await self._wait_cache(moved, timeout_s):
                log.warning("controlled shutdown: this broker's cache still shows leaderships after %.0f s", timeout_s)
            log.info("controlled shutdown succeeded in %.0f ms", (time.monotonic() - t0) * 1000)
        else:
            log.warning("controlled shutdown failed after %d attempts (%d partitions still led here); stopping anyway",
                        attempts, len(remaining))
        return ok

    # --- ElectLeaders --------------------------------------------------------------------------------
    async def elect_leaders(self, election_type: int, partitions: Iterable[TopicPartition] | None
                            ) -> dict[TopicPartition, tuple[int, str | None]]:
        """Preferred (0) or unclean (1) election for the given partitions, or all (None: then partitions
        that needed no election are left out of the answer). Per partition (error code, message);
        answered once the new states are in the cache. Raises KafkaError(NOT_CONTROLLER)."""
        from gregor.protocol.messages.cluster_admin import PREFERRED_ELECTION, UNCLEAN_ELECTION

        if election_type not in (PREFERRED_ELECTION, UNCLEAN_ELECTION):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}")
        async with self._lock:
            if not self.active:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, f"Broker {self.broker_id} is not the controller")
            everything = partitions is None
            if partitions is None:
                partitions = [(n, p) for n, t in self.cache.topics().items() for p in t.partitions]
            live = {b.broker_id for b in self.cache.brokers()}
            eligible = live - self._shutting_down
            results: dict[TopicPartition, tuple[int, str | None]] = {}
            updates: dict[TopicPartition, tuple[PartitionState, int]] = {}
            for tp in partitions:
                s = self.cache.partition_state(*tp)
                if s is None:
                    results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                    continue
                if election_type == PREFERRED_ELECTION:
                    new, code = election.preferred(s, eligible, self.epoch)
                else:
                    new, code = election.unclean(s, live, eligible, self.epoch)
                if new is not None:
                    updates[tp] = (new, s.version)
                    if election_type == UNCLEAN_ELECTION and new.leader not in s.isr:
                        log.warning("controller %d: unclean leader election for %s-%d by request: broker %d leads "
                                    "from outside the ISR %s; acknowledged records may be lost",
                                    self.broker_id, tp[0], tp[1], new.leader, s.isr)
                results[tp] = (code, None if code == ErrorCode.NONE else _election_message(code, tp))
            written = await self._write(updates)
            for tp, r in written.items():
                if isinstance(r, MetadataError):
                    code = ErrorCode.NOT_CONTROLLER if isinstance(r, ControllerMovedError) else ErrorCode.UNKNOWN_SERVER_ERROR
                    results[tp] = (code, str(r))
            if everything:
                results = {tp: r for tp, r in results.items() if r[0] != ErrorCode.ELECTION_NOT_NEEDED}
            if updates:
                log.info("controller %d: %s election moved %d leaderships", self.broker_id,
                         "preferred" if election_type == PREFERRED_ELECTION else "unclean",
                         sum(1 for r in written.values() if isinstance(r, int)))
            return results

    # --- automatic rebalancing --------------------------------------------------------------------------
    async def _rebalance_loop(self) -> None:
        interval_s = self.config.get("leader.imbalance.check.interval.seconds")
        while True:
            await asyncio.sleep(interval_s)
            if self.active and self.config.get("auto.leader.rebalance.enable"):
                try:
                    await self.rebalance()
                except Exception:
                    log.exception("controller %d: the leader rebalance failed", self.broker_id)

    async def rebalance(self) -> int:
        """One automatic rebalance pass: a preferred election for the partitions of every broker whose
        leader imbalance is above `leader.imbalance.per.broker.percentage`. Returns the leaderships moved."""
        async with self._lock:
            if not self.active:
                return 0
            eligible = {b.broker_id for b in self.cache.brokers()} - self._shutting_down
            rows = ((n, p, s) for n, t in self.cache.topics().items() for p, s in t.partitions.items())
            chosen = election.imbalanced(rows, eligible, self.config.get("leader.imbalance.per.broker.percentage"))
            updates: dict[TopicPartition, tuple[PartitionState, int]] = {}
            for tp in chosen:
                s = self.cache.partition_state(*tp)
                if s is None:
                    continue
                new, _ = election.preferred(s, eligible, self.epoch)
                if new is not None:
                    updates[tp] = (new, s.version)
            written = await self._write(updates)
            moved = sum(1 for r in written.values() if isinstance(r, int))
            if moved:
                log.info("controller %d: leader rebalance moved %d leaderships to their preferred replicas",
                         self.broker_id, moved)
            return moved

    # --- reassignment ---------------------------------------------------------------------------------
    async def alter_reassignments(self, requests: dict[str, dict[int, list[int] | None]]
                                  ) -> dict[str, dict[int, tuple[int, str | None]]]:
        """AlterPartitionReassignments: per partition a target replica list (None: cancel). Returns per
        partition (error code, message) once the assignments are written and in the cache. Raises
        KafkaError(NOT_CONTROLLER)."""
        async with self._lock:
            if not self.active:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, f"Broker {self.broker_id} is not the controller")
            known = {b.broker_id for b in self.cache.brokers()}
            for t in self.cache.topics().values():
                for s in t.partitions.values():
                    known.update(s.replicas)
            eligible = {b.broker_id for b in self.cache.brokers()} - self._shutting_down
            out: dict[str, dict[int, tuple[int, str | None]]] = {}
            for name, parts in requests.items():
                res = out.setdefault(name, {})
                t = self.cache.topic(name)
                writes: dict[int, PartitionState] = {}
                cancels: dict[TopicPartition, tuple[PartitionState, int]] = {}
                for p, target in parts.items():
                    s = t.partitions.get(p) if t is not None else None
                    if s is None:
                        res[p] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unknown partition {name}-{p}.")
                        continue
                    try:
                        reassignment.validate_target(target, known)
                    except KafkaError as e:
                        res[p] = (e.code, e.message)
                        continue
                    if target is None or (target == reassignment.original_replicas(s) and reassignment.in_progress(s)):
                        if not reassignment.in_progress(s):
                            res[p] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                                      f"No reassignment is in progress for {name}-{p}.")
                            continue
                        view = s.copy()  # the cancellation completes at once, back to the ORS
                        view.removing_replicas, view.adding_replicas = list(s.adding_replicas), []
                        new, _ = reassignment.completion(view, eligible, self.epoch, force=True)
                        if new is not None:
                            cancels[(name, p)] = (new, s.version)
                        writes[p] = reassignment.assignment(reassignment.original_replicas(s), [], [])
                    else:
                        planned = reassignment.plan(s, list(target))
                        if planned is not None:
                            writes[p] = planned
                    res[p] = (ErrorCode.NONE, None)
                if cancels:
                    for (_, p), r in (await self._write(cancels)).items():
                        if isinstance(r, MetadataError):
                            res[p] = (ErrorCode.NOT_CONTROLLER if isinstance(r, ControllerMovedError)
                                      else ErrorCode.UNKNOWN_SERVER_ERROR, str(r))
                            writes.pop(p, None)
                if writes:
                    if await self._write_assignments(name, writes):
                        log.info("controller %d: reassignment of %s partitions %s written", self.broker_id, name,
                                 sorted(writes))
                    else:
                        for p in writes:
                            res[p] = (ErrorCode.UNKNOWN_SERVER_ERROR, "The metadata store refused the assignment.")
                    self._index_topic(name)
                    if name in self._reassigning:
                        await self._advance_reassignments_locked(name)
            return out

    def list_reassignments(self, topics: dict[str, list[int]] | None) -> dict[str, dict[int, PartitionState]]:
        """ListPartitionReassignments: the reassignments under way (of the given partitions, or all).
        Raises KafkaError(NOT_CONTROLLER)."""
        if not self.active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"Broker {self.broker_id} is not the controller")
        out: dict[str, dict[int, PartitionState]] = {}
        wanted = topics.items() if topics is not None else ((n, None) for n in self._reassigning)
        for name, parts in wanted:
            t = self.cache.topic(name)
            if t is None:
                continue
            for p in (parts if parts is not None else sorted(t.partitions)):
                s = t.partitions.get(p)
                if s is not None and reassignment.in_progress(s):
                    out.setdefault(name, {})[p] = s
        return out

    async def _advance_reassignments(self, topic: str) -> None:
        async with self._lock:
            self._reassign_pending.discard(topic)
            if self.active:
                await self._advance_reassignments_locked(topic)

    async def _advance_reassignments_locked(self, topic: str) -> None:
        """Complete the topic's reassignments whose target replicas are all in the ISR: leader from TRS,
        ISR shrunk to TRS (one state write), then the assignment TRS with nothing adding or removing."""
        t = self.cache.topic(topic)
        if t is None:
            return
        eligible = {b.broker_id for b in self.cache.brokers()} - self._shutting_down
        states: dict[TopicPartition, tuple[PartitionState, int]] = {}
        done: list[int] = []
        for p in sorted(self._reassigning.get(topic, ())):
            s = t.partitions.get(p)
            if s is None or not reassignment.in_progress(s):
                continue
            new, complete = reassignment.completion(s, eligible, self.epoch)
            if new is not None:
                states[(topic, p)] = (new, s.version)
            if complete:
                done.append(p)
        if states:
            written = await self._write(states)
            done = [p for p in done if not isinstance(written.get((topic, p), 0), MetadataError)]
        if done and self.active:
            t = self.cache.topic(topic)
            if t is None:
                return
            finals = {p: reassignment.assignment(reassignment.target_replicas(t.partitions[p]), [], [])
                      for p in done if p in t.partitions}
            if await self._write_assignments(topic, finals):
                log.info("controller %d: reassignment of %s partitions %s completed", self.broker_id, topic, sorted(finals))
        self._index_topic(topic)


def _election_message(code: int, tp: TopicPartition) -> str:
    if code == ErrorCode.ELECTION_NOT_NEEDED:
        return f"Leader election not needed for topic partition {tp[0]}-{tp[1]}"
    if code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE:
        return f"Failed to elect leader for partition {tp[0]}-{tp[1]}: the preferred replica is not live and in sync"
    if code == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE:
        return f"Failed to elect leader for partition {tp[0]}-{tp[1]}: no live replica"
    return ErrorCode(code).name
