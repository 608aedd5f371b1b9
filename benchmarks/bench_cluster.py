"""A 3-broker cluster on this machine: replicated produce throughput, end-to-end latency, leader failover
and controlled shutdown (issue 10's performance section). Run on demand; prints its figures.

    python benchmarks/bench_cluster.py [--records 2000000] [--rdkafka-performance PATH] [--skip ...]
    python benchmarks/bench_cluster.py --smoke   # tiny, for CI: it still runs end to end

Everything runs on loopback: ZooKeeper, three `gregor serve` processes (gregor.tools.local_cluster
with its documented timeouts: zookeeper.session.timeout.ms=4000) and the client, all sharing this
machine's cores, so the figures are what this box gives, not what three machines would.
- throughput: librdkafka's rdkafka_performance (built outside the repo; --rdkafka-performance) producing
  100-byte records to a topic with replication factor 3 and min.insync.replicas=2, acks=1 and acks=all;
- latency: a confluent-kafka producer (acks=all) at a fixed rate stamping each record with its send time,
  a consumer measuring arrival: p50/p99/max;
- failover: SIGKILL the leader of a partition while a producer sends to it; the time until a produce to
  that partition is acknowledged again (median and max of several kills);
- controlled shutdown: SIGTERM a broker leading about a third of 1,000 partitions; the time until no
  partition is led by it any more (as Metadata from another broker shows).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time

from gregor.tools.local_cluster import LocalCluster, create_topic

DEFAULT_PERF = "/work/ext/librdkafka/examples/rdkafka_performance"


def throughput(c: LocalCluster, perf: str, records: int, acks: str, partitions: int) -> float:
    topic = f"tp-acks{acks.replace('-', 'm')}-{int(time.time() * 1000) % 100000}"
    create_topic(c.bootstrap, topic, partitions, 3, {"min.insync.replicas": "2"})
    out = subprocess.run([perf, "-P", "-t", topic, "-b", c.bootstrap, "-s", "100", "-c", str(records), "-a", acks,
                          "-X", "linger.ms=5", "-X", "batch.size=1000000", "-q"],
                         capture_output=True, text=True, timeout=600).stdout
    m = re.search(r"(\d+) messages produced .* in (\d+)ms", out.replace("\n", " "))
    if m is None:
        raise RuntimeError(f"no figure from rdkafka_performance:\n{out[-2000:]}")
    return int(m.group(1)) / (int(m.group(2)) / 1000.0)


def latency(c: LocalCluster, rate: int, seconds: float) -> tuple[float, float, float]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = "latency"
    create_topic(c.bootstrap, topic, 6, 3, {"min.insync.replicas": "2"})
    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "lat", "fetch.wait.max.ms": 10,
                     "enable.auto.commit": False})
    cons.assign([TopicPartition(topic, p, 0) for p in range(6)])
    lat: list[float] = []
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            # consume(n, timeout) waits until n messages or the timeout: a long timeout adds up to that much
            # to every figure (an earlier version used 0.1 s and measured p50 61.6 ms).
            for m in cons.consume(10000, 0.002):
                if not m.error():
                    lat.append(time.time() - float(m.value()))

    th = threading.Thread(target=consume)
    th.start()
    time.sleep(1.0)
    prod = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 1})
    n = int(rate * seconds)
    t0 = time.monotonic()
    for i in range(n):
        ahead = t0 + i / rate - time.monotonic()
        if ahead > 0.001:
            time.sleep(ahead)
        prod.produce(topic, repr(time.time()).encode())
        prod.poll(0)
    prod.flush(30)
    time.sleep(1.0)
    stop.set()
    th.join()
    cons.close()
    lat.sort()
    return lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000, lat[-1] * 1000


def failover(c: LocalCluster, kills: int) -> list[float]:
    from confluent_kafka import Producer

    create_topic(c.bootstrap, "failover", 3, 3, {"min.insync.replicas": "2"})
    times = []
    for _ in range(kills):
        c.wait_until(lambda: len(c.isr_of("failover", 0)) == 3, 60, "a full ISR")
        prod = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 0,
                         "enable.idempotence": True, "retry.backoff.ms": 50, "retry.backoff.max.ms": 200})
        victim = c.leader_of("failover", 0)
        c.kill(victim)
        t0 = time.monotonic()
        done: list[object] = []
        while not done or done[-1] is not None:  # one record at a time: the first acknowledged ends the clock
            prod.produce("failover", b"x", partition=0, on_delivery=lambda err, msg, done=done: done.append(err))
            prod.flush(30)
        times.append(time.monotonic() - t0)
        prod.flush(5)
        c.start_broker(victim)
    return times


def controlled_shutdown(c: LocalCluster, partitions: int) -> float:
    create_topic(c.bootstrap, "cs", partitions, 3, {"min.insync.replicas": "2"})
    c.wait_until(lambda: all(len(p.isr) == 3 for p in c.metadata(["cs"]).topics["cs"].values()), 120,
                 "full ISRs")
    victim = 1
    led = sum(1 for p in c.metadata(["cs"]).topics["cs"].values() if p.leader == victim)
    c.brokers[victim].proc.send_signal(15)  # type: ignore[union-attr]
    t0 = time.monotonic()
    c.wait_until(lambda: all(p.leader != victim for p in c.metadata(["cs"], via=0).topics["cs"].values()),
                 30, "leaderships moved")
    took = time.monotonic() - t0
    print(f"controlled shutdown: {led} of {partitions} leaderships moved in {took * 1000:.0f} ms")
    c.brokers[victim].proc.wait(30)  # type: ignore[union-attr]
    c.start_broker(victim)
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--rdkafka-performance", default=DEFAULT_PERF)
    ap.add_argument("--rate", type=int, default=20_000, help="records/s for the latency run")
    ap.add_argument("--latency-seconds", type=float, default=10.0, help="how long the latency run produces")
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--cs-partitions", type=int, default=1000)
    ap.add_argument("--skip", nargs="*", default=[], choices=["throughput", "latency", "failover", "shutdown"])
    ap.add_argument("--smoke", action="store_true", help="a tiny end-to-end run, for CI (its figures mean nothing)")
    args = ap.parse_args()
    if args.smoke:
        args.records, args.partitions, args.rate, args.latency_seconds = 2_000, 2, 500, 1.0
        args.kills, args.cs_partitions = 1, 30
    with LocalCluster(3, overrides={"auto.create.topics.enable": "false"}) as c:
        print(f"cluster: {c.bootstrap} (ZooKeeper {c.zk_connect}), {os.cpu_count()} cores shared")
        if "throughput" not in args.skip:
            if not os.access(args.rdkafka_performance, os.X_OK):
                print(f"throughput: skipped, no rdkafka_performance at {args.rdkafka_performance}")
            else:
                for acks in ("1", "-1"):
                    rate = throughput(c, args.rdkafka_performance, args.records, acks, args.partitions)
                    print(f"throughput acks={'all' if acks == '-1' else acks}: {rate:,.0f} records/s "
                          f"(100 B, {args.partitions} partitions, RF 3, min.insync.replicas 2)")
        if "latency" not in args.skip:
            p50, p99, mx = latency(c, args.rate, args.latency_seconds)
            print(f"end-to-end latency at {args.rate:,}/s (acks=all): p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {mx:.1f} ms")
        if "failover" not in args.skip:
            times = failover(c, args.kills)
            print(f"leader failover (SIGKILL -> produce acknowledged): median {statistics.median(times):.2f} s, "
                  f"max {max(times):.2f} s over {len(times)} kills")
        if "shutdown" not in args.skip:
            controlled_shutdown(c, args.cs_partitions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
