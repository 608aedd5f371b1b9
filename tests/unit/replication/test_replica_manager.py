"""ReplicaManager over a real LogManager and metadata store in a tmp dir, with a fake purgatory clock:
acks=all through the purgatory, follower fetches moving the HW, delayed fetches, leadership changes."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from gregor.config import BrokerConfig
from gregor.metadata.cache import MetadataCache
from gregor.metadata.embedded import EmbeddedMetadataStore
from gregor.metadata.store import PartitionState, TopicMetadata
from gregor.protocol.errors import ErrorCode
from gregor.protocol.messages.list_offsets import LATEST_TIMESTAMP
from gregor.protocol.records import Record, build_batch, iter_headers
from gregor.replication.append_path import AppendEntry
from gregor.replication.log_configs import effective_topic_configs, valid_overrides
from gregor.replication.partition import FETCH_LOG_END, READ_UNCOMMITTED, ReadResult
from gregor.replication.read_path import FetchParams, FetchPartition
from gregor.replication.replica_fetcher import ReplicaFetcherSettings
from gregor.replication.replica_manager import ReplicaManager, ReplicaManagerSettings
from gregor.security.inter_broker import ClientSecurity
from gregor.storage.log_manager import LogManager
from tests.server.fakeclock import FakeClock

ME, FOLLOWER = 0, 1


def sync(rm: ReplicaManager) -> None:
    """What the broker's metadata cache does on the loop after a store write: catch up, then sync."""
    rm.metadata_cache.load(rm.store.snapshot())
    rm.sync_all()


def run(coro: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(coro())


@asynccontextmanager
async def replica_manager(tmp_path: Path, replicas: list[int], isr: list[int],
                          props: dict[str, str] | None = None) -> AsyncIterator[tuple[ReplicaManager, FakeClock]]:
    data = tmp_path / "data"
    config = BrokerConfig({"log.dirs": str(data), **(props or {})})
    store = EmbeddedMetadataStore(str(data), ME)
    lm = LogManager(config.log_dirs, config.log_config)
    clock = FakeClock()
    rm = ReplicaManager(ReplicaManagerSettings.from_config(config), ReplicaFetcherSettings.from_config(config),
                        config.log_config, store, lm, MetadataCache(), ClientSecurity.from_config(config), clock)
    store.create_topic(TopicMetadata("t", uuid.uuid4(), {0: PartitionState(replicas, ME, 0, isr)}))
    sync(rm)
    work = rm.log_work_done("t")
    if work is not None:
        await work
    try:
        yield rm, clock
    finally:
        rm.shutdown()
        lm.shutdown()


def _entry(n: int) -> AppendEntry:
    buf = memoryview(bytearray(build_batch([Record(i, 1000 + i, None, b"v" * 100) for i in range(n)])))
    return AppendEntry("t", 0, buf, list(iter_headers(buf)))


def _params(replica_id: int = -1, min_bytes: int = 1, max_wait_ms: int = 500) -> FetchParams:
    return FetchParams(replica_id, max_wait_ms, min_bytes, READ_UNCOMMITTED, lambda: (1 << 20, True))


def _fetch(rm: ReplicaManager, offset: int, **kw: Any) -> list[ReadResult] | asyncio.Future[list[ReadResult]]:
    return rm.fetch_messages(_params(**kw), [FetchPartition("t", 0, offset, 1 << 20)], lambda rs: rs)


def test_single_replica_acks_all_completes_at_once_through_the_purgatory(tmp_path: Path) -> None:
    async def body() -> None:
        async with replica_manager(tmp_path, [ME], [ME]) as (rm, _):
            got = rm.append_records(30_000, -1, [_entry(5), _entry(3)])
            assert isinstance(got, list), "the HW moved at the append: nothing to wait for"
            assert [(r.error, r.base_offset, r.last_offset) for r in got] == [(ErrorCode.NONE, 0, 4), (ErrorCode.NONE, 5, 7)]
            assert rm.partitions[("t", 0)].high_watermark == 8 and rm.purgatory.parked == 0
    run(body)


def test_acks_all_waits_for_the_follower_then_completes(tmp_path: Path) -> None:
    async def body() -> None:
        async with replica_manager(tmp_path, [ME, FOLLOWER], [ME, FOLLOWER]) as (rm, _):
            acks1 = rm.append_records(30_000, 1, [_entry(2)])
            assert isinstance(acks1, list) and acks1[0].error == ErrorCode.NONE  # acks=1 does not wait
            waiting = rm.append_records(30_000, -1, [_entry(3)])
            assert isinstance(waiting, asyncio.Future) and not waiting.done()
            assert rm.purgatory.parked == 1
            # The follower fetches from 0: it gets everything up to the LEO; its LEO is 0, the HW stays.
            res = _fetch(rm, 0, replica_id=FOLLOWER)
            assert isinstance(res, list) and res[0].high_watermark == 0
            assert sum(h.records_count for h in iter_headers(res[0].records)) == 5
            assert not waiting.done()
            res = _fetch(rm, 5, replica_id=FOLLOWER, max_wait_ms=0)  # it appended them: LEO 5
            assert isinstance(res, list) and res[0].high_watermark == 5 and res[0].log_start_offset == 0
            assert waiting.done() and [(r.error, r.base_offset) for r in waiting.result()] == [(ErrorCode.NONE, 2)]
            assert rm.purgatory.parked == 0
    run(body)


def test_acks_all_times_out(tmp_path: Path) -> None:
    async def body() -> None:
        async with replica_manager(tmp_path, [ME, FOLLOWER], [ME, FOLLOWER]) as (rm, clock):
            waiting = rm.append_records(2_000, -1, [_entry(1)])
            assert isinstance(waiting, asyncio.Future)
            clock.advance(1_999)
            assert not waiting.done()
            clock.advance(1)
            (r,) = waiting.result()
            assert r.error == ErrorCode.REQUEST_TIMED_OUT and r.base_offset == 0 and "did not reach offset 1" in r.message
    run(body)


def test_delayed_fetch_completes_on_appended_bytes(tmp_path: Path) -> None:
    async def body() -> None:
        async with replica_manager(tmp_path, [ME], [ME]) as (rm, clock):
            parked = _fetch(rm, 0, min_bytes=500, max_wait_ms=10_000)
            assert isinstance(parked, asyncio.Future) and rm.purgatory.parked == 1
            rm.append_records(0, 1, [_entry(1)])  # ~170 bytes: not enough
            assert not parked.done()
            rm.append_records(0, 1, [_entry(5)])
            assert parked.done()
            assert sum(h.records_count for h in iter_headers(parked.result()[0].records)) == 6
            # Max wait: answers with what there is.
            parked = _fetch(rm, 6, min_bytes=500, max_wait_ms=1_000)
            assert isinstance(parked, asyncio.Future)
            clock.advance(1_000)
            assert parked.done() and parked.result()[0].records == b""
    run(body)


def test_delayed_consumer_fetch_waits_for_the_hw_not_the_leo(tmp_path: Path) -> None:
    async def body() -> None:
        async with replica_manager(tmp_path, [ME, FOLLOWER], [ME, FOLLOWER]) as (rm, _):
            parked = _fetch(rm, 0, min_bytes=1, max_wait_ms=10_000)
            follower = _fetch(rm, 0, replica_id=FOLLOWER, min_bytes=1, max_wait_ms=10_000)
            assert isinstance(parked, asyncio.Future) and isinstance(follower, asyncio.Future)
            rm.append_records(30_000, 1, [_entry(4)])
            assert follower.done() and not parked.done()  # the follower reads to the LEO; the consumer waits
            assert sum(h.records_count for h in iter_headers(follower.result()[0].records)) == 4
            _fetch(rm, 4, replica_id=FOLLOWER, max_wait_ms=0)  # the HW moves to 4
            assert parked.done()
            (r,) = parked.result()
            assert r.high_watermark == 4 and sum(h.records_count for h in iter_headers(r.records)) == 4
    run(body)


def test_parked_requests_end_when_the_partition_goes_or_changes_leader(tmp_path: Path) -> None:
    async def body() -> None:
        async with replica_manager(tmp_path, [ME, FOLLOWER], [ME, FOLLOWER]) as (rm, _):
            fetch = _fetch(rm, 0, max_wait_ms=10_000)
            produce = rm.append_records(30_000, -1, [_entry(1)])
            assert isinstance(fetch, asyncio.Future) and isinstance(produce, asyncio.Future)
            t = rm.metadata_cache.topic("t")
            assert t is not None
            rm.store.update_partition_state("t", 0, PartitionState([ME, FOLLOWER], FOLLOWER, 1, [ME, FOLLOWER]),
                                            t.partitions[0].version)
            sync(rm)
            assert fetch.done() and fetch.result()[0].error == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert produce.done() and produce.result()[0].error == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert rm.purgatory.parked == 0
    run(body)


def test_parked_fetch_answers_when_its_topic_is_deleted(tmp_path: Path) -> None:
    async def body() -> None:
        async with replica_manager(tmp_path, [ME], [ME]) as (rm, _):
            fetch = _fetch(rm, 0, max_wait_ms=10_000)
            assert isinstance(fetch, asyncio.Future)
            rm.store.delete_topic("t")
            rm.metadata_cache.load(rm.store.snapshot())
            rm.on_metadata_change("deleted", "t")
            assert fetch.done() and fetch.result()[0].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            work = rm.log_work_done("t")
            if work is not None:
                await work
    run(body)


def test_replica_fetch_errors_and_list_offsets_by_isolation(tmp_path: Path) -> None:
    async def body() -> None:
        async with replica_manager(tmp_path, [ME, FOLLOWER], [ME, FOLLOWER]) as (rm, _):
            rm.append_records(0, 1, [_entry(3)])
            (r,) = _fetch(rm, 0, replica_id=5)  # type: ignore[misc]
            assert r.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
            (r,) = _fetch(rm, 99, replica_id=FOLLOWER)  # type: ignore[misc]
            assert r.error == ErrorCode.OFFSET_OUT_OF_RANGE
            assert rm.partitions[("t", 0)].followers[FOLLOWER].log_end_offset == -1  # not recorded
            assert rm.fetch_offset_for_timestamp("t", 0, LATEST_TIMESTAMP, READ_UNCOMMITTED, -1, True)[1] == 0
            assert rm.fetch_offset_for_timestamp("t", 0, LATEST_TIMESTAMP, FETCH_LOG_END, -1, True)[1] == 3
            assert rm.last_offset_for_leader_epoch("t", 0, -1, 0, True) == (0, 3)
    run(body)


def test_purgatory_bound_answers_at_once(tmp_path: Path) -> None:
    async def body() -> None:
        props = {"gregor.purgatory.max.operations": "1"}
        async with replica_manager(tmp_path, [ME, FOLLOWER], [ME, FOLLOWER], props) as (rm, _):
            assert isinstance(_fetch(rm, 0, max_wait_ms=10_000), asyncio.Future)
            second = _fetch(rm, 0, max_wait_ms=10_000)
            assert isinstance(second, list) and second[0].error == ErrorCode.NONE  # answered with what it has
            (r,) = rm.append_records(30_000, -1, [_entry(1)])  # type: ignore[misc]
            assert r.error == ErrorCode.REQUEST_TIMED_OUT and "gregor.purgatory.max.operations" in r.message
    run(body)


def test_flush_messages_fsync_runs_off_the_loop_and_the_answer_waits_for_it(tmp_path: Path) -> None:
    async def body() -> None:
        async with replica_manager(tmp_path, [ME], [ME], {"log.flush.interval.messages": "3"}) as (rm, _):
            part = rm.partitions[("t", 0)]
            first = rm.append_records(0, 1, [_entry(2)])
            assert isinstance(first, list) and part.high_watermark == 2  # not due yet: answered at once
            pending = rm.append_records(0, 1, [_entry(2)])
            # flush.messages is due: the fsync runs on an executor thread; until it is done the answer waits
            # and the HW stays before this append (consumers never see what a crash could take back).
            assert isinstance(pending, asyncio.Future) and not pending.done()
            assert part.high_watermark == 2  # (the fsync itself may already be done on its thread)
            (r,) = _fetch(rm, 0, max_wait_ms=0)  # type: ignore[misc]
            assert sum(h.records_count for h in iter_headers(r.records)) == 2
            also = rm.append_records(0, -1, [_entry(1)])  # still due: covered by the next flush
            assert isinstance(also, asyncio.Future)
            (res,) = await pending
            assert res.error == ErrorCode.NONE and res.base_offset == 2
            (res,) = await also
            assert res.error == ErrorCode.NONE and res.base_offset == 4
            assert part.log.recovery_point == 5 and part.high_watermark == 5
            assert part.flushes is None  # nothing unflushed, no answer waiting, no fsync running
    run(body)


def test_topic_configs_an_invalid_override_is_reported_once_and_new_defaults_reach_the_logs(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        async with replica_manager(tmp_path, [ME], [ME]) as (rm, _):
            defaults = rm.log_configs.defaults
            overrides = {"retention.ms": "soon", "segment.bytes": "2000000"}
            rm.store.create_topic(TopicMetadata("c", uuid.uuid4(), {0: PartitionState([ME], ME, 0, [ME])},
                                                configs=overrides))
            with caplog.at_level(logging.WARNING, logger="gregor.replica"):
                sync(rm)
                sync(rm)  # every sync derives the configs again: the warning is not repeated
            warned = [r.getMessage() for r in caplog.records if "stored config" in r.getMessage()]
            assert len(warned) == 1 and "topic c" in warned[0] and "retention.ms=soon" in warned[0], warned
            part = rm.partitions[("c", 0)]
            assert part.log_config is not None
            assert (part.log_config.retention_ms, part.log_config.segment_bytes) == (defaults.retention_ms, 2000000)
            assert valid_overrides(defaults, overrides) == {"segment.bytes": "2000000"}

            newer = BrokerConfig({"log.dirs": str(tmp_path / "data"), "log.retention.ms": "60000",
                                  "log.segment.bytes": "3000000"}).log_config
            rm.refresh_log_configs(newer)  # a dynamic change of the broker's topic defaults
            assert (part.log_config.retention_ms, part.log_config.segment_bytes) == (60000, 2000000)
            assert part.log.config == part.log_config
            assert rm.partitions[("t", 0)].log.config.segment_bytes == 3000000
            assert effective_topic_configs(newer, overrides)["retention.ms"] == 60000
    run(body)
