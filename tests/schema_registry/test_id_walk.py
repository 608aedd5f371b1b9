"""The schema-id walk: the C walk and the pure-Python reference agree, and both find what an independent
decoding of the records (gregor.protocol.records.decode_records) says the batch holds."""

from __future__ import annotations

import random
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gregor.protocol import compression, validator
from gregor.protocol.record_walk import (
    ID_BAD_MAGIC,
    ID_NO_SCHEMA_ID,
    ID_OK,
    ID_TOO_MANY,
    KEY_FIELD,
    MAX_DISTINCT_IDS,
    VALUE_FIELD,
    IdWalkResult,
)
from gregor.protocol.records import HEADER_SIZE, Header, Record, build_batch, decode_records, iter_headers
from gregor.protocol.validator import BatchValidationError, ValidationRules, validate_batches

needs_c = pytest.mark.skipif(validator.walk_ids_c is None, reason="the C record walk is not built")
NOW = int(time.time() * 1000)
FIELDS = (0, KEY_FIELD, VALUE_FIELD, KEY_FIELD | VALUE_FIELD)


def framed(schema_id: int, payload: bytes = b"") -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + payload


# A field: null, a wire-format payload with one of a few ids (so batches repeat ids), or arbitrary bytes.
field_st = st.one_of(
    st.none(),
    st.builds(framed, st.sampled_from([0, 1, 7, 42, 2**31 - 1, 2**32 - 1]), st.binary(max_size=12)),
    st.builds(framed, st.integers(0, 2**32 - 1), st.binary(max_size=4)),
    st.binary(max_size=8),
)
records_st = st.lists(
    st.tuples(field_st, field_st, st.lists(st.tuples(st.text(max_size=3), st.one_of(st.none(), st.binary(max_size=4))),
                                           max_size=2)),
    min_size=1, max_size=40,
)


def _body(recs: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]) -> bytes:
    return build_batch([Record(i, NOW, k, v, [Header(hk, hv) for hk, hv in hs])
                        for i, (k, v, hs) in enumerate(recs)])[HEADER_SIZE:]


def _both(body: bytes, count: int, strict: bool, last: int, fields: int) -> IdWalkResult:
    c = validator.walk_ids_c(body, count, strict, last, fields)
    p = validator.walk_ids_py(body, count, strict, last, fields)
    assert c == p, (body.hex(), count, strict, last, fields)
    assert c[:6] == validator.walk_c(body, count, strict, last)  # the ids change nothing of the framing walk
    return c


def _expected(recs: list[tuple[bytes | None, bytes | None, list]], fields: int) -> tuple[int, int, int, int, tuple, tuple]:
    """The oracle: the first record (key before value) without the prefix, else the distinct ids in order."""
    seen: tuple[dict[int, None], dict[int, None]] = ({}, {})
    for i, (k, v, _) in enumerate(recs):
        for f, data in ((0, k), (1, v)):
            if data is None or not fields & (KEY_FIELD if f == 0 else VALUE_FIELD):
                continue
            if not data or data[0] != 0:
                return ID_BAD_MAGIC, i, f, (data[0] if data else -1), tuple(seen[0]), tuple(seen[1])
            if len(data) < 5:
                return ID_NO_SCHEMA_ID, i, f, len(data), tuple(seen[0]), tuple(seen[1])
            sid = int.from_bytes(data[1:5], "big")
            if sid not in seen[f] and len(seen[f]) == MAX_DISTINCT_IDS:
                return ID_TOO_MANY, i, f, 0, tuple(seen[0]), tuple(seen[1])
            seen[f].setdefault(sid, None)
    return ID_OK, -1, 0, 0, tuple(seen[0]), tuple(seen[1])


@needs_c
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records_st, st.sampled_from(FIELDS), st.data())
def test_c_and_python_id_walks_agree(recs: list, fields: int, data: st.DataObject) -> None:
    body = _body(recs)
    n = len(recs)
    res = _both(body, n, True, n - 1, fields)
    assert res[0] == validator.OK
    assert res[6:] == _expected(recs, fields)
    mutated = bytearray(body)
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if kind == "flip" and mutated:
            mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
        elif kind == "cut" and mutated:
            del mutated[data.draw(st.integers(0, len(mutated) - 1)):]
        else:
            i = data.draw(st.integers(0, len(mutated)))
            mutated[i:i] = data.draw(st.binary(min_size=1, max_size=4))
    res = _both(bytes(mutated), data.draw(st.sampled_from([n, n - 1, n + 1, 0])), data.draw(st.booleans()),
                data.draw(st.integers(-1, n + 2)), fields)
    if res[0] != validator.OK:  # a batch that does not frame reports no ids
        assert res[6:] == (ID_OK, -1, 0, 0, (), ())


@needs_c
def test_c_and_python_agree_on_random_bytes() -> None:
    rnd = random.Random(22)
    for _ in range(3000):
        body = bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(0, 48)))
        _both(body, rnd.randrange(0, 4), rnd.random() < 0.5, rnd.randrange(-1, 5), rnd.choice(FIELDS))


@needs_c
def test_more_distinct_ids_than_the_c_table_are_all_found() -> None:
    """The C walk stops at MAX_DISTINCT_IDS distinct ids per field; the validator then walks in Python."""
    n = MAX_DISTINCT_IDS * 2 + 5
    recs = [(None, framed(1000 + i % (MAX_DISTINCT_IDS + 3)), []) for i in range(n)]
    res = _both(_body(recs), n, True, n - 1, VALUE_FIELD)
    assert res[6] == ID_TOO_MANY and res[7] == MAX_DISTINCT_IDS
    batch = memoryview(bytearray(build_batch([Record(i, NOW, k, v) for i, (k, v, _) in enumerate(recs)])))
    got = validate_batches(batch, _rules(VALUE_FIELD), NOW)
    assert got.schema_ids[0].values == tuple(range(1000, 1000 + MAX_DISTINCT_IDS + 3))


def _rules(fields: int) -> ValidationRules:
    return ValidationRules.for_topic(max_message_bytes=1 << 20, decompression_ratio=64, decompression_max_bytes=1 << 26,
                                     compacted=False, log_append_time=False, timestamp_before_max_ms=2**62,
                                     timestamp_after_max_ms=2**62, schema_fields=fields)


@pytest.mark.parametrize("codec", [compression.NONE, compression.LZ4, compression.ZSTD])
def test_validate_batches_reports_ids_and_refuses_records_without_the_prefix(codec: int) -> None:
    good = [Record(0, NOW, framed(3), framed(42, b"avro")), Record(1, NOW, None, None),
            Record(2, NOW, framed(3), framed(43)), Record(3, NOW, b"plain key", framed(42))]
    batch = memoryview(bytearray(build_batch(good, codec=codec)))
    got = validate_batches(batch, _rules(VALUE_FIELD), NOW)
    assert [(i.keys, i.values) for i in got.schema_ids] == [((), (42, 43))]
    with pytest.raises(BatchValidationError) as e:  # record 3's key is not in the wire format
        validate_batches(batch, _rules(KEY_FIELD | VALUE_FIELD), NOW)
    assert e.value.error == "INVALID_RECORD"
    assert e.value.record_errors == [(3, "offset 3 in the batch: key: bad magic byte (it starts with 0x70; Confluent's "
                                         "wire format is a magic byte 0, then a 4-byte schema id)")]
    short = build_batch([Record(0, NOW, None, framed(1)), Record(1, NOW, None, b"\x00\x01"), Record(2, NOW, None, b""),
                         Record(3, NOW, None, framed(2)), Record(4, NOW, None, b"{}")], codec=codec)
    with pytest.raises(BatchValidationError) as e:  # every record without the prefix is named, not only the first
        validate_batches(memoryview(bytearray(short)), _rules(VALUE_FIELD), NOW)
    assert [m for _, m in e.value.record_errors] == [
        "offset 1 in the batch: value: no schema id (it has 2 bytes; Confluent's wire format is a magic byte 0, then a "
        "4-byte schema id)",
        "offset 2 in the batch: value: bad magic byte (it is empty; Confluent's wire format is a magic byte 0, then a "
        "4-byte schema id)",
        "offset 4 in the batch: value: bad magic byte (it starts with 0x7b; Confluent's wire format is a magic byte 0, "
        "then a 4-byte schema id)"]
    assert str(e.value).startswith("3 records refused by schema validation: offset 1 in the batch")
    # The records themselves are untouched: what was validated decodes to what was built.
    h = next(iter_headers(batch))
    assert [r.value for r in decode_records(batch, h)] == [r.value for r in good]
