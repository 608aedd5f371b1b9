"""Spark connector throughput: the gregor source against Parquet holding the same rows, in the same run.

    .venv/bin/python benchmarks/bench_spark.py [--records 10000000] [--partitions 4] [--master local[2]]
        [--runs 3] [--min-partitions N ...] [--no-baseline] [--no-ceiling] [--bootstrap-server HOST:PORT]
    .venv/bin/python benchmarks/bench_spark.py --smoke   # tiny, for CI: it runs end to end, its figures mean nothing

1. sink: spark.range -> --value-bytes values (null keys) -> df.write.format("gregor") fills the topic, and
   the same rows, read back once through the source, are written to Parquet;
2. every round runs each reader below once, in an order rotated from round to round (so a noisy
   neighbour on a shared machine does not always hit the same one), into df.count() and into
   groupBy("partition").agg(count(*), sum(length(value))):
   - gregor: spark.read.format("gregor") as a user writes it (gregor.client's Arrow reader);
   - gregor minPartitions=N: the same with each partition's range split into more Spark tasks;
   - librdkafka: the source as it read before, through confluent-kafka's Consumer (messages gathered
     column by column into Arrow batches), kept here as the baseline;
   - ceiling: a Python data source that yields prebuilt RecordBatches of the same schema and size and
     reads nothing at all: what Spark's Python data source path itself costs;
   - parquet: spark.read.parquet of the copy.
Each line gives rows/s of wall time and the CPU (in cores) used meanwhile by the broker, by Spark's JVM,
by Spark's Python processes (this driver and the workers that run the source's read()) and by the rest
of the machine (other processes: on a shared machine, what the run had to share the CPUs with); the summary takes each reader's best
run, and the load average is printed at the start and at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gregor.tools.local_broker import BrokerProcess  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / _TICK  # utime, stime and those of waited-for children


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            out.setdefault(ppid, []).append(int(name))
    return out


def _tree(root: int, skip: int) -> list[int]:
    kids, out, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        if pid != skip:
            out.append(pid)
            todo.extend(kids.get(pid, []))
    return out


def _is_jvm(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip() == "java"
    except OSError:
        return False


def _machine_busy() -> float:
    with open("/proc/stat") as fh:
        cpu = [int(x) for x in fh.readline().split()[1:]]
    return (sum(cpu) - cpu[3] - cpu[4]) / _TICK  # everything but idle and iowait


@dataclass
class Sample:
    """One timed query: wall seconds and the CPU seconds of the broker, of Spark's JVM, of its Python
    workers (and this driver process), and of everything else on the machine."""

    wall: float
    broker: float
    jvm: float
    python: float
    others: float

    def cores(self) -> str:
        return (f"CPU in cores: broker {self.broker / self.wall:.2f}, JVM {self.jvm / self.wall:.2f}, "
                f"Python {self.python / self.wall:.2f}, others {self.others / self.wall:.2f}")


def _cpu_split(broker_pid: int | None) -> tuple[float, float, float]:
    """CPU seconds so far of (broker, Spark's JVM, the Python processes of Spark: driver and workers)."""
    jvm = python = 0.0
    for pid in _tree(os.getpid(), broker_pid or -1):
        if _is_jvm(pid):
            jvm += _proc_cpu(pid)
        else:
            python += _proc_cpu(pid)
    return (_proc_cpu(broker_pid) if broker_pid else 0.0), jvm, python


def measure(fn: Callable[[], Any], broker_pid: int | None) -> tuple[Sample, Any]:
    b0, j0, p0 = _cpu_split(broker_pid)
    m0, t0 = _machine_busy(), time.perf_counter()
    result = fn()
    wall = time.perf_counter() - t0
    b1, j1, p1 = _cpu_split(broker_pid)
    m1 = _machine_busy()
    broker, jvm, python = b1 - b0, j1 - j0, p1 - p0
    return Sample(wall, broker, jvm, python, max(0.0, (m1 - m0) - broker - jvm - python)), result


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# --- the old read path, through librdkafka: the baseline ------------------------------------------------

def _librdkafka_batches(bootstrap: str, topic: str, partition: int, start: int, until: int,
                        schema: Any) -> Iterator[Any]:
    """The source's former executor read: a confluent-kafka Consumer assigned to the range, its messages
    gathered column by column (C-level maps) into Arrow batches of 32,768 rows."""
    import gc

    import numpy as np
    import pyarrow as pa
    from confluent_kafka import Consumer, Message, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-baseline", "enable.auto.commit": False,
                  "isolation.level": "read_uncommitted", "fetch.queue.backoff.ms": 1,
                  "enable.partition.eof": True})
    topic_bytes = topic.encode()
    try:
        c.assign([TopicPartition(topic, partition, start)])
        nxt = start
        while nxt < until:
            gc.disable()  # as the old reader did: Message objects are GC-tracked
            try:
                msgs = [m for m in c.consume(min(32_768, until - nxt), 0.5) if m.error() is None]
                msgs = [m for m in msgs if m.offset() < until]
                if not msgs:
                    continue
                n = len(msgs)
                stamps = list(map(Message.timestamp, msgs))
                ts = np.fromiter((s[1] for s in stamps), dtype=np.int64, count=n) * 1000
                tst = np.fromiter((s[0] for s in stamps), dtype=np.int32, count=n) - 1
                topic_offsets = np.arange(0, (n + 1) * len(topic_bytes), len(topic_bytes), dtype=np.int32)
                batch = pa.RecordBatch.from_arrays([
                    pa.array(list(map(Message.key, msgs)), pa.binary()),
                    pa.array(list(map(Message.value, msgs)), pa.binary()),
                    pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(topic_offsets),
                                                           pa.py_buffer(topic_bytes * n)]),
                    pa.array(np.full(n, partition, dtype=np.int32)),
                    pa.array(list(map(Message.offset, msgs)), pa.int64()),
                    pa.array(ts, pa.timestamp("us", tz="UTC")),
                    pa.array(tst),
                ], schema=schema)
                nxt = msgs[-1].offset() + 1
            finally:
                gc.enable()
            yield batch
    finally:
        c.close()


def register_baselines(spark: Any, batch_rows: int, value_bytes: int) -> None:
    """format("gregor-librdkafka") (the old read path) and format("gregor-ceiling") (no reading at all)."""
    from gregor.spark.schema import arrow_schema, source_schema
    from gregor.spark.source import GregorBatchReader, GregorDataSource, KafkaInputPartition

    class LibrdkafkaReader(GregorBatchReader):
        def read(self, partition: Any) -> Iterator[Any]:
            assert isinstance(partition, KafkaInputPartition)
            r = partition.range
            return _librdkafka_batches(self.opts.kafka_params["bootstrap.servers"], r.topic, r.partition,
                                       r.from_offset, r.until_offset, arrow_schema(self.schema))

    class CeilingReader(GregorBatchReader):
        def read(self, partition: Any) -> Iterator[Any]:
            import numpy as np
            import pyarrow as pa

            assert isinstance(partition, KafkaInputPartition)
            r = partition.range
            n = batch_rows
            values = pa.array([b"x" * value_bytes] * n, pa.binary())
            batch = pa.RecordBatch.from_arrays([
                pa.nulls(n, pa.binary()), values, pa.repeat(pa.scalar(r.topic), n),
                pa.array(np.full(n, r.partition, dtype=np.int32)), pa.array(np.arange(n, dtype=np.int64)),
                pa.array(np.zeros(n, dtype=np.int64), pa.timestamp("us", tz="UTC")),
                pa.array(np.zeros(n, dtype=np.int32)),
            ], schema=arrow_schema(source_schema(False)))
            for lo in range(r.from_offset, r.until_offset, n):
                yield batch if r.until_offset - lo >= n else batch.slice(0, r.until_offset - lo)

    class Librdkafka(GregorDataSource):
        @classmethod
        def name(cls) -> str:
            return "gregor-librdkafka"

        def reader(self, schema: Any) -> Any:
            base = super().reader(schema)
            return LibrdkafkaReader(base.opts, schema)

    class Ceiling(GregorDataSource):
        @classmethod
        def name(cls) -> str:
            return "gregor-ceiling"

        def reader(self, schema: Any) -> Any:
            base = super().reader(schema)
            return CeilingReader(base.opts, schema)

    spark.dataSource.register(Librdkafka)
    spark.dataSource.register(Ceiling)


# --- the benchmark ----------------------------------------------------------------------------------------

@dataclass
class Reader:
    label: str
    load: Callable[[], Any]
    count: list[Sample] = field(default_factory=list)
    group: list[Sample] = field(default_factory=list)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--bootstrap-server", default=None)
    ap.add_argument("--runs", type=int, default=3, help="rounds: each reader runs once per round")
    ap.add_argument("--min-partitions", type=int, action="append", default=None,
                    help="also read with minPartitions=N (repeatable; default: 2 and 4 tasks per Kafka partition; 0: none)")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL:OPTION=VALUE,...",
                    help="also read with these source options, e.g. 'batch 16k:kafka.arrow.batch.max.records=16384'")
    ap.add_argument("--no-baseline", action="store_true", help="leave out the librdkafka read path")
    ap.add_argument("--no-ceiling", action="store_true", help="leave out the no-I/O ceiling")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting")
    ap.add_argument("--smoke", action="store_true", help="a tiny end-to-end run, for CI (its figures mean nothing)")
    args = ap.parse_args()
    if args.smoke:
        args.records, args.partitions, args.runs = 2_000, 2, 1
    if args.min_partitions is None:
        args.min_partitions = [2 * args.partitions, 4 * args.partitions]
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    workdir = Path(tempfile.mkdtemp(prefix="gregor-bench-spark-"))
    broker = None
    bootstrap = args.bootstrap_server
    if bootstrap is None:
        broker = BrokerProcess(workdir / "broker").start()
        bootstrap = broker.bootstrap
    try:
        pid = broker.proc.pid if broker is not None and broker.proc is not None else None
        return bench(args, bootstrap, workdir, pid)
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def bench(args: argparse.Namespace, bootstrap: str, workdir: Path, broker_pid: int | None) -> int:
    from pyspark.sql import functions as F

    from gregor.client.decoder import C_DECODER
    from gregor.pipeline.demo import create_topics
    from gregor.pipeline.jobs import build_session

    n = args.records
    topic = f"bench-{int(time.time())}"
    create_topics(bootstrap, {topic: args.partitions})
    conf = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"}
    conf.update(dict(c.split("=", 1) for c in args.conf))
    spark = build_session(args.master, "gregor-bench", conf)
    spark.sparkContext.setLogLevel("ERROR")
    register_baselines(spark, 65_536, args.value_bytes)
    print(f"{n:,} records of {args.value_bytes} bytes (null keys), {args.partitions} partitions, {args.master}, "
          f"broker {bootstrap}, {os.cpu_count()} CPUs, C decoder: {C_DECODER}, load average {load_average()}",
          flush=True)

    def write(df: Any, fmt: str, t: str) -> None:
        df.write.format(fmt).mode("append").option("kafka.bootstrap.servers", bootstrap).option("topic", t).save()

    def values(count: int) -> Any:
        return spark.range(0, count, numPartitions=max(2, args.partitions)).select(
            F.lpad(F.col("id").cast("string"), args.value_bytes, "x").alias("value"))

    def source(fmt: str = "gregor", t: str = topic, **options: str) -> Any:
        r = spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", t)
        for k, v in options.items():
            r = r.option(k, v)
        return r.load()

    if not args.smoke:
        # Warm-up on a scratch topic: starts the Python workers and JIT-compiles the JVM paths, which
        # otherwise land on whichever measurement runs first (several seconds here).
        create_topics(bootstrap, {f"{topic}-warmup": args.partitions})
        write(values(200_000), "gregor", f"{topic}-warmup")
        source(t=f"{topic}-warmup").count()

    sample, _ = measure(lambda: write(values(n), "gregor", topic), broker_pid)
    print(f"sink: {n / sample.wall:,.0f} rows/s ({sample.wall:.2f} s; {sample.cores()})", flush=True)
    parquet = str(workdir / "parquet")
    sample, _ = measure(lambda: source().write.mode("overwrite").parquet(parquet), broker_pid)
    print(f"parquet copy written in {sample.wall:.2f} s", flush=True)

    def aggregate(df: Any) -> Any:
        return sorted(tuple(r) for r in df.groupBy("partition").agg(F.count(F.lit(1)), F.sum(F.length("value")))
                      .collect())

    readers = [Reader("gregor", source)]
    readers += [Reader(f"gregor minPartitions={m}", lambda m=m: source(minPartitions=str(m)))  # type: ignore[misc]
                for m in args.min_partitions if m > 0]
    for v in args.variant:
        label, _, spec = v.partition(":")
        opts = dict(kv.split("=", 1) for kv in spec.split(",") if kv)
        readers.append(Reader(f"gregor {label}", lambda opts=opts: source(**opts)))  # type: ignore[misc]
    if not args.no_baseline:
        readers.append(Reader("librdkafka (before)", lambda: source("gregor-librdkafka")))
    if not args.no_ceiling:
        readers.append(Reader("ceiling (no I/O)", lambda: source("gregor-ceiling")))
    readers.append(Reader("parquet", lambda: spark.read.parquet(parquet)))

    expected = None
    for rnd in range(args.runs):
        print(f"round {rnd + 1} (load average {load_average()})", flush=True)
        order = readers[rnd % len(readers):] + readers[:rnd % len(readers)]
        for r in order:
            s, rows = measure(lambda r=r: r.load().count(), broker_pid)  # type: ignore[misc]
            r.count.append(s)
            print(f"  {r.label:<26} count()  {n / s.wall:>12,.0f} rows/s  {s.wall:6.2f} s  {s.cores()}", flush=True)
            assert rows == n, (r.label, rows)
            s, groups = measure(lambda r=r: aggregate(r.load()), broker_pid)  # type: ignore[misc]
            r.group.append(s)
            print(f"  {r.label:<26} groupBy  {n / s.wall:>12,.0f} rows/s  {s.wall:6.2f} s  {s.cores()}", flush=True)
            if expected is None:
                expected = groups
            assert groups == expected, (r.label, groups, expected)
    spark.stop()

    pq = readers[-1]
    print(f"\nload average at the end: {load_average()}")
    print("\nrows/s: best run / median run; CPU: broker + JVM + Python per row, in microseconds (median run), what the "
          "rows cost whatever else ran on the machine")
    print("\n| reader | count() rows/s | / Parquet | CPU us/row | groupBy rows/s | / Parquet | CPU us/row |")
    print("| --- | --- | --- | --- | --- | --- | --- |")

    def best(samples: list[Sample]) -> float:
        return n / min(x.wall for x in samples)

    def cells(samples: list[Sample], parquet: list[Sample]) -> str:
        median = n / statistics.median(x.wall for x in samples)
        cpu = statistics.median((x.broker + x.jvm + x.python) / n * 1e6 for x in samples)
        return f"{best(samples):,.0f} / {median:,.0f} | {best(samples) / best(parquet):.2f} | {cpu:.2f}"

    for r in readers:
        print(f"| {r.label} | {cells(r.count, pq.count)} | {cells(r.group, pq.group)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
