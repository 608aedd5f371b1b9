"""The group coordinator's replay of `__consumer_offsets` at startup skips what it cannot decode.

The broker-level test (tests/server/test_internal_topics.py) puts garbage in a real log and restarts
a real broker; this one hands the coordinator the record sets a log would, including a batch whose
CRC is right but whose records do not parse, which a storage layer that re-validates at recovery
would never let reach it, so the coordinator's own guard is proven whatever storage does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

import pytest

from gregor.config import BrokerConfig
from gregor.coordinator.group import records as rec
from gregor.coordinator.group.consumer_protocol import ConsumerGroupSettings
from gregor.coordinator.group.coordinator import GroupCoordinator, GroupCoordinatorSettings, GroupMetadataSettings
from gregor.protocol.records import HEADER_SIZE, Record, build_batch, compute_crc


def _batch(base_offset: int, entries: list[tuple[bytes, bytes | None]]) -> bytes:
    return build_batch([Record(base_offset + i, 1, k, v) for i, (k, v) in enumerate(entries)],
                       base_offset=base_offset)


def _commit(base_offset: int, offset: int) -> bytes:
    return _batch(base_offset, [(rec.offset_key("g", "t", 0), rec.offset_value(offset, -1, "", 1))])


def _lying(base_offset: int) -> bytes:
    b = bytearray(_batch(base_offset, [(rec.group_key("g"), b"x" * 20)]))
    b[HEADER_SIZE] = 0x7E  # the record's length runs past the batch
    b[17:21] = compute_crc(b, 0, len(b)).to_bytes(4, "big")
    return bytes(b)


def _coordinator(props: dict[str, str], read: Callable[[int], Iterable[memoryview]]) -> GroupCoordinator:
    config = BrokerConfig(props)
    return GroupCoordinator(GroupCoordinatorSettings.from_config(config), GroupMetadataSettings.from_config(config),
                            ConsumerGroupSettings.from_config(config), lambda *a: None, read)


def _load(partition_data: bytes) -> GroupCoordinator:
    def read(p: int) -> Iterable[memoryview]:
        return [memoryview(partition_data)] if p == 0 else []

    gc = _coordinator({"offsets.topic.num.partitions": "1"}, read)

    async def run() -> None:
        gc.load()
        gc.shutdown()

    asyncio.run(run())
    return gc


def test_a_batch_that_does_not_decode_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    garbage = _batch(2, [(b"\x00\x01\x00", b"x"), (rec.offset_key("g", "t", 0), b"\x00\x03"),
                         (rec.group_key("g"), b"\x00\x07junk"), (b"\x00\x2a", None)])
    with caplog.at_level(logging.WARNING, logger="gregor.group"):
        gc = _load(_commit(0, 5) + _lying(1) + garbage + _commit(6, 9))
    assert gc.groups["g"].offsets[("t", 0)].offset == 9  # the commits on both sides are replayed
    text = caplog.text
    assert "unreadable batch in __consumer_offsets-0 at offset 1" in text
    for offset in (2, 3, 4, 5):  # garbage key, truncated offset value, bad group value, unknown key version
        assert f"unreadable record in __consumer_offsets-0 at offset {offset}" in text
    assert "skipped 5 unreadable records or batches in __consumer_offsets-0" in text


def test_garbage_between_commits_never_changes_them(caplog: pytest.LogCaptureFixture) -> None:
    gc = _load(_commit(0, 5) + _batch(1, [(rec.offset_key("g", "t", 0), b"\x7f\x7f" + b"\x00" * 30)]))
    assert gc.groups["g"].offsets[("t", 0)].offset == 5


def test_resignation_answers_waiting_joins_not_coordinator() -> None:
    """The coordinator's partition moves away while a rebalance waits for a member's rejoin: the
    JoinGroup already parked is answered NOT_COORDINATOR at once (Kafka's onGroupUnloaded), so its
    member looks for the new coordinator now, and the group is gone from here."""
    from gregor.protocol.errors import ErrorCode

    gc = _coordinator({"offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}, lambda p: [])

    def join(member_id: str) -> object:
        return gc.join_group("g", member_id, None, "c", "h", 30000, 30000, "consumer", [("range", b"")], False)

    async def run() -> tuple[object, object]:
        gc.load()
        first = join("")
        if isinstance(first, asyncio.Future):
            first = await asyncio.wait_for(first, 5)
        assert first.error == ErrorCode.NONE  # type: ignore[attr-defined]
        waiting = join("")  # a second member: a rebalance that waits for the first to rejoin
        assert isinstance(waiting, asyncio.Future) and not waiting.done()
        gc.follow_leadership(set())
        await asyncio.sleep(0)
        result = waiting.result() if waiting.done() else None
        gc.shutdown()
        return result, gc.groups.get("g")

    result, group = asyncio.run(run())
    assert result is not None and result.error == ErrorCode.NOT_COORDINATOR  # type: ignore[attr-defined]
    assert group is None
