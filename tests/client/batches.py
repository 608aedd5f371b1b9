"""Record sets for the decoder tests, and the rows a reader must return for them (from the records themselves)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from gregor.client import pydecoder
from gregor.client.arrow_columns import ArrowLayout, record_batch
from gregor.client.decoder import FULL, Decoder
from gregor.client.decompress import Decompressor
from gregor.protocol.records import Record, build_batch, build_marker_batch, patch_batch


def batch(records: list[Record], base: int, *, codec: int = 0, pid: int = -1, txn: bool = False,
          log_append_ms: int | None = None) -> bytes:
    """A batch of `records` (offsets absolute) at `base`."""
    b = bytearray(build_batch(records, base_offset=base, codec=codec, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                              base_sequence=0 if pid >= 0 else -1, transactional=txn))
    if log_append_ms is not None:
        patch_batch(b, 0, base, 0, log_append_ms)
    return bytes(b)


def marker(base: int, pid: int, commit: bool) -> bytes:
    b = bytearray(build_marker_batch(pid, 0, commit, 0, 1000))
    patch_batch(b, 0, base, 0)
    return bytes(b)


def row(r: Record, log_append_ms: int | None = None) -> dict[str, Any]:
    """The row a record reads as, in the default layout's columns (partition 0)."""
    return {"partition": 0, "offset": r.offset, "timestamp": log_append_ms if log_append_ms is not None else r.timestamp,
            "timestampType": int(log_append_ms is not None), "key": r.key, "value": r.value,
            "headers": [{"key": h.key, "value": h.value} for h in r.headers] or None}


LAYOUT = ArrowLayout(timezone="")


def decode_rows(record_set: bytes, start: int, end: int, *, python: bool = False, read_committed: bool = False,
                aborted: list[tuple[int, int]] | None = None, max_rows: int = 1 << 30,
                layout: ArrowLayout = LAYOUT) -> tuple[list[dict[str, Any]], int, list[int]]:
    """(rows, next offset, rows per Arrow batch) of one record set through the C (or Python) decoder,
    feeding on after each FULL as the fetcher does. Timestamps come back as epoch ms."""
    impl = pydecoder.Decoder if python else Decoder
    d = impl(check_crcs=True, read_committed=read_committed, **layout.decoder_flags())
    d.set_range(start, end)
    d.set_aborted(aborted)
    schema = layout.arrow_schema()
    rows: list[dict[str, Any]] = []
    sizes: list[int] = []
    pos = 0
    dec = Decompressor(1 << 26)

    def take() -> None:
        t = d.take()
        if t is not None:
            rb = record_batch(layout, schema, "t", 0, t)
            rb.validate(full=True)
            sizes.append(rb.num_rows)
            table = pa.Table.from_batches([rb])
            if "timestamp" in table.column_names:
                i = table.column_names.index("timestamp")
                table = table.set_column(i, "timestamp", table.column(i).cast(pa.int64()))
            rows.extend(table.to_pylist())

    while True:
        pos, status = d.feed(record_set, pos, dec, max_rows, 1 << 30)
        if status == FULL:
            take()
            continue
        break
    take()
    return rows, d.next_offset, sizes
