"""InitProducerId (idempotent producers) and DescribeProducers.

InitProducerId without a transactional id hands out a fresh producer id with epoch 0, as Kafka's
transaction coordinator does for idempotent producers (also when a v3+ producer sends its current
id and epoch: it gets a new id). Ids come from blocks reserved durably in the metadata store
(`allocate_producer_ids`), so an id is never handed out twice, across restarts too. Transactional
ids wait for the transaction coordinator (issue 11) and are refused with a clear error, as the
Produce handler refuses transactional batches.

DescribeProducers reports, per partition this broker leads, the producer state the log keeps
(gregor.storage.producer_state).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

from gregor.metadata.store import MetadataError
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.schema import Struct
from gregor.server.dispatcher import RequestContext

log = logging.getLogger("gregor.producers")

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


class ProducerIdManager:
    """Hands out producer ids from the current block. Reserving the next block writes and fsyncs the
    store (tens of ms on a busy disk), so it runs on a worker thread, once for every waiter, and
    requests keep being served meanwhile; it happens once per 1000 producers."""

    def __init__(self, store: Any, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        self._store = store
        self._block_size = block_size
        self._next = 0
        self._end = 0  # exclusive
        self._pending: asyncio.Future[tuple[int, int]] | None = None

    def try_generate(self) -> int | None:
        """The next id of the current block, or None when it is used up."""
        if self._next >= self._end:
            return None
        pid = self._next
        self._next += 1
        return pid

    async def generate(self) -> int:
        while True:
            pid = self.try_generate()
            if pid is not None:
                return pid
            if self._pending is None:
                fut = asyncio.get_running_loop().run_in_executor(None, self._store.allocate_producer_ids,
                                                                 self._block_size)
                fut.add_done_callback(self._install)
                self._pending = fut
            await asyncio.shield(self._pending)

    def _install(self, fut: asyncio.Future[tuple[int, int]]) -> None:
        self._pending = None
        if fut.cancelled() or fut.exception() is not None:
            return  # the waiters see the error; the next request tries again
        first, count = fut.result()
        assert count > 0 and first >= self._end, (first, count, self._end)
        self._next, self._end = first, first + count


_managers: weakref.WeakKeyDictionary[Any, ProducerIdManager] = weakref.WeakKeyDictionary()


def _manager(broker: Any) -> ProducerIdManager:
    m = _managers.get(broker)
    if m is None:
        m = _managers[broker] = ProducerIdManager(broker.store)
    return m


def _init_answer(code: ErrorCode, pid: int = -1, epoch: int = -1) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": pid, "producer_epoch": epoch}


def handle_init_producer_id(ctx: RequestContext, req: Struct) -> dict[str, Any] | asyncio.Future[Any]:
    if req.transactional_id is not None:
        return _init_answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)  # transactions: issue 11
    if (req.get("producer_id", -1) == -1) != (req.get("producer_epoch", -1) == -1):
        return _init_answer(ErrorCode.INVALID_REQUEST)  # an id without an epoch or the reverse
    m = _manager(ctx.broker)
    pid = m.try_generate()
    if pid is not None:
        return _init_answer(ErrorCode.NONE, pid, 0)
    return asyncio.ensure_future(_init_later(m))


async def _init_later(m: ProducerIdManager) -> dict[str, Any]:
    try:
        return _init_answer(ErrorCode.NONE, await m.generate(), 0)
    except (OSError, MetadataError) as e:  # the store could not record a new block: the client retries
        log.error("cannot reserve a block of producer ids: %s", e)
        return _init_answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)


def handle_describe_producers(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    rm = ctx.broker.replica_manager
    topics = []
    for t in req.topics:
        parts = []
        for index in t.partition_indexes:
            entry: dict[str, Any] = {"partition_index": index, "error_code": ErrorCode.NONE,
                                     "error_message": None, "active_producers": []}
            try:
                lg = rm.get_leader_partition(t.name, index).log
                entry["active_producers"] = [
                    {"producer_id": e.producer_id, "producer_epoch": e.producer_epoch, "last_sequence": e.last_seq,
                     "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
                     "current_txn_start_offset": e.current_txn_first_offset}
                    for e in lg.active_producers()
                ]
            except KafkaError as e:
                entry["error_code"], entry["error_message"] = e.code, e.message
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
