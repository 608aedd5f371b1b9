"""The controller's pure rules (gregor.controller.election, .reassignment), without I/O."""

from __future__ import annotations

import pytest

from gregor.controller import election, reassignment
from gregor.metadata.store import PartitionState
from gregor.protocol.errors import ErrorCode, KafkaError

E = 7  # the controller epoch of these tests


def st(replicas: list[int], leader: int, isr: list[int], epoch: int = 3, adding: list[int] | None = None,
       removing: list[int] | None = None) -> PartitionState:
    return PartitionState(replicas, leader, epoch, isr, 1, 5, adding or [], removing or [])


def test_offline_election_takes_the_first_live_isr_replica_in_assignment_order() -> None:
    assert election.offline_leader([1, 2, 3], [3, 2, 1], {2, 3}, False) == (2, [3, 2], False)
    assert election.offline_leader([1, 2, 3], [1, 3], {2, 3}, False) == (3, [3], False)


def test_offline_election_without_a_live_isr_member_keeps_the_isr_unless_unclean() -> None:
    assert election.offline_leader([1, 2, 3], [1], {2, 3}, False) == (-1, [1], False)
    assert election.offline_leader([1, 2, 3], [1], {3, 2}, True) == (2, [2], True)
    assert election.offline_leader([1, 2], [1], set(), True) == (-1, [1], False)


def test_broker_failure_moves_its_leadership_and_bumps_the_epoch() -> None:
    new, unclean = election.after_broker_change(st([1, 2, 3], 1, [1, 2, 3]), {2, 3}, set(), False, E)
    assert new is not None and not unclean
    assert (new.leader, new.isr, new.leader_epoch, new.controller_epoch) == (2, [2, 3], 4, E)
    assert (new.replicas, new.version) == ([1, 2, 3], 5)  # the assignment and the expected version stay


def test_dead_follower_leaves_the_isr_and_a_partition_without_change_is_not_written() -> None:
    new, _ = election.after_broker_change(st([1, 2, 3], 1, [1, 2, 3]), {1, 2}, set(), False, E)
    assert new is not None and (new.leader, new.isr, new.leader_epoch) == (1, [1, 2], 4)
    assert election.after_broker_change(st([1, 2, 3], 1, [1, 2]), {1, 2}, set(), False, E) == (None, False)
    assert election.after_broker_change(st([1, 2], 1, [1]), {1}, set(), False, E) == (None, False)


def test_offline_partition_stays_offline_then_returns_with_an_isr_member() -> None:
    s = st([1, 2, 3], 1, [1])
    new, _ = election.after_broker_change(s, {2, 3}, set(), False, E)
    assert new is not None and (new.leader, new.isr, new.leader_epoch) == (-1, [1], 4)
    assert election.after_broker_change(new, {2, 3}, set(), False, E) == (None, False)  # no rewrite
    back, _ = election.after_broker_change(new, {1, 2, 3}, set(), False, E)
    assert back is not None and (back.leader, back.isr, back.leader_epoch) == (1, [1], 5)


def test_unclean_election_on_failure_is_flagged() -> None:
    new, unclean = election.after_broker_change(st([1, 2, 3], 1, [1]), {2, 3}, set(), True, E)
    assert new is not None and unclean and (new.leader, new.isr) == (2, [2])


def test_shutting_down_broker_is_live_but_not_eligible() -> None:
    # its leadership stays (the controlled shutdown moves what it can) ...
    assert election.after_broker_change(st([1, 2], 1, [1, 2]), {1, 2}, {1}, False, E) == (None, False)
    # ... and it is not elected
    new, _ = election.after_broker_change(st([1, 2, 3], 3, [1, 2, 3]), {1, 2}, {1}, False, E)
    assert new is not None and (new.leader, new.isr) == (2, [2])


def test_controlled_shutdown_rules() -> None:
    new = election.controlled_shutdown(st([1, 2, 3], 1, [1, 3, 2]), 1, {1, 2, 3}, {1}, E)
    assert new is not None and (new.leader, new.isr, new.leader_epoch) == (2, [3, 2], 4)
    assert election.controlled_shutdown(st([1, 2], 1, [1]), 1, {1, 2}, {1}, E) is None  # no eligible ISR member
    follower = election.controlled_shutdown(st([1, 2], 2, [2, 1]), 1, {1, 2}, {1}, E)
    assert follower is not None and (follower.leader, follower.isr, follower.leader_epoch) == (2, [2], 4)
    assert election.controlled_shutdown(st([1, 2], 2, [1]), 1, {1, 2}, {1}, E) is None  # the ISR keeps a member
    assert election.controlled_shutdown(st([1], 1, [1]), 1, {1}, {1}, E) is None  # a single replica stays
    assert election.controlled_shutdown(st([2, 3], 2, [2, 3]), 1, {1, 2, 3}, {1}, E) is None  # not its replica


def test_preferred_election() -> None:
    new, code = election.preferred(st([1, 2], 2, [2, 1]), {1, 2}, E)
    assert code == ErrorCode.NONE and new is not None and (new.leader, new.isr, new.leader_epoch) == (1, [2, 1], 4)
    assert election.preferred(st([1, 2], 1, [1, 2]), {1, 2}, E) == (None, ErrorCode.ELECTION_NOT_NEEDED)
    assert election.preferred(st([1, 2], 2, [2]), {1, 2}, E) == (None, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)
    assert election.preferred(st([1, 2], 2, [2, 1]), {2}, E) == (None, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)


def test_unclean_election_by_request() -> None:
    assert election.unclean(st([1, 2], 2, [2]), {1, 2}, {1, 2}, E) == (None, ErrorCode.ELECTION_NOT_NEEDED)
    new, code = election.unclean(st([1, 2, 3], -1, [1]), {2, 3}, {2, 3}, E)
    assert code == ErrorCode.NONE and new is not None and (new.leader, new.isr) == (2, [2])
    assert election.unclean(st([1, 2], -1, [1]), set(), set(), E) == (None, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)


def test_imbalance_per_broker_above_the_percentage() -> None:
    rows = [("t", 0, st([1, 2], 2, [1, 2])), ("t", 1, st([1, 2], 1, [1, 2])), ("t", 2, st([1, 2], 1, [1, 2])),
            ("t", 3, st([2, 1], 2, [2, 1])), ("t", 4, st([1, 2], 2, [2]))]
    # broker 1 prefers 4 partitions and leads 2: 50% imbalance; partition 4 cannot move (1 not in its ISR)
    assert election.imbalanced(rows, {1, 2}, 10) == [("t", 0)]
    assert election.imbalanced(rows, {1, 2}, 50) == []
    assert election.imbalanced(rows, {2}, 10) == []


def test_unclean_topic_config_overrides_the_default() -> None:
    assert election.unclean_enabled({"unclean.leader.election.enable": "true"}, False)
    assert not election.unclean_enabled({"unclean.leader.election.enable": "false"}, True)
    assert election.unclean_enabled({}, True)


def test_reassignment_plan_and_completion() -> None:
    s = st([1, 2, 3], 1, [1, 2, 3])
    plan = reassignment.plan(s, [4, 5, 1])
    assert plan is not None and (plan.replicas, plan.adding_replicas, plan.removing_replicas) == ([4, 5, 1, 2, 3], [4, 5], [2, 3])
    assert reassignment.plan(s, [1, 2, 3]) is None
    during = st(plan.replicas, 1, [1, 2, 3], adding=plan.adding_replicas, removing=plan.removing_replicas)
    assert reassignment.original_replicas(during) == [1, 2, 3]
    assert reassignment.target_replicas(during) == [4, 5, 1]
    assert reassignment.completion(during, {1, 2, 3, 4, 5}, E) == (None, False)  # 4 and 5 not in sync yet
    during.isr = [1, 2, 3, 4, 5]
    new, done = reassignment.completion(during, {1, 2, 3, 4, 5}, E)
    assert done and new is not None and (new.leader, new.isr, new.leader_epoch) == (1, [1, 4, 5], 4)
    moved = st([4, 5, 6, 1, 2, 3], 1, [1, 2, 3, 4, 5, 6], adding=[4, 5, 6], removing=[1, 2, 3])
    new, done = reassignment.completion(moved, {2, 3, 4, 5, 6}, E)
    assert done and new is not None and (new.leader, new.isr) == (4, [4, 5, 6])
    # a new target during a reassignment keeps the original replicas as the ORS
    again = reassignment.plan(during, [2, 6])
    assert again is not None and (again.replicas, again.adding_replicas, again.removing_replicas) == (
        [2, 6, 1, 3], [6], [1, 3])
    back = reassignment.plan(during, [1, 2, 3])
    assert back is not None and (back.replicas, back.adding_replicas, back.removing_replicas) == ([1, 2, 3], [], [])


def test_reassignment_target_validation() -> None:
    reassignment.validate_target([1, 2], {1, 2, 3})
    reassignment.validate_target(None, {1})
    for bad in ([], [1, 1], [1, 9]):
        with pytest.raises(KafkaError) as e:
            reassignment.validate_target(bad, {1, 2, 3})
        assert e.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
