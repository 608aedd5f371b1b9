"""The transaction coordinator's state machine on its own: its writes go to an in-memory partition log
(the real record encoding, replayed by the real loader), markers to a recorder. What a client sees is
tested through real clients in tests/clients/test_transactions.py; here: fencing, timeouts, expiry,
and a coordinator elected over a log that holds a prepared transaction."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from gregor.config import BrokerConfig
from gregor.coordinator.transaction.coordinator import TransactionCoordinator, TransactionSettings
from gregor.coordinator.transaction.markers import TxnMarkerSender
from gregor.coordinator.transaction.state import COMPLETE_ABORT, COMPLETE_COMMIT, EMPTY, ONGOING, PREPARE_COMMIT
from gregor.coordinator.transaction.state_manager import TransactionStateManager
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import iter_headers

TOPICS = {("t", 0), ("t", 1)}


class Harness:
    """One coordinator (broker 0) over in-memory __transaction_state partitions."""

    def __init__(self, logs: dict[int, list[bytes]] | None = None) -> None:
        self.logs: dict[int, list[bytes]] = logs if logs is not None else {}
        self.markers: list[tuple[int, int, bool, list[tuple[str, int]]]] = []
        self.next_pid = 100
        config = BrokerConfig({"transaction.state.log.num.partitions": "1", "transactional.id.expiration.ms": "1000"})

        def append(topic: str, p: int, batch: bytes) -> None:
            self.logs.setdefault(p, []).append(batch)
            return None

        def read(p: int) -> Iterator[memoryview]:
            for b in self.logs.get(p, []):
                yield memoryview(b)

        async def write_local(pid: int, epoch: int, commit: bool, coord: int, tps: list[tuple[str, int]]) -> Any:
            self.markers.append((pid, epoch, commit, sorted(tps)))
            return dict.fromkeys(tps, ErrorCode.NONE)

        harness = self

        class Pids:
            def try_generate(self) -> int | None:
                harness.next_pid += 1
                return harness.next_pid

            async def generate(self) -> int:
                harness.next_pid += 1
                return harness.next_pid

        self.state = TransactionStateManager(1, append, read)
        sender = TxnMarkerSender(0, lambda t, p: 0, lambda b: None, lambda t: True, write_local)
        self.tc = TransactionCoordinator(TransactionSettings.from_config(config), self.state, Pids(), sender, lambda t, p: (t, p) in TOPICS)


async def done(result: Any) -> Any:
    """A coordinator answer, awaited when it is a Future."""
    return await result if isinstance(result, asyncio.Future) else result


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_commit_fencing_and_reload() -> None:
    async def run() -> None:
        h = Harness()
        h.tc.follow_leadership({0: 5})
        code, pid, epoch = await done(h.tc.init_producer_id("app", 60_000))
        assert (code, epoch) == (ErrorCode.NONE, 0)
        assert (await done(h.tc.init_producer_id("app", 10**9)))[0] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        got = await done(h.tc.add_partitions("app", pid, 0, [("t", 0), ("nope", 0)]))
        assert got == {("t", 0): ErrorCode.OPERATION_NOT_ATTEMPTED, ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert await done(h.tc.add_partitions("app", pid, 0, [("t", 0), ("t", 1)])) == dict.fromkeys(TOPICS, ErrorCode.NONE)
        assert (await done(h.tc.add_partitions("app", pid, 1, [("t", 0)])))[("t", 0)] == ErrorCode.PRODUCER_FENCED
        assert await done(h.tc.end_txn("app", pid, 0, True)) == ErrorCode.NONE
        await settle()
        assert h.markers == [(pid, 0, True, [("t", 0), ("t", 1)])]
        m = h.state.table["app"]
        assert m.state == COMPLETE_COMMIT and not m.partitions
        assert await done(h.tc.end_txn("app", pid, 0, True)) == ErrorCode.NONE  # a retried EndTxn
        assert await done(h.tc.end_txn("app", pid, 0, False)) == ErrorCode.INVALID_TXN_STATE
        # A second producer with the id while a transaction is open: it is aborted under a bumped epoch.
        await done(h.tc.add_partitions("app", pid, 0, [("t", 1)]))
        code, _, _ = await done(h.tc.init_producer_id("app", 60_000))
        assert code == ErrorCode.CONCURRENT_TRANSACTIONS
        await settle()
        assert h.markers[-1] == (pid, 1, False, [("t", 1)])
        code, pid2, epoch2 = await done(h.tc.init_producer_id("app", 60_000))
        assert (code, pid2, epoch2) == (ErrorCode.NONE, pid, 2)
        assert await done(h.tc.end_txn("app", pid, 0, True)) == ErrorCode.PRODUCER_FENCED
        # A new coordinator (another epoch) reads the same log: the same state.
        h2 = Harness(h.logs)
        h2.tc.follow_leadership({0: 6})
        m2 = h2.state.table["app"]
        assert (m2.producer_id, m2.producer_epoch, m2.state) == (pid, 2, EMPTY)
        assert sum(1 for b in h.logs[0] for _ in iter_headers(b)) >= 6

    asyncio.run(run())


def test_a_prepared_transaction_is_completed_by_the_next_coordinator() -> None:
    async def run() -> None:
        h = Harness()
        h.tc.follow_leadership({0: 1})
        _, pid, _ = await done(h.tc.init_producer_id("app", 60_000))
        await done(h.tc.add_partitions("app", pid, 0, [("t", 0)]))
        h.tc.markers.send = _never  # type: ignore[method-assign] # the coordinator dies before its markers
        assert await done(h.tc.end_txn("app", pid, 0, True)) == ErrorCode.NONE
        await settle()
        assert h.state.table["app"].state == PREPARE_COMMIT and h.markers == []
        h2 = Harness(h.logs)
        h2.tc.follow_leadership({0: 2})
        await settle()
        assert h2.markers == [(pid, 0, True, [("t", 0)])]
        assert h2.state.table["app"].state == COMPLETE_COMMIT

    asyncio.run(run())


async def _never(*args: Any, **kwargs: Any) -> bool:
    return False


def test_timeouts_abort_and_fence_and_idle_ids_expire() -> None:
    async def run() -> None:
        h = Harness()
        h.tc.follow_leadership({0: 1})
        _, pid, _ = await done(h.tc.init_producer_id("slow", 1000))
        await done(h.tc.add_partitions("slow", pid, 0, [("t", 0)]))
        m = h.state.table["slow"]
        assert m.state == ONGOING
        assert h.tc.abort_timed_out(now_ms=m.start_ms + 500) == 0
        assert h.tc.abort_timed_out(now_ms=m.start_ms + 1001) == 1
        await settle()
        assert h.markers == [(pid, 1, False, [("t", 0)])] and m.state == COMPLETE_ABORT
        assert await done(h.tc.end_txn("slow", pid, 0, True)) == ErrorCode.PRODUCER_FENCED
        # KIP-588: the timed-out producer may re-initialise with its old epoch and go on.
        code, pid2, epoch2 = await done(h.tc.init_producer_id("slow", 1000, pid, 0))
        assert (code, pid2, epoch2) == (ErrorCode.NONE, pid, 2)
        assert h.tc.expire_ids(now_ms=m.last_update_ms + 500) == 0
        assert h.tc.expire_ids(now_ms=m.last_update_ms + 1001) == 1
        await settle()
        assert "slow" not in h.state.table
        h2 = Harness(h.logs)
        h2.tc.follow_leadership({0: 2})
        assert "slow" not in h2.state.table  # the tombstone is replayed too

    asyncio.run(run())
