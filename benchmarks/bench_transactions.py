"""Transactions: throughput against plain idempotent produce, and end-to-end latency for read_committed.

Usage: python benchmarks/bench_transactions.py [--seconds 10] [--value-bytes 100] [--partitions 4]
       [--spark-rows 1000000] [--no-spark] [--smoke (tiny, for CI: it still runs end to end)]

Against one real broker process, with confluent-kafka (librdkafka): for `--seconds` each, a producer
sends 100-byte records (acks=all) as fast as it can
  - idempotent, no transactions (the baseline);
  - in transactions committed every 100 ms;
  - in transactions committed every 1,000 records;
while a read_committed consumer in another process measures each record's end-to-end latency (from the
producer's send time in the value to its delivery to the consumer). Prints records/s, the ratio to the
baseline, and latency p50/p99 (the targets: within 15% of the baseline at 100 ms commits; p99 under the
commit interval + 20 ms). Then, unless --no-spark, the gregor Spark sink writes `--spark-rows` rows at
least once and exactly once (`transactional`), timed on the same SparkSession (target: within 20%).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.broker_process import BrokerProcess  # noqa: E402


def create(bs: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)


def consume_latencies(bs: str, topic: str, partitions: int, expected: mp.Value, out: mp.Queue) -> None:  # type: ignore[type-arg]
    c = Consumer({"bootstrap.servers": bs, "group.id": "lat", "isolation.level": "read_committed",
                  "fetch.wait.max.ms": 5, "fetch.queue.backoff.ms": 1, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    lat: list[float] = []
    seen = 0
    idle_since = time.monotonic()
    while True:
        msgs = c.consume(10_000, 0.002)  # consume() waits for all 10,000 or the timeout: keep it short
        now = time.time()
        for m in msgs:
            if m.error() is None:
                lat.append(now - float(m.value()[:20]))
                seen += 1
        if msgs:
            idle_since = time.monotonic()
        if expected.value >= 0 and seen >= expected.value:
            break
        if time.monotonic() - idle_since > 15:
            break
    c.close()
    lat.sort()
    out.put((seen, lat[len(lat) // 2] if lat else -1, lat[int(len(lat) * 0.99)] if lat else -1))


def run(bs: str, name: str, partitions: int, seconds: float, value_bytes: int, txn_ms: int | None,
        txn_records: int | None, rate: float = 0.0) -> tuple[float, float, float]:
    """Produce for `seconds` (as fast as possible, or at `rate` records/s) and return (records/s, e2e p50 ms,
    e2e p99 ms) as the read_committed consumer saw them."""
    topic = f"bench-{name}"
    create(bs, topic, partitions)
    expected = mp.Value("q", -1)
    q: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    consumer = mp.Process(target=consume_latencies, args=(bs, topic, partitions, expected, q))
    consumer.start()
    time.sleep(1.0)
    conf = {"bootstrap.servers": bs, "linger.ms": 5, "enable.idempotence": True, "acks": "all",
            "queue.buffering.max.messages": 1_000_000}
    transactional = txn_ms is not None or txn_records is not None
    if transactional:
        conf["transactional.id"] = f"bench-{name}"
    p = Producer(conf)
    if transactional:
        p.init_transactions(30)
    pad = b"x" * max(value_bytes - 20, 0)
    sent = 0
    t0 = time.monotonic()
    end = t0 + seconds
    while time.monotonic() < end:
        if transactional:
            p.begin_transaction()
        started, in_txn = time.monotonic(), 0
        while True:
            try:
                p.produce(topic, value=f"{time.time():<20.6f}".encode()[:20] + pad, partition=sent % partitions)
            except BufferError:
                p.poll(0.001)
                continue
            sent += 1
            in_txn += 1
            if sent % 1000 == 0:
                p.poll(0)
            if rate > 0 and sent % 100 == 0:
                ahead = t0 + sent / rate - time.monotonic()
                if ahead > 0:
                    p.poll(ahead)
            if not transactional:
                if sent % 10_000 == 0 and time.monotonic() >= end:
                    break
                continue
            if txn_records is not None and in_txn >= txn_records:
                break
            if txn_ms is not None and in_txn % 100 == 0 and (time.monotonic() - started) * 1000 >= txn_ms:
                break
        if transactional:
            p.commit_transaction(60)
    p.flush(60)
    elapsed = time.monotonic() - t0
    expected.value = sent
    consumer.join(120)
    seen, p50, p99 = q.get(timeout=10)
    if seen != sent:
        print(f"  !! the read_committed consumer saw {seen} of {sent} records")
    return sent / elapsed, p50 * 1000, p99 * 1000


def spark_sink(bs: str, rows: int) -> tuple[float, float]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from gregor.pipeline.jobs import build_session

    spark = build_session("local[2]", "bench-txn", {"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.range(0, rows, numPartitions=2).selectExpr("cast(id as string) as value").cache()
    df.count()
    times = {}
    for mode in ("false", "true", "false", "true"):  # interleaved: the second run of each is kept
        topic = f"bench-spark-{mode}-{time.monotonic_ns()}"
        create(bs, topic, 2)
        t0 = time.monotonic()
        (df.write.format("gregor").option("kafka.bootstrap.servers", bs).option("topic", topic)
         .option("transactional", mode).mode("append").save())
        times[mode] = time.monotonic() - t0
    spark.stop()
    return rows / times["false"], rows / times["true"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--spark-rows", type=int, default=1_000_000)
    ap.add_argument("--latency-rate", type=float, default=20_000,
                    help="records/s of the latency runs (the throughput runs go flat out)")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="a tiny end-to-end run, for CI (its figures mean nothing)")
    args = ap.parse_args()
    if args.smoke:
        args.seconds, args.partitions, args.spark_rows, args.latency_rate = 0.5, 2, 1_000, 1_000
    with tempfile.TemporaryDirectory() as d:
        b = BrokerProcess(Path(d)).start()
        try:
            print(f"broker {b.bootstrap}; {args.seconds:g} s per run, {args.value_bytes}-byte values, "
                  f"{args.partitions} partitions, acks=all, os.cpu_count()={os.cpu_count()}")
            base, b50, b99 = run(b.bootstrap, "idempotent", args.partitions, args.seconds, args.value_bytes, None, None)
            print(f"  idempotent (no transactions):   {base:>10,.0f} rec/s   e2e p50 {b50:6.1f} ms  p99 {b99:6.1f} ms")
            for name, ms, n in (("txn-100ms", 100, None), ("txn-1000rec", None, 1000)):
                rate, p50, p99 = run(b.bootstrap, name, args.partitions, args.seconds, args.value_bytes, ms, n)
                print(f"  transactions, commit {'every 100 ms' if ms else 'every 1,000 records'}: {rate:>10,.0f} "
                      f"rec/s ({statistics.fmean([rate / base]) * 100:5.1f}% of idempotent)   read_committed e2e "
                      f"p50 {p50:6.1f} ms  p99 {p99:6.1f} ms")
            print(f"  latency at {args.latency_rate:,.0f} rec/s (read_committed consumer; the producer not saturated):")
            for name, ms in (("lat-idempotent", None), ("lat-txn-100ms", 100)):
                _, p50, p99 = run(b.bootstrap, name, args.partitions, args.seconds, args.value_bytes, ms, None,
                                  args.latency_rate)
                print(f"    {'idempotent' if ms is None else 'commit every 100 ms'}: e2e p50 {p50:6.1f} ms  "
                      f"p99 {p99:6.1f} ms")
            if not args.no_spark:
                alo, eos = spark_sink(b.bootstrap, args.spark_rows)
                print(f"  spark sink, {args.spark_rows:,} rows: at least once {alo:,.0f} rows/s, exactly once "
                      f"(transactional) {eos:,.0f} rows/s ({eos / alo * 100:.1f}%)")
        finally:
            b.stop()


if __name__ == "__main__":
    main()
