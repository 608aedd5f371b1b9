"""The group coordinator's replay of `__consumer_offsets` at startup skips what it cannot decode.

The broker-level test (tests/server/test_internal_topics.py) puts garbage in a real log and restarts
a real broker; this one hands the coordinator the record sets a log would, including a batch whose
CRC is right but whose records do not parse, which a storage layer that re-validates at recovery
would never let reach it, so the coordinator's own guard is proven whatever storage does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

import pytest

from gregor.config import BrokerConfig
from gregor.coordinator.group import records as rec
from gregor.coordinator.group.coordinator import GroupCoordinator
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


def _load(partition_data: bytes) -> GroupCoordinator:
    def read(p: int) -> Iterable[memoryview]:
        return [memoryview(partition_data)] if p == 0 else []

    gc = GroupCoordinator(BrokerConfig({"offsets.topic.num.partitions": "1"}), lambda *a: None, read)

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
