"""A column of Confluent-framed payloads decoded into typed Arrow values, whatever their schema ids.

Confluent's wire format: a magic byte 0, the schema's global id (4 bytes, big-endian), then the payload
(for Protobuf, message indexes first). The frame of every row is read with numpy over the column's
buffers; the rows are then decoded one schema id at a time by the format's decoder (which resolves
each writer schema to the reader's) and put back in their order.

Modes are Spark's: FAILFAST raises CorruptRecordError at the first payload that cannot be decoded;
PERMISSIVE keeps the row with a null value and the raw bytes in a `_corrupt_record` column. A null
payload (a tombstone) is a null value, not a corrupt record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

try:
    from gregor.typed import _avrodecode
except ImportError:  # no compiler at install time: numpy reads the frames
    _avrodecode = None  # type: ignore[assignment]

from gregor.typed.errors import CorruptRecordError, RegistryLookupError
from gregor.typed.registry_client import RegistryClient, SchemaInfo

FAILFAST = "FAILFAST"
PERMISSIVE = "PERMISSIVE"
MODES = (FAILFAST, PERMISSIVE)
CORRUPT_COLUMN = "_corrupt_record"
BAD_FRAME = "not in Confluent's wire format (a magic byte 0 and a 4-byte schema id)"


class FormatDecoder(Protocol):
    schema_type: str
    arrow_type: pa.DataType

    def decode_group(self, col: pa.Array, rows: np.ndarray | None,
                     info: SchemaInfo) -> tuple[pa.Array, list[tuple[int, str]]]:
        """The payloads col[rows] (every row when rows is None), all written with schema `info`, as one
        array of the reader's type with a null for each that fails, and the failures as (position, reason)."""
        ...


@dataclass
class DecodedColumn:
    """`value`: the typed values (null for a null or corrupt payload); `corrupt`: the raw payload of each
    corrupt row, null elsewhere (PERMISSIVE); `errors`: (row, reason) of each corrupt row."""

    value: pa.Array
    corrupt: pa.Array
    errors: list[tuple[int, str]]

    @property
    def corrupt_mask(self) -> pa.Array:
        return self.corrupt.is_valid()


def frames(col: pa.Array) -> tuple[np.ndarray, int]:
    """The schema id of each row (-1 for a null payload, -2 for a bad frame), and the id all rows share
    (-3 when they do not)."""
    n = len(col)
    bufs = col.buffers()
    data = bufs[2] if bufs[2] is not None else b""
    offsets = bufs[1] if bufs[1] is not None else np.zeros(n + 1, "<i4")
    if _avrodecode is not None:
        offs = np.frombuffer(offsets, dtype="<i4", count=n + 1, offset=col.offset * 4)
        raw, common = _avrodecode.frames(data, offs, bufs[0], col.offset, n)
        return np.frombuffer(raw, dtype="<i4"), common
    offs = np.frombuffer(offsets, dtype="<i4", count=n + 1, offset=col.offset * 4)
    data_np = np.frombuffer(data, dtype=np.uint8) if len(data) else np.zeros(8, np.uint8)
    starts = offs[:-1].astype(np.int64)
    framed = (offs[1:].astype(np.int64) - starts) >= 5
    at = np.where(framed, starts, 0)
    ids = np.zeros(n, dtype=np.int64)
    for i in range(1, 5):
        ids = (ids << 8) | data_np[np.minimum(at + i, len(data_np) - 1)].astype(np.int64)
    ids = np.where(framed & (data_np[at] == 0) & (ids <= 0x7FFFFFFF), ids, -2)
    if col.null_count:
        ids = np.where(np.asarray(col.is_valid().to_numpy(zero_copy_only=False)), ids, -1)
    ids = ids.astype("<i4")
    common = int(ids[0]) if n and bool((ids == ids[0]).all()) else -3
    return ids, common


class ColumnDecoder:
    """Decodes binary columns of one format into the reader schema's Arrow type; writer schemas are the
    registry client's (cached) answers for the ids in the frames. A registry that cannot be reached fails
    the batch in either mode: it says nothing about the record."""

    def __init__(self, decoder: FormatDecoder, registry: RegistryClient, mode: str = FAILFAST) -> None:
        mode = mode.upper()
        if mode not in MODES:
            raise ValueError(f"mode must be FAILFAST or PERMISSIVE, not {mode!r}")
        self.decoder = decoder
        self.registry = registry
        self.mode = mode
        self.arrow_type = decoder.arrow_type

    def _writer(self, schema_id: int) -> SchemaInfo | str:
        try:
            info = self.registry.schema_by_id(schema_id)
        except RegistryLookupError as e:
            if e.status == 404:
                return f"unknown schema id {schema_id}"
            raise
        if info.schema_type != self.decoder.schema_type:
            return f"schema id {schema_id} is a {info.schema_type} schema, not {self.decoder.schema_type}"
        return info

    def decode(self, col: pa.Array, offsets: Any = None) -> DecodedColumn:
        """Decode `col` (binary). `offsets` (the rows' Kafka offsets, optional) only names rows in errors."""
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        if col.type != pa.binary():
            col = col.cast(pa.binary())
        n = len(col)
        ids, common = frames(col)
        if common >= 0:  # the usual batch: one writer schema, no null or bad frame
            info = self._writer(common)
            if not isinstance(info, str):
                arr, errs = self.decoder.decode_group(col, None, info)
                return self._finish(col, arr, errs, offsets)
        errors: list[tuple[int, str]] = [(int(r), BAD_FRAME) for r in np.flatnonzero(ids == -2)]
        pieces: list[pa.Array] = []
        order: list[np.ndarray] = []
        unique = np.unique(ids[ids >= 0])
        for schema_id in unique.tolist():
            rows = np.flatnonzero(ids == schema_id).astype(np.int32)
            info = self._writer(schema_id)
            if isinstance(info, str):
                errors.extend((int(r), info) for r in rows)
                continue
            arr, errs = self.decoder.decode_group(col, rows, info)
            errors.extend((int(rows[k]), reason) for k, reason in errs)
            pieces.append(arr)
            order.append(rows)
        if len(order) == 1 and len(order[0]) == n:
            value = pieces[0]
        else:
            decoded = sum(len(o) for o in order)
            pieces.append(pa.nulls(n - decoded, self.arrow_type))
            rest = np.setdiff1d(np.arange(n, dtype=np.int32), np.concatenate(order) if order else np.empty(0, np.int32))
            perm = np.concatenate([*order, rest]) if order else rest
            inverse = np.empty(n, dtype=np.int64)
            inverse[perm] = np.arange(n)
            value = pa.concat_arrays(pieces).take(pa.array(inverse))
        return self._finish(col, value, errors, offsets)

    def _finish(self, col: pa.Array, value: pa.Array, errors: list[tuple[int, str]], offsets: Any) -> DecodedColumn:
        n = len(col)
        errors.sort()
        if errors and self.mode == FAILFAST:
            row, reason = errors[0]
            offset = None
            if offsets is not None:
                offset = int(offsets[row].as_py() if hasattr(offsets, "type") else offsets[row])
            raise CorruptRecordError(row, reason, offset)
        if errors:  # the decoders left a null value in each corrupt row
            mask = np.zeros(n, dtype=bool)
            mask[[r for r, _ in errors]] = True
            corrupt = pc.if_else(pa.array(mask), col, pa.scalar(None, pa.binary()))
        else:
            corrupt = pa.nulls(n, pa.binary())
        return DecodedColumn(value, corrupt, errors)

