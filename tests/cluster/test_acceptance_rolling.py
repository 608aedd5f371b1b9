"""Acceptance (issue 10): a rolling restart with controlled shutdown under load. Each broker in turn
gets SIGTERM (it hands its leaderships over before it exits), is started again and rejoins every ISR
before the next goes: a producer with default retries sees no error, and nothing acknowledged is lost."""

from __future__ import annotations

from collections.abc import Callable

from gregor.tools.local_cluster import LocalCluster, create_topic
from gregor.tools.numbered_load import NumberedLoad, check_acked, read_back

TOPIC, PARTS, COUNT = "rolling", 6, 15000


def test_rolling_restart_under_load_loses_nothing_and_surfaces_no_error(
        make_any_cluster: Callable[..., LocalCluster]) -> None:
    c = make_any_cluster(3)
    create_topic(c.bootstrap, TOPIC, PARTS, 3, {"min.insync.replicas": "2"})

    def full_isr() -> bool:
        return all(c.isr_of(TOPIC, p) == [0, 1, 2] for p in range(PARTS))

    c.wait_until(full_isr, 30, "full ISRs")
    load = NumberedLoad(c.bootstrap, TOPIC, PARTS, COUNT, {}, rate=COUNT / 30).start()  # librdkafka defaults
    for i in range(3):
        assert c.stop(i) == 0, f"broker {i} did not exit cleanly on SIGTERM"
        # Its controlled shutdown took it out of every ISR, and it stopped fetching then (Kafka's
        # StopReplica): a leader must not take it back in, or acks=all would wait for a stopped broker
        # until replica.lag.time.max.ms.
        other = (i + 1) % 3
        assert all(i not in c.isr_of(TOPIC, p, via=other) for p in range(PARTS)), \
            [c.isr_of(TOPIC, p, via=other) for p in range(PARTS)]
        c.restart(i)
        c.wait_until(full_isr, 40, f"broker {i} back in every ISR")
    load.join(120)
    assert not load.errors, load.errors[:5]
    assert load.acked_count() == COUNT
    res = check_acked(load.acked, read_back(c.bootstrap, TOPIC, PARTS), allow_duplicates=True)
    assert not res.lost and not res.offset_gaps, res.summary()
