"""The transactional-id table and `__transaction_state` (Kafka's TransactionStateManager).

The coordinator of a transactional id is the leader of partition hash(id) % 50 of
`__transaction_state` (transaction.state.log.num.partitions), found with FindCoordinator key type 1.
Becoming its leader loads the partition's records into the table, under a coordinator epoch (the
partition's leader epoch: markers carry it, so a deposed coordinator's markers are refused);
losing the leadership forgets them. Every state change is written to the partition and waits for
its ISR (acks=all, transaction.state.log.min.isr) before it is applied in memory: a coordinator
elected after a crash reads exactly what was acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from gregor.coordinator.group.metadata_manager import partition_for
from gregor.coordinator.transaction import records as rec
from gregor.coordinator.transaction.state import DEAD, TransactionMetadata
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import Record, build_batch, decode_records, iter_headers

log = logging.getLogger("gregor.txn")

TRANSACTION_STATE_TOPIC = "__transaction_state"
_MAX_SKIP_WARNINGS = 10

Append = Callable[[str, int, bytes], "asyncio.Future[None] | None"]
# The partition of a transactional id is chosen as a group's is: Kafka's abs(hashCode) % partitions.


class TransactionStateManager:
    def __init__(self, num_partitions: int, append: Append,
                 read_partition: Callable[[int], Iterable[memoryview]]) -> None:
        self.num_partitions = num_partitions
        self._append = append
        self._read_partition = read_partition
        self.table: dict[str, TransactionMetadata] = {}
        self.epochs: dict[int, int] = {}  # loaded partition -> coordinator epoch

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def coordinator_epoch(self, transactional_id: str) -> int:
        """The coordinator epoch this broker serves the id under; NOT_COORDINATOR if it does not."""
        epoch = self.epochs.get(self.partition_for(transactional_id))
        if epoch is None:
            raise KafkaError(ErrorCode.NOT_COORDINATOR, f"this broker is not the coordinator of {transactional_id}")
        return epoch

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        self.coordinator_epoch(transactional_id)
        return self.table.get(transactional_id)

    # --- loading --------------------------------------------------------------------------
    def load(self, p: int, epoch: int) -> list[TransactionMetadata]:
        """Replay one partition as its new coordinator; returns its ids (for the caller to finish
        the transactions a previous coordinator left prepared). A record that does not decode is
        skipped with a warning: nothing in the log may stop the broker."""
        for tid in [t for t in self.table if self.partition_for(t) == p]:
            del self.table[tid]
        loaded: dict[str, TransactionMetadata | None] = {}
        skipped = 0
        for records in self._read_partition(p):
            for h in iter_headers(records):
                if h.is_control:
                    continue
                try:
                    batch = decode_records(records, h)
                except Exception as e:
                    skipped += 1
                    if skipped <= _MAX_SKIP_WARNINGS:
                        log.warning("skipping an unreadable batch of %s-%d at offset %d: %s",
                                    TRANSACTION_STATE_TOPIC, p, h.base_offset, e)
                    continue
                for r in batch:
                    if r.key is None:
                        continue
                    try:
                        tid = rec.decode_key(r.key)
                        loaded[tid] = None if r.value is None else rec.decode_value(tid, r.value)
                    except Exception as e:
                        skipped += 1
                        if skipped <= _MAX_SKIP_WARNINGS:
                            log.warning("skipping an unreadable record of %s-%d at offset %d: %s",
                                        TRANSACTION_STATE_TOPIC, p, r.offset, e)
        out = []
        for tid, m in loaded.items():
            if m is not None and m.state != DEAD:
                self.table[tid] = m
                out.append(m)
        self.epochs[p] = epoch
        log.log(logging.INFO if out or skipped else logging.DEBUG,
                "loaded %d transactional ids of %s-%d as coordinator epoch %d%s", len(out),
                TRANSACTION_STATE_TOPIC, p, epoch, f" ({skipped} unreadable records skipped)" if skipped else "")
        return out

    def unload(self, p: int) -> None:
        self.epochs.pop(p, None)
        for tid in [t for t in self.table if self.partition_for(t) == p]:
            del self.table[tid]

    # --- writes ---------------------------------------------------------------------------
    def write(self, m: TransactionMetadata, target: TransactionMetadata | None) -> asyncio.Future[None]:
        """Write `target` as the id's state (None: a tombstone) and apply it once replicated. The future
        fails with the KafkaError for the client (NOT_COORDINATOR when the write failed because the
        partition moved, COORDINATOR_NOT_AVAILABLE when its ISR is too small, ...). `m.pending` is set
        meanwhile; a coordinator that changed epoch meanwhile applies nothing."""
        tid = m.transactional_id
        p = self.partition_for(tid)
        epoch = self.coordinator_epoch(tid)
        now = target.last_update_ms if target is not None else 0
        batch = build_batch([Record(0, max(now, 0), rec.key(tid), None if target is None else rec.value(target))])
        m.pending = target if target is not None else m
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def finish(err: BaseException | None) -> None:
            if self.epochs.get(p) != epoch:  # unloaded or reloaded meanwhile: the table is not ours any more
                m.pending = None
                done.set_exception(KafkaError(ErrorCode.NOT_COORDINATOR, f"coordinator of {tid} moved"))
                return
            m.pending = None
            if err is not None:
                done.set_exception(err)
                return
            if target is None:
                self.table.pop(tid, None)
            else:
                m.apply(target)
            done.set_result(None)

        try:
            pending = self._append(TRANSACTION_STATE_TOPIC, p, batch)
        except KafkaError as e:
            finish(e)
            return done
        if pending is None:
            finish(None)
        else:
            pending.add_done_callback(lambda f: finish(_error_of(f)))
        return done


def _error_of(f: Any) -> BaseException | None:
    if f.cancelled():
        return KafkaError(ErrorCode.NOT_COORDINATOR, "the write was cancelled")
    err = f.exception()
    if err is not None and not isinstance(err, KafkaError):
        return KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(err))
    return err
