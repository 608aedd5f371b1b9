"""Partition on a real Log: HW rules with a fake follower, acks=all, min.insync.replicas, epochs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gregor.metadata.store import PartitionState
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import Record, build_batch, iter_headers
from gregor.replication.delayed import DelayedProduce, ProducePartitionStatus
from gregor.replication.partition import FETCH_LOG_END, READ_UNCOMMITTED, Partition
from gregor.replication.purgatory import Purgatory
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from tests.server.fakeclock import FakeClock

ME, FOLLOWER = 0, 2
NOW = 1_000_000


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    lg = Log.open(str(tmp_path / "t-0"), LogConfig())
    yield lg
    lg.close()


def _partition(log: Log, isr: list[int], replicas: list[int] | None = None, min_isr: int = 1,
               epoch: int = 0) -> Partition:
    state = PartitionState(replicas=replicas or [ME, FOLLOWER], leader=ME, leader_epoch=epoch, isr=isr)
    return Partition("t", 0, log, state, ME, min_isr, now_ms=NOW)


def _append(part: Partition, n: int, acks: int = -1):
    buf = memoryview(bytearray(build_batch([Record(i, 1000 + i, None, b"v" * 10) for i in range(n)])))
    return part.append_records_to_leader(buf, list(iter_headers(buf)), acks, NOW)


def _follower_fetch(part: Partition, offset: int, now: int = NOW, epoch: int = -1, replica: int = FOLLOWER):
    res, moved = part.fetch_records(replica, offset, 1 << 20, FETCH_LOG_END, True, now, current_leader_epoch=epoch)
    return res, moved


def _records(res) -> int:
    return sum(h.records_count for h in iter_headers(res.records))


def test_hw_is_the_smallest_leo_in_the_isr_and_follower_fetches_advance_it(log: Log) -> None:
    part = _partition(log, isr=[ME, FOLLOWER])
    r = _append(part, 10)
    assert (r.error, r.base_offset, r.last_offset) == (ErrorCode.NONE, 0, 9)
    assert part.log_end_offset == 10 and part.high_watermark == 0  # the follower has not fetched yet
    res, moved = _follower_fetch(part, 0)
    assert not moved and part.high_watermark == 0
    assert _records(res) == 10  # a follower reads up to the LEO, not the HW
    consumer, _ = part.fetch_records(-1, 0, 1 << 20, READ_UNCOMMITTED, True, NOW)
    assert _records(consumer) == 0  # a consumer only below the HW
    res, moved = _follower_fetch(part, 6)
    assert moved and part.high_watermark == 6 and res.high_watermark == 6
    res, moved = _follower_fetch(part, 10)
    assert moved and part.high_watermark == 10 and res.high_watermark == 10 and _records(res) == 0
    consumer, _ = part.fetch_records(-1, 0, 1 << 20, READ_UNCOMMITTED, True, NOW)
    assert _records(consumer) == 10 and consumer.high_watermark == 10


def test_hw_never_moves_back(log: Log) -> None:
    part = _partition(log, isr=[ME, FOLLOWER])
    _append(part, 10)
    _follower_fetch(part, 10)
    assert part.high_watermark == 10
    _, moved = _follower_fetch(part, 4)  # a follower that truncated and refetches
    assert not moved and part.high_watermark == 10
    assert part.followers[FOLLOWER].log_end_offset == 4


def test_a_follower_outside_the_isr_does_not_hold_the_hw(log: Log) -> None:
    part = _partition(log, isr=[ME])
    _append(part, 5)
    assert part.high_watermark == 5  # the ISR is the leader alone: the HW moves at the append
    _follower_fetch(part, 0)  # its fetches are served and tracked all the same
    assert part.followers[FOLLOWER].log_end_offset == 0 and part.high_watermark == 5


def test_single_replica_hw_follows_the_leo(log: Log) -> None:
    part = _partition(log, isr=[ME], replicas=[ME])
    for i in range(3):
        _append(part, 4)
        assert part.high_watermark == part.log_end_offset == 4 * (i + 1)
        assert part.check_enough_replicas_reach_offset(4 * (i + 1)) == (True, ErrorCode.NONE)


def test_acks_all_waits_for_the_followers_fetch(log: Log) -> None:
    clock = FakeClock()
    purgatory = Purgatory(10, clock)
    part = _partition(log, isr=[ME, FOLLOWER])
    key = ("t", 0)
    r = _append(part, 10)
    answered: list[ErrorCode] = []
    op = DelayedProduce(30_000, [ProducePartitionStatus(key, part, r.last_offset + 1, r)], lambda k: part,
                        lambda: answered.append(r.error))
    assert not purgatory.try_complete_else_watch(op, [key])
    _, moved = _follower_fetch(part, 5)
    assert moved
    purgatory.check_and_complete(key)
    assert answered == []  # the HW is at 5, the batch ends at 10
    _, moved = _follower_fetch(part, 10)
    purgatory.check_and_complete(key)
    assert answered == [ErrorCode.NONE] and purgatory.parked == 0


def test_acks_all_times_out_when_the_follower_does_not_fetch(log: Log) -> None:
    clock = FakeClock()
    purgatory = Purgatory(10, clock)
    part = _partition(log, isr=[ME, FOLLOWER])
    r = _append(part, 3)
    op = DelayedProduce(1500, [ProducePartitionStatus(("t", 0), part, 3, r)], lambda k: part, lambda: None)
    purgatory.try_complete_else_watch(op, [("t", 0)])
    clock.advance(1499)
    assert r.error == ErrorCode.NONE and not op.completed
    clock.advance(1)
    assert op.completed and r.error == ErrorCode.REQUEST_TIMED_OUT


def test_min_insync_replicas(log: Log) -> None:
    part = _partition(log, isr=[ME], min_isr=2)
    with pytest.raises(KafkaError) as e:
        _append(part, 1, acks=-1)
    assert e.value.code == ErrorCode.NOT_ENOUGH_REPLICAS and part.log_end_offset == 0
    assert _append(part, 1, acks=1).error == ErrorCode.NONE  # only acks=all is refused
    # Appended with the ISR complete, then the ISR shrinks before the HW gets there.
    part.apply_state(PartitionState([ME, FOLLOWER], ME, 0, [ME, FOLLOWER]), NOW)
    _follower_fetch(part, 1)
    r = _append(part, 1, acks=-1)
    assert part.check_enough_replicas_reach_offset(r.last_offset + 1) == (False, ErrorCode.NONE)
    part.apply_state(PartitionState([ME, FOLLOWER], ME, 0, [ME]), NOW)  # the follower dropped out
    assert part.high_watermark == 2  # no longer held by it
    assert part.check_enough_replicas_reach_offset(r.last_offset + 1) == (True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)


def test_leader_epoch_fencing_and_changes(log: Log) -> None:
    part = _partition(log, isr=[ME, FOLLOWER], epoch=3)
    _append(part, 4)
    for sent, code in ((2, ErrorCode.FENCED_LEADER_EPOCH), (4, ErrorCode.UNKNOWN_LEADER_EPOCH)):
        with pytest.raises(KafkaError) as e:
            _follower_fetch(part, 0, epoch=sent)
        assert e.value.code == code
    _follower_fetch(part, 4, epoch=3)
    assert part.high_watermark == 4
    # A stale state (older epoch) is ignored; a new epoch forgets what the followers had fetched.
    assert not part.apply_state(PartitionState([ME, FOLLOWER], ME, 2, [ME]), NOW)
    assert part.leader_epoch == 3 and part.isr == [ME, FOLLOWER]
    assert part.apply_state(PartitionState([ME, FOLLOWER], ME, 4, [ME, FOLLOWER]), NOW)
    assert part.followers[FOLLOWER].log_end_offset == -1
    r = _append(part, 2)
    assert r.base_offset == 4 and part.high_watermark == 4  # held until the follower fetches in epoch 4
    # Leadership moves away: appends and reads are refused, acks=all waits end.
    part.apply_state(PartitionState([ME, FOLLOWER], FOLLOWER, 5, [ME, FOLLOWER]), NOW)
    assert part.check_enough_replicas_reach_offset(6) == (False, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    with pytest.raises(KafkaError) as e:
        _append(part, 1)
    assert e.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_replica_not_assigned_is_refused(log: Log) -> None:
    part = _partition(log, isr=[ME, FOLLOWER])
    for epoch, code in ((-1, ErrorCode.NOT_LEADER_OR_FOLLOWER), (0, ErrorCode.UNKNOWN_LEADER_EPOCH)):
        with pytest.raises(KafkaError) as e:
            _follower_fetch(part, 0, epoch=epoch, replica=7)
        assert e.value.code == code
    with pytest.raises(KafkaError):
        _follower_fetch(part, 0, replica=ME)  # the leader is not its own follower


def test_last_caught_up_time(log: Log) -> None:
    part = _partition(log, isr=[ME, FOLLOWER])
    f = part.followers[FOLLOWER]
    assert f.last_caught_up_time_ms == NOW  # an ISR member counts as caught up when the epoch starts
    _append(part, 10)
    _follower_fetch(part, 5, now=NOW + 100)  # behind the LEO (10): not caught up now
    assert f.last_caught_up_time_ms == NOW
    _append(part, 10)
    _follower_fetch(part, 12, now=NOW + 200)  # past the LEO of its previous fetch: caught up as of then
    assert f.last_caught_up_time_ms == NOW + 100
    _follower_fetch(part, 20, now=NOW + 300)  # at the LEO
    assert f.last_caught_up_time_ms == NOW + 300
    assert part.out_of_sync_replicas(NOW + 300 + 30_000, 30_000) == []
    _append(part, 1)
    assert part.out_of_sync_replicas(NOW + 300 + 30_001, 30_000) == [FOLLOWER]


def test_diverging_epoch_and_offset_for_leader_epoch(log: Log) -> None:
    part = _partition(log, isr=[ME], epoch=0)
    _append(part, 5)
    part.apply_state(PartitionState([ME, FOLLOWER], ME, 1, [ME]), NOW)
    _append(part, 5)
    assert part.last_offset_for_leader_epoch(-1, 0, True) == (0, 5)
    assert part.last_offset_for_leader_epoch(-1, 1, True) == (1, 10)
    assert part.last_offset_for_leader_epoch(1, 7, True) == (-1, -1)  # an epoch above ours: unknown
    # A follower that fetched up to 7 in epoch 0 diverged: epoch 0 ended at 5 here.
    res, moved = part.fetch_records(FOLLOWER, 7, 1 << 20, FETCH_LOG_END, True, NOW, 1, last_fetched_epoch=0)
    assert res.diverging_epoch == (0, 5) and _records(res) == 0 and not moved
    res, _ = part.fetch_records(FOLLOWER, 5, 1 << 20, FETCH_LOG_END, True, NOW, 1, last_fetched_epoch=0)
    assert res.diverging_epoch is None and _records(res) == 5
    with pytest.raises(KafkaError) as e:
        part.last_offset_for_leader_epoch(0, 0, True)
    assert e.value.code == ErrorCode.FENCED_LEADER_EPOCH


def _replicate(leader: Partition, follower: Partition, last_fetched_epoch: int = -1) -> tuple[int, object]:
    """One round of the follower's fetch loop: fetch at its LEO, truncate if told, append what came."""
    res, _ = leader.fetch_records(follower.broker_id, follower.log_end_offset, 1 << 20, FETCH_LOG_END, True, NOW,
                                  leader.leader_epoch, last_fetched_epoch)
    if res.diverging_epoch is not None:
        follower.truncate_to(res.diverging_epoch[1], NOW)
        return 0, res.diverging_epoch
    if res.records:
        buf = memoryview(bytearray(res.records))
        follower.append_records_as_follower(buf, list(iter_headers(buf)), res.high_watermark, NOW)
    else:
        follower.update_follower_high_watermark(res.high_watermark)
    return len(res.records), None


def test_a_follower_partition_replicates_truncates_and_follows_the_hw(tmp_path: Path) -> None:
    leader_log = Log.open(str(tmp_path / "leader" / "t-0"), LogConfig())
    follower_log = Log.open(str(tmp_path / "follower" / "t-0"), LogConfig())
    try:
        leader = _partition(leader_log, isr=[ME, FOLLOWER])
        follower = Partition("t", 0, follower_log, PartitionState([ME, FOLLOWER], ME, 0, [ME, FOLLOWER]),
                             FOLLOWER, 1, now_ms=NOW)
        with pytest.raises(KafkaError):
            _append(follower, 1)  # a follower does not take produce
        _append(leader, 5)
        _replicate(leader, follower)
        assert follower.log_end_offset == 5 and follower.high_watermark == 0  # the leader's HW was 0
        _replicate(leader, follower)  # fetching at 5 tells the leader; the answer carries HW 5
        assert leader.high_watermark == 5 and follower.high_watermark == 5
        # The follower takes 3 more records of epoch 0 the leader then loses (a new leader at epoch 1 that
        # never had them: played here by truncating the leader's log and bumping its epoch).
        _append(leader, 3)
        _replicate(leader, follower)
        assert follower.log_end_offset == 8
        leader.log.truncate_to(5, NOW)
        leader.apply_state(PartitionState([ME, FOLLOWER], ME, 1, [ME, FOLLOWER]), NOW)
        _append(leader, 2)  # offsets 5-6 in epoch 1
        _, diverged = _replicate(leader, follower, last_fetched_epoch=0)
        assert diverged == (0, 5) and follower.log_end_offset == 5  # epoch 0 ended at 5 on the leader
        _replicate(leader, follower, last_fetched_epoch=0)
        assert follower.log_end_offset == 7
        _replicate(leader, follower, last_fetched_epoch=1)
        assert leader.high_watermark == 7 and follower.high_watermark == 7
        assert [e.epoch for e in follower.log.leader_epoch_cache.entries()] == [0, 1]
        assert follower.last_offset_for_leader_epoch(-1, 0, False) == (0, 5)
    finally:
        leader_log.close()
        follower_log.close()
