"""Replica placement (Kafka's AdminUtils): balance, rack alternation, distinct racks, shifts, errors."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from gregor.admin.topic_admin import assign_replicas, initial_state, rack_alternated
from gregor.metadata.store import BrokerInfo
from gregor.protocol.errors import ErrorCode, KafkaError


def _brokers(ids: list[int], racks: dict[int, str] | None = None) -> list[BrokerInfo]:
    return [BrokerInfo(b, "127.0.0.1", 9092 + b, (racks or {}).get(b)) for b in ids]


def _counts(layout: dict[int, list[int]], ids: list[int]) -> tuple[Counter[int], Counter[int]]:
    leaders = Counter({b: 0 for b in ids})
    replicas = Counter({b: 0 for b in ids})
    for r in layout.values():
        leaders[r[0]] += 1
        replicas.update(r)
    return leaders, replicas


def test_rack_unaware_layout_matches_kafkas_for_a_fixed_start() -> None:
    # Kafka's AdminUtilsTest: 5 brokers, 10 partitions, rf 3, start 0.
    layout = assign_replicas(_brokers([0, 1, 2, 3, 4]), 10, 3, start_index=0)
    assert layout == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }


@pytest.mark.parametrize("n,rf", [(3, 3), (4, 2), (5, 3), (6, 1), (7, 3)])
def test_leaders_and_replicas_balanced(n: int, rf: int) -> None:
    ids = list(range(1, n + 1))
    rng = random.Random(n * 31 + rf)
    for count in range(1, 4 * n + 1):
        layout = assign_replicas(_brokers(ids), count, rf, rng=rng)
        assert all(len(set(r)) == rf for r in layout.values())
        leaders, replicas = _counts(layout, ids)
        assert max(leaders.values()) - min(leaders.values()) <= 1, layout
        if count % n == 0:  # whole rounds: every broker the same number of replicas
            assert max(replicas.values()) - min(replicas.values()) <= 1, layout


def test_rack_alternated_order() -> None:
    assert rack_alternated({1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}) == [1, 3, 5, 2, 4, 6]
    assert rack_alternated({0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated({1: "a", 2: "a", 3: "a", 4: "b"}) == [1, 4, 2, 3]


@pytest.mark.parametrize("racks,rf", [
    ({1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}, 3),
    ({1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c", 7: "d", 8: "d"}, 3),
    ({1: "a", 2: "b", 3: "a", 4: "b"}, 2),
    ({0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}, 2),
])
def test_rack_aware_distinct_racks_and_balance(racks: dict[int, str], rf: int) -> None:
    ids = sorted(racks)
    rng = random.Random(7)
    for count in range(1, 3 * len(ids) + 1):
        layout = assign_replicas(_brokers(ids, racks), count, rf, rng=rng)
        for r in layout.values():
            assert len(set(r)) == rf
            assert len({racks[b] for b in r}) == rf, (r, layout)
        leaders, replicas = _counts(layout, ids)
        assert max(leaders.values()) - min(leaders.values()) <= 1, layout
        if count % len(ids) == 0 and len(set(Counter(racks.values()).values())) == 1:
            assert max(replicas.values()) - min(replicas.values()) <= 1, layout


def test_more_replicas_than_racks_still_uses_every_rack() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    for r in assign_replicas(_brokers([1, 2, 3, 4], racks), 8, 3, start_index=0).values():
        assert len(set(r)) == 3 and {racks[b] for b in r} == {"a", "b"}


def test_random_start_spreads_single_partition_leaders() -> None:
    rng = random.Random(1)
    leaders = Counter(assign_replicas(_brokers([1, 2, 3]), 1, 3, rng=rng)[0][0] for _ in range(300))
    assert set(leaders) == {1, 2, 3} and min(leaders.values()) > 50


def test_continuing_a_topic_keeps_partition_ids() -> None:
    layout = assign_replicas(_brokers([1, 2, 3]), 2, 2, first_partition=3, start_index=0)
    assert sorted(layout) == [3, 4]
    assert [r[0] for r in layout.values()] == [1, 2]


def test_errors() -> None:
    with pytest.raises(KafkaError) as e:
        assign_replicas(_brokers([1, 2, 3], {1: "a", 2: "b"}), 3, 2)
    assert e.value.code == ErrorCode.INVALID_REPLICATION_FACTOR and "Not all brokers have rack information" in str(e.value)
    with pytest.raises(KafkaError) as e:
        assign_replicas(_brokers([1, 2]), 3, 3)
    assert e.value.code == ErrorCode.INVALID_REPLICATION_FACTOR and "larger than available brokers: 2" in str(e.value)


def test_initial_state_first_live_replica_leads() -> None:
    s = initial_state([3, 1, 2], [1, 2])
    assert (s.leader, s.isr, s.leader_epoch, s.replicas) == (1, [1, 2], 0, [3, 1, 2])
    assert initial_state([5], [1]).leader == -1
