"""Helpers for the storage tests: building batches, appending, reading a whole log back."""

from __future__ import annotations

import os

from gregor.protocol.records import BatchHeader, Record, build_batch, iter_headers, iter_records, validate_record_set
from gregor.storage import AppendInfo, Log, LogConfig


def batch(n: int = 1, ts: int = 1000, value: bytes = b"v" * 10, key: bytes | None = None, codec: int = 0,
          timestamps: list[int] | None = None, base_offset: int = 0, leader_epoch: int = -1) -> bytearray:
    """One batch of `n` records (per-record timestamps if `timestamps` is given)."""
    tss = timestamps if timestamps is not None else [ts] * n
    recs = [Record(base_offset + i, t, key, value) for i, t in enumerate(tss)]
    return bytearray(build_batch(recs, base_offset=base_offset, codec=codec, leader_epoch=leader_epoch))


def headers_of(buf: bytes | bytearray | memoryview) -> list[BatchHeader]:
    return validate_record_set(memoryview(buf), 1 << 30)


def append(log: Log, n: int = 1, ts: int = 1000, value: bytes = b"v" * 10, epoch: int = 0,
           now: int | None = None, batches: int = 1, **kw: object) -> AppendInfo:
    buf = bytearray()
    for _ in range(batches):
        buf += batch(n, ts, value, **kw)  # type: ignore[arg-type]
    return log.append_as_leader(buf, headers_of(buf), epoch, ts if now is None else now)


def open_log(path: os.PathLike | str, name: str = "topic-0", now: int = 0, **config: object) -> Log:
    return Log.open(os.path.join(path, name), LogConfig(**config), now_ms=now)  # type: ignore[arg-type]


def read_all(log: Log, max_bytes: int = 1 << 20) -> list[Record]:
    """Every record from the log start to the LEO, by repeated reads."""
    out: list[Record] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        info = log.read(offset, max_bytes)
        data = bytes(info.records)
        assert data, f"empty read at {offset} below LEO {log.log_end_offset}"
        validate_record_set(memoryview(data), 1 << 30)  # whole batches with valid CRCs
        out.extend(r for r in iter_records(data) if r.offset >= offset)
        offset = info.next_offset
    return out


def batch_headers(log: Log) -> list[BatchHeader]:
    """All batch headers of the log, segment by segment."""
    out: list[BatchHeader] = []
    for seg in log.segments:
        out.extend(seg.batches())
    return out


def headers_in(data: bytes | memoryview) -> list[BatchHeader]:
    return list(iter_headers(data))


