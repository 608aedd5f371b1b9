"""The Prometheus endpoint on a cluster: the leader's under-replicated partition count rises when a
follower is killed (SIGKILL) and falls back to 0 once the restarted follower rejoins the ISR."""

from __future__ import annotations

import re
from collections.abc import Callable

from gregor.tools.local_cluster import LocalCluster, create_topic
from tests.server.test_metrics import scrape, value

TOPIC = "metrics-urp"


def _url(c: LocalCluster, i: int) -> str:
    urls = re.findall(r"metrics endpoint listening on (http://\S+/metrics)", c.log_text(i))
    assert urls, f"broker {i} logged no metrics endpoint"
    return str(urls[-1])


def test_under_replicated_rises_when_a_follower_dies_and_falls_when_it_returns(
        make_cluster: Callable[..., LocalCluster]) -> None:
    c = make_cluster(2, overrides={"metrics.port": "0"})
    create_topic(c.bootstrap, TOPIC, 1, 2)
    c.wait_until(lambda: c.isr_of(TOPIC, 0) == [0, 1], 30, "a full ISR")
    leader = c.leader_of(TOPIC, 0)
    follower = 1 - leader
    url = _url(c, leader)

    def urp() -> float:
        return value(scrape(url), "kafka_server_replicamanager_underreplicatedpartitions")

    assert urp() == 0
    c.kill(follower)
    c.wait_until(lambda: urp() >= 1, 30, "an under-replicated partition on the leader")
    # (the controller, seeing the broker's session end, removed it from the ISR: not a shrink of the leader's)
    assert value(scrape(url), "kafka_cluster_partition_underminisr") == 0  # min.insync.replicas 1
    c.restart(follower)
    c.wait_until(lambda: urp() == 0, 30, "no under-replicated partition once the follower is back")
    assert value(scrape(url), "kafka_server_replicamanager_isrexpands_total") >= 1
