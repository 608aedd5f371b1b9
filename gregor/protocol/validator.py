"""The record validator: Kafka's LogValidator rules for magic v2 record batches, in one place.

Every produced batch passes through `validate_batches` before offsets are assigned; the cleaner
reads stored batches through `read_records`/`scan_records`; ListOffsets' max-timestamp lookup
uses `record_timestamps`; follower appends (replication) will call `validate_batches` with
`ValidationRules.for_follower(...)`, whose looser rules accept what the cleaner writes.

What is checked, in order, for each batch of a record set:
  header       size field inside the record set, magic 2, size <= max.message.bytes (MESSAGE_TOO_LARGE),
               codec <= 4 (UNSUPPORTED_COMPRESSION_TYPE), CRC32C (CORRUPT_MESSAGE), no control batch
               from a client (INVALID_RECORD), record count > 0 and == last offset delta + 1
               (INVALID_RECORD; followers: count <= last offset delta + 1)
  body         decompressed under a limit (CORRUPT_MESSAGE if it does not decode, MESSAGE_TOO_LARGE
               if it expands past the limit; decompression stops there)
  records      the walk: every record's length varint, and every field (attributes, timestamp
               delta, offset delta, key, value, header count, header keys non-null, header values)
               inside the record, every record inside the body, exactly `records_count` of them and
               no byte after the last (CORRUPT_MESSAGE); offset delta == its index (followers:
               increasing, <= last offset delta) (INVALID_RECORD)
  timestamps   CreateTime topics: each record's timestamp within message.timestamp.before.max.ms
               before and message.timestamp.after.max.ms after the broker's clock (INVALID_TIMESTAMP,
               KIP-937); the header's max timestamp is corrected to the records' (as Kafka does)
  keys         compacted topics: every record has a key (INVALID_RECORD)
Record-level failures carry KIP-467 record errors (index within the batch, message).

  schema ids   schema-checked topics (rules.schema_fields): every non-null checked key and value starts with
               Confluent's wire-format prefix (magic byte 0, 4-byte schema id) (INVALID_RECORD with the
               record's error); each batch's distinct ids are returned for the registry check
               (gregor.schema_registry.checks)

The walk is gregor.protocol.record_walk: C (`_recordwalk.c`) with no per-record Python work, and a
pure-Python reference that is the fallback when the extension is not built.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from gregor.protocol import compression
from gregor.protocol.record_walk import (  # noqa: F401 (the walk's names are the validator's too)
    BAD_HEADER_COUNT,
    BAD_LENGTH,
    ID_BAD_MAGIC,
    ID_NO_SCHEMA_ID,
    ID_OK,
    ID_TOO_MANY,
    KEY_FIELD,
    MAX_DISTINCT_IDS,
    NULL_HEADER_KEY,
    OFFSET_DELTA,
    OK,
    RECORD_LENGTH,
    SIZE_MISMATCH,
    TRAILING_BYTES,
    TRUNCATED,
    VALUE_FIELD,
    VARINT_TOO_LONG,
    WALK_MESSAGES,
    IdWalkResult,
    WalkResult,
    _varint,
    _varlong,
    _walk_ids_py,
    _walk_py,
    walk,
    walk_c,
    walk_ids,
    walk_ids_c,
    walk_ids_py,
    walk_py,
)
from gregor.protocol.records import (
    _OFF_CRC,
    _OFF_MAX_TIMESTAMP,
    CONTROL_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    InvalidRecordError,
    compute_crc,
    read_header,
)

LONG_MAX = 2**63 - 1
NO_TIMESTAMP = -1
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")

# --- rules and errors ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ValidationRules:
    """What a partition accepts. Build with `for_topic` (Produce) or `for_follower` (replication)."""

    max_batch_bytes: int
    """max.message.bytes: the largest batch, as sent (compressed)."""
    max_decompressed_bytes: int
    """How far one batch may expand when decompressed (see `decompression_limit`)."""
    decompression_limit_doc: str = ""
    """Names the properties behind max_decompressed_bytes, for the error message."""
    compacted: bool = False
    log_append_time: bool = False
    timestamp_before_max_ms: int = LONG_MAX
    timestamp_after_max_ms: int = LONG_MAX
    from_client: bool = True
    """Clients may not write control batches; a follower copies the leader's."""
    strict_offsets: bool = True
    """Produce: records_count == last offset delta + 1 and offset deltas 0..n-1. Follower appends
    of cleaned batches: fewer records than the offset range, deltas increasing, empty batches allowed."""
    schema_fields: int = 0
    """Schema-checked topics: KEY_FIELD | VALUE_FIELD of the fields whose non-null contents must start with
    Confluent's wire-format prefix; the walk reports their distinct schema ids (Validated.schema_ids)."""

    @classmethod
    def for_topic(
        cls,
        *,
        max_message_bytes: int,
        decompression_ratio: int,
        decompression_max_bytes: int,
        compacted: bool,
        log_append_time: bool,
        timestamp_before_max_ms: int,
        timestamp_after_max_ms: int,
        schema_fields: int = 0,
    ) -> ValidationRules:
        limit, doc = decompression_limit(max_message_bytes, decompression_ratio, decompression_max_bytes)
        return cls(max_message_bytes, limit, doc, compacted, log_append_time, timestamp_before_max_ms,
                   timestamp_after_max_ms, schema_fields=schema_fields)

    @classmethod
    def for_follower(cls, *, max_message_bytes: int, decompression_ratio: int,
                     decompression_max_bytes: int) -> ValidationRules:
        """A follower stores what its leader stored: framing and CRC are checked, not timestamps or keys."""
        limit, doc = decompression_limit(max_message_bytes, decompression_ratio, decompression_max_bytes)
        return cls(max(max_message_bytes, 1), limit, doc, from_client=False, strict_offsets=False,
                   log_append_time=True)


    @classmethod
    def for_stored(cls, max_message_bytes: int, decompression_ratio: int = 0,
                   decompression_max_bytes: int = 0) -> ValidationRules:
        """Reading back stored batches (cleaner, ListOffsets): a cleaned batch holds fewer records
        than its offset range and may be empty; a batch may be larger than today's
        max.message.bytes; decompression is bounded as at produce time (default ratio and cap
        unless given). Timestamps and keys are not judged."""
        limit, doc = decompression_limit(max(max_message_bytes, 1), decompression_ratio or DEFAULT_DECOMPRESSION_RATIO,
                                         decompression_max_bytes or DEFAULT_DECOMPRESSION_MAX_BYTES)
        return cls(2**31 - 1, limit, doc, from_client=False, strict_offsets=False, log_append_time=True)


def decompression_limit(max_message_bytes: int, ratio: int, cap: int) -> tuple[int, str]:
    """A batch may expand to max.message.bytes x gregor.batch.decompressed.max.ratio, and never past
    gregor.batch.decompressed.max.bytes. Returns (limit, text naming the limit for error messages)."""
    scaled = max_message_bytes * ratio
    if scaled <= cap:
        return scaled, (f"{scaled} bytes (max.message.bytes {max_message_bytes} x "
                        f"gregor.batch.decompressed.max.ratio {ratio})")
    return cap, f"{cap} bytes (gregor.batch.decompressed.max.bytes)"


DEFAULT_DECOMPRESSION_RATIO = 64
DEFAULT_DECOMPRESSION_MAX_BYTES = compression.DEFAULT_MAX_DECOMPRESSED_BYTES


class BatchValidationError(InvalidRecordError):
    """A batch the partition must refuse. `error` is the Kafka error name; `record_errors` the
    KIP-467 (index in batch, message) pairs; `batch_index` the batch's position in the record set."""

    def __init__(self, message: str, error: str = "CORRUPT_MESSAGE", *, batch_index: int = 0,
                 record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message, error)
        self.batch_index = batch_index
        self.record_errors = record_errors or []


class InlineBudgetExceeded(Exception):
    """Raised by validate_batches when a batch expands past `inline_decompress_bytes`: the caller
    validates it again off the event loop, with the full limit."""


@dataclass(frozen=True, slots=True)
class SchemaIds:
    """The distinct schema ids of one batch's keys and values, in order of first appearance (empty for a
    field the rules do not check)."""

    keys: tuple[int, ...]
    values: tuple[int, ...]


@dataclass(slots=True)
class Validated:
    """What validate_batches found: the headers, with keep_bodies the decompressed records, and with
    rules.schema_fields each batch's schema ids."""

    headers: list[BatchHeader] = field(default_factory=list)
    bodies: list[memoryview] = field(default_factory=list)
    schema_ids: list[SchemaIds] = field(default_factory=list)


# --- batches -------------------------------------------------------------------------------------


def check_header(buf: memoryview | bytes | bytearray, pos: int, rules: ValidationRules,
                 batch_index: int = 0) -> BatchHeader:
    """The header checks for the batch at `pos` (see the module docstring). Returns its header."""
    n = len(buf)
    if n - pos < HEADER_SIZE:
        raise BatchValidationError(f"truncated batch at byte {pos}", batch_index=batch_index)
    h = read_header(buf, pos)
    if h.magic != MAGIC:
        # Produce v3+ may only carry magic v2 batches; older magics are INVALID_RECORD, as in Kafka.
        raise BatchValidationError(f"unsupported record batch magic {h.magic}",
                                   "INVALID_RECORD" if h.magic in (0, 1) else "CORRUPT_MESSAGE",
                                   batch_index=batch_index)
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or h.size > n - pos:
        raise BatchValidationError(f"batch length {h.batch_length} does not fit the record set",
                                   batch_index=batch_index)
    if h.size > rules.max_batch_bytes:
        raise BatchValidationError(f"batch of {h.size} bytes exceeds max.message.bytes {rules.max_batch_bytes}",
                                   "MESSAGE_TOO_LARGE", batch_index=batch_index)
    if h.compression > compression.ZSTD:
        raise BatchValidationError(f"unknown compression codec {h.compression}", "UNSUPPORTED_COMPRESSION_TYPE",
                                   batch_index=batch_index)
    if compute_crc(buf, pos, h.size) != h.crc:
        raise BatchValidationError(f"CRC mismatch in batch at byte {pos}", batch_index=batch_index)
    if rules.from_client and h.attributes & CONTROL_BIT:
        raise BatchValidationError("Clients are not allowed to write control records", "INVALID_RECORD",
                                   batch_index=batch_index)
    if rules.strict_offsets:
        if h.records_count <= 0 or h.last_offset_delta != h.records_count - 1:
            raise BatchValidationError(
                f"batch has {h.records_count} records and last offset delta {h.last_offset_delta}",
                "INVALID_RECORD", batch_index=batch_index)
    elif h.records_count < 0 or h.last_offset_delta < h.records_count - 1:
        raise BatchValidationError(
            f"batch has {h.records_count} records and last offset delta {h.last_offset_delta}",
            "INVALID_RECORD", batch_index=batch_index)
    return h


def batch_body(buf: memoryview | bytes | bytearray, h: BatchHeader, limit: int, limit_doc: str = "",
               batch_index: int = 0, *, copy: bool = True) -> memoryview:
    """The records section of the batch `h` (at h.position in `buf`), decompressed under `limit`
    (copy=False: see compression.decompress). Raises BatchValidationError: CORRUPT_MESSAGE if it
    does not decode, MESSAGE_TOO_LARGE past the limit."""
    payload = memoryview(buf)[h.position + HEADER_SIZE : h.position + h.size]
    if not h.compression:
        return payload
    try:
        return compression.decompress(h.compression, payload, limit, copy=copy)
    except compression.DecompressedTooLargeError:
        raise BatchValidationError(
            f"{compression.NAMES[h.compression]} batch of {h.size} bytes expands past the limit of "
            f"{limit_doc or f'{limit} bytes'}", "MESSAGE_TOO_LARGE", batch_index=batch_index) from None
    except ValueError as e:
        raise BatchValidationError(f"batch does not decompress: {e}", batch_index=batch_index) from None


def check_records(h: BatchHeader, body: memoryview | bytes, rules: ValidationRules, batch_index: int = 0,
                  *, walker: Callable[..., WalkResult] | None = None) -> WalkResult:
    """The walk over one batch's records. Raises BatchValidationError on a framing failure or a
    bad offset delta (the latter with a record error)."""
    res = (walker or walk)(body, h.records_count, rules.strict_offsets, h.last_offset_delta)
    status = res[0]
    if status:
        msg = WALK_MESSAGES[status].format(i=res[1])
        if status == OFFSET_DELTA:
            raise BatchValidationError(msg, "INVALID_RECORD", batch_index=batch_index, record_errors=[(res[1], msg)])
        raise BatchValidationError(f"invalid record batch: {msg}", batch_index=batch_index)
    return res


FIELD_NAMES = {0: "key", 1: "value"}
WIRE_FORMAT = "Confluent's wire format is a magic byte 0, then a 4-byte schema id"


def id_failure_message(status: int, index: int, field_index: int, detail: int) -> str:
    """The KIP-467 record error of a key or value without the wire-format prefix."""
    where = f"offset {index} in the batch: {FIELD_NAMES[field_index]}"
    if status == ID_BAD_MAGIC:
        why = "it is empty" if detail < 0 else f"it starts with 0x{detail:02x}"
        return f"{where}: bad magic byte ({why}; {WIRE_FORMAT})"
    return f"{where}: no schema id (it has {detail} bytes; {WIRE_FORMAT})"


INLINE_PYTHON_RECORDS = 256
"""A schema-checked batch that needs a Python pass over its records (more distinct ids than the C walk
holds, or records to name in a refusal) and has more records than this is validated again off the event
loop (InlineBudgetExceeded), so that no batch costs the loop Python work per record at length."""


def check_schema_ids(h: BatchHeader, body: memoryview | bytes, rules: ValidationRules, batch_index: int = 0,
                     *, walker: Callable[..., IdWalkResult] | None = None, inline: bool = False
                     ) -> tuple[WalkResult, SchemaIds]:
    """check_records for a schema-checked topic: the same walk, which also reads each checked key's and
    value's wire-format prefix. Raises BatchValidationError (INVALID_RECORD with a record error for every
    record without the prefix), or InlineBudgetExceeded when `inline` and a large batch needs a Python pass."""
    res = (walker or walk_ids)(body, h.records_count, rules.strict_offsets, h.last_offset_delta, rules.schema_fields)
    status = res[0]
    if status:
        check_records(h, body, rules, batch_index, walker=lambda *_: res[:6])
    id_status = res[6]
    if id_status and inline and h.records_count > INLINE_PYTHON_RECORDS:
        raise InlineBudgetExceeded()
    if id_status == ID_TOO_MANY:  # more distinct ids than the C walk's table holds: all of them, in Python
        res = _walk_ids_py(body, h.records_count, rules.strict_offsets, h.last_offset_delta, rules.schema_fields, None)
        id_status = res[6]
    if id_status:
        errors = id_failures(body, h.records_count, rules.schema_fields)
        n = len(errors)
        raise BatchValidationError(f"{n} record{'s' if n != 1 else ''} refused by schema validation: {errors[0][1]}",
                                   "INVALID_RECORD", batch_index=batch_index, record_errors=errors)
    return res[:6], SchemaIds(res[10], res[11])  # type: ignore[return-value]


def id_failures(body: memoryview | bytes, count: int, fields: int) -> list[tuple[int, str]]:
    """Every record of a framed body whose checked key or value lacks the wire-format prefix, with its record
    error (the refusal path: the walk found the first, this names them all; Python work per record)."""
    buf = bytes(body)
    out = []
    pos, n = 0, len(buf)
    for i in range(count):
        _, length, pos = _varint(buf, pos, n)
        end = pos + length
        _, _, p = _varlong(buf, pos + 1, end)
        _, _, p = _varint(buf, p, end)  # offset delta
        for f, mask in ((0, KEY_FIELD), (1, VALUE_FIELD)):
            _, size, p = _varint(buf, p, end)
            if size >= 0 and fields & mask and not has_prefix(buf, p, size):
                status, detail = (ID_BAD_MAGIC, buf[p] if size else -1) if size == 0 or buf[p] != 0 else \
                    (ID_NO_SCHEMA_ID, size)
                out.append((i, id_failure_message(status, i, f, detail)))
                break
            p += max(size, 0)
        pos = end
    return out


def has_prefix(buf: bytes, pos: int, size: int) -> bool:
    """Whether `size` bytes at pos start with the wire-format prefix (magic byte 0 and a 4-byte id)."""
    return size >= 5 and buf[pos] == 0


def _bad_timestamps(h: BatchHeader, body: memoryview | bytes, rules: ValidationRules,
                    now_ms: int) -> list[tuple[int, str]]:
    """The records whose timestamps break KIP-937's bounds (slow path: only when min/max say some may)."""
    lo = now_ms - rules.timestamp_before_max_ms
    hi = now_ms + rules.timestamp_after_max_ms
    out = []
    for i, rec in enumerate(scan_records(body, h.records_count)):
        ts = h.base_timestamp + rec.ts_delta
        if ts == NO_TIMESTAMP:
            continue
        if ts < lo:
            out.append((i, f"Timestamp {ts} of message with offset delta {i} is out of range: more than "
                           f"message.timestamp.before.max.ms {rules.timestamp_before_max_ms} ms before now {now_ms}"))
        elif ts > hi:
            out.append((i, f"Timestamp {ts} of message with offset delta {i} is out of range: more than "
                           f"message.timestamp.after.max.ms {rules.timestamp_after_max_ms} ms after now {now_ms}"))
    return out


def validate_batches(buf: memoryview, rules: ValidationRules, now_ms: int, *,
                     inline_decompress_bytes: int | None = None, keep_bodies: bool = False) -> Validated:
    """Validate every batch of a record set (see the module docstring); fix header max timestamps in
    place (the buffer must be writable for that, and is, for Produce). Raises BatchValidationError,
    or InlineBudgetExceeded when a compressed batch expands past `inline_decompress_bytes`."""
    try:
        return _validate_batches(buf, rules, now_ms, inline_decompress_bytes, keep_bodies)
    finally:
        if not keep_bodies:  # the bodies were views of this thread's scratch buffer
            compression.release_scratch(compression.RELEASE_AFTER_BYTES)


def _validate_batches(buf: memoryview, rules: ValidationRules, now_ms: int, inline_decompress_bytes: int | None,
                      keep_bodies: bool) -> Validated:
    out = Validated()
    n = len(buf)
    if n == 0:
        raise BatchValidationError("empty record set", "INVALID_RECORD")
    pos = 0
    index = 0
    check_ts = not rules.log_append_time and (rules.timestamp_before_max_ms < LONG_MAX
                                              or rules.timestamp_after_max_ms < LONG_MAX)
    while pos < n:
        h = check_header(buf, pos, rules, index)
        limit = rules.max_decompressed_bytes
        if h.compression and inline_decompress_bytes is not None and inline_decompress_bytes < limit:
            try:
                body = compression.decompress(h.compression, buf[pos + HEADER_SIZE : pos + h.size],
                                              inline_decompress_bytes, copy=keep_bodies)
            except compression.DecompressedTooLargeError:
                raise InlineBudgetExceeded() from None
            except ValueError as e:
                raise BatchValidationError(f"batch does not decompress: {e}", batch_index=index) from None
        else:
            body = batch_body(buf, h, limit, rules.decompression_limit_doc, index, copy=keep_bodies)
        if rules.schema_fields:
            res, ids = check_schema_ids(h, body, rules, index, inline=inline_decompress_bytes is not None)
            out.schema_ids.append(ids)
        else:
            res = check_records(h, body, rules, index)
        if h.records_count > 0 and not rules.log_append_time:
            if check_ts:
                lo = now_ms - rules.timestamp_before_max_ms
                hi = now_ms + rules.timestamp_after_max_ms
                if h.base_timestamp + res[2] < lo or h.base_timestamp + res[3] > hi:
                    bad = _bad_timestamps(h, body, rules, now_ms)
                    if bad:
                        raise BatchValidationError(bad[0][1], "INVALID_TIMESTAMP", batch_index=index,
                                                   record_errors=bad)
            max_ts = h.base_timestamp + res[3]
            if (rules.from_client and max_ts != h.max_timestamp and h.base_timestamp != NO_TIMESTAMP
                    and not buf.readonly):
                _set_max_timestamp(buf, h, max_ts)
        if rules.compacted and res[4] and not h.is_control:
            keyless = [i for i, rec in enumerate(scan_records(body, h.records_count)) if rec.key is None]
            raise BatchValidationError("Compacted topic cannot accept message without key", "INVALID_RECORD",
                                       batch_index=index,
                                       record_errors=[(i, "Compacted topic cannot accept message without key")
                                                      for i in keyless])
        out.headers.append(h)
        if keep_bodies:
            out.bodies.append(body)
        pos += h.size
        index += 1
    return out


def _set_max_timestamp(buf: memoryview, h: BatchHeader, max_ts: int) -> None:
    """Kafka rewrites a CreateTime batch's max timestamp to its records' maximum: the time index and
    ListOffsets trust the header."""
    _I64.pack_into(buf, h.position + _OFF_MAX_TIMESTAMP, max_ts)
    h.max_timestamp = max_ts
    h.crc = compute_crc(buf, h.position, h.size)
    _U32.pack_into(buf, h.position + _OFF_CRC, h.crc)


# --- records, for the cleaner and lookups ----------------------------------------------------------


@dataclass(slots=True)
class ScannedRecord:
    """One record's positions in its batch body: start..end spans the record with its length
    prefix, ts_start..ts_end its timestamp-delta varint."""

    start: int
    end: int
    ts_start: int
    ts_end: int
    ts_delta: int
    offset_delta: int
    key: bytes | None
    is_tombstone: bool


def scan_records(body: memoryview | bytes, count: int) -> list[ScannedRecord]:
    """The records of a body that `check_records` accepted (positions, deltas, key, tombstone)."""
    buf = bytes(body)
    out: list[ScannedRecord] = []
    append = out.append
    pos = 0
    n = len(buf)
    for _ in range(count):
        start = pos
        _, length, pos = _varint(buf, pos, n)
        end = pos + length
        ts_start = pos + 1
        _, ts_delta, ts_end = _varlong(buf, ts_start, end)
        _, offset_delta, p = _varint(buf, ts_end, end)
        _, key_len, p = _varint(buf, p, end)
        key = None
        if key_len >= 0:
            key = buf[p : p + key_len]
            p += key_len
        _, value_len, p = _varint(buf, p, end)
        append(ScannedRecord(start, end, ts_start, ts_end, ts_delta, offset_delta, key, value_len < 0))
        pos = end
    return out


def read_records(raw: memoryview | bytes, rules: ValidationRules) -> tuple[memoryview, list[ScannedRecord]]:
    """A stored batch (`raw` starts at it) checked and scanned: CRC, header, bounded decompression, walk.
    Returns (decompressed body, records). Raises BatchValidationError; never anything else for bad bytes."""
    view = memoryview(raw)
    h = check_header(view, 0, rules)
    body = batch_body(view, h, rules.max_decompressed_bytes, rules.decompression_limit_doc)
    check_records(h, body, rules)
    return body, scan_records(body, h.records_count)


def record_timestamps(raw: memoryview | bytes, rules: ValidationRules) -> list[tuple[int, int]]:
    """(offset, timestamp) of each record of the stored batch at the start of `raw`. Raises
    BatchValidationError for a batch that does not validate."""
    view = memoryview(raw)
    h = check_header(view, 0, rules)
    body = batch_body(view, h, rules.max_decompressed_bytes, rules.decompression_limit_doc)
    check_records(h, body, rules)
    if h.log_append_time:
        return [(h.base_offset + r.offset_delta, h.max_timestamp) for r in scan_records(body, h.records_count)]
    return [(h.base_offset + r.offset_delta, h.base_timestamp + r.ts_delta) for r in scan_records(body, h.records_count)]
