"""Producer state: Kafka's idempotence rules on a real Log, snapshots, reload, truncation, expiry."""

from __future__ import annotations

import os

import pytest

from gregor.protocol.records import Record, build_batch
from gregor.storage import Log, LogConfig
from gregor.storage.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from gregor.storage.producer_state import (
    INT32_MAX,
    ProducerStateManager,
    last_sequence,
    snapshot_name,
)
from tests.storage.util import headers_of, read_all


def pbatch(pid: int, epoch: int, seq: int, n: int = 1, ts: int = 1000) -> bytearray:
    recs = [Record(i, ts, None, f"{pid}-{seq + i}".encode()) for i in range(n)]
    return bytearray(build_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq))


def send(log: Log, pid: int, epoch: int, seq: int, n: int = 1, ts: int = 1000):
    buf = pbatch(pid, epoch, seq, n, ts)
    return log.append_as_leader(buf, headers_of(buf), 0, ts)


def snapshots(log: Log) -> list[str]:
    return sorted(n for n in os.listdir(log.dir) if n.endswith(".snapshot"))


@pytest.fixture
def log(tmp_path):
    lg = Log.open(os.path.join(tmp_path, "t-0"), LogConfig(), now_ms=0)
    yield lg
    lg.close()


def test_last_sequence_wraps() -> None:
    assert last_sequence(10, 4) == 14
    assert last_sequence(INT32_MAX, 0) == INT32_MAX
    assert last_sequence(INT32_MAX - 1, 3) == 1


def test_duplicate_of_any_of_the_last_five_batches_returns_original_offsets(log: Log) -> None:
    infos = [send(log, 7, 0, seq * 2, n=2) for seq in range(6)]  # 6 batches of 2: seqs 0..11
    assert [i.first_offset for i in infos] == [0, 2, 4, 6, 8, 10]
    for k in range(1, 6):  # the last five are remembered
        dup = send(log, 7, 0, k * 2, n=2)
        assert dup.duplicate and (dup.first_offset, dup.last_offset) == (k * 2, k * 2 + 1)
    assert log.log_end_offset == 12
    # the first batch is no longer remembered: its retry is a sequence error, never a second copy
    with pytest.raises(OutOfOrderSequenceError):
        send(log, 7, 0, 0, n=2)
    assert log.log_end_offset == 12 and len(read_all(log)) == 12


def test_gap_and_old_epoch_and_new_epoch_rules(log: Log) -> None:
    send(log, 1, 3, 0)
    with pytest.raises(OutOfOrderSequenceError) as e:
        send(log, 1, 3, 2)  # sequence 1 is missing
    assert e.value.error == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    with pytest.raises(InvalidProducerEpochError) as e2:
        send(log, 1, 2, 1)
    assert e2.value.error == "INVALID_PRODUCER_EPOCH"
    with pytest.raises(OutOfOrderSequenceError):
        send(log, 1, 4, 5)  # a new epoch starts at 0
    assert send(log, 1, 4, 0).first_offset == 1
    assert log.log_end_offset == 2


def test_unknown_producer_may_start_at_any_sequence(log: Log) -> None:
    """KIP-360: a producer the partition does not know (new or expired) is accepted at any sequence."""
    assert send(log, 9, 0, 41).first_offset == 0
    assert send(log, 9, 0, 42).first_offset == 1


def test_sequence_wraps_from_int32_max_to_zero(log: Log) -> None:
    send(log, 2, 0, INT32_MAX)
    assert not send(log, 2, 0, 0).duplicate


def test_plain_batches_are_untouched(log: Log) -> None:
    buf = bytearray(build_batch([Record(0, 1, None, b"x")]))
    log.append_as_leader(buf, headers_of(buf), 0, 1)
    assert len(log.producer_state) == 0


def test_clean_close_snapshots_and_reopen_replays_nothing(tmp_path) -> None:
    d = os.path.join(tmp_path, "t-0")
    lg = Log.open(d, LogConfig(segment_bytes=1024), now_ms=0)
    for seq in range(40):
        send(lg, 5, 0, seq)
    leo = lg.log_end_offset
    assert lg.num_segments > 1 and len(snapshots(lg)) >= 1  # one per roll
    lg.flush()
    lg.close()
    assert snapshot_name(leo) in os.listdir(d)
    lg = Log.open(d, LogConfig(segment_bytes=1024), recovery_point=leo, now_ms=0, clean_shutdown=True)
    assert lg.producer_state.loaded_from == (leo, 0)
    assert send(lg, 5, 0, 39).duplicate
    assert send(lg, 5, 0, 40).first_offset == leo
    lg.close()


def test_unclean_open_replays_from_the_latest_snapshot_below_the_recovery_point(tmp_path) -> None:
    d = os.path.join(tmp_path, "t-0")
    lg = Log.open(d, LogConfig(segment_bytes=1024), now_ms=0)
    for seq in range(40):
        send(lg, 5, 0, seq)
    roll_snaps = [int(n[:20]) for n in snapshots(lg)]
    leo = lg.log_end_offset
    lg.flush()
    for seg in lg.segments:  # "crash": no close, so no snapshot at the LEO
        seg.close()
    lg = Log.open(d, LogConfig(segment_bytes=1024), recovery_point=leo, now_ms=0)
    start, replayed = lg.producer_state.loaded_from
    assert start == max(roll_snaps) and replayed == leo - start > 0
    assert send(lg, 5, 0, 39).duplicate
    lg.close()


def test_damaged_snapshot_falls_back_to_the_log(tmp_path) -> None:
    d = os.path.join(tmp_path, "t-0")
    lg = Log.open(d, LogConfig(), now_ms=0)
    for seq in range(5):
        send(lg, 5, 0, seq)
    lg.close()
    path = os.path.join(d, snapshot_name(5))
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 0xFF
    open(path, "wb").write(data)
    lg = Log.open(d, LogConfig(), recovery_point=5, now_ms=0, clean_shutdown=True)
    assert lg.producer_state.loaded_from == (None, 5)
    assert not os.path.exists(path)
    assert send(lg, 5, 0, 4).duplicate
    lg.close()


def test_truncation_drops_snapshots_above_and_rebuilds(tmp_path) -> None:
    d = os.path.join(tmp_path, "t-0")
    lg = Log.open(d, LogConfig(segment_bytes=1024), now_ms=0)
    for seq in range(40):
        send(lg, 5, 0, seq)
    lg.truncate_to(10)
    assert all(int(n[:20]) <= 10 for n in snapshots(lg))
    assert lg.producer_state.producers[5].last_seq == 9
    assert send(lg, 5, 0, 10).first_offset == 10  # sequence continues from the truncated state
    lg.truncate_fully_and_start_at(100)
    assert snapshots(lg) == [] and len(lg.producer_state) == 0
    lg.close()


def test_follower_append_updates_state_without_checks(log: Log) -> None:
    buf = pbatch(3, 0, 17)
    hs = headers_of(buf)
    log.append_as_follower(buf, hs)
    assert log.producer_state.producers[3].last_seq == 17


def test_retention_deletes_snapshots_below_the_log_start(tmp_path) -> None:
    d = os.path.join(tmp_path, "t-0")
    lg = Log.open(d, LogConfig(segment_bytes=1024), now_ms=0)
    for seq in range(40):
        send(lg, 5, 0, seq)
    lg.update_high_watermark(lg.log_end_offset)
    assert int(snapshots(lg)[0][:20]) > 0
    lg.delete_records(lg.segments[-1].base_offset)
    first = lg.segments[0].base_offset
    assert snapshots(lg) and all(int(n[:20]) >= first for n in snapshots(lg))
    assert 5 in lg.producer_state.producers  # KIP-360: state outlives the producer's records
    lg.close()


def test_expiry(log: Log) -> None:
    send(log, 1, 0, 0, ts=1000)
    send(log, 2, 0, 0, ts=5000)
    assert log.remove_expired_producers(now_ms=6000, expiration_ms=2000) == 1
    assert [e.producer_id for e in log.active_producers()] == [2]
    assert send(log, 1, 0, 99).first_offset == 2  # unknown again: any sequence


def test_snapshot_roundtrip(tmp_path) -> None:
    m = ProducerStateManager(str(tmp_path), "t-0")
    for pid in range(3):
        m.update(headers_of(pbatch(pid, 1, 0, n=3)))
    m.take_snapshot(3)
    got = m.read_snapshot(3)
    assert {p: (e.producer_epoch, e.last_seq, list(e.batches)) for p, e in got.items()} == \
           {p: (e.producer_epoch, e.last_seq, list(e.batches)) for p, e in m.producers.items()}
