"""The transaction coordinator: InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, timeouts, and DescribeTransactions/ListTransactions (Kafka's
TransactionCoordinator).

A transaction's life here: InitProducerId fences older producers of the id by bumping the epoch
(aborting their open transaction first: the caller gets CONCURRENT_TRANSACTIONS and retries);
AddPartitionsToTxn / AddOffsetsToTxn record the partitions before the producer writes to them;
EndTxn writes PREPARE_COMMIT or PREPARE_ABORT, answers, and then `markers` (markers.py) writes the
marker in every partition, after which COMPLETE_* is written. The PREPARE record is the decision:
a coordinator elected after a crash finds it on load and sends the markers again. Open transactions
older than their timeout are aborted with a bumped epoch, which fences their producer.

Every change goes through `state.write` (state_manager.py), which applies it once replicated; while a
write is in flight the id answers CONCURRENT_TRANSACTIONS. Like the group coordinator, a request is
answered at once when nothing has to be written (errors, retries, partitions already added) and with a
Future of its answer otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from gregor.configdef import Settings, setting
from gregor.coordinator.transaction.markers import TxnMarkerSender
from gregor.coordinator.transaction.state import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    DEAD,
    EMPTY,
    MAX_EPOCH,
    NO_EPOCH,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARE_EPOCH_FENCE,
    STATES_BY_NAME,
    TopicPartition,
    TransactionMetadata,
)
from gregor.coordinator.transaction.state_manager import TransactionStateManager
from gregor.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("gregor.txn")

R = TypeVar("R")
InitResult = tuple[ErrorCode, int, int]


class ProducerIds(Protocol):
    """Where producer ids come from (producer_ids.ProducerIdManager)."""

    def try_generate(self) -> int | None: ...
    async def generate(self) -> int: ...


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class TransactionSettings(Settings):
    max_timeout_ms: int = setting("transaction.max.timeout.ms")
    id_expiration_ms: int = setting("transactional.id.expiration.ms")


class TransactionCoordinator:
    def __init__(self, settings: TransactionSettings, state: TransactionStateManager, producer_ids: ProducerIds,
                 markers: TxnMarkerSender, partition_exists: Callable[[str, int], bool]) -> None:
        self.state = state
        self._producer_ids = producer_ids
        self.markers = markers
        self._partition_exists = partition_exists
        self.max_timeout_ms = settings.max_timeout_ms
        self.id_expiration_ms = settings.id_expiration_ms
        self._completions: set[asyncio.Task[None]] = set()

    # --- leadership -------------------------------------------------------------------------
    def follow_leadership(self, led: dict[int, int]) -> None:
        """`led`: the __transaction_state partitions this broker leads now, with their leader epochs.
        Newly led ones (or re-led under a new epoch) are loaded and their prepared transactions
        completed; the others are forgotten."""
        for p in list(self.state.epochs):
            if p not in led:
                self.state.unload(p)
        for p, epoch in sorted(led.items()):
            if self.state.epochs.get(p) == epoch:
                continue
            for m in self.state.load(p, epoch):
                if m.state in (PREPARE_COMMIT, PREPARE_ABORT):
                    log.info("completing the %s of transactional id %s left by the previous coordinator",
                             "commit" if m.state == PREPARE_COMMIT else "abort", m.transactional_id)
                    self._start_completion(m, epoch)

    def shutdown(self) -> None:
        for t in list(self._completions):
            t.cancel()
        self.markers.close()

    # --- InitProducerId -------------------------------------------------------------------------
    def init_producer_id(self, tid: str, timeout_ms: int, producer_id: int = -1, producer_epoch: int = -1,
                         _new_pid: int | None = None) -> InitResult | asyncio.Future[InitResult]:
        """(error, producer id, epoch), or a Future of it when a write (or a new block of producer ids)
        must be waited for."""
        fresh = self._producer_ids.try_generate if _new_pid is None else (lambda: _new_pid)
        if not tid:
            return ErrorCode.INVALID_REQUEST, -1, -1
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        try:
            m = self.state.get(tid)
            if m is None:
                pid = fresh()
                if pid is None:  # the block is used up: reserve the next (off the loop), then start again
                    return asyncio.ensure_future(self._init_after_new_block(tid, timeout_ms, producer_id,
                                                                            producer_epoch))
                m = self.state.table[tid] = TransactionMetadata(tid, pid, NO_EPOCH, timeout_ms, EMPTY,
                                                                last_update_ms=_now_ms())
            if m.pending is not None:
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
            if producer_id >= 0:  # KIP-360/588: a producer re-initialising with its current id and epoch
                ok = (producer_id == m.producer_id and producer_epoch in (m.producer_epoch, m.last_producer_epoch))
                if not ok:
                    return ErrorCode.PRODUCER_FENCED, -1, -1
            if m.state in (PREPARE_COMMIT, PREPARE_ABORT, PREPARE_EPOCH_FENCE, DEAD):
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
            if m.state == ONGOING:
                # An open transaction of an older producer: abort it under a bumped epoch (which fences
                # that producer); the caller retries and gets the epoch after it.
                return _then(self._abort(m, fence=True), lambda: (ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1),
                             lambda code: (code, -1, -1))
            now = _now_ms()
            if m.producer_epoch >= MAX_EPOCH:  # epochs exhausted: a new producer id, epoch 0
                pid = fresh()
                if pid is None:
                    return asyncio.ensure_future(self._init_after_new_block(tid, timeout_ms, producer_id,
                                                                            producer_epoch))
                target = m.copy_with(producer_id=pid, producer_epoch=0, last_producer_epoch=NO_EPOCH,
                                     timeout_ms=timeout_ms, state=EMPTY, partitions=set(), start_ms=-1,
                                     last_update_ms=now)
            else:
                target = m.copy_with(producer_epoch=m.producer_epoch + 1, last_producer_epoch=m.producer_epoch,
                                     timeout_ms=timeout_ms, state=EMPTY, partitions=set(), start_ms=-1,
                                     last_update_ms=now)
            return _then(self.state.write(m, target), lambda: (ErrorCode.NONE, m.producer_id, m.producer_epoch),
                         lambda code: (code, -1, -1))
        except KafkaError as e:
            return e.code, -1, -1

    async def _init_after_new_block(self, tid: str, timeout_ms: int, producer_id: int,
                                    producer_epoch: int) -> InitResult:
        try:
            pid = await self._producer_ids.generate()
        except Exception as e:  # the store could not record a new block: the client retries
            log.error("cannot reserve a block of producer ids: %s", e)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
        got = self.init_producer_id(tid, timeout_ms, producer_id, producer_epoch, _new_pid=pid)
        return await got if isinstance(got, asyncio.Future) else got

    # --- AddPartitionsToTxn / AddOffsetsToTxn -----------------------------------------------------
    def _check_producer(self, tid: str, producer_id: int, producer_epoch: int) -> TransactionMetadata:
        m = self.state.get(tid)
        if m is None:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING, f"no transactional id {tid}")
        if m.producer_id != producer_id:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                             f"producer id {producer_id} is not the current one of {tid}")
        if m.producer_epoch != producer_epoch:
            raise KafkaError(ErrorCode.PRODUCER_FENCED,
                             f"producer epoch {producer_epoch} of {tid} is not the current {m.producer_epoch}")
        if m.pending is not None or m.state in (PREPARE_COMMIT, PREPARE_ABORT, PREPARE_EPOCH_FENCE):
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, f"{tid} is completing a transaction")
        return m

    def add_partitions(self, tid: str, producer_id: int, producer_epoch: int, partitions: list[TopicPartition]
                       ) -> dict[TopicPartition, ErrorCode] | asyncio.Future[dict[TopicPartition, ErrorCode]]:
        """Add partitions to the open transaction (opening it). Per partition: NONE, or
        UNKNOWN_TOPIC_OR_PARTITION for those that do not exist and OPERATION_NOT_ATTEMPTED for the
        rest, or one error for all (fencing, CONCURRENT_TRANSACTIONS, NOT_COORDINATOR, ...); a Future
        of them while the change is written."""
        missing = [tp for tp in partitions if not self._partition_exists(*tp)]
        if missing:
            return {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in missing else ErrorCode.OPERATION_NOT_ATTEMPTED
                    for tp in partitions}
        try:
            m = self._check_producer(tid, producer_id, producer_epoch)
            if m.state == ONGOING and set(partitions) <= m.partitions:
                return dict.fromkeys(partitions, ErrorCode.NONE)
            now = _now_ms()
            if m.state == ONGOING:
                target = m.copy_with(partitions=m.partitions | set(partitions), last_update_ms=now)
            else:
                target = m.copy_with(state=ONGOING, partitions=set(partitions), start_ms=now, last_update_ms=now)
            return _then(self.state.write(m, target), lambda: dict.fromkeys(partitions, ErrorCode.NONE),
                         lambda code: dict.fromkeys(partitions, code))
        except KafkaError as e:
            return dict.fromkeys(partitions, e.code)

    def verify_partitions(self, tid: str, producer_id: int, producer_epoch: int,
                          partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4+ verify_only (KIP-890): are these partitions in the open transaction?"""
        try:
            m = self._check_producer(tid, producer_id, producer_epoch)
        except KafkaError as e:
            return dict.fromkeys(partitions, e.code)
        return {tp: ErrorCode.NONE if m.state == ONGOING and tp in m.partitions else ErrorCode.INVALID_TXN_STATE
                for tp in partitions}

    # --- EndTxn ----------------------------------------------------------------------------------
    def end_txn(self, tid: str, producer_id: int, producer_epoch: int, commit: bool
                ) -> ErrorCode | asyncio.Future[ErrorCode]:
        try:
            m = self.state.get(tid)
            if m is None:
                return ErrorCode.INVALID_PRODUCER_ID_MAPPING
            if m.producer_id != producer_id:
                return ErrorCode.INVALID_PRODUCER_ID_MAPPING
            if m.producer_epoch != producer_epoch:
                return ErrorCode.PRODUCER_FENCED
            if m.pending is not None:
                return ErrorCode.CONCURRENT_TRANSACTIONS
            if m.state == ONGOING:
                decided = self._prepare(m, PREPARE_COMMIT, m.producer_epoch) if commit else self._abort(m, fence=False)
                return _then(decided, lambda: ErrorCode.NONE, lambda code: code)
            if m.state in (COMPLETE_COMMIT, PREPARE_COMMIT):  # a retry of the same decision, or the wrong one
                return (ErrorCode.NONE if m.state == COMPLETE_COMMIT else ErrorCode.CONCURRENT_TRANSACTIONS) \
                    if commit else ErrorCode.INVALID_TXN_STATE
            if m.state in (COMPLETE_ABORT, PREPARE_ABORT):
                return (ErrorCode.NONE if m.state == COMPLETE_ABORT else ErrorCode.CONCURRENT_TRANSACTIONS) \
                    if not commit else ErrorCode.INVALID_TXN_STATE
            if m.state == PREPARE_EPOCH_FENCE:
                return ErrorCode.PRODUCER_FENCED
            return ErrorCode.INVALID_TXN_STATE  # EMPTY: nothing to end
        except KafkaError as e:
            return e.code

    def _abort(self, m: TransactionMetadata, fence: bool) -> asyncio.Future[None]:
        """Abort the open transaction; with `fence` under the next epoch, so its producer is fenced."""
        epoch = m.producer_epoch
        if fence and m.producer_epoch < MAX_EPOCH:  # (at the last epoch: abort under it, as Kafka does)
            epoch = m.producer_epoch + 1
            m.state = PREPARE_EPOCH_FENCE  # in memory only: written as PREPARE_ABORT below
            last = m.producer_epoch
        else:
            last = m.last_producer_epoch
        try:
            written = self._prepare(m, PREPARE_ABORT, epoch, last_epoch=last)
        except KafkaError:
            if m.state == PREPARE_EPOCH_FENCE:
                m.state = ONGOING
            raise

        def undo_fence(f: asyncio.Future[None]) -> None:
            if (f.cancelled() or f.exception() is not None) and m.state == PREPARE_EPOCH_FENCE:
                m.state = ONGOING

        written.add_done_callback(undo_fence)
        return written

    def _prepare(self, m: TransactionMetadata, state: int, epoch: int, last_epoch: int | None = None
                 ) -> asyncio.Future[None]:
        """Write the decision; once it is replicated, the markers go out (in the background)."""
        coordinator_epoch = self.state.coordinator_epoch(m.transactional_id)
        target = m.copy_with(state=state, producer_epoch=epoch, last_update_ms=_now_ms(),
                             last_producer_epoch=m.last_producer_epoch if last_epoch is None else last_epoch)
        written = self.state.write(m, target)

        def decided(f: asyncio.Future[None]) -> None:
            if not f.cancelled() and f.exception() is None:
                self._start_completion(m, coordinator_epoch)

        written.add_done_callback(decided)
        return written

    def _start_completion(self, m: TransactionMetadata, coordinator_epoch: int) -> None:
        task = asyncio.ensure_future(self._complete(m, coordinator_epoch))
        self._completions.add(task)
        task.add_done_callback(self._completions.discard)

    async def _complete(self, m: TransactionMetadata, coordinator_epoch: int) -> None:
        """Markers, then COMPLETE_*: in the background of the EndTxn answer."""
        commit = m.state == PREPARE_COMMIT
        tid = m.transactional_id

        def still_coordinator() -> bool:
            try:
                return (self.state.coordinator_epoch(tid) == coordinator_epoch
                        and self.state.table.get(tid) is m and m.state in (PREPARE_COMMIT, PREPARE_ABORT))
            except KafkaError:
                return False

        try:
            if not await self.markers.send(m.producer_id, m.producer_epoch, commit, coordinator_epoch,
                                           set(m.partitions), still_coordinator):
                return
            while still_coordinator():
                target = m.copy_with(state=COMPLETE_COMMIT if commit else COMPLETE_ABORT, partitions=set(),
                                     last_update_ms=_now_ms())
                try:
                    await self.state.write(m, target)
                    return
                except KafkaError as e:
                    log.warning("cannot write the completion of transactional id %s (%s); retrying", tid, e)
                    await asyncio.sleep(self.markers.retry_backoff_ms / 1000)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("completing transactional id %s failed", tid)

    # --- timeouts and expiration ------------------------------------------------------------------
    def abort_timed_out(self, now_ms: int | None = None) -> int:
        """Abort (fencing their producers) the open transactions older than their timeout. Returns how many."""
        now = _now_ms() if now_ms is None else now_ms
        n = 0
        for m in list(self.state.table.values()):
            if m.state == ONGOING and m.pending is None and m.start_ms >= 0 and now - m.start_ms > m.timeout_ms:
                log.info("aborting the transaction of %s (producer %d epoch %d): open %d ms, longer than its "
                         "timeout of %d ms", m.transactional_id, m.producer_id, m.producer_epoch, now - m.start_ms,
                         m.timeout_ms)
                try:
                    self._abort(m, fence=True).add_done_callback(_log_failure(m.transactional_id))
                except KafkaError as e:
                    log.warning("cannot abort the timed-out transaction of %s: %s", m.transactional_id, e)
                n += 1
        return n

    def expire_ids(self, now_ms: int | None = None) -> int:
        """Forget ids with no open transaction idle longer than transactional.id.expiration.ms (a tombstone)."""
        now = _now_ms() if now_ms is None else now_ms
        n = 0
        for m in list(self.state.table.values()):
            if (m.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT) and m.pending is None
                    and now - m.last_update_ms > self.id_expiration_ms):
                try:
                    self.state.write(m, None).add_done_callback(_log_failure(m.transactional_id))
                except KafkaError as e:
                    log.warning("cannot expire transactional id %s: %s", m.transactional_id, e)
                n += 1
        return n

    # --- DescribeTransactions / ListTransactions -------------------------------------------------
    def describe(self, tid: str) -> TransactionMetadata:
        m = self.state.get(tid)
        if m is None:
            raise KafkaError(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, f"no transactional id {tid}")
        return m

    def list(self, states: list[str], producer_ids: list[int], duration_ms: int = -1) -> list[TransactionMetadata]:
        wanted = {STATES_BY_NAME[s] for s in states if s in STATES_BY_NAME}
        if states and not wanted:
            return []
        now = _now_ms()
        return [m for m in self.state.table.values()
                if (not wanted or m.state in wanted) and (not producer_ids or m.producer_id in producer_ids)
                and (duration_ms < 0 or (m.state == ONGOING and now - m.start_ms >= duration_ms))]


def _then(written: asyncio.Future[None], ok: Callable[[], R], failed: Callable[[ErrorCode], R]) -> asyncio.Future[R]:
    """A Future of `ok()` once `written` succeeds, or of `failed(code)` with its KafkaError's code."""
    out: asyncio.Future[R] = asyncio.get_running_loop().create_future()

    def done(f: asyncio.Future[None]) -> None:
        if out.done():
            return
        err = KafkaError(ErrorCode.NOT_COORDINATOR, "cancelled") if f.cancelled() else f.exception()
        if err is None:
            out.set_result(ok())
        else:
            out.set_result(failed(err.code if isinstance(err, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR))

    written.add_done_callback(done)
    return out


def _log_failure(tid: str) -> Callable[[asyncio.Future[Any]], None]:
    def done(f: asyncio.Future[Any]) -> None:
        if not f.cancelled() and f.exception() is not None:
            log.warning("transactional id %s: %s", tid, f.exception())
    return done
