"""Spark connector throughput: the gregor sink and source against a real broker, and Parquet for scale.

    .venv/bin/python benchmarks/bench_spark.py --records 10000000 [--partitions 4] [--master local[2]]
        [--bootstrap-server HOST:PORT]   # default: start a broker in a temp dir
    .venv/bin/python benchmarks/bench_spark.py --smoke   # tiny, for CI: it still runs end to end

1. sink: spark.range -> 100-byte values -> df.write.format("gregor") (fills the topic);
2. source: spark.read.format("gregor") into df.count() and into a groupBy aggregation;
3. the same rows written to Parquet and read the same two ways, as the yardstick.

A small warm-up job runs first (Python worker start-up and JVM JIT would otherwise land on the
first measurement); every read then runs --runs times. Figures are rows per second of wall time.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    result = fn()
    return time.perf_counter() - t, result


def runs(label: str, fn: Callable[[], Any], n_rows: int, repeat: int) -> list[float]:
    rates = []
    for i in range(repeat):
        secs, result = timed(fn)
        rates.append(n_rows / secs)
        print(f"  {label} run {i + 1}: {secs:6.2f} s  {n_rows / secs:12,.0f} rows/s  ({result})", flush=True)
    return rates


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--bootstrap-server", default=None)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="a tiny end-to-end run, for CI (its figures mean nothing)")
    args = ap.parse_args()
    if args.smoke:
        args.records, args.partitions, args.runs = 2_000, 2, 1

    from gregor.tools.local_broker import BrokerProcess

    workdir = Path(tempfile.mkdtemp(prefix="gregor-bench-spark-"))
    broker = None
    bootstrap = args.bootstrap_server
    if bootstrap is None:
        broker = BrokerProcess(workdir / "broker").start()
        bootstrap = broker.bootstrap
    try:
        return bench(args, bootstrap, workdir)
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def bench(args: argparse.Namespace, bootstrap: str, workdir: Path) -> int:
    from pyspark.sql import functions as F

    from gregor.pipeline.demo import create_topics
    from gregor.pipeline.jobs import build_session

    n = args.records
    topic = f"bench-{int(time.time())}"
    create_topics(bootstrap, {topic: args.partitions})
    spark = build_session(args.master, "gregor-bench", {"spark.ui.enabled": "false",
                                                         "spark.sql.shuffle.partitions": "4"})
    spark.sparkContext.setLogLevel("ERROR")
    print(f"{n:,} records of {args.value_bytes} bytes, {args.partitions} partitions, {args.master}, broker {bootstrap}")

    def values(count: int) -> Any:
        return spark.range(0, count, numPartitions=max(2, args.partitions)).select(
            F.lpad(F.col("id").cast("string"), args.value_bytes, "x").alias("value"))

    # Warm-up on a scratch topic: starts the Python workers and JIT-compiles the JVM paths, which
    # otherwise land on whichever measurement runs first (several seconds here). A smoke run measures nothing.
    if not args.smoke:
        create_topics(bootstrap, {f"{topic}-warmup": args.partitions})
        (values(200_000).write.format("gregor").mode("append").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", f"{topic}-warmup").save())
        spark.read.format("gregor").option("kafka.bootstrap.servers", bootstrap) \
            .option("subscribe", f"{topic}-warmup").load().count()

    rows = values(n)
    secs, _ = timed(lambda: rows.write.format("gregor").mode("append").option("kafka.bootstrap.servers", bootstrap)
                    .option("topic", topic).save())
    sink_rate = n / secs
    print(f"sink: {secs:.2f} s, {sink_rate:,.0f} rows/s")

    def source() -> Any:
        return (spark.read.format("gregor").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic).load())

    def aggregate(df: Any) -> Any:
        return sorted(tuple(r) for r in df.groupBy("partition").agg(F.count(F.lit(1)), F.sum(F.length("value")))
                      .collect())

    print("gregor source:")
    g_count = runs("count()", lambda: source().count(), n, args.runs)
    g_agg = runs("groupBy", lambda: aggregate(source()), n, args.runs)

    parquet = str(workdir / "parquet")
    secs, _ = timed(lambda: source().write.mode("overwrite").parquet(parquet))
    print(f"parquet copy written in {secs:.2f} s")
    print("parquet:")
    p_count = runs("count()", lambda: spark.read.parquet(parquet).count(), n, args.runs)
    p_agg = runs("groupBy", lambda: aggregate(spark.read.parquet(parquet)), n, args.runs)
    spark.stop()

    print()
    print("| measure | gregor rows/s (first / best) | Parquet rows/s (best) | gregor / Parquet |")
    print("| --- | --- | --- | --- |")
    for label, g, p in (("df.count()", g_count, p_count), ("groupBy(partition).agg(count, sum(length(value)))",
                                                            g_agg, p_agg)):
        print(f"| {label} | {g[0]:,.0f} / {max(g):,.0f} | {max(p):,.0f} | {max(g) / max(p):.2f} |")
    print(f"| sink: df.write.format('gregor') | {sink_rate:,.0f} | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
