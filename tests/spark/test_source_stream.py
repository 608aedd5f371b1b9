"""spark.readStream.format("gregor"): micro-batches of exact offset ranges, restarts, limits, data loss."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.broker_process import BrokerProcess
from tests.spark.util import (
    add_partitions,
    checkpoint_commits,
    consume_all,
    create_topic,
    delete_records,
    df_records,
    produce,
    recent_minute_ms,
    unique,
)

ROOT = Path(__file__).resolve().parents[2]


def stream(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.readStream.format("gregor").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def values(n: int, start: int = 0, partitions: int = 1) -> list[dict[str, Any]]:
    return [{"value": f"v{i}".encode(), "key": f"k{i}".encode(), "partition": i % partitions}
            for i in range(start, start + n)]


def input_rows(q: Any) -> list[int]:
    return [p["numInputRows"] for p in q.recentProgress]


def test_max_offsets_per_trigger_bounds_micro_batches_with_available_now(spark: Any, broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, unique("bounded"), 3)
    produce(broker.bootstrap, topic, values(3_000, partitions=3))
    name = unique("bounded").replace("-", "_")
    q = (stream(spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="700")
         .writeStream.format("memory").queryName(name).trigger(availableNow=True).start())
    q.awaitTermination(120)
    rows = input_rows(q)
    assert sum(rows) == 3_000
    assert max(rows) <= 700 and len([r for r in rows if r]) >= 5, rows
    assert df_records(spark.table(name)) == [
        r.__class__(r.partition, r.offset, r.key, r.value, r.timestamp_ms, r.timestamp_type, None)
        for r in consume_all(broker.bootstrap, topic)]


def test_killed_and_restarted_query_reads_every_record_exactly_once(spark: Any, broker: BrokerProcess,
                                                                    tmp_path: Path) -> None:
    topic = create_topic(broker.bootstrap, unique("crash"), 4)
    produce(broker.bootstrap, topic, values(20_000, partitions=4))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.spark.stream_child", broker.bootstrap, topic, str(out), str(checkpoint), "1500"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    try:
        deadline = time.monotonic() + 120
        while checkpoint_commits(checkpoint) < 3:
            assert child.poll() is None, child.stdout.read() if child.stdout else ""
            assert time.monotonic() < deadline, "the child query made no progress"
            time.sleep(0.1)
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # the child, its JVM and its Python workers: a crash
        child.wait(30)
    done_before = checkpoint_commits(checkpoint)
    assert 3 <= done_before < 14, "killed mid-stream"

    q = (stream(spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="1500")
         .select("partition", "offset", "value").writeStream.format("parquet").option("path", str(out))
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert q.exception() is None
    got = sorted((r["partition"], r["offset"], r["value"]) for r in spark.read.parquet(str(out)).collect())
    truth = sorted((r.partition, r.offset, r.value) for r in consume_all(broker.bootstrap, topic))
    assert len(got) == len(set(got)) == 20_000, "no record lost or repeated"
    assert got == truth
    assert max(input_rows(q)) <= 1500


def test_new_partitions_and_topics_matching_the_pattern_are_picked_up(spark: Any, broker: BrokerProcess) -> None:
    prefix = unique("grow")
    first = create_topic(broker.bootstrap, f"{prefix}-a", 2)
    produce(broker.bootstrap, first, values(100, partitions=2))
    name = prefix.replace("-", "_")
    q = (stream(spark, broker.bootstrap, subscribePattern=f"{prefix}-.*", startingOffsets="earliest")
         .writeStream.format("memory").queryName(name).trigger(processingTime="200 milliseconds").start())
    try:
        q.processAllAvailable()
        assert spark.table(name).count() == 100
        add_partitions(broker.bootstrap, first, 3)
        second = create_topic(broker.bootstrap, f"{prefix}-b", 1)
        produce(broker.bootstrap, first, values(60, start=100, partitions=3))
        produce(broker.bootstrap, second, values(10, start=1000))
        deadline = time.monotonic() + 60
        while spark.table(name).count() < 170:
            assert time.monotonic() < deadline, spark.table(name).count()
            time.sleep(0.3)
        q.processAllAvailable()
    finally:
        q.stop()
    got = sorted((r["topic"], r["partition"], r["offset"]) for r in spark.table(name).collect())
    truth = sorted([(first, r.partition, r.offset) for r in consume_all(broker.bootstrap, first)]
                   + [(second, r.partition, r.offset) for r in consume_all(broker.bootstrap, second)])
    assert got == truth
    assert (first, 2, 0) in got and (second, 0, 0) in got  # new ones are read from their start


def test_starting_offsets_latest_and_by_timestamp(spark: Any, broker: BrokerProcess, tmp_path: Path) -> None:
    topic = create_topic(broker.bootstrap, unique("start"), 1)
    base_ts = recent_minute_ms()
    produce(broker.bootstrap, topic, [{"value": f"old{i}".encode(), "timestamp": base_ts + i}
                                      for i in range(50)])
    name = unique("latest").replace("-", "_")
    q = (stream(spark, broker.bootstrap, subscribe=topic).writeStream.format("memory").queryName(name)
         .trigger(processingTime="200 milliseconds").start())
    try:
        q.processAllAvailable()
        produce(broker.bootstrap, topic, [{"value": f"new{i}".encode()} for i in range(5)])
        deadline = time.monotonic() + 60
        while spark.table(name).count() < 5:
            assert time.monotonic() < deadline
            time.sleep(0.3)
        q.processAllAvailable()
    finally:
        q.stop()
    assert sorted(r["value"] for r in spark.table(name).collect()) == [f"new{i}".encode() for i in range(5)]

    name = unique("by_ts").replace("-", "_")
    q = (stream(spark, broker.bootstrap, subscribe=topic, startingTimestamp=str(base_ts + 45))
         .writeStream.format("memory").queryName(name).trigger(availableNow=True).start())
    q.awaitTermination(60)
    assert sorted(r["offset"] for r in spark.table(name).collect()) == list(range(45, 55))


def test_min_offsets_per_trigger_waits_for_records_or_max_trigger_delay(spark: Any, broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, unique("min"), 1)
    name = unique("min").replace("-", "_")
    q = (stream(spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest", minOffsetsPerTrigger="100",
                maxTriggerDelay="5s")
         .writeStream.format("memory").queryName(name).trigger(processingTime="200 milliseconds").start())
    try:
        q.processAllAvailable()  # the query's first trigger has passed: the delay clock runs from there
        produce(broker.bootstrap, topic, values(30))
        produced_at = time.monotonic()
        while spark.table(name).count() < 30:
            assert time.monotonic() - produced_at < 30
            time.sleep(0.1)
        waited = time.monotonic() - produced_at
        assert waited > 2.0, f"30 < minOffsetsPerTrigger records were processed after only {waited:.1f} s"
        produce(broker.bootstrap, topic, values(150, start=30))
        produced_at = time.monotonic()
        while spark.table(name).count() < 180:
            assert time.monotonic() - produced_at < 30
            time.sleep(0.1)
        assert time.monotonic() - produced_at < 4.0, "enough records trigger a batch without waiting"
    finally:
        q.stop()
    assert [r for r in input_rows(q) if r] == [30, 150]


def test_data_loss_in_a_stream(spark: Any, broker: BrokerProcess, tmp_path: Path) -> None:
    topic = create_topic(broker.bootstrap, unique("gone"), 1)
    produce(broker.bootstrap, topic, values(50))
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run(**options: str) -> Any:
        q = (stream(spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest", **options)
             .select("offset").writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        try:
            q.awaitTermination(60)
        except Exception as e:  # the StreamingQueryException of a failed query
            return e
        return q

    run()
    produce(broker.bootstrap, topic, values(50, start=50))
    delete_records(broker.bootstrap, topic, 0, 80)  # offsets 50..79 vanish before the query reads them
    failure = run()
    assert isinstance(failure, Exception) and "failOnDataLoss" in str(failure)
    q = run(failOnDataLoss="false")
    assert not isinstance(q, Exception), q
    got = sorted(r["offset"] for r in spark.read.parquet(out).collect())
    assert got == list(range(50)) + list(range(80, 100))


@pytest.mark.parametrize("options, message", [
    ({"subscribe": "x", "endingOffsets": "latest"}, "not valid in streaming"),
    ({"subscribe": "x", "assign": '{"x":[0]}'}, "Only one of the following options"),
])
def test_bad_stream_options(spark: Any, broker: BrokerProcess, options: dict[str, str], message: str) -> None:
    with pytest.raises(Exception, match=message):
        q = stream(spark, broker.bootstrap, **options).writeStream.format("memory").queryName(
            unique("bad").replace("-", "_")).start()
        try:
            q.awaitTermination(30)
        finally:
            q.stop()


def test_unknown_topic_in_a_stream(spark: Any, broker: BrokerProcess) -> None:
    missing = unique("later")
    q = (stream(spark, broker.bootstrap, subscribe=missing).writeStream.format("memory")
         .queryName(unique("unknown").replace("-", "_")).start())
    with pytest.raises(Exception, match=f"Topics {missing} of subscribe={missing} do not exist"):
        q.awaitTermination(30)
    # With failOnDataLoss=false the query waits for the topic and reads it from the start.
    name = unique("waits").replace("-", "_")
    q = (stream(spark, broker.bootstrap, subscribe=missing, failOnDataLoss="false").writeStream.format("memory")
         .queryName(name).trigger(processingTime="200 milliseconds").start())
    try:
        q.processAllAvailable()
        create_topic(broker.bootstrap, missing, 2)
        produce(broker.bootstrap, missing, values(40, partitions=2))
        deadline = time.monotonic() + 60
        while spark.table(name).count() < 40:
            assert q.exception() is None and time.monotonic() < deadline
            time.sleep(0.3)
    finally:
        q.stop()
    assert sorted(r["value"] for r in spark.table(name).collect()) == sorted(v["value"] for v in values(40))
