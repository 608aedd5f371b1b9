"""Acceptance (issue 10): idempotent producers through leader failover. Stock kafka-python
`KafkaProducer()` (idempotent by default) and confluent-kafka with enable.idempotence=True send
numbered messages while the leader of a partition is SIGKILLed: every number is acknowledged, read
back once, in order, with no gap."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gregor.tools.local_cluster import LocalCluster, create_topic
from gregor.tools.numbered_load import Acked, NumberedLoad, check_acked, read_back

PARTS, COUNT = 3, 6000


def _setup(c: LocalCluster, topic: str) -> None:
    create_topic(c.bootstrap, topic, PARTS, 3, {"min.insync.replicas": "2"})
    c.wait_until(lambda: all(c.isr_of(topic, p) == [0, 1, 2] for p in range(PARTS)), 30, "full ISRs")


def test_confluent_idempotent_producer_through_failover(make_any_cluster: Callable[..., LocalCluster]) -> None:
    c = make_any_cluster(3)
    topic = "idem-confluent"
    _setup(c, topic)
    load = NumberedLoad(c.bootstrap, topic, PARTS, COUNT, {"enable.idempotence": True}, rate=COUNT / 12).start()
    c.wait_until(lambda: load.acked_count() >= COUNT // 4, 60, "a quarter acknowledged")
    victim = c.leader_of(topic, 0)
    c.kill(victim)
    load.join(120)
    assert not load.errors, load.errors[:5]
    assert load.acked_count() == COUNT
    res = check_acked(load.acked, read_back(c.bootstrap, topic, PARTS))
    assert res.ok and res.read == COUNT, res.summary()


def test_kafka_python_default_producer_through_failover(make_any_cluster: Callable[..., LocalCluster]) -> None:
    from kafka import KafkaProducer

    c = make_any_cluster(3)
    topic = "idem-kafka-python"
    _setup(c, topic)
    producer = KafkaProducer(bootstrap_servers=c.bootstrap)  # the stock defaults: idempotent, acks=all
    acked: list[Acked] = []
    errors: list[str] = []

    def ok(seq: int) -> Callable[[Any], None]:
        return lambda md: acked.append(Acked(seq, md.partition, md.offset))

    victim = c.leader_of(topic, 0)
    t0 = time.monotonic()
    for seq in range(COUNT):
        if seq == COUNT // 4:
            c.kill(victim)
        ahead = t0 + seq / (COUNT / 12) - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        fut = producer.send(topic, str(seq).encode(), partition=seq % PARTS)
        fut.add_callback(ok(seq)).add_errback(lambda e: errors.append(repr(e)))
    producer.flush(120)
    producer.close()
    assert not errors, errors[:5]
    assert len(acked) == COUNT
    res = check_acked(acked, read_back(c.bootstrap, topic, PARTS))
    assert res.ok and res.read == COUNT, res.summary()
