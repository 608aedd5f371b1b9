"""Benchmark of the metadata quorum (gregor.raft): three runner processes on loopback ports.

    PYTHONPATH=. python benchmarks/bench_raft.py [--smoke] [--count 20000] [--size 100] [--elections 5]
                                    [--linger-ms 25,0] [--short-timeouts]

For each append linger (controller.quorum.append.linger.ms; Kafka's default is 25 ms):

- start: from starting three fresh processes to a leader all agree on;
- commit latency: appends made one at a time inside the leader, each waited for until committed (on a
  majority, flushed, and handed to the leader's listener): p50 / p99 / max;
- client latency: the same through the runner's control port from this process (JSON over TCP);
- throughput: appends of `--size`-byte records with 500 in flight, records committed per second;
- failover: the leader is killed (SIGKILL) `--elections` times; the time until the other two agree on a
  new leader, and until an append commits there. The killed node is restarted and caught up between runs.

With --short-timeouts the failover is also measured with election / fetch timeouts of 200 / 400 ms
(Kafka's defaults are 1000 / 2000). Every fsync is real (the log directory is under --dir, by default
a temporary directory on the machine's disk).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: keep PYTHONPATH's gregor first, then this checkout's
    sys.path.append(str(Path(__file__).resolve().parent.parent))

from gregor.raft.runner import QuorumProcess
from gregor.tools.ports import pick_ports  # noqa: E402


class Quorum:
    def __init__(self, root: str, overrides: dict[str, str]) -> None:
        ports = pick_ports(6)
        voters = ",".join(f"{i}@127.0.0.1:{ports[i - 1]}" for i in (1, 2, 3))
        self.procs = {i: QuorumProcess(i, voters, os.path.join(root, f"node-{i}"), ports[2 + i], overrides)
                      for i in (1, 2, 3)}

    def start(self) -> float:
        t0 = time.perf_counter()
        for p in self.procs.values():
            p.launch()
        for p in self.procs.values():
            p.wait_ready()
        self.leader(30.0)
        return time.perf_counter() - t0

    def status(self, n: int) -> dict[str, Any] | None:
        p = self.procs[n]
        if not p.alive:
            return None
        try:
            return p.request({"op": "status"}, 2.0)
        except OSError:
            return None

    def leader(self, timeout_s: float, exclude: int | None = None) -> int:
        deadline = time.perf_counter() + timeout_s
        while time.perf_counter() < deadline:
            st = {n: self.status(n) for n in self.procs if n != exclude}
            live = [s for s in st.values() if s is not None]
            leaders = [s["node_id"] for s in live if s["role"] == "Leader"]
            if len(leaders) == 1 and all(s["leader_id"] == leaders[0] for s in live):
                return leaders[0]
            time.sleep(0.005)
        raise TimeoutError(f"no leader within {timeout_s} s")

    def stop(self) -> None:
        for p in self.procs.values():
            p.stop()


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * q))]


def client_latency(q: Quorum, leader: int, n: int) -> list[float]:
    out = []
    p = q.procs[leader]
    for i in range(n):
        t0 = time.perf_counter()
        r = p.request({"op": "append", "value": f"c{i}"})
        if not r.get("ok"):
            raise RuntimeError(r)
        out.append(1000 * (time.perf_counter() - t0))
    return out


def failovers(q: Quorum, runs: int) -> list[tuple[float, float]]:
    out = []
    for _ in range(runs):
        leader = q.leader(30.0)
        t0 = time.perf_counter()
        q.procs[leader].signal(signal.SIGKILL)
        q.procs[leader].proc.wait()  # type: ignore[union-attr]
        new = q.leader(30.0, exclude=leader)
        elected = time.perf_counter() - t0
        while True:
            r = q.procs[new].request({"op": "append", "value": "after-failover"})
            if r.get("ok"):
                break
            time.sleep(0.005)
        out.append((elected, time.perf_counter() - t0))
        q.procs[leader].start()
        target = q.status(new)["next_offset"]  # type: ignore[index]
        deadline = time.perf_counter() + 60
        while time.perf_counter() < deadline:
            st = q.status(leader)
            if st is not None and st["next_offset"] >= target:
                break
            time.sleep(0.05)
    return out


def run(root: str, linger: int, args: argparse.Namespace, timeouts: dict[str, str] | None = None) -> None:
    overrides = {"controller.quorum.append.linger.ms": str(linger),
                 "metadata.log.max.record.bytes.between.snapshots": str(64 << 20)}
    overrides.update(timeouts or {})
    d = tempfile.mkdtemp(dir=root)
    q = Quorum(d, overrides)
    try:
        started = q.start()
        label = f"linger {linger} ms" + (", short timeouts" if timeouts else "")
        print(f"[{label}] start of a 3-node quorum from nothing: {started:.2f} s (three processes launched "
              "together, until all agree on a leader; Python's start is most of it)")
        leader = q.leader(10)
        if not timeouts:
            one = q.procs[leader].request({"op": "bench", "count": args.latency_count, "size": args.size,
                                           "concurrency": 1}, 600)
            print(f"[{label}] commit latency, one append at a time ({one['count']} x {args.size} B): "
                  f"p50 {one['p50_ms']:.2f} ms, p99 {one['p99_ms']:.2f} ms, max {one['max_ms']:.2f} ms")
            lat = client_latency(q, leader, args.latency_count)
            print(f"[{label}] client latency through the control port: p50 {pct(lat, 0.5):.2f} ms, "
                  f"p99 {pct(lat, 0.99):.2f} ms")
            tp = q.procs[leader].request({"op": "bench", "count": args.count, "size": args.size,
                                          "concurrency": 500}, 600)
            print(f"[{label}] throughput, 500 appends in flight: {tp['rate']:,.0f} records/s "
                  f"({tp['rate'] * args.size / 1e6:.2f} MB/s of values), commit p50 {tp['p50_ms']:.1f} ms, "
                  f"p99 {tp['p99_ms']:.1f} ms")
        if args.elections:
            fo = failovers(q, args.elections)
            el = [a for a, _ in fo]
            cm = [b for _, b in fo]
            print(f"[{label}] failover after SIGKILL of the leader, {len(fo)} runs: new leader in "
                  f"{', '.join(f'{x:.2f}' for x in el)} s (median {statistics.median(el):.2f}); first commit "
                  f"after {statistics.median(cm):.2f} s (median)")
    finally:
        q.stop()
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="a tiny run for CI")
    p.add_argument("--count", type=int, default=20000)
    p.add_argument("--latency-count", type=int, default=500)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--elections", type=int, default=5)
    p.add_argument("--linger-ms", default="25,0")
    p.add_argument("--short-timeouts", action="store_true")
    p.add_argument("--dir", default=None)
    args = p.parse_args()
    if args.smoke:
        args.count, args.latency_count, args.elections, args.linger_ms = 500, 20, 1, "25"
    root = args.dir or tempfile.mkdtemp(prefix="bench-raft-")
    print(f"machine: {os.cpu_count()} cores; log dirs under {root}")
    try:
        for linger in (int(x) for x in args.linger_ms.split(",")):
            run(root, linger, args)
        if args.short_timeouts:
            run(root, 25, argparse.Namespace(**{**vars(args), "count": 0}), {
                "controller.quorum.election.timeout.ms": "200", "controller.quorum.fetch.timeout.ms": "400"})
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
