"""Cluster fixtures: a LocalCluster of real broker processes on the session's real ZooKeeper, each
test in a chroot of its own, everything killed at the end of the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gregor.tools.local_cluster import LocalCluster

# Short timeouts so that failures are detected in seconds and the tests stay short: a broker's
# ZooKeeper session ends 3 s after its last heartbeat; a follower that fetched nothing for 4 s leaves
# the ISR. The auto rebalance is off unless a test turns it on (it would move leaders under a test).
CLUSTER_TEST_OVERRIDES = {
    "zookeeper.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "4000",
    "auto.leader.rebalance.enable": "false",
    "auto.create.topics.enable": "false",
}

# KRaft mode's counterpart of the 3 s ZooKeeper session: a broker without a heartbeat for 3 s is fenced.
KRAFT_TEST_OVERRIDES = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}


@pytest.fixture
def make_cluster(tmp_path: Path, zk_connect: str) -> Iterator[Callable[..., LocalCluster]]:
    """Start a LocalCluster: `make_cluster(n, overrides=..., per_broker=...)`; overrides go on top of
    CLUSTER_TEST_OVERRIDES. Clusters are closed (SIGKILL) at the end of the test, and a failing test
    prints the tail of every broker's log."""
    made: list[LocalCluster] = []

    def make(n: int = 3, overrides: dict[str, str] | None = None,
             per_broker: dict[int, dict[str, str]] | None = None, kraft: bool = False) -> LocalCluster:
        base = {**CLUSTER_TEST_OVERRIDES, **(KRAFT_TEST_OVERRIDES if kraft else {})}
        c = LocalCluster(n, tmp_path / f"cluster-{len(made)}", {**base, **(overrides or {})},
                         per_broker, zk_connect=None if kraft else zk_connect, kraft=kraft)
        made.append(c)
        return c.start()

    yield make
    for c in made:
        for i in range(c.n):
            tail = "\n".join(c.log_text(i).splitlines()[-15:])
            print(f"--- broker {i} log tail ---\n{tail}")
        c.close()


@pytest.fixture(params=["zookeeper", "kraft"])
def make_any_cluster(request: pytest.FixtureRequest,
                     make_cluster: Callable[..., LocalCluster]) -> Callable[..., LocalCluster]:
    """make_cluster in both metadata modes: the test runs once on ZooKeeper, once on a KRaft quorum."""
    kraft = request.param == "kraft"

    def make(n: int = 3, overrides: dict[str, str] | None = None,
             per_broker: dict[int, dict[str, str]] | None = None) -> LocalCluster:
        return make_cluster(n, overrides, per_broker, kraft=kraft)

    return make
