"""The quorum's own record batches: the fast data-batch builder and decoder agree byte for byte with the
generic codec (gregor.protocol.records), and the control records round-trip."""

from __future__ import annotations

import random

import pytest

from gregor.protocol.records import Header, Record, build_batch, read_header, validate_record_set
from gregor.raft import records as rr


@pytest.mark.parametrize("seed", range(20))
def test_data_batches_are_what_the_generic_codec_writes(seed: int) -> None:
    rng = random.Random(seed)
    values = [rng.randbytes(rng.choice([0, 1, 63, 64, 200, 5000, 70000])) for _ in range(rng.randint(1, 400))]
    base, epoch, ts = rng.randint(0, 1 << 40), rng.randint(0, 1 << 20), rng.randint(0, 1 << 41)
    fast = rr.data_batch(values, base, epoch, ts)
    generic = build_batch([Record(base + i, ts, None, v) for i, v in enumerate(values)], base_offset=base,
                          leader_epoch=epoch)
    assert fast == generic
    validate_record_set(memoryview(fast), 1 << 30)
    b = rr.decode_batch(fast, read_header(fast, 0))
    assert (b.records, b.base_offset, b.last_offset, b.epoch) == (values, base, base + len(values) - 1, epoch)


def test_records_with_keys_or_headers_fall_back_to_the_generic_decoder() -> None:
    data = build_batch([Record(0, 5, b"k", b"v"), Record(1, 5, None, b"w", [Header("h", b"x")])])
    assert rr.decode_batch(data, read_header(data, 0)).records == [b"v", b"w"]


def test_control_records_round_trip() -> None:
    data = rr.leader_change_batch(42, 7, 2, [3, 1, 2], [2, 3], 1000)
    b = rr.decode_batch(data, read_header(data, 0))
    assert b.is_control and (b.base_offset, b.epoch) == (42, 7)
    msg = b.control[0].message
    assert b.control[0].type == rr.LEADER_CHANGE and msg is not None
    assert msg.leader_id == 2 and [v.voter_id for v in msg.voters] == [1, 2, 3]
    assert [v.voter_id for v in msg.granting_voters] == [2, 3]
    h = rr.decode_batch(rr.snapshot_header_batch(3, 99, 0), read_header(rr.snapshot_header_batch(3, 99, 0), 0))
    assert h.control[0].type == rr.SNAPSHOT_HEADER and h.control[0].message.last_contained_log_timestamp == 99
