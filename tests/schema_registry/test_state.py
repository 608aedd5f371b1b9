"""The `_schemas` records (Confluent's JSON) and the state built from them in offset order, without a broker:
what every instance derives from the same records, rejections of a second writer included."""

from __future__ import annotations

import json

from gregor.schema_registry.records import (
    CONFIG,
    DELETE_SUBJECT,
    MODE,
    NOOP,
    SCHEMA,
    Key,
    Reference,
    SchemaValue,
    encode_value,
)
from gregor.schema_registry.state import RegistryState


def schema_record(subject: str, version: int, sid: int, text: str = '"int"', kind: str = "AVRO",
                  deleted: bool = False, refs: tuple[Reference, ...] = ()) -> tuple[bytes, bytes | None]:
    return (Key(SCHEMA, subject, version).encode(),
            encode_value(SchemaValue(subject, version, sid, kind, text, refs, deleted)))


def apply_all(records: list[tuple[bytes | None, bytes | None]]) -> tuple[RegistryState, list[bool]]:
    state = RegistryState()
    accepted = [state.apply_record(i, k, v, "_schemas-0").accepted for i, (k, v) in enumerate(records)]
    return state, accepted


def test_confluents_json_for_keys_and_values() -> None:
    key, value = schema_record("orders-value", 2, 7, 'syntax = "proto3";', "PROTOBUF",
                               refs=(Reference("a.proto", "a", 1),))
    assert json.loads(key) == {"keytype": "SCHEMA", "subject": "orders-value", "version": 2, "magic": 1}
    assert list(json.loads(key)) == ["keytype", "subject", "version", "magic"]
    assert json.loads(value or b"") == {"subject": "orders-value", "version": 2, "id": 7, "schemaType": "PROTOBUF",
                                        "references": [{"name": "a.proto", "subject": "a", "version": 1}],
                                        "schema": 'syntax = "proto3";', "deleted": False}
    assert "schemaType" not in json.loads(schema_record("s", 1, 1)[1] or b"")  # AVRO, as Confluent omits it
    assert json.loads(Key(CONFIG, None).encode()) == {"keytype": "CONFIG", "subject": None, "magic": 0}
    assert json.loads(Key(DELETE_SUBJECT, "s").encode()) == {"keytype": "DELETE_SUBJECT", "subject": "s", "magic": 0}
    assert json.loads(Key(NOOP).encode()) == {"keytype": "NOOP", "magic": 0}


def test_records_written_by_confluent_apply() -> None:
    """Records as Confluent's registry writes them (its field order, its CONFIG/MODE/DELETE_SUBJECT values)."""
    state, accepted = apply_all([
        (b'{"keytype":"SCHEMA","subject":"t-value","version":1,"magic":1}',
         b'{"subject":"t-value","version":1,"id":1,"schema":"\\"string\\"","deleted":false}'),
        (b'{"keytype":"SCHEMA","subject":"t-value","version":2,"magic":1}',
         b'{"subject":"t-value","version":2,"id":2,"schemaType":"JSON","schema":"{}","deleted":false}'),
        (b'{"keytype":"CONFIG","subject":"t-value","magic":0}', b'{"compatibilityLevel":"FULL"}'),
        (b'{"keytype":"CONFIG","magic":0}', b'{"compatibilityLevel":"NONE"}'),
        (b'{"keytype":"MODE","magic":0}', b'{"mode":"READONLY"}'),
        (b'{"keytype":"NOOP","magic":0}', None),
        (b'{"keytype":"DELETE_SUBJECT","subject":"t-value","magic":0}', b'{"subject":"t-value","version":1}'),
    ])
    assert all(accepted)
    assert [v.version for v in state.versions("t-value")] == [2]
    assert [v.version for v in state.versions("t-value", deleted=True)] == [1, 2]
    assert state.configs == {"t-value": "FULL", None: "NONE"} and state.modes == {None: "READONLY"}
    assert state.max_id == 2


def test_global_ids_deletes_and_tombstones() -> None:
    state, accepted = apply_all([
        schema_record("a", 1, 1, '"int"'), schema_record("b", 1, 1, '"int"'),  # the same schema: the same id
        schema_record("a", 2, 2, '"long"'),
        schema_record("a", 2, 2, '"long"', deleted=True),  # soft delete of a version
        (Key(SCHEMA, "a", 2).encode(), None),  # hard delete
        (Key(CONFIG, "a").encode(), b'{"compatibilityLevel":"FULL"}'), (Key(CONFIG, "a").encode(), None),
    ])
    assert all(accepted)
    assert [v.id for v in state.subjects_of(1)] == [1, 1]
    assert state.version("a", 2) is None and 2 not in state.contents  # no version names id 2 any more
    assert state.max_id == 2  # but it is never issued again
    assert "a" not in state.configs


def test_a_second_writer_is_rejected_in_log_order_by_every_reader() -> None:
    """Two instances that both believed they were the primary: the first record in the log wins."""
    records = [
        schema_record("s", 1, 1, '"int"'),
        schema_record("s", 2, 2, '"long"'),  # the real primary
        schema_record("t", 1, 2, '"string"'),  # a stale one: id 2 again, for another schema
        schema_record("s", 2, 3, '"float"'),  # and version 2 of s again
        schema_record("s", 1, 1, '"int"'),  # a retried produce of an accepted record changes nothing
    ]
    state, accepted = apply_all(records)
    assert accepted == [True, True, False, False, True]
    assert state.version("s", 2).schema == '"long"' and state.versions("t") == []  # type: ignore[union-attr]
    again, _ = apply_all(records)  # a restarted instance decides the same
    assert again.contents == state.contents and again.max_id == state.max_id == 2
    rejected = RegistryState()
    for i, (k, v) in enumerate(records[:4]):
        out = rejected.apply_record(i, k, v, "_schemas-0")
    # The record that took version 2's key: compaction would keep it and drop the accepted one, so the
    # primary is told to write the accepted value again.
    assert out.repair is not None and out.repair.schema == '"long"'


def test_records_that_do_not_decode_are_skipped() -> None:
    state, accepted = apply_all([
        (b"not json", b"{}"), (None, b"{}"), (b'{"keytype":"WHAT","magic":0}', b"{}"),
        (Key(SCHEMA, "s", 1).encode(), b'{"subject":"s","version":1}'),
        (Key(MODE, None).encode(), b'{"mode": 3}'),
        schema_record("s", 1, 1),
    ])
    assert accepted == [False, False, False, False, False, True]
    assert [v.id for v in state.versions("s")] == [1] and state.applied_offset == 5
