"""TLS cost: produce and consume throughput over an SSL listener relative to PLAINTEXT, on one broker.

Usage: python benchmarks/bench_tls.py [--records 300000] [--value-bytes 1024] [--runs 3]
       python benchmarks/bench_tls.py --smoke   # tiny, for CI: it still runs end to end

One broker with a PLAINTEXT and an SSL listener (certificates made with openssl in a temp dir). Each run
produces --records records (acks=1, confluent-kafka, in a child process so the client has its own
interpreter) to a fresh 1-partition topic through one listener, then consumes them from the beginning
through the same listener; PLAINTEXT and SSL alternate, so machine noise hits both. Printed per run:
records/s and MB/s of produce and consume, and the broker's CPU seconds per GB moved; then the medians
and SSL as a share of PLAINTEXT. The data dir is on /dev/shm where it exists (disk writeback would
dominate otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_rdkafka import cpu_seconds  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402
from tests.security.certs import make_pki  # noqa: E402

CLIENT = r'''
import json, sys, time
from confluent_kafka import Consumer, Producer
conf = json.loads(sys.argv[1]); mode = sys.argv[2]; topic = sys.argv[3]; n = int(sys.argv[4]); size = int(sys.argv[5])
if mode == "produce":
    p = Producer({**conf, "acks": "1", "linger.ms": 20, "batch.size": 1000000, "queue.buffering.max.messages": 2000000,
                  "queue.buffering.max.kbytes": 2097151})
    value = b"v" * size
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    print(json.dumps({"seconds": time.perf_counter() - t0}))
else:
    c = Consumer({**conf, "group.id": "bench", "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "fetch.max.bytes": 52428800, "queued.max.messages.kbytes": 1000000, "fetch.queue.backoff.ms": 1})
    c.subscribe([topic])
    got = 0
    t0 = None
    while got < n:
        for m in c.consume(10000, 1.0):
            if m.error() is None:
                if t0 is None:
                    t0 = time.perf_counter()
                got += 1
    print(json.dumps({"seconds": time.perf_counter() - t0}))
    c.close()
'''


def run_client(conf: dict[str, str], mode: str, topic: str, n: int, size: int) -> float:
    out = subprocess.run([sys.executable, "-c", CLIENT, json.dumps(conf), mode, topic, str(n), str(size)],
                         check=True, capture_output=True, text=True, timeout=600).stdout
    return float(json.loads(out.strip().splitlines()[-1])["seconds"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="a tiny end-to-end run, for CI (its figures mean nothing)")
    args = ap.parse_args()
    if args.smoke:
        args.records, args.runs = 500, 1
    base = Path(tempfile.mkdtemp(prefix="bench-tls-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    pki = make_pki(base / "pki")
    broker = BrokerProcess(base / "data", {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "ssl.keystore.location": pki.keystore("broker"),
        "ssl.truststore.location": pki.ca, "num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}).start()
    confs = {"PLAINTEXT": {"bootstrap.servers": broker.bootstrap_of("PLAINTEXT")},
             "SSL": {"bootstrap.servers": broker.bootstrap_of("SSL"), "security.protocol": "SSL",
                     "ssl.ca.location": pki.ca}}
    mb = args.records * args.value_bytes / 1e6
    results: dict[str, list[tuple[float, float, float]]] = {"PLAINTEXT": [], "SSL": []}
    print(f"{args.records:,} records of {args.value_bytes} bytes ({mb:.0f} MB) per run, 1 partition, acks=1")
    try:
        for run in range(args.runs):
            for listener, conf in confs.items():
                topic = f"bench-{listener.lower()}-{run}"
                cpu0 = cpu_seconds(broker.proc.pid)  # type: ignore[union-attr]
                ps = run_client(conf, "produce", topic, args.records, args.value_bytes)
                cs = run_client(conf, "consume", topic, args.records, args.value_bytes)
                cpu = cpu_seconds(broker.proc.pid) - cpu0  # type: ignore[union-attr]
                results[listener].append((args.records / ps, args.records / cs, cpu / (2 * mb / 1000)))
                print(f"run {run} {listener:<9} produce {args.records / ps:>9,.0f} rec/s ({mb / ps:6.1f} MB/s)  "
                      f"consume {args.records / cs:>9,.0f} rec/s ({mb / cs:6.1f} MB/s)  "
                      f"broker CPU {cpu / (2 * mb / 1000):5.1f} s/GB", flush=True)
                time.sleep(1)
    finally:
        broker.kill()
    med = {k: tuple(statistics.median(r[i] for r in v) for i in range(3)) for k, v in results.items()}
    for k, (p, c, cpu) in med.items():
        print(f"median {k:<9} produce {p:>9,.0f} rec/s  consume {c:>9,.0f} rec/s  broker CPU {cpu:5.1f} s/GB")
    p_share = med["SSL"][0] / med["PLAINTEXT"][0]
    c_share = med["SSL"][1] / med["PLAINTEXT"][1]
    print(f"SSL / PLAINTEXT: produce {p_share:.0%}, consume {c_share:.0%} (target: at least 60%)")


if __name__ == "__main__":
    main()
