"""Transactions and Spark: the source's kafka.isolation.level (read_committed stops at the last stable
offset and skips aborted records) and the sink's exactly-once `transactional` mode, with the streaming
query SIGKILLed mid-stream and restarted from its checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.broker_process import BrokerProcess
from tests.spark.util import checkpoint_commits, consume_all, create_topic, load, produce, unique

ROOT = Path(__file__).resolve().parents[2]


def test_read_committed_source_skips_aborted_records_and_stops_at_the_lso(spark: Any, broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, unique("txn-src"), 2)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique("spark-src")})
    p.init_transactions(30)
    for outcome in ("commit", "abort"):
        p.begin_transaction()
        for i in range(6):
            p.produce(topic, value=f"{outcome}-{i}".encode(), partition=i % 2)
        p.flush(30)
        p.commit_transaction(30) if outcome == "commit" else p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=0)  # left open: read_committed stops before it
    p.flush(30)
    produce(broker.bootstrap, topic, [{"value": b"after-open", "partition": 0}, {"value": b"plain", "partition": 1}])

    def values(**options: str) -> list[bytes]:
        rows = load(spark, broker.bootstrap, subscribe=topic, **options).select("value").collect()
        return sorted(bytes(r["value"]) for r in rows)

    assert values() == sorted([f"commit-{i}".encode() for i in range(6)] + [f"abort-{i}".encode() for i in range(6)]
                              + [b"open", b"after-open", b"plain"])  # read_uncommitted, Spark's default
    assert values(**{"kafka.isolation.level": "read_committed"}) == sorted(
        [f"commit-{i}".encode() for i in range(6)] + [b"plain"])  # partition 0 ends at the open transaction
    p.commit_transaction(30)
    assert values(**{"kafka.isolation.level": "read_committed"}) == sorted(
        [f"commit-{i}".encode() for i in range(6)] + [b"open", b"after-open", b"plain"])


def test_transactional_batch_write(spark: Any, broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, unique("txn-batch"), 3)
    df = spark.range(0, 3000, numPartitions=3).selectExpr("cast(id as string) as value")
    df.write.format("gregor").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic) \
        .option("transactional", "true").mode("append").save()
    got = consume_all(broker.bootstrap, topic, isolation="read_committed")
    assert sorted(int(r.value) for r in got) == list(range(3000))


@pytest.mark.timeout(600)
def test_transactional_sink_is_exactly_once_across_a_query_killed_mid_stream(spark: Any, broker: BrokerProcess,
                                                                             tmp_path: Path) -> None:
    src = create_topic(broker.bootstrap, unique("eos-src"), 3)
    dst = create_topic(broker.bootstrap, unique("eos-dst"), 2)
    n = 12_000
    produce(broker.bootstrap, src, [{"value": f"v{i}".encode(), "partition": i % 3} for i in range(n)])
    checkpoint = tmp_path / "checkpoint"
    cmd = [sys.executable, "-m", "tests.spark.stream_child", broker.bootstrap, src, str(tmp_path / "unused"),
           str(checkpoint), "1200", dst]
    child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    try:
        deadline = time.monotonic() + 240  # a JVM and Spark start in the child: minutes on a loaded machine
        while checkpoint_commits(checkpoint) < 2:
            assert child.poll() is None, child.stdout.read() if child.stdout else ""
            assert time.monotonic() < deadline, "the child query made no progress"
            time.sleep(0.05)
        time.sleep(0.15)  # into the next micro-batch's writes
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
        child.wait(30)
    assert 2 <= checkpoint_commits(checkpoint) < 10, "killed mid-stream"

    from tests.spark.stream_child import transformed

    reader = (spark.readStream.format("gregor").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribe", src).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "1200"))
    q = (transformed(reader.load()).writeStream.format("gregor").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", dst).option("transactional", "true").option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination(240)
    assert q.exception() is None
    committed = [r.value.decode() for r in consume_all(broker.bootstrap, dst, isolation="read_committed")]
    assert len(committed) == len(set(committed)) == n, "each input exactly once"
    truth = {f"{r.partition}:{r.offset}:{r.value.decode()}" for r in consume_all(broker.bootstrap, src)}
    assert set(committed) == truth


def test_a_kept_transactional_producer_fenced_by_another_worker_is_replaced(broker: BrokerProcess) -> None:
    """Between two micro-batches another worker took the task slot's transactional id: the producer this
    worker kept is fenced; the next batch notices before taking any row and writes with a new one."""
    import pyarrow as pa

    from gregor.spark import sink
    from gregor.spark.options import parse_sink_options

    topic = create_topic(broker.bootstrap, unique("txn-kept"), 1)
    opts = parse_sink_options({"kafka.bootstrap.servers": broker.bootstrap, "topic": topic, "transactional": "true"})
    query = unique("query")

    def rows(batch: int) -> Any:
        return iter([pa.RecordBatch.from_pydict({"value": [f"b{batch}-{i}" for i in range(100)]})])

    try:
        assert sink.write_transactional(opts, rows(0), query, 0, 0) == 100
        other = Producer({"bootstrap.servers": broker.bootstrap,
                          "transactional.id": f"{opts.transactional_id_prefix}{query}-0"})
        other.init_transactions(30)  # the other worker: the kept producer is fenced now
        assert sink.write_transactional(opts, rows(1), query, 1, 0) == 100
        assert sink.write_transactional(opts, rows(1), query, 1, 0) == 0  # a replay of batch 1: skipped
    finally:
        for txn_id in list(sink._TXN_CLIENTS):  # this process is not a Spark worker: let the clients go
            sink._drop_txn_clients(txn_id)
    got = sorted(r.value.decode() for r in consume_all(broker.bootstrap, topic, isolation="read_committed"))
    assert got == sorted([f"b0-{i}" for i in range(100)] + [f"b1-{i}" for i in range(100)])
