"""The Arrow side of the reader: which columns a read returns, their types, and RecordBatches made from the
decoder's buffers without copying them (pyarrow.Array.from_buffers over pa.py_buffer).

Columns, as Spark's Kafka source names them: topic (string), partition (int32), offset (int64),
timestamp (timestamp[ms, tz=UTC] by default, or the unit and zone asked for), timestampType (int32:
0 CreateTime, 1 LogAppendTime), key (binary, null for a null key), value (binary, null for a
tombstone), headers (list<struct<key: string, value: binary>>, null when a record has none, as
Spark's source and confluent-kafka's Message.headers() give it). A layout may carry the exact Arrow
schema a consumer demands (Spark compares schemas field by field); columns are then built with its
types.

pyarrow is imported on first use, so `gregor.client` imports without it.
"""

from __future__ import annotations

import array
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

COLUMNS = ("topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers")
DEFAULT_COLUMNS = ("partition", "offset", "timestamp", "timestampType", "key", "value", "headers")
TIMESTAMP_UNITS = {"ms": 1, "us": 1000}


def import_pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        raise ImportError("gregor.client's Arrow reader needs pyarrow: pip install pyarrow "
                          "(or pip install 'gregor[spark]', which includes it)") from None
    return pyarrow


@dataclass(frozen=True)
class ArrowLayout:
    """What a read returns: `columns` (a selection of COLUMNS, in order), the timestamp unit ("ms" or
    "us") and time zone ("" for none), or an exact `schema` whose field names and types win."""

    columns: tuple[str, ...] = DEFAULT_COLUMNS
    timestamp_unit: str = "ms"
    timezone: str = "UTC"
    schema: pa.Schema | None = None

    def __post_init__(self) -> None:
        if self.schema is not None:
            object.__setattr__(self, "columns", tuple(self.schema.names))
            ts = self.schema.field("timestamp").type if "timestamp" in self.schema.names else None
            if ts is not None:
                object.__setattr__(self, "timestamp_unit", ts.unit)
                object.__setattr__(self, "timezone", ts.tz or "")
        unknown = [c for c in self.columns if c not in COLUMNS]
        if unknown or len(set(self.columns)) != len(self.columns) or not self.columns:
            raise ValueError(f"columns must be distinct names among {', '.join(COLUMNS)}; got {list(self.columns)}")
        if self.timestamp_unit not in TIMESTAMP_UNITS:
            raise ValueError(f"the timestamp unit must be one of {', '.join(TIMESTAMP_UNITS)}, "
                             f"not {self.timestamp_unit!r}")

    @property
    def timestamp_scale(self) -> int:
        return TIMESTAMP_UNITS[self.timestamp_unit]

    def decoder_flags(self) -> dict[str, bool | int]:
        """What the decoder must build (columns left out cost nothing)."""
        return {"timestamp_scale": self.timestamp_scale, "key": "key" in self.columns,
                "value": "value" in self.columns, "headers": "headers" in self.columns}

    def arrow_schema(self) -> pa.Schema:
        if self.schema is not None:
            return self.schema
        pa = import_pyarrow()
        types = {
            "topic": pa.string(),
            "partition": pa.int32(),
            "offset": pa.int64(),
            "timestamp": pa.timestamp(self.timestamp_unit, tz=self.timezone or None),
            "timestampType": pa.int32(),
            "key": pa.binary(),
            "value": pa.binary(),
            "headers": pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])),
        }
        return pa.schema([pa.field(c, types[c]) for c in self.columns])


def _buf(pa: Any, b: Any) -> Any:
    return pa.py_buffer(b)


# The partition and topic columns repeat one value. pyarrow's own pa.repeat loads its compute kernels on
# first use: ~0.5 s of CPU in every fresh process (each Spark worker's first task, each CLI read) for two
# constant columns. They are built from buffers instead: the values are one bytes repetition (a memcpy),
# and a string column's offsets (0, w, 2w, ...) are kept per width and sliced for shorter batches.
_OFFSETS: dict[int, Any] = {}  # value width -> int32 offsets 0, w, 2w, ... (the longest built so far)
_OFFSET_WIDTHS_KEPT = 64


def _constant_int32(pa: Any, typ: pa.DataType, value: int, n: int) -> pa.Array:
    if typ != pa.int32():
        return pa.repeat(pa.scalar(value, typ), n)
    return pa.Array.from_buffers(typ, n, [None, _buf(pa, struct.pack("<i", value) * n)], null_count=0)


def _constant_string(pa: Any, typ: pa.DataType, value: str, n: int) -> pa.Array:
    raw = value.encode()
    width = len(raw)
    if typ != pa.string() or n * width >= 1 << 31:
        return pa.repeat(pa.scalar(value, typ), n)
    offsets = _OFFSETS.get(width)
    if offsets is None or len(offsets) <= n:
        if len(_OFFSETS) >= _OFFSET_WIDTHS_KEPT:
            _OFFSETS.clear()
        offsets = array.array("i", range(0, (n + 1) * width, width) if width else bytes(4 * (n + 1)))
        _OFFSETS[width] = offsets  # a racing thread builds the same values: either copy serves
    head = _buf(pa, offsets).slice(0, 4 * (n + 1))
    return pa.Array.from_buffers(typ, n, [None, head, _buf(pa, raw * n)], null_count=0)


def _binary(pa: Any, typ: pa.DataType, n: int, nulls: int, validity: Any, offsets: Any, data: Any) -> pa.Array:
    return pa.Array.from_buffers(typ, n, [_buf(pa, validity) if nulls else None, _buf(pa, offsets), _buf(pa, data)],
                                 null_count=nulls)


def _header_keys(pa: Any, n: int, offsets: Any, data: Any, bad_utf8: bool) -> pa.Array:
    if not bad_utf8:
        return pa.Array.from_buffers(pa.string(), n, [None, _buf(pa, offsets), _buf(pa, data)], null_count=0)
    # A header key that is not UTF-8 reads as Kafka's Java client reads it: malformed bytes become U+FFFD.
    raw = pa.Array.from_buffers(pa.binary(), n, [None, _buf(pa, offsets), _buf(pa, data)], null_count=0)
    return pa.array([k.decode("utf-8", "replace") for k in raw.to_pylist()], pa.string())


def record_batch(layout: ArrowLayout, schema: pa.Schema, topic: str, partition: int, taken: tuple[Any, ...]
                 ) -> pa.RecordBatch:
    """A RecordBatch of `schema` from a Decoder's take() tuple (its buffers are used, not copied)."""
    pa = import_pyarrow()
    (n, offset, ts, tstype, key_nulls, key_valid, key_offs, key_data, value_nulls, value_valid, value_offs, value_data,
     hl_nulls, hl_valid, hl_offs, n_headers, hk_offs, hk_data, hv_nulls, hv_valid, hv_offs, hv_data, bad_utf8) = taken
    arrays = []
    for field in schema:
        name, typ = field.name, field.type
        if name == "offset":
            arr = pa.Array.from_buffers(typ, n, [None, _buf(pa, offset)], null_count=0)
        elif name == "timestamp":
            arr = pa.Array.from_buffers(typ, n, [None, _buf(pa, ts)], null_count=0)
        elif name == "timestampType":
            arr = pa.Array.from_buffers(typ, n, [None, _buf(pa, tstype)], null_count=0)
        elif name == "key":
            arr = _binary(pa, typ, n, key_nulls, key_valid, key_offs, key_data)
        elif name == "value":
            arr = _binary(pa, typ, n, value_nulls, value_valid, value_offs, value_data)
        elif name == "partition":
            arr = _constant_int32(pa, typ, partition, n)
        elif name == "topic":
            arr = _constant_string(pa, typ, topic, n)
        else:  # headers
            struct_type = typ.value_type
            keys = _header_keys(pa, n_headers, hk_offs, hk_data, bool(bad_utf8))
            values = _binary(pa, struct_type.field("value").type, n_headers, hv_nulls, hv_valid, hv_offs, hv_data)
            items = pa.StructArray.from_arrays([keys, values], fields=list(struct_type))
            arr = pa.Array.from_buffers(typ, n, [_buf(pa, hl_valid) if hl_nulls else None, _buf(pa, hl_offs)],
                                        null_count=hl_nulls, children=[items])
        arrays.append(arr)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
