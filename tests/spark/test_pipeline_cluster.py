"""The reference pipeline on a 3-broker cluster (real ZooKeeper, real broker processes) while one broker
is SIGKILLed and restarted under it: the streaming query keeps running (the source follows the
leadership changes), and its aggregates equal the plain-Python ones over exactly what was produced:
nothing lost, nothing counted twice."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

from gregor.pipeline import jobs, reference
from gregor.pipeline.demo import create_topics, read_topic
from gregor.pipeline.events import page_views
from gregor.pipeline.generator import make_producer, produce_all
from gregor.tools.local_cluster import LocalCluster
from tests.cluster.conftest import CLUSTER_TEST_OVERRIDES
from tests.spark.test_pipeline import stats_rows
from tests.spark.util import recent_minute_ms

EVENTS = 6_000
RATE = 300  # records/s: the produce runs ~20 s, through the kill and the restart


def _progressed(q: Any) -> int:
    return sum(p["numInputRows"] for p in q.recentProgress)


def test_reference_pipeline_through_a_broker_kill(spark: Any, zk_connect: str, tmp_path: Path) -> None:
    cluster = LocalCluster(3, tmp_path / "cluster", {**CLUSTER_TEST_OVERRIDES, "min.insync.replicas": "2"},
                           zk_connect=zk_connect).start()
    try:
        bootstrap = cluster.bootstrap
        create_topics(bootstrap, {"page_views": 4, "page_view_stats": 1}, replication_factor=3)
        cfg = jobs.StreamConfig(bootstrap, "page_views", "page_view_stats", tmp_path / "stats", tmp_path / "checkpoint",
                                trigger="processing-time=1 second", source_options={"maxOffsetsPerTrigger": "1000"})
        query = jobs.start_activity_stream(spark, cfg)
        events = list(page_views(EVENTS, start_ms=recent_minute_ms(30), events_per_second=20))
        failure: list[BaseException] = []

        def produce() -> None:
            try:
                # Event time: 5 minutes of it (20 events per second of event time), produced at RATE per second
                # of wall clock, so windows close as the watermark moves.
                produce_all(make_producer(bootstrap), "page_views", ((e.user.encode(), e.to_json()) for e in events),
                            rate_per_s=RATE)
            except BaseException as e:  # noqa: BLE001 - reported by the test below
                failure.append(e)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        deadline = time.monotonic() + 60
        while _progressed(query) < 500:  # the query is reading
            assert query.exception() is None and time.monotonic() < deadline, query.exception()
            time.sleep(0.2)
        victim = cluster.leader_of("page_views", 0)
        cluster.kill(victim)
        time.sleep(6)  # its leaderships fail over (session 3 s) while both sides keep going
        assert query.isActive and query.exception() is None, query.exception()
        cluster.restart(victim)
        producer.join(120)
        assert not producer.is_alive() and not failure, failure
        cluster.wait_until(lambda: all(len(cluster.isr_of("page_views", p)) == 3 for p in range(4)), 60,
                           "the restarted broker back in every ISR")
        query.stop()
        assert query.exception() is None

        # Drain from the same checkpoint: what the live query had not read, and the windows it left open.
        jobs.start_activity_stream(spark, dataclasses.replace(cfg, trigger="available-now")).awaitTermination(180)
        truth_values = read_topic(bootstrap, "page_views")
    finally:
        cluster.close()

    # The idempotent producer wrote every page view exactly once, through the failover.
    assert sorted(truth_values) == sorted(e.to_json() for e in events)
    expected = reference.page_view_stats(events, 60_000)
    assert len(expected) > 50
    assert stats_rows(spark, cfg.output_dir) == expected
