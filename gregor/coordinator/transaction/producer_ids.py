"""Producer ids: handed out from blocks reserved durably in the metadata store (Kafka's
ProducerIdManager; on ZooKeeper the block is /latest_producer_id_block), so an id is never handed
out twice, across restarts and brokers. Idempotent producers and transactional ids both draw here."""

from __future__ import annotations

import asyncio
from typing import Any

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
