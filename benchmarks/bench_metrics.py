"""What the Prometheus metrics cost: produce and fetch throughput with metrics.port set vs unset.

Usage: python benchmarks/bench_metrics.py [--records 1000000] [--rounds 4] [--value-bytes 100]
       [--batch-records 10000]  (--records 20000 --batch-records 1: one record a Produce request)
       [--smoke]  (tiny, for CI: it still runs end to end)
       [--one on|off]  (one broker; for pairs: farm-bench --vs "python benchmarks/bench_metrics.py --one off ..."
                        -- python benchmarks/bench_metrics.py --one on ...)

Two brokers run side by side, one with the endpoint on (metrics.port=0) and one without; each round
produces --records records (confluent-kafka, acks=1, linger.ms 5) to a fresh topic on each and consumes
them back, the order of the two alternating from round to round so a machine that speeds up or slows
down favours neither. Prints each run's records/s and the broker's CPU microseconds per record (the
cost of the hot path: on a shared machine the steadier figure of the two), then the medians and the
ratio on/off. The broker with metrics is scraped during the last round's produce and at the end: the
scraped bytes-in must match the record batch bytes on disk within 1% (the issue's acceptance line).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path
from tempfile import TemporaryDirectory

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from benchmarks.bench_throughput import Measure, produce_n  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402


def produce(b: BrokerProcess, topic: str, n: int, value: bytes, batch_records: int) -> Measure:
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "1", "linger.ms": 5, "batch.size": 1_000_000,
                  "batch.num.messages": batch_records,
                  "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 65536})
    assert b.proc is not None
    with Measure(b.proc.pid) as m:
        produce_n(p, topic, value, n)
        assert p.flush(120) == 0
    return m


def consume(b: BrokerProcess, topic: str, n: int) -> Measure:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "bench-metrics", "enable.auto.commit": False,
                  "fetch.queue.backoff.ms": 1, "queued.min.messages": 1_000_000})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = 0
    assert b.proc is not None
    with Measure(b.proc.pid) as m:
        while got < n:
            got += sum(1 for msg in c.consume(10000, 1.0) if msg.error() is None)
    c.close()
    return m


def scrape_bytes_in(url: str, topic: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    m = re.search(rf'^kafka_server_brokertopicmetrics_bytesin_total\{{topic="{re.escape(topic)}"\}} (\S+)$', text,
                  re.M)
    return float(m.group(1)) if m else 0.0


def _scraper(url: str, topic: str, stop: threading.Event, out: list[float]) -> None:
    while not stop.wait(0.5):
        out.append(scrape_bytes_in(url, topic))


def hook_cost_ns(n: int = 200_000) -> float:
    """ns of the hot-path hooks one Produce request pays with metrics on (four clock reads, the append and
    request counters with a one-partition response's error walk), measured in process."""
    from gregor.metrics.registry import BrokerMetrics
    m = BrokerMetrics()
    body = {"responses": [{"name": "t", "partition_responses": [{"index": 0, "error_code": 0, "base_offset": 5}]}],
            "throttle_time_ms": 0}
    clock = time.perf_counter_ns
    t0 = clock()
    for _ in range(n):
        a = clock()
        b = clock()
        m.record_append("t", 16384, 100)
        c = clock()
        m.record_request(0, body, b - a, c - b, 0, clock() - c)
    return (clock() - t0) / n


def one(metrics_on: bool, n: int, value: bytes, batch_records: int) -> None:
    with TemporaryDirectory() as tmp:
        b = BrokerProcess(Path(tmp), {"metrics.port": "0"} if metrics_on else {}).start()
        try:
            m = produce(b, "one", n, value, batch_records)
            print(f"metrics {'on' if metrics_on else 'off'}: {n / m.wall:,.0f} rec/s, broker "
                  f"{m.cpu / n * 1e6:.3f} us CPU/record")
        finally:
            b.kill()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--one", choices=("on", "off"),
                    help="one broker only, metrics on or off: produce --records and print its CPU per record, for "
                         "farm-bench --vs pairs (two brokers side by side skew each other on a 2-core machine)")
    ap.add_argument("--batch-records", type=int, default=10000,
                    help="the producer's batch.num.messages: 1 makes a Produce request a record (the per-request cost)")
    ap.add_argument("--smoke", action="store_true", help="a tiny end-to-end run, for CI (its figures mean nothing)")
    a = ap.parse_args()
    if a.smoke:
        a.records, a.rounds = 2_000, 1
    value = b"x" * a.value_bytes
    if a.one:
        one(a.one == "on", a.records, value, a.batch_records)
        return
    print(f"hot-path hooks with metrics on: {hook_cost_ns():.0f} ns per Produce request (in process)")
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}  # (variant, op) -> [(rec/s, CPU us/rec)]
    with TemporaryDirectory() as tmp:
        brokers = {
            "on": BrokerProcess(Path(tmp) / "on", {"metrics.port": "0"}).start(),
            "off": BrokerProcess(Path(tmp) / "off").start(),
        }
        try:
            url = re.findall(r"metrics endpoint listening on (http://\S+/metrics)", brokers["on"].log_text())[-1]
            for r in range(a.rounds):
                order = ["on", "off"] if r % 2 == 0 else ["off", "on"]
                for variant in order:
                    b = brokers[variant]
                    topic = f"bench-{r}"
                    admin = AdminClient({"bootstrap.servers": b.bootstrap})
                    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
                    scrapes: list[float] = []
                    stop = threading.Event()
                    if variant == "on":  # scraped while it runs, as Prometheus would (every 0.5 s here)
                        threading.Thread(target=_scraper, args=(url, topic, stop, scrapes), daemon=True).start()
                    for op in ("produce", "consume"):
                        m = produce(b, topic, a.records, value, a.batch_records) if op == "produce" else consume(b, topic, a.records)
                        rate, cost = a.records / m.wall, m.cpu / a.records * 1e6
                        results.setdefault((variant, op), []).append((rate, cost))
                        print(f"round {r} metrics {variant:<3} {op:<8} {rate:>10,.0f} rec/s "
                              f"{a.records * a.value_bytes / m.wall / 1e6:>6.1f} MB/s  broker {cost:6.3f} us CPU/record"
                              f"  (waited for a CPU: broker {m.wait[0] / m.wall * 100:.0f}%)")
                    stop.set()
                    if variant == "on":
                        d = Path(tmp) / "on" / f"{topic}-0"
                        on_disk = sum(f.stat().st_size for f in d.iterdir() if f.suffix == ".log")
                        got = scrape_bytes_in(url, topic)
                        print(f"  scraped bytes in {got:,.0f} vs {on_disk:,} record batch bytes on disk "
                              f"({(got - on_disk) / on_disk * 100:+.2f}%), {len(scrapes)} scrapes during the run")
                        assert abs(got - on_disk) <= 0.01 * on_disk
        finally:
            for b in brokers.values():
                b.kill()
    print()
    for op in ("produce", "consume"):
        on, off = results[("on", op)], results[("off", op)]
        rate_on, rate_off = statistics.median(x[0] for x in on), statistics.median(x[0] for x in off)
        cost_on, cost_off = statistics.median(x[1] for x in on), statistics.median(x[1] for x in off)
        print(f"{op:<8} median rec/s on {rate_on:>10,.0f}  off {rate_off:>10,.0f}  on/off {rate_on / rate_off:6.3f}"
              f"   broker CPU us/record on {cost_on:.3f} off {cost_off:.3f}  on/off {cost_on / max(cost_off, 1e-9):6.3f}")


if __name__ == "__main__":
    main()
