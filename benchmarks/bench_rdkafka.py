"""librdkafka's rdkafka_performance (a C client) against a broker started from this tree.

Usage: python benchmarks/bench_rdkafka.py [--rdkafka-performance PATH] [--records 5000000] [--runs 3]
       [--value-bytes 100] [--data-base DIR] [--smoke (tiny, for CI: it still runs end to end)]

The issue's figure is 100-byte records on 1 partition, produce then consume, in records/s. A Python
client tops out near 1M records/s on its own, so the client here is librdkafka's C example
`rdkafka_performance` (examples/ of librdkafka, built outside this repo), given by
--rdkafka-performance or $RDKAFKA_PERFORMANCE; without one the benchmark prints why and exits 0
("skipped").

Each run produces --records records (acks=1) to a fresh 1-partition topic, then consumes them from
the beginning. Printed per run: rdkafka_performance's own rate (records/s and MB/s, from its summary
line), the broker process's CPU (user+system from /proc) as a share of a core and per record, and
the client's CPU.
Then the medians. On a machine shared with other work the rates swing by 2x from run to run while
the broker's CPU per record stays within ~20%: compare trees on that figure, alternating runs.

Client options are chosen so the run measures the broker and not the client's own limits:
- producer: batch.num.messages (default 10,000) and queue.buffering.max.messages (default 100,000)
  raised so batches fill to batch.size and the application never waits on a full local queue;
- consumer: fetch.queue.backoff.ms=1 (default 1000: librdkafka pauses fetching for a second whenever
  its local queue passes queued.max.messages.kbytes), a large local queue and large fetches.
The data dir defaults to /dev/shm (tmpfs) where it exists: 500 MB a run at these rates otherwise
measures this VM's dirty-page writeback; --data-base puts it on a disk instead.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.broker_process import BrokerProcess  # noqa: E402

PRODUCER_OPTS = ("acks=1", "linger.ms=20", "batch.size=1000000", "batch.num.messages=1000000",
                 "queue.buffering.max.messages=5000000", "queue.buffering.max.kbytes=2097151")
CONSUMER_OPTS = ("fetch.queue.backoff.ms=1", "queued.max.messages.kbytes=1000000",
                 "fetch.message.max.bytes=10485760", "fetch.max.bytes=52428800")
# rdkafka_performance's summary lines ("% N messages produced ... in Tms: R msgs/s and M MB/s" and
# "% N messages (B bytes) consumed in Tms: R msgs/s (M MB/s)").
_PRODUCED = re.compile(r"(\d+) delivered .* in (\d+)ms: (\d+) msgs/s and ([\d.]+) MB/s")
_CONSUMED = re.compile(r"(\d+) messages \(\d+ bytes\) consumed in (\d+)ms: (\d+) msgs/s \(([\d.]+) MB/s\)")


def cpu_seconds(pid: int) -> float:
    """User+system CPU of a process so far (fields 14 and 15 of /proc/PID/stat, after the name)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    """User+system CPU of this process's finished children: the client runs' own CPU."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_client(args: list[str], pattern: re.Pattern[str], pid: int, records: int) -> tuple[float, float, float]:
    """Run one rdkafka_performance; returns (records/s, MB/s, broker CPU seconds).

    The client's CPU is printed too: on a 2-core machine client and broker share the cores, and
    which of the two is saturated decides what the rate measures."""
    c0, k0, t0 = cpu_seconds(pid), children_cpu(), time.perf_counter()
    res = subprocess.run(args, capture_output=True, text=True, timeout=600)
    cpu, wall = cpu_seconds(pid) - c0, time.perf_counter() - t0
    client = children_cpu() - k0
    m = pattern.search(res.stdout)
    if res.returncode != 0 or m is None or int(m.group(1)) < records:
        raise SystemExit(f"rdkafka_performance failed (exit {res.returncode}):\n{res.stdout[-1500:]}{res.stderr[-1500:]}")
    rate, mbs = float(m.group(3)), float(m.group(4))
    print(f"  {'produce' if pattern is _PRODUCED else 'consume'} {rate:>12,.0f} rec/s {mbs:8.1f} MB/s"
          f"   broker CPU {cpu:5.2f} s = {cpu / wall * 100:3.0f}% of a core over {wall:5.2f} s,"
          f" {cpu / records * 1e6:.3f} us/record; client CPU {client:5.2f} s", flush=True)
    return rate, mbs, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rdkafka-performance", default=os.environ.get("RDKAFKA_PERFORMANCE"))
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--data-base", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                    help="parent dir of the broker's data dir (default /dev/shm, a tmpfs)")
    ap.add_argument("--smoke", action="store_true", help="a tiny end-to-end run, for CI (its figures mean nothing)")
    args = ap.parse_args()
    if args.smoke:
        args.records, args.runs = 2_000, 1
    binary = args.rdkafka_performance
    if not binary:
        print("skipped: no rdkafka_performance binary (give --rdkafka-performance PATH or set RDKAFKA_PERFORMANCE;"
              " it is examples/rdkafka_performance of a librdkafka build)")
        return
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"{binary}: not an executable rdkafka_performance")
    with tempfile.TemporaryDirectory(dir=args.data_base) as d:
        broker = BrokerProcess(Path(d) / "data", {"num.partitions": "1"}).start()
        assert broker.proc is not None
        pid, boot = broker.proc.pid, broker.bootstrap
        print(f"broker {boot} (pid {pid}, data in {d}); {args.runs} runs of {args.records:,} records of"
              f" {args.value_bytes} B, 1 partition, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
        produced: list[tuple[float, float, float]] = []
        consumed: list[tuple[float, float, float]] = []
        try:
            for run in range(args.runs):
                topic = f"bench-rdk-{run}"
                common = ["-t", topic, "-p", "0", "-b", boot, "-c", str(args.records)]
                prod = [binary, "-P", *common, "-s", str(args.value_bytes), "-q"]
                for opt in PRODUCER_OPTS:
                    prod += ["-X", opt]
                cons = [binary, "-C", *common, "-o", "beginning", "-e", "-q"]
                for opt in CONSUMER_OPTS:
                    cons += ["-X", opt]
                print(f"run {run + 1}:")
                produced.append(run_client(prod, _PRODUCED, pid, args.records))
                consumed.append(run_client(cons, _CONSUMED, pid, args.records))
        finally:
            broker.stop()
    for label, runs in (("produce", produced), ("consume", consumed)):
        print(f"median {label}: {statistics.median(r[0] for r in runs):>12,.0f} rec/s"
              f" {statistics.median(r[1] for r in runs):8.1f} MB/s,"
              f" broker {statistics.median(r[2] for r in runs) / args.records * 1e6:.3f} us/record")


if __name__ == "__main__":
    main()
