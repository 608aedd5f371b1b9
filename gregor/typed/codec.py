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

from gregor.typed.errors import CorruptRecordError, RegistryLookupError, UnsupportedSchema
from gregor.typed.registry_client import RegistryClient, SchemaInfo

FAILFAST = "FAILFAST"
PERMISSIVE = "PERMISSIVE"
MODES = (FAILFAST, PERMISSIVE)
CORRUPT_COLUMN = "_corrupt_record"
BAD_FRAME = "not in Confluent's wire format (a magic byte 0 and a 4-byte schema id)"


class FormatDecoder(Protocol):
    schema_type: str
    arrow_type: pa.DataType

    def decode_group(self, col: pa.Array, rows: np.ndarray, info: SchemaInfo) -> tuple[pa.Array, list[tuple[int, str]]]:
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


def frames(col: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(schema id of each row: -1 for a null payload, -2 for a bad frame; the row's payload length)."""
    n = len(col)
    bufs = col.buffers()
    offsets = np.frombuffer(bufs[1], dtype="<i4", count=n + 1, offset=col.offset * 4) if n else np.zeros(1, "<i4")
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and bufs[2].size else np.zeros(8, np.uint8)
    starts = offsets[:-1].astype(np.int64)
    lengths = offsets[1:].astype(np.int64) - starts
    framed = lengths >= 5
    at = np.where(framed, starts, 0)
    ids = ((data[np.minimum(at + 1, len(data) - 1)].astype(np.int64) << 24)
           | (data[np.minimum(at + 2, len(data) - 1)].astype(np.int64) << 16)
           | (data[np.minimum(at + 3, len(data) - 1)].astype(np.int64) << 8)
           | data[np.minimum(at + 4, len(data) - 1)].astype(np.int64))
    ok = framed & (data[at] == 0)
    ids = np.where(ok, ids, -2)
    if col.null_count:
        ids = np.where(np.asarray(col.is_valid().to_numpy(zero_copy_only=False)), ids, -1)
    return ids, lengths


class ColumnDecoder:
    """Decodes binary columns of one format into the reader schema's Arrow type.

    `schemas` gives the SchemaInfo of a writer id (normally the registry client's cached lookup)."""

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
        ids, _ = frames(col)
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


def check_type(schema_type: str) -> str:
    t = schema_type.upper()
    if t not in ("AVRO", "JSON", "PROTOBUF"):
        raise UnsupportedSchema(f"unknown schema type {schema_type!r}")
    return t
