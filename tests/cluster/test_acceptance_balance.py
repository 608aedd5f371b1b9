"""Acceptance (issue 10): leader balance. After a killed broker returns, its preferred leaderships
(the first replica of each partition) come back to it: by the controller's automatic rebalance, and
with the rebalance off by `gregor elect-leaders` (kafka-leader-election.sh's options)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

from gregor.tools.local_cluster import LocalCluster, create_topic

TOPIC, PARTS = "balance", 6


def _preferred(c: LocalCluster) -> dict[int, int]:
    md = c.metadata([TOPIC]).topics[TOPIC]
    return {p: info.replicas[0] for p, info in md.items()}


def _leaders(c: LocalCluster) -> dict[int, int]:
    return {p: info.leader for p, info in c.metadata([TOPIC]).topics[TOPIC].items()}


def _kill_and_return(c: LocalCluster, victim: int) -> None:
    c.kill(victim)
    c.wait_until(lambda: all(lead not in (-1, victim) for lead in _leaders(c).values()), 20,
                 "the victim's leaderships moved")
    c.restart(victim)
    c.wait_until(lambda: all(sorted(i.isr) == [0, 1, 2] for i in c.metadata([TOPIC]).topics[TOPIC].values()), 40,
                 "the victim back in every ISR")


def test_auto_rebalance_restores_preferred_leaders(make_any_cluster: Callable[..., LocalCluster]) -> None:
    c = make_any_cluster(3, overrides={"auto.leader.rebalance.enable": "true",
                                   "leader.imbalance.check.interval.seconds": "2",
                                   "leader.imbalance.per.broker.percentage": "0"})
    create_topic(c.bootstrap, TOPIC, PARTS, 3)
    c.wait_until(lambda: _leaders(c) == _preferred(c), 30, "preferred leaders at creation")
    preferred = _preferred(c)
    victim = preferred[0]
    assert sum(1 for b in preferred.values() if b == victim) >= 1
    _kill_and_return(c, victim)
    c.wait_until(lambda: _leaders(c) == preferred, 30, "preferred leaders restored by the rebalance")


def test_elect_leaders_restores_preferred_leaders(make_any_cluster: Callable[..., LocalCluster]) -> None:
    c = make_any_cluster(3)  # auto.leader.rebalance.enable=false (the fixture's)
    create_topic(c.bootstrap, TOPIC, PARTS, 3)
    c.wait_until(lambda: _leaders(c) == _preferred(c), 30, "preferred leaders at creation")
    preferred = _preferred(c)
    victim = preferred[0]
    _kill_and_return(c, victim)
    assert _leaders(c) != preferred  # nothing moves them back on its own with the rebalance off
    r = subprocess.run([sys.executable, "-m", "gregor", "elect-leaders", "--bootstrap-server", c.bootstrap,
                        "--election-type", "preferred", "--all-topic-partitions"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    c.wait_until(lambda: _leaders(c) == preferred, 20, "preferred leaders restored by elect-leaders")
