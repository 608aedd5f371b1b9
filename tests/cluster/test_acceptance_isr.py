"""Acceptance (issue 10): the in-sync replica set. A dead follower leaves the ISR and acks=all goes on
with 2 of 3; it rejoins after a restart. With two of three dead acks=all fails with
NOT_ENOUGH_REPLICAS and nothing acknowledged is lost; with the whole ISR gone and unclean election
off the partition is offline until an ISR member returns. A leader frozen past its ZooKeeper session
loses leadership and, thawed, acknowledges nothing as a stale leader."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer

from gregor.tools.local_cluster import LocalCluster, create_topic
from gregor.tools.numbered_load import Acked, check_acked, read_back

TOPIC = "isr"


def _setup(c: LocalCluster) -> int:
    create_topic(c.bootstrap, TOPIC, 1, 3, {"min.insync.replicas": "2"})
    c.wait_until(lambda: c.isr_of(TOPIC, 0) == [0, 1, 2], 30, "a full ISR")
    return c.leader_of(TOPIC, 0)


def _produce(bootstrap: str, start: int, n: int, **config: Any) -> tuple[list[Acked], list[str]]:
    """n numbered acks=all messages to partition 0; (acknowledged, error names)."""
    acked: list[Acked] = []
    errors: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(Acked(int(msg.value()), 0, msg.offset()))
        else:
            errors.append(err.name())

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0, "message.timeout.ms": 30000,
                  **config})
    for i in range(start, start + n):
        p.produce(TOPIC, str(i).encode(), partition=0, on_delivery=report)
    p.flush(60)
    return acked, errors


def test_dead_follower_leaves_isr_acks_all_continues_and_it_rejoins(
        make_any_cluster: Callable[..., LocalCluster]) -> None:
    c = make_any_cluster(3)
    leader = _setup(c)
    acked, errors = _produce(c.bootstrap, 0, 200)
    assert len(acked) == 200 and not errors
    follower = next(i for i in (0, 1, 2) if i != leader)
    c.kill(follower)
    t0 = time.monotonic()
    c.wait_until(lambda: follower not in c.isr_of(TOPIC, 0), 30, "the dead follower out of the ISR")
    assert time.monotonic() - t0 < 20  # within replica.lag.time.max.ms (4 s) plus detection
    more, errors = _produce(c.bootstrap, 200, 200)
    assert len(more) == 200 and not errors, errors[:5]
    c.restart(follower)
    c.wait_until(lambda: c.isr_of(TOPIC, 0) == [0, 1, 2], 30, "the restarted follower back in the ISR")
    last, errors = _produce(c.bootstrap, 400, 200)
    assert len(last) == 200 and not errors
    res = check_acked(acked + more + last, read_back(c.bootstrap, TOPIC, 1))
    assert res.ok and res.read == 600, res.summary()
    # The rejoined follower has every record: it can lead them.
    old = c.leader_of(TOPIC, 0)
    c.kill(old)
    c.wait_leader(TOPIC, 0, not_in=(old,), timeout_s=20)
    res = check_acked(acked + more + last, read_back(c.bootstrap, TOPIC, 1))
    assert res.ok, res.summary()


def test_two_of_three_dead_refuses_acks_all_and_whole_isr_gone_is_offline(
        make_cluster: Callable[..., LocalCluster]) -> None:
    c = make_cluster(3, overrides={"unclean.leader.election.enable": "false"})
    leader = _setup(c)
    acked, errors = _produce(c.bootstrap, 0, 300)
    assert len(acked) == 300 and not errors
    f1, f2 = (i for i in (0, 1, 2) if i != leader)
    c.kill(f1)
    c.kill(f2)
    c.wait_until(lambda: c.isr_of(TOPIC, 0) == [leader], 30, "the ISR down to the leader")
    refused, errors = _produce(c.bootstrap, 300, 20, retries=0)
    assert not refused, "acks=all acknowledged with 1 in-sync replica and min.insync.replicas=2"
    assert errors and set(errors) <= {"NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND"}, errors
    c.kill(leader)  # the whole ISR is gone
    c.restart(f1)  # alive, but not in the ISR: with unclean election off it may not lead
    time.sleep(5)  # longer than a session: the controller has had its chance to (wrongly) elect f1
    assert c.leader_of(TOPIC, 0) == -1, "an out-of-sync replica became leader with unclean election off"
    c.restart(leader)  # an ISR member returns
    assert c.wait_leader(TOPIC, 0, timeout_s=30) == leader
    res = check_acked(acked, read_back(c.bootstrap, TOPIC, 1), allow_duplicates=True)
    assert not res.lost, res.summary()


def test_frozen_leader_loses_leadership_and_acknowledges_nothing_after_thaw(
        make_any_cluster: Callable[..., LocalCluster]) -> None:
    c = make_any_cluster(3)
    leader = _setup(c)
    acked, errors = _produce(c.bootstrap, 0, 100)
    assert len(acked) == 100 and not errors
    c.freeze(leader)
    new = c.wait_leader(TOPIC, 0, not_in=(leader,), timeout_s=30)  # as the two live brokers say
    more, errors = _produce(",".join(c.brokers[i].bootstrap for i in c.running()), 100, 100)
    assert len(more) == 100 and not errors
    # Thawed, the old leader still believes it leads until it hears of its lost session: a producer
    # that knows only its address sends to it at once. Whatever it acknowledges must survive.
    c.thaw(leader)
    stale, _ = _produce(c.brokers[leader].bootstrap, 200, 50, retries=0, **{"message.timeout.ms": 10000})
    c.wait_until(lambda: c.leader_of(TOPIC, 0, via=leader) == new, 30, "the old leader learning it lost")
    res = check_acked(acked + more + stale, read_back(c.bootstrap, TOPIC, 1), allow_duplicates=True)
    assert res.ok, res.summary()
