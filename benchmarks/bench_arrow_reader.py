"""Rows/s of gregor.client.read_arrow into a pyarrow.Table from one partition, and of confluent-kafka's Python
consumer reading the same records in the same run.

Usage: python benchmarks/bench_arrow_reader.py [--records N] [--value-bytes 100] [--runs 3]
       [--compression none|gzip|snappy|lz4|zstd] [--no-baseline] [--smoke] [--set name=value ...]
       [--aborted-percent P [--txn-records 10000]]

A broker process on this machine gets N records of --value-bytes random-hex values (null keys) in one
partition, produced by confluent-kafka in large batches; one untimed read warms the page cache. Then,
--runs times each: read_arrow of the whole partition into a Table, and a confluent-kafka Consumer
assigned to it reading every message to the end (consume() in batches of 10,000, counting and touching
each value). Each line gives rows/s and MB/s, the CPU seconds of the broker and of this process
(user + system) and how long each waited for a CPU held by other processes (schedstat), so it shows
which side is the limit and how much a shared machine distorted the run; read_arrow's line adds its
fetches and this process's page faults (the column buffers of the previous run's table are reused:
see gregor.client.buffer_pool_bytes). The summary is the median run
of each reader and their ratio. --set passes reader settings (e.g. --set max.partition.fetch.bytes=4194304).
--smoke runs it tiny (a few thousand records, one run) to check that it works.

--aborted-percent P produces the records in transactions of --txn-records records, P% of them aborted,
and compares read_arrow under isolation.level=read_committed (which drops the aborted ones) with
read_uncommitted on the same records, instead of confluent-kafka.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from benchmarks.bench_throughput import Measure  # noqa: E402
from gregor.client.arrow import ArrowReader  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402

TOPIC = "arrow-bench"


@dataclass
class Run:
    what: str
    rows: int
    mb: float
    m: Measure
    note: str = ""

    @property
    def rate(self) -> float:
        return self.rows / self.m.wall

    def line(self) -> str:
        return (f"{self.what:<22} {self.rate / 1e6:6.2f} M rows/s {self.mb / self.m.wall:7.0f} MB/s  wall {self.m.wall:5.2f} s"
                f" | broker cpu {self.m.cpu:5.2f} s waited {self.m.wait[0]:5.2f} s | reader cpu {self.m.own:5.2f} s "
                f"waited {self.m.wait[1]:5.2f} s {self.note}")


def produce(bootstrap: str, n: int, value_bytes: int, compression: str, aborted_percent: float | None = None,
            txn_records: int = 10_000) -> int:
    """Produce n records; returns how many are in aborted transactions."""
    conf: dict[str, object] = {"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                               "queue.buffering.max.messages": 1_000_000, "compression.type": compression}
    if aborted_percent is not None:
        conf["transactional.id"] = "arrow-bench"
    p = Producer(conf)
    value = os.urandom((value_bytes + 1) // 2).hex().encode()[:value_bytes]
    every = round(100 / aborted_percent) if aborted_percent else 0
    if aborted_percent is not None:
        p.init_transactions(30)
    aborted = 0
    for i in range(n):
        if aborted_percent is not None and i % txn_records == 0:
            p.begin_transaction()
        while True:
            try:
                p.produce(TOPIC, value=value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
        if aborted_percent is not None and (i % txn_records == txn_records - 1 or i == n - 1):
            txn = i // txn_records
            if every and txn % every == every - 1:
                p.flush(60)  # in the log before the abort (librdkafka drops what it has not sent)
                p.abort_transaction(60)
                aborted += i % txn_records + 1
            else:
                p.commit_transaction(60)
    if p.flush(120) != 0:
        raise SystemExit("produce did not finish")
    return aborted


def read_arrow_run(bootstrap: str, n: int, pid: int, settings: dict[str, str], what: str = "read_arrow -> Table") -> Run:
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    with Measure(pid) as m:
        reader = ArrowReader(bootstrap, TOPIC, config=settings)
        table = reader.read_all()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    if table.num_rows != n:
        raise SystemExit(f"read_arrow read {table.num_rows} rows, expected {n}")
    s = reader.stats
    note = (f"[{s.fetches} fetches, {s.prefetched} sent ahead, {s.response_bytes / 1e6:.0f} MB fetched, "
            f"decode {s.decode_s:.2f} s, waiting for fetches {s.wait_s:.2f} s, {faults} page faults]")
    return Run(what, n, table.nbytes / 1e6, m, note)


def confluent_run(bootstrap: str, n: int, pid: int) -> Run:
    with Measure(pid) as m:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "arrow-bench", "enable.auto.commit": False,
                      "fetch.queue.backoff.ms": 1, "queued.max.messages.kbytes": 262144})
        c.assign([TopicPartition(TOPIC, 0, 0)])
        got = nbytes = 0
        deadline = time.monotonic() + 600
        while got < n and time.monotonic() < deadline:
            for msg in c.consume(min(10_000, n - got), 1.0):  # no wait for messages that will not come
                if msg.error() is not None:
                    raise SystemExit(f"confluent-kafka: {msg.error()}")
                nbytes += len(msg.value())
                got += 1
        c.close()
    if got != n:
        raise SystemExit(f"confluent-kafka read {got} messages, expected {n}")
    return Run("confluent-kafka", n, nbytes / 1e6, m)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    ap.add_argument("--no-baseline", action="store_true", help="skip confluent-kafka")
    ap.add_argument("--smoke", action="store_true", help="a tiny run, to check that the benchmark works")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a reader setting")
    ap.add_argument("--aborted-percent", type=float, default=None,
                    help="produce in transactions, this share of them aborted; compare read_committed with read_uncommitted")
    ap.add_argument("--txn-records", type=int, default=10_000)
    args = ap.parse_args()
    if args.smoke:
        args.records, args.runs = 3000, 1
    settings = dict(s.split("=", 1) for s in args.set)
    with tempfile.TemporaryDirectory(prefix="bench-arrow-") as d:
        broker = BrokerProcess(Path(d))
        broker.start()
        try:
            assert broker.proc is not None
            pid = broker.proc.pid
            t0 = time.perf_counter()
            aborted = produce(broker.bootstrap, args.records, args.value_bytes, args.compression, args.aborted_percent,
                              args.txn_records)
            txn = f", in transactions of {args.txn_records}, {aborted} records aborted" if args.aborted_percent else ""
            print(f"{args.records} records of {args.value_bytes} bytes ({args.compression}) produced in "
                  f"{time.perf_counter() - t0:.1f} s; one partition{txn}")
            read_arrow_run(broker.bootstrap, args.records, pid, settings)  # warms the page cache
            ours: list[Run] = []
            theirs: list[Run] = []
            for _ in range(args.runs):
                ours.append(read_arrow_run(broker.bootstrap, args.records, pid, settings))
                print(ours[-1].line(), flush=True)
                if args.aborted_percent is not None:
                    committed = {**settings, "isolation.level": "read_committed"}
                    theirs.append(read_arrow_run(broker.bootstrap, args.records - aborted, pid, committed,
                                                 "read_arrow committed"))
                    print(theirs[-1].line(), flush=True)
                elif not args.no_baseline:
                    theirs.append(confluent_run(broker.bootstrap, args.records, pid))
                    print(theirs[-1].line(), flush=True)
        finally:
            broker.kill()
    median = statistics.median(r.rate for r in ours)
    if args.aborted_percent is not None:
        committed_median = statistics.median(r.m.wall for r in theirs)
        uncommitted_median = statistics.median(r.m.wall for r in ours)
        print(f"read_uncommitted: median {median / 1e6:.2f} M rows/s; read_committed: median wall "
              f"{committed_median:.2f} s against {uncommitted_median:.2f} s for the same records "
              f"({committed_median / uncommitted_median:.2f}x)")
        return
    print(f"read_arrow: median {median / 1e6:.2f} M rows/s, best {max(r.rate for r in ours) / 1e6:.2f} M rows/s")
    # What limits it: CPU per row on each side, and the time each spent waiting for a CPU.
    reader_ns = statistics.median(r.m.own / r.rows for r in ours) * 1e9
    broker_ns = statistics.median(r.m.cpu / r.rows for r in ours) * 1e9
    waited = statistics.median(r.m.wait[0] + r.m.wait[1] for r in ours)
    print(f"read_arrow CPU per row: reader {reader_ns:.0f} ns (all its threads), broker {broker_ns:.0f} ns; "
          f"both waited {waited:.2f} s per run for a CPU held by other processes")
    if theirs:
        base = statistics.median(r.rate for r in theirs)
        print(f"confluent-kafka: median {base / 1e6:.2f} M rows/s; ratio read_arrow / confluent-kafka "
              f"{median / base:.1f}x")


if __name__ == "__main__":
    main()
