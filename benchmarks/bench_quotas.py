"""The cost of client quotas on produce throughput: no quota configured at all (the broker checks one
attribute per request) against quotas configured but not binding (every request is timed for
request_percentage and every Produce recorded for producer_byte_rate, with limits far above what is
sent).

Usage: python benchmarks/bench_quotas.py [--records 300000] [--value-bytes 100] [--rounds 2]
       [--batch-bytes 1000000] [--smoke (tiny, for CI: it still runs end to end)]

One broker process; the rounds alternate none / configured on the same broker (AlterClientQuotas
in between) so disk and machine load drift hit both alike. Producer: confluent-kafka in this
process, acks=1, linger.ms=5, batch.size --batch-bytes (small: many small requests, so the per-request
cost shows). Prints records/s and MB/s per run and the configured/none ratio of
the medians, and the broker's CPU time per record (steadier than wall time on a shared machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer  # noqa: E402

from tests.broker_process import BrokerProcess  # noqa: E402
from tests.security.quota_client import alter, entity  # noqa: E402

CLIENT_ID = "bench-quotas"


def cpu_seconds(pid: int) -> float:
    """The broker's user+system CPU time: less disturbed by other load on a shared machine than wall time."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(bootstrap: str, records: int, value: bytes, topic: str, batch_bytes: int) -> float:
    """Records/s of `records` produced and acknowledged."""
    p = Producer({"bootstrap.servers": bootstrap, "client.id": CLIENT_ID, "linger.ms": 5, "acks": 1,
                  "batch.size": batch_bytes, "queue.buffering.max.messages": 1_000_000})
    p.produce(topic, value)  # connect and create the topic outside the measurement
    p.flush(30)
    t0 = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.005)
        p.poll(0)
    if p.flush(120) != 0:
        raise SystemExit("produce did not complete")
    return records / (time.perf_counter() - t0)


def per_request_cost_us(n: int = 100_000) -> float:
    """The quota work one Produce request adds, measured in-process on the real functions
    (producer_byte_rate recording, request_percentage timing and recording): the end-to-end runs
    on a shared machine vary more than this cost."""
    from types import SimpleNamespace

    from gregor.api import throttling
    from gregor.security.quotas import DEFAULT, ClientQuotaManager

    m = ClientQuotaManager()
    m.load([((None, CLIENT_ID), {"producer_byte_rate": "1e12", "request_percentage": "1e6"}),
            ((None, DEFAULT), {"consumer_byte_rate": "1e12"})])
    from gregor.security.principal import ANONYMOUS

    conn = SimpleNamespace(quota_client=None, throttle=lambda ms: None, principal=ANONYMOUS)
    ctx: Any = SimpleNamespace(connection=conn,
                               services=SimpleNamespace(quotas=m), header=SimpleNamespace(client_id=CLIENT_ID))
    req = SimpleNamespace(topic_data=[SimpleNamespace(partition_data=[SimpleNamespace(records=b"x" * 2000)])])
    resp = {"throttle_time_ms": 0}
    t = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter_ns()
        throttling.after_request(ctx, 0, req, resp, time.perf_counter_ns() - t0)
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch-bytes", type=int, default=1_000_000,
                    help="the producer's batch.size: small batches make many small requests, the per-request cost")
    ap.add_argument("--smoke", action="store_true", help="a tiny end-to-end run, for CI (its figures mean nothing)")
    args = ap.parse_args()
    if args.smoke:
        args.records, args.rounds = 2_000, 1
    value = b"v" * args.value_bytes
    quotas = [(entity(client=CLIENT_ID), {"producer_byte_rate": 1e12, "request_percentage": 1e6}),
              (entity(client=None), {"consumer_byte_rate": 1e12})]
    off = [(e, dict.fromkeys(ops)) for e, ops in quotas]
    results: dict[str, list[float]] = {"none": [], "configured": []}
    cpu: dict[str, list[float]] = {"none": [], "configured": []}  # broker CPU microseconds per record
    with tempfile.TemporaryDirectory() as d:
        broker = BrokerProcess(Path(d)).start()
        try:
            for r in range(args.rounds):
                for mode in ("none", "configured"):
                    alter(broker.bootstrap, quotas if mode == "configured" else off)
                    time.sleep(0.2)
                    assert broker.proc is not None
                    c0 = cpu_seconds(broker.proc.pid)
                    rate = produce(broker.bootstrap, args.records, value, f"bench-quotas-{r}-{mode}",
                                   args.batch_bytes)
                    us = (cpu_seconds(broker.proc.pid) - c0) / args.records * 1e6
                    results[mode].append(rate)
                    cpu[mode].append(us)
                    print(f"round {r} {mode:>10}: {rate:10.0f} records/s  {rate * len(value) / 1e6:6.1f} MB/s  "
                          f"broker {us:.2f} CPU us/record", flush=True)
        finally:
            broker.kill()
    none, conf = statistics.median(results["none"]), statistics.median(results["configured"])
    print(f"median: none {none:.0f} records/s, configured {conf:.0f} records/s: {conf / none:.3f} of none")
    cn, cc = statistics.median(cpu["none"]), statistics.median(cpu["configured"])
    ratio = f"{cc / cn:.3f} of none" if cn > 0 else "no ratio (no broker CPU measured at this size)"
    print(f"median broker CPU per record: none {cn:.2f} us, configured {cc:.2f} us: {ratio}")
    print(f"quota work per Produce request (in-process): {per_request_cost_us():.2f} us")


if __name__ == "__main__":
    main()
