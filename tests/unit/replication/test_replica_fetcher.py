"""The pure parts of replication on real Logs, time given explicitly (a fake clock): where a follower
truncates on a diverging epoch, makeLeader's epoch entry, ISR expansion candidates and the lag rule for
shrinking, the maximal ISR in the HW, follower appends keeping producer state, and the leader's
diverging-epoch answer driving a follower's exact truncation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gregor.metadata.store import PartitionState
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import Record, build_batch, iter_headers
from gregor.replication.partition import FETCH_LOG_END, Partition
from gregor.replication.replica_fetcher import follow_log_start, truncation_offset
from gregor.storage.config import LogConfig
from gregor.storage.leader_epoch import LeaderEpochFileCache
from gregor.storage.log import Log

A, B, C = 0, 1, 2
NOW = 1_000_000
LAG = 1000


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[dict[int, Log]]:
    out = {i: Log.open(str(tmp_path / f"b{i}" / "t-0"), LogConfig()) for i in (A, B, C)}
    yield out
    for lg in out.values():
        lg.close()


def _part(lg: Log, me: int, leader: int, epoch: int, isr: list[int], replicas: list[int] | None = None,
          min_isr: int = 1) -> Partition:
    state = PartitionState(replicas=replicas or [A, B, C], leader=leader, leader_epoch=epoch, isr=isr)
    return Partition("t", 0, lg, state, me, min_isr, now_ms=NOW)


def _append(part: Partition, n: int, pid: int = -1, seq: int = -1) -> None:
    buf = memoryview(bytearray(build_batch([Record(i, 1000 + i, None, b"v" * 10) for i in range(n)],
                                           producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                                           base_sequence=seq)))
    part.append_records_to_leader(buf, list(iter_headers(buf)), 1, NOW)


def _replicate(leader: Partition, follower: Partition, replica: int, now: int = NOW) -> None:
    """One follower fetch round trip, as the fetcher does it (records appended as they came)."""
    lg = follower.log
    latest = lg.leader_epoch_cache.latest_epoch
    res, _ = leader.fetch_records(replica, lg.log_end_offset, 1 << 20, FETCH_LOG_END, True, now,
                                  current_leader_epoch=leader.leader_epoch,
                                  last_fetched_epoch=-1 if latest is None else latest)
    if res.diverging_epoch is not None:
        epoch, end = res.diverging_epoch
        follower.truncate_to(truncation_offset(lg.leader_epoch_cache, lg.log_end_offset, lg.high_watermark,
                                               epoch, end), now)
    elif len(res.records):
        follower.append_records_as_follower(memoryview(res.records), None, res.high_watermark, now)
        follow_log_start(follower, res.log_start_offset, now)
    else:
        follower.update_follower_high_watermark(res.high_watermark)
        follow_log_start(follower, res.log_start_offset, now)


def test_truncation_offset_takes_the_smaller_end_of_the_epoch(tmp_path: Path) -> None:
    cache = LeaderEpochFileCache(str(tmp_path / "leader-epoch-checkpoint"))
    cache.assign(0, 0)
    cache.assign(2, 50)
    cache.assign(3, 80)  # our log: epoch 0 [0, 50), 2 [50, 80), 3 [80, 100)
    assert truncation_offset(cache, 100, 40, 2, 70) == 70  # the leader's epoch 2 ends first
    assert truncation_offset(cache, 100, 40, 2, 90) == 80  # ours does
    assert truncation_offset(cache, 100, 40, 1, 60) == 50  # an epoch we never had: ours of epoch 0 ends at 50
    assert truncation_offset(cache, 100, 40, 3, 120) == 100  # never above our LEO
    assert truncation_offset(cache, 100, 40, -1, -1) == 40  # the leader knows nothing: the shared HW


def test_becoming_leader_records_the_epoch_at_the_leo_before_any_append(logs: dict[int, Log]) -> None:
    a = _part(logs[A], A, A, 0, [A, B, C])
    b = _part(logs[B], B, A, 0, [A, B, C])
    _append(a, 10)
    _replicate(a, b, B)
    assert logs[B].log_end_offset == 10
    b.apply_state(PartitionState([A, B, C], B, 1, [B, C]), NOW)
    assert [tuple(e) for e in logs[B].leader_epoch_cache.entries()] == [(0, 0), (1, 10)]
    assert b.leader_epoch_start_offset == 10
    # An older epoch or the same again changes nothing.
    b.apply_state(PartitionState([A, B, C], B, 1, [B, C, A]), NOW)
    assert [tuple(e) for e in logs[B].leader_epoch_cache.entries()] == [(0, 0), (1, 10)]


def test_diverged_old_leader_truncates_exactly_and_converges(logs: dict[int, Log]) -> None:
    a = _part(logs[A], A, A, 0, [A, B])
    b = _part(logs[B], B, A, 0, [A, B])
    _append(a, 10)
    _replicate(a, b, B)
    _append(a, 5)  # A's tail in epoch 0 that B never fetched
    b.apply_state(PartitionState([A, B, C], B, 1, [B]), NOW)
    a.apply_state(PartitionState([A, B, C], B, 1, [B]), NOW)
    _append(b, 3)  # epoch 1 at 10-12
    _replicate(b, a, A)  # diverging epoch: epoch 0 ends at 10 on B
    assert logs[A].log_end_offset == 10
    _replicate(b, a, A)
    assert logs[A].log_end_offset == 13
    assert [tuple(e) for e in logs[A].leader_epoch_cache.entries()] == [(0, 0), (1, 10)]
    assert list(iter_headers(logs[A].read(0, 1 << 20).records)) == list(iter_headers(logs[B].read(0, 1 << 20).records))


def test_isr_expansion_needs_the_hw_and_the_epoch_start(logs: dict[int, Log]) -> None:
    a = _part(logs[A], A, A, 0, [A, B])
    b = _part(logs[B], B, A, 0, [A, B])
    c = _part(logs[C], C, A, 0, [A, B])
    _append(a, 10)
    _replicate(a, b, B)
    _replicate(a, b, B)
    assert a.high_watermark == 10
    assert not a.isr_expansion_candidate(C)  # it never fetched
    _replicate(a, c, C)  # fetched from 0: its LEO is 0 at the leader, below the HW
    assert not a.isr_expansion_candidate(C)
    _replicate(a, c, C)  # now at 10 = HW
    assert a.isr_expansion_candidate(C)
    assert not a.isr_expansion_candidate(B)  # already in
    # A new epoch resets what the leader knows of its followers: C must fetch in this epoch again.
    a.apply_state(PartitionState([A, B, C], A, 1, [A, B]), NOW)
    assert a.leader_epoch_start_offset == 10
    assert not a.isr_expansion_candidate(C)  # nothing heard from it in this epoch


def test_maximal_isr_counts_a_pending_expansion_and_keeps_a_pending_shrink(logs: dict[int, Log]) -> None:
    a = _part(logs[A], A, A, 0, [A])
    b = _part(logs[B], B, A, 0, [A])
    _append(a, 10)
    assert a.high_watermark == 10  # ISR of one
    a.pending_isr = [A, B]  # an expansion written, not yet committed: B counts for the HW at once
    _append(a, 5)
    assert a.high_watermark == 10
    _replicate(a, b, B)
    _replicate(a, b, B)
    assert a.high_watermark == 15
    a.apply_state(PartitionState([A, B, C], A, 0, [A, B]), NOW)  # committed (same epoch)
    a.pending_isr = [A]  # a shrink in flight: B still holds the HW until it is committed
    _append(a, 5)
    assert a.high_watermark == 15
    a.pending_isr = None
    a.apply_state(PartitionState([A, B, C], A, 0, [A]), NOW)
    assert a.high_watermark == 20


def test_out_of_sync_after_lag_time_only_when_behind(logs: dict[int, Log]) -> None:
    a = _part(logs[A], A, A, 0, [A, B])
    b = _part(logs[B], B, A, 0, [A, B])
    _append(a, 10)
    _replicate(a, b, B, NOW)
    _replicate(a, b, B, NOW)
    assert a.out_of_sync_replicas(NOW + 10 * LAG, LAG) == []  # at the LEO: caught up however long ago
    _append(a, 1)
    assert a.out_of_sync_replicas(NOW + LAG, LAG) == []
    assert a.out_of_sync_replicas(NOW + LAG + 1, LAG) == [B]


def test_follower_appends_keep_producer_state_for_a_new_leader(logs: dict[int, Log]) -> None:
    a = _part(logs[A], A, A, 0, [A, B])
    b = _part(logs[B], B, A, 0, [A, B])
    _append(a, 5, pid=7, seq=0)
    _replicate(a, b, B)
    b.apply_state(PartitionState([A, B, C], B, 1, [B]), NOW)
    buf = memoryview(bytearray(build_batch([Record(i, 1000 + i, None, b"v" * 10) for i in range(5)],
                                           producer_id=7, producer_epoch=0, base_sequence=0)))
    r = b.append_records_to_leader(buf, list(iter_headers(buf)), 1, NOW)
    assert (r.base_offset, r.last_offset) == (0, 4)  # the retry is answered with the original's offsets
    assert logs[B].log_end_offset == 5


def test_fenced_leader_refuses_appends_and_follower_fetches(logs: dict[int, Log]) -> None:
    a = _part(logs[A], A, A, 0, [A, B])
    a.fenced = True
    with pytest.raises(KafkaError, match="not the leader"):
        _append(a, 1)
    with pytest.raises(KafkaError, match="not the leader"):
        a.fetch_records(B, 0, 1 << 20, FETCH_LOG_END, True, NOW)
    a.fenced = False
    _append(a, 1)


def test_follower_log_start_follows_the_leader_below_its_hw(logs: dict[int, Log]) -> None:
    a = _part(logs[A], A, A, 0, [A, B])
    b = _part(logs[B], B, A, 0, [A, B])
    _append(a, 10)
    _replicate(a, b, B)  # B has 10, its HW still 0
    _replicate(a, b, B)  # A's HW now 10, and B's
    assert a.high_watermark == 10
    logs[A].delete_records(6)
    _replicate(a, b, B)
    assert logs[B].high_watermark == 10 and logs[B].log_start_offset == 6


def test_a_leader_for_a_moment_drops_its_empty_epoch_when_it_follows_again(logs: dict[int, Log]) -> None:
    """B led epoch 1 without appending (its cache says epoch 1 starts at its LEO 10), then A leads epoch 2 and
    appends. B's first fetch names epoch 1; A answers epoch 0 ends at 10; B truncates 'to 10', a no-op on
    the log that must still drop epoch 1, or B would name it again forever."""
    a = _part(logs[A], A, A, 0, [A, B])
    b = _part(logs[B], B, A, 0, [A, B])
    _append(a, 10)
    _replicate(a, b, B)
    b.apply_state(PartitionState([A, B, C], B, 1, [A, B]), NOW)
    assert logs[B].leader_epoch_cache.latest_epoch == 1
    b.apply_state(PartitionState([A, B, C], A, 2, [A, B]), NOW)
    a.apply_state(PartitionState([A, B, C], A, 2, [A, B]), NOW)
    _append(a, 5)
    _replicate(a, b, B)  # diverging: epoch 0 ends at 10 on A
    assert logs[B].leader_epoch_cache.latest_epoch == 0 and logs[B].log_end_offset == 10
    _replicate(a, b, B)
    assert logs[B].log_end_offset == 15
    assert [tuple(e) for e in logs[B].leader_epoch_cache.entries()] == [(0, 0), (2, 10)]
