"""Transactions in the log: the last stable offset, the .txnindex of aborted transactions, markers, and
what a restart, a crash (lost index entries, a torn index) and a follower's truncation leave of them."""

from __future__ import annotations

import os

import pytest

from gregor.protocol.records import Record, build_batch, build_marker_batch, iter_records
from gregor.storage import Log, LogConfig
from gregor.storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from gregor.storage.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex
from tests.storage.util import headers_of


def txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0, transactional: bool = True) -> bytearray:
    recs = [Record(i, 1000, None, f"{pid}-{seq + i}".encode()) for i in range(n)]
    return bytearray(build_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                 transactional=transactional))


def append(log: Log, buf: bytearray) -> tuple[int, int]:
    info = log.append_as_leader(buf, headers_of(buf), 0, 1000)
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset, info.last_offset


def marker(log: Log, pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> int:
    buf = bytearray(build_marker_batch(pid, epoch, commit, coordinator_epoch, 1000))
    return append(log, buf)[0]


@pytest.fixture
def log(tmp_path):
    lg = Log.open(os.path.join(tmp_path, "t-0"), LogConfig(), now_ms=0)
    yield lg
    lg.close()


def test_lso_stops_at_the_first_open_transaction_and_moves_with_markers(log: Log) -> None:
    append(log, txn_batch(1, 0))  # 0-1: producer 1 opens a transaction
    append(log, txn_batch(2, 0))  # 2-3: producer 2 opens one
    assert log.high_watermark == 4 and log.last_stable_offset == 0
    m1 = marker(log, 1, commit=True)  # 4
    assert log.last_stable_offset == 2  # producer 2's still open
    m2 = marker(log, 2, commit=False)  # 5
    assert (m1, m2) == (4, 5)
    assert log.last_stable_offset == log.high_watermark == 6
    assert log.aborted_transactions(0, 6) == [AbortedTxn(2, 2, 5, 6)]
    assert log.aborted_transactions(4, 6) == [AbortedTxn(2, 2, 5, 6)]  # its marker is still ahead
    assert log.aborted_transactions(0, 2) == []  # producer 2's records start at 2


def test_a_marker_above_the_hw_keeps_its_transaction_unstable(log: Log) -> None:
    buf = txn_batch(1, 0)
    log.append_as_leader(buf, headers_of(buf), 0, 1000)
    log.update_high_watermark(2)
    mbuf = bytearray(build_marker_batch(1, 0, True, 0, 1000))
    log.append_as_leader(mbuf, headers_of(mbuf), 0, 1000)  # offset 2, the HW not past it
    assert log.last_stable_offset == 0  # a failover could still lose the marker
    log.update_high_watermark(3)
    assert log.last_stable_offset == 3


def test_leader_checks_of_transactional_batches_and_markers(log: Log) -> None:
    append(log, txn_batch(1, 0, epoch=3))
    with pytest.raises(InvalidTxnStateError):  # a plain batch inside the producer's open transaction
        append(log, txn_batch(1, 2, epoch=3, transactional=False))
    with pytest.raises(InvalidProducerEpochError):
        marker(log, 1, commit=True, epoch=2)
    marker(log, 1, commit=False, epoch=4, coordinator_epoch=5)  # a fencing abort under a bumped epoch
    with pytest.raises(TransactionCoordinatorFencedError):
        marker(log, 1, commit=True, epoch=4, coordinator_epoch=4)
    with pytest.raises(InvalidProducerEpochError):  # the fenced producer's next batch
        append(log, txn_batch(1, 2, epoch=3))
    assert log.last_stable_offset == log.log_end_offset


def test_aborted_index_and_lso_survive_a_restart_and_a_crash_that_lost_index_entries(tmp_path) -> None:
    d = os.path.join(tmp_path, "t-0")
    lg = Log.open(d, LogConfig(), now_ms=0)
    append(lg, txn_batch(1, 0))  # 0-1 aborted below
    append(lg, txn_batch(2, 0))  # 2-3 left open
    marker(lg, 1, commit=False)  # 4
    append(lg, txn_batch(3, 0))  # 5-6 aborted below
    marker(lg, 3, commit=False)  # 7
    expected = lg.aborted_transactions(0, 8)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in expected] == [(1, 0, 4), (3, 5, 7)]
    lg.flush()
    lg.close()
    lg = Log.open(d, LogConfig(), recovery_point=8, log_start_offset=0, now_ms=0, clean_shutdown=True)
    lg.update_high_watermark(8)
    assert lg.aborted_transactions(0, 8) == expected and lg.last_stable_offset == 2  # producer 2 still open
    lg.close()
    # A machine crash lost the index (its entries were past the recovery point) and tore the log's
    # tail: recovery truncates, and the producer state's replay writes the lost entries back.
    os.unlink(os.path.join(d, "00000000000000000000.txnindex"))
    for name in os.listdir(d):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(d, name))
    lg = Log.open(d, LogConfig(), recovery_point=0, log_start_offset=0, now_ms=0)
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.aborted_transactions(0, 8) == expected and lg.last_stable_offset == 2
    lg.close()


def test_a_torn_index_entry_is_dropped_and_the_index_rebuilt(tmp_path) -> None:
    d = os.path.join(tmp_path, "t-0")
    lg = Log.open(d, LogConfig(), now_ms=0)
    append(lg, txn_batch(1, 0))
    marker(lg, 1, commit=False)
    lg.close()
    path = os.path.join(d, "00000000000000000000.txnindex")
    with open(path, "ab") as fh:
        fh.write(b"\x00" * (ENTRY_SIZE - 3))  # half an entry: a crash mid-write
    lg = Log.open(d, LogConfig(), recovery_point=0, log_start_offset=0, now_ms=0)
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.aborted_transactions(0, 3) == [AbortedTxn(1, 0, 2, 3)]
    assert os.path.getsize(path) == ENTRY_SIZE
    lg.close()


def test_follower_truncation_removes_markers_and_reopens_their_transactions(log: Log) -> None:
    append(log, txn_batch(1, 0))  # 0-1
    marker(log, 1, commit=False)  # 2
    append(log, txn_batch(2, 0))  # 3-4
    marker(log, 2, commit=True)  # 5
    assert log.last_stable_offset == 6
    # Become a follower that diverged at offset 5 (the commit marker of producer 2 is not the leader's)
    log.truncate_to(5)
    log.update_high_watermark(5)
    assert log.last_stable_offset == 3  # producer 2's transaction is open again
    assert log.aborted_transactions(0, 5) == [AbortedTxn(1, 0, 2, 3)]
    log.truncate_to(2)
    assert log.aborted_transactions(0, 2) == [] and log.last_stable_offset == 0
    assert not os.path.exists(os.path.join(log.dir, "00000000000000000000.txnindex"))


def test_follower_appends_maintain_the_same_state(tmp_path) -> None:
    leader = Log.open(os.path.join(tmp_path, "l-0"), LogConfig(), now_ms=0)
    follower = Log.open(os.path.join(tmp_path, "f-0"), LogConfig(), now_ms=0)
    append(leader, txn_batch(9, 0))
    marker(leader, 9, commit=False)
    data = leader.read(0, 1 << 20).records
    follower.append_as_follower(bytes(data))
    follower.update_high_watermark(follower.log_end_offset)
    assert follower.aborted_transactions(0, 3) == leader.aborted_transactions(0, 3) == [AbortedTxn(9, 0, 2, 3)]
    assert follower.last_stable_offset == 3
    control = [r for r in iter_records(bytes(data)) if r.offset == 2]
    assert control and control[0].key == b"\x00\x00\x00\x00"  # version 0, type 0 (abort)
    leader.close()
    follower.close()


def test_index_entries_are_kept_in_marker_order(tmp_path) -> None:
    idx = TransactionIndex(os.path.join(tmp_path, "00000000000000000000.txnindex"), new=True)
    idx.append(AbortedTxn(1, 0, 5, 6))
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(2, 1, 4, 6))
    assert idx.add_if_absent(AbortedTxn(1, 0, 5, 6)) is False
    assert idx.add_if_absent(AbortedTxn(2, 1, 3, 4)) is True  # replay fills a gap in order
    assert [e.last_offset for e in TransactionIndex(idx.path).entries] == [3, 5]
