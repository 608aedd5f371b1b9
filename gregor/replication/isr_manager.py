"""The ISR as its leader keeps it: shrink, expand, and the conditional writes of its changes.

A leader drops from a partition's ISR the followers not caught up within replica.lag.time.max.ms
(checked every half of it) and adds a follower once it reached the HW and the current epoch's start.
As Kafka's ZooKeeper-mode leaders did before AlterPartition (KIP-497), it writes the change itself,
conditional on the state's version with the leader and epoch unchanged, on one writer thread off the
loop; while a change is in flight the HW counts the maximal ISR (Partition.pending_isr). A lost race
waits for the metadata event that says what won. The replica manager owns the partitions; this class
only reads them and sets their `pending_isr`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable

from gregor.metadata.cache import MetadataCache
from gregor.metadata.store import BadVersionError, MetadataError, MetadataStore, PartitionState, StateUpdate
from gregor.metrics.registry import BrokerMetrics
from gregor.replication.partition import Partition
from gregor.replication.purgatory import TopicPartition

log = logging.getLogger("gregor.replica")


class IsrManager:
    """The leader side of the ISR for every partition this broker leads."""

    def __init__(self, broker_id: int, partitions: dict[TopicPartition, Partition], store: MetadataStore,
                 metadata_cache: MetadataCache, lag_time_max_ms: int, fenced: Callable[[], bool],
                 after_progress: Callable[[TopicPartition], None],
                 check_parked: Callable[[TopicPartition], object]) -> None:
        """`fenced()`: the metadata session is lost (no ISR change may be written); `after_progress(key)`:
        the HW moved; `check_parked(key)`: let what is parked on the partition check again."""
        self.broker_id = broker_id
        self.partitions = partitions
        self.store = store
        self.metadata_cache = metadata_cache
        self.lag_time_max_ms = lag_time_max_ms
        self._fenced = fenced
        self._after_progress = after_progress
        self._check_parked = check_parked
        self.metrics: BrokerMetrics | None = None  # the broker's, when metrics.port is set: shrinks, expands
        self._isr_writer: concurrent.futures.ThreadPoolExecutor | None = None  # one writer thread, on first use
        self._isr_task: asyncio.Task[None] | None = None
        self._replication_stopped = False
        self._last_summary = 0.0

    def start(self) -> None:
        """Start the shrink check (every replica.lag.time.max.ms / 2) on the running loop."""
        if self._isr_task is None:
            self._isr_task = asyncio.ensure_future(self._isr_loop())

    async def stop(self) -> None:
        """Stop the check; a write under way finishes on its thread (its answer is dropped)."""
        self._replication_stopped = True
        task, self._isr_task = self._isr_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        writer, self._isr_writer = self._isr_writer, None
        if writer is not None:  # the write under way finishes (its answer is dropped), off the loop
            await asyncio.get_running_loop().run_in_executor(None, writer.shutdown)

    async def _isr_loop(self) -> None:
        interval = max(self.lag_time_max_ms / 2, 1) / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                self.maybe_shrink(int(time.time() * 1000))
                self._maybe_log_summary()
            except Exception:  # one bad partition must not end the check for all
                log.exception("ISR check failed")

    def maybe_shrink(self, now_ms: int) -> None:
        """Drop from each led partition's ISR the followers not caught up within replica.lag.time.max.ms
        (all of them in one batched store write: a dead broker's thousands of partitions at once)."""
        if self._fenced():
            return
        changes: list[tuple[Partition, list[int], str]] = []
        for part in self.partitions.values():
            if not part.is_leader or part.pending_isr is not None or len(part.isr) <= 1 or not part.has_log:
                continue
            out = part.out_of_sync_replicas(now_ms, self.lag_time_max_ms)
            if out:
                changes.append((part, [r for r in part.isr if r not in out],
                                f"replicas {out} not caught up within replica.lag.time.max.ms={self.lag_time_max_ms}"))
        if changes:
            self.write(changes)

    def drop_unassigned(self, part: Partition) -> None:
        """A leader whose ISR names a broker no longer assigned (an expansion written while a reassignment
        removed that replica: the ISR and the assignment are separate znodes, each with its own version)
        drops it at once; the ISR must stay within the replicas."""
        if part.is_leader and part.pending_isr is None and not self._fenced() \
                and any(r not in part.replicas for r in part.isr):
            self.write([(part, [r for r in part.isr if r in part.replicas],
                              f"replicas {[r for r in part.isr if r not in part.replicas]} are not assigned any more")])

    def maybe_expand(self, part: Partition, replica_id: int) -> None:
        """A follower fetched: add it to the ISR once it reached the HW and the current epoch's start."""
        if part.pending_isr is None and part.isr_expansion_candidate(replica_id) \
                and self.metadata_cache.broker(replica_id) is not None:
            self.write([(part, part.isr + [replica_id],
                              f"replica {replica_id} caught up to the high watermark {part.high_watermark}")])

    def write(self, changes: list[tuple[Partition, list[int], str]]) -> None:
        """Write each (partition, new ISR, why) (leader and epoch unchanged) conditionally on the state's
        version, in one store call off the loop on the one writer thread; one change in flight per
        partition, counted in the HW meanwhile (maximal ISR). A lost race (BadVersionError) waits for the
        metadata event that says what won; the next check proposes again from the new state."""
        updates: list[StateUpdate] = []
        sent: list[tuple[Partition, list[int], list[int], str]] = []
        for part, new_isr, why in changes:
            state = self.metadata_cache.partition_state(part.topic, part.index)
            if state is None or state.leader != self.broker_id or state.leader_epoch != part.leader_epoch:
                continue
            new_state = PartitionState(list(state.replicas), state.leader, state.leader_epoch, list(new_isr),
                                       state.controller_epoch, state.version)
            updates.append(StateUpdate(part.topic, part.index, new_state, expected_version=state.version))
            sent.append((part, list(part.isr), list(new_isr), why))
            part.pending_isr = list(new_isr)
        if not updates:
            return
        if self._isr_writer is None:
            if self._replication_stopped:
                for part, _, _, _ in sent:
                    part.pending_isr = None
                return
            self._isr_writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="isr-writer")
        job = asyncio.get_running_loop().run_in_executor(
            self._isr_writer, lambda: self.store.update_partition_states(updates, controller_epoch=None))

        def done(f: asyncio.Future[list[int | MetadataError]]) -> None:
            failure: BaseException | None = (asyncio.CancelledError() if f.cancelled() else f.exception())
            results: list[int | MetadataError] | None = None if failure is not None else f.result()
            for i, (part, old_isr, new_isr, why) in enumerate(sent):
                key = (part.topic, part.index)
                if self.partitions.get(key) is part and part.pending_isr == new_isr:
                    part.pending_isr = None
                result = failure if results is None else results[i]
                if isinstance(result, BaseException):
                    level = logging.INFO if isinstance(result, BadVersionError) else logging.ERROR
                    log.log(level, "%s-%d: ISR change %s -> %s not written (%s): %s", part.topic, part.index,
                            old_isr, new_isr, why, result)
                else:
                    log.warning("%s-%d: ISR %s -> %s (%s)", part.topic, part.index, old_isr, new_isr, why)
                    if self.metrics is not None:
                        if len(new_isr) < len(old_isr):
                            self.metrics.isr_shrinks += 1
                        elif len(new_isr) > len(old_isr):
                            self.metrics.isr_expands += 1
                if part.maybe_increment_high_watermark():
                    self._after_progress(key)
                self._check_parked(key)

        job.add_done_callback(done)

    # --- observability --------------------------------------------------------------------
    def under_replicated(self) -> list[TopicPartition]:
        return [k for k, p in self.partitions.items() if p.is_leader and len(p.isr) < len(p.replicas)]

    def _maybe_log_summary(self) -> None:
        now = time.monotonic()
        if now - self._last_summary < 10.0:
            return
        under = self.under_replicated()
        if under:
            self._last_summary = now
            log.warning("broker %d leads %d under-replicated partitions (e.g. %s)", self.broker_id, len(under),
                        ", ".join(f"{t}-{p}" for t, p in under[:5]))
