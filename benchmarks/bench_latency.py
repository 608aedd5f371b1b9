"""End-to-end latency at fixed rates: p50, p99, p99.9 and max, per producer kind, on one broker and on three.

Usage: python benchmarks/bench_latency.py [--brokers 1 3] [--modes acks1 all idempotent transactional]
       [--rates 5000 20000 100000] [--seconds 30] [--warmup 3] [--repeat 1] [--partitions 1]
       [--value-bytes 100] [--commit-ms 100] [--soak] [--smoke]

For every (cluster, mode, rate): a fresh topic (replication factor = the cluster's size), a consumer
process assigned to it from offset 0, then a producer process sending `--value-bytes` records at the
fixed rate for `--warmup` + `--seconds` (only records sent after the warm-up are measured). Both are
confluent-kafka (librdkafka) with linger.ms=0 and, for the producer, at most `--max-in-flight` (5)
requests in flight, as Kafka's Java producer by default: librdkafka's own default (a million) sends
a Produce request for every record or two at linger.ms=0, which measures how many requests a second
the broker can take rather than its latency. The producer paces itself: it sleeps until the next
record is due and then sends every record that is due, so it keeps the rate without spinning on a
core the broker needs. Each record carries the CLOCK_MONOTONIC time (shared by every process of this
machine) at which it was handed to the client; the consumer takes the same clock when poll() hands
it a record, and the difference goes into a log-linear histogram (HDR-style: 64 linear sub-buckets
per power of two, under 1.6% error; see LatencyHistogram).

Modes: `acks1` (acks=1, not idempotent), `all` (acks=all, not idempotent), `idempotent`
(enable.idempotence=true), `transactional` (a transactional.id, committed every `--commit-ms`, and a
read_committed consumer). A read_committed consumer sees a record only once its transaction commits,
so a transactional record's send-to-receive time is mostly the commit interval (up to 100 ms by
design); the `transactional` row therefore reports the latency that commits add, from the moment the
producer calls commit_transaction() to the record's delivery (librdkafka flushes the transaction's
last records, ends it, the coordinator writes its markers and the LSO moves), and the `txn-send` row
the plain send-to-receive time.

Beside each run, what splits the record's trip: `ack p99`, the producer's own send-to-acknowledgement time
(its delivery reports); `brk p99<=`, the bucket bound under which 99% of the brokers' Produce requests
were answered by their own clocks (TotalTimeMs, from the frame read to the response handed to the
socket: what the broker's request handling adds, but not the time bytes wait in a socket for a loop
that is busy or off its CPU, which the loop lag shows); and `cli cpu`, the producer's and consumer's CPU
in cores (this machine's two cores are shared by every process of the run). Then the producer's worst
lag behind its schedule (a producer that cannot keep the rate makes the figures meaningless; such rows
are marked), the broker's event-loop stalls over 50 ms
counted by its `gregor_eventloop_lag_ms` histogram during the run (all brokers, via metrics.port), and
the 1-minute load average when the run ended (this machine has 2 cores shared with other work: read
figures with it; `--repeat N` runs each point N times and adds a median row).

`--soak` is the long run of the issue: one topic, compacted and deleted (keys cycle through 10,000
values), segments of 8 MiB rolling every few seconds, retention of 60 s checked every 5 s, the cleaner
on a 1 s backoff and checkpoints at their defaults, at 20,000 records/s for `--seconds` (600 for the
10 minutes); the figure to read is the broker's largest stall and the latency max.

`--smoke` runs every mode on one broker for 3 s at 2,000 records/s.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import statistics
import struct
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gregor.tools.local_broker import BrokerProcess  # noqa: E402
from gregor.tools.local_cluster import LocalCluster, create_topic  # noqa: E402

MODES = ("acks1", "all", "idempotent", "transactional")
# The record's head: send time (ns, CLOCK_MONOTONIC), transaction number, measured flag.
HEAD = struct.Struct(">qqB")
COMMIT_RING = 1 << 16  # commit times of the last 65,536 transactions (hours at 10 commits a second)
STALL_MS = 50


class LatencyHistogram:
    """Latencies in microseconds, log-linear: values below 128 us exact, then each power of two cut into 64
    linear sub-buckets (relative error under 1/64). A few hundred ints, whatever the count; mergeable."""

    SUB_BITS = 7
    HALF = 1 << (SUB_BITS - 1)

    def __init__(self) -> None:
        self.counts: list[int] = [0] * 2048
        self.total = 0
        self.max_us = 0
        self.min_us = 1 << 62

    @classmethod
    def index(cls, v: int) -> int:
        if v < (1 << cls.SUB_BITS):
            return v
        shift = v.bit_length() - cls.SUB_BITS
        return (1 << cls.SUB_BITS) + (shift - 1) * cls.HALF + (v >> shift) - cls.HALF

    @classmethod
    def upper(cls, i: int) -> int:
        """The largest value bucket i holds."""
        if i < (1 << cls.SUB_BITS):
            return i
        shift = (i - (1 << cls.SUB_BITS)) // cls.HALF + 1
        top = (i - (1 << cls.SUB_BITS)) % cls.HALF + cls.HALF
        return ((top + 1) << shift) - 1

    def record(self, v_us: int) -> None:
        v = max(v_us, 0)
        i = self.index(v)
        if i >= len(self.counts):
            self.counts.extend([0] * (i + 1 - len(self.counts)))
        self.counts[i] += 1
        self.total += 1
        if v > self.max_us:
            self.max_us = v
        if v < self.min_us:
            self.min_us = v

    def merge(self, other: LatencyHistogram) -> None:
        if len(other.counts) > len(self.counts):
            self.counts.extend([0] * (len(other.counts) - len(self.counts)))
        for i, n in enumerate(other.counts):
            self.counts[i] += n
        self.total += other.total
        self.max_us = max(self.max_us, other.max_us)
        self.min_us = min(self.min_us, other.min_us)

    def percentile(self, q: float) -> int:
        """The value at quantile q (0..1): the top of the bucket holding it, capped by the true max."""
        if self.total == 0:
            return 0
        rank = max(1, round(q * self.total + 0.5 - 1e-9)) if q < 1 else self.total
        rank = min(rank, self.total)
        acc = 0
        for i, n in enumerate(self.counts):
            acc += n
            if acc >= rank:
                return min(self.upper(i), self.max_us)
        return self.max_us

    def state(self) -> tuple[list[int], int, int, int]:
        return self.counts, self.total, self.max_us, self.min_us

    @classmethod
    def from_state(cls, st: tuple[list[int], int, int, int]) -> LatencyHistogram:
        h = cls()
        h.counts, h.total, h.max_us, h.min_us = list(st[0]), st[1], st[2], st[3]
        return h


# --- the two client processes ----------------------------------------------------------------------------

def producer_main(bs: str, topic: str, partitions: int, mode: str, rate: int, warmup_s: float, seconds: float,
                  value_bytes: int, commit_ms: int, keys: int, max_in_flight: int, ring: Any, out: Any) -> None:
    from confluent_kafka import Producer

    conf: dict[str, Any] = {"bootstrap.servers": bs, "linger.ms": 0, "log_level": 3,
                            "queue.buffering.max.messages": 2_000_000, "message.timeout.ms": 60_000,
                            "max.in.flight.requests.per.connection": max_in_flight}
    if mode == "acks1":
        conf.update({"acks": 1, "enable.idempotence": False})
    elif mode == "all":
        conf.update({"acks": "all", "enable.idempotence": False})
    else:
        conf.update({"enable.idempotence": True})
    transactional = mode == "transactional"
    if transactional:
        conf["transactional.id"] = f"{topic}-txn"
    errors = [0]
    ack_h = LatencyHistogram()  # send to delivery report: the producer's half of the record's trip
    unpack = HEAD.unpack_from

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors[0] += 1
            return
        stamp, _txn, flag = unpack(msg.value())
        if flag:
            ack_h.record((time.monotonic_ns() - stamp) // 1000)

    p = Producer(conf)
    if transactional:
        p.init_transactions(60)
        p.begin_transaction()
    pad = b"x" * max(value_bytes - HEAD.size, 0)
    commit_ns = commit_ms * 1_000_000
    t0 = time.monotonic_ns()
    cpu0 = time.process_time()
    measure_from = t0 + int(warmup_s * 1e9)
    end = measure_from + int(seconds * 1e9)
    ns_per = 1e9 / rate
    sent = measured = buffer_full = 0
    max_lag_ns = 0
    txn = 0
    txn_start = t0
    commit_times: list[int] = []
    pack = HEAD.pack
    produce = p.produce
    while True:
        now = time.monotonic_ns()
        if now >= end:
            break
        due = int((now - t0) / ns_per) + 1
        if due - sent > 1:
            max_lag_ns = max(max_lag_ns, now - (t0 + int(sent * ns_per)))
        while sent < due:
            stamp = time.monotonic_ns()
            flag = 1 if stamp >= measure_from else 0
            key = str(sent % keys).encode() if keys else None
            try:
                produce(topic, pack(stamp, txn, flag) + pad, key, partition=sent % partitions,
                        on_delivery=on_delivery)
            except BufferError:
                buffer_full += 1
                p.poll(0.001)
                continue
            sent += 1
            measured += flag
        p.poll(0)
        if transactional and now - txn_start >= commit_ns:
            c0 = time.monotonic_ns()
            ring[2 * (txn % COMMIT_RING)] = txn
            ring[2 * (txn % COMMIT_RING) + 1] = c0
            p.commit_transaction(60)
            commit_times.append(time.monotonic_ns() - c0)
            txn += 1
            p.begin_transaction()
            txn_start = time.monotonic_ns()
        ahead = t0 + sent * ns_per - time.monotonic_ns()
        if ahead > 0:
            time.sleep(ahead / 1e9)
    if transactional:
        ring[2 * (txn % COMMIT_RING)] = txn
        ring[2 * (txn % COMMIT_RING) + 1] = time.monotonic_ns()
        p.commit_transaction(60)
    cpu = (time.process_time() - cpu0) / ((time.monotonic_ns() - t0) / 1e9)
    left = p.flush(60)
    commit_times.sort()
    out.put(("producer", {"sent": sent, "measured": measured, "errors": errors[0] + left,
                          "buffer_full": buffer_full, "max_lag_ms": max_lag_ns / 1e6,
                          "commit_p50_ms": commit_times[len(commit_times) // 2] / 1e6 if commit_times else 0.0,
                          "commit_max_ms": commit_times[-1] / 1e6 if commit_times else 0.0,
                          "ack_h": ack_h.state(), "cpu": cpu}))


def consumer_main(bs: str, topic: str, partitions: int, read_committed: bool, ring: Any, expected: Any,
                  ready: Any, out: Any) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": f"{topic}-lat", "enable.auto.commit": False,
                  "isolation.level": "read_committed" if read_committed else "read_uncommitted",
                  "fetch.queue.backoff.ms": 1, "log_level": 3})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    sent_h, commit_h = LatencyHistogram(), LatencyHistogram()
    received = 0
    c.poll(0.5)  # connects and sends the first Fetch before the producer starts
    ready.set()
    cpu0, wall0, last_cpu, last_wall, measured = time.process_time(), time.monotonic(), 0.0, 0.0, False
    idle_since = time.monotonic()
    unpack = HEAD.unpack_from
    while True:
        m = c.poll(0.2)
        if m is None:
            if 0 <= expected.value <= received or time.monotonic() - idle_since > 30:
                break
            continue
        now = time.monotonic_ns()
        msgs = [m]
        msgs.extend(c.consume(10_000, 0))
        for m in msgs:
            if m.error() is not None:
                continue
            received += 1
            stamp, txn, flag = unpack(m.value())
            if not flag:
                continue
            sent_h.record((now - stamp) // 1000)
            measured = True
            if read_committed:
                slot = 2 * (txn % COMMIT_RING)
                if ring[slot] == txn:
                    commit_h.record((now - ring[slot + 1]) // 1000)
        if measured:  # the clock read once a poll, not once a record (the consumer's own hot loop)
            last_cpu, last_wall, measured = time.process_time(), time.monotonic(), False
        idle_since = time.monotonic()
    c.close()
    cpu = (last_cpu - cpu0) / (last_wall - wall0) if last_wall > wall0 else 0.0  # until the last measured record
    out.put(("consumer", {"received": received, "sent_h": sent_h.state(), "commit_h": commit_h.state(), "cpu": cpu}))


# --- one run -------------------------------------------------------------------------------------------

@dataclass
class Run:
    brokers: int
    mode: str
    rate: int
    producer: dict[str, Any]
    received: int
    hist: LatencyHistogram
    stalls: int  # loop lags over STALL_MS on the brokers during the run
    worst_lag_ms: float  # the bucket bound every loop lag of the run stayed under
    broker_cpu: float  # CPU seconds per second of the brokers together (1.0: one core)
    per_request: float  # records per Produce request
    load1: float
    gc: str  # ms in collections of generation 0/1/2 during the run, and (how many full ones)
    ack: LatencyHistogram  # the producer's send to delivery report (acks), measured records only
    broker_p99_ms: float  # the bucket bound under which 99% of the brokers' Produce times (TotalTimeMs) stayed
    client_cpu: float  # producer + consumer processes, cores
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Snapshot:
    """What the brokers said before or after a run: loop lag buckets (cumulative, {le: count}, per broker),
    Produce requests and records appended (all brokers), and their CPU time."""

    at: float
    lag: list[dict[float, int]]
    produce_requests: int
    records_in: int
    cpu_s: float
    gc_ms: list[float]  # time in garbage collections per generation (all brokers)
    gc_full: int  # generation-2 collections
    produce_ms: dict[float, int]  # the brokers' Produce TotalTimeMs histogram, cumulative {le: count}, summed


def snapshot(procs: list[BrokerProcess], urls: list[str]) -> Snapshot:
    lags, requests, records, cpu, gc_ms, gc_full = [], 0, 0, 0.0, [0.0, 0.0, 0.0], 0
    produce_ms: dict[float, int] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for proc, url in zip(procs, urls, strict=True):
        buckets: dict[float, int] = {}
        try:
            text = urllib.request.urlopen(url, timeout=5).read().decode()
        except OSError:
            text = ""
        for m in re.finditer(r'^gregor_eventloop_lag_ms_bucket\{le="([^"]+)"\} (\d+)', text, re.M):
            buckets[float(m.group(1))] = int(m.group(2))
        lags.append(buckets)
        for le, n in re.findall(r'^kafka_network_requestmetrics_totaltimems_bucket\{request="Produce",le="([^"]+)"\} (\d+)',
                                text, re.M):
            produce_ms[float(le)] = produce_ms.get(float(le), 0) + int(n)
        m2 = re.search(r'^kafka_network_requestmetrics_requests_total\{request="Produce"\} (\d+)', text, re.M)
        requests += int(m2.group(1)) if m2 else 0
        records += sum(int(x) for x in re.findall(
            r'^kafka_server_brokertopicmetrics_messagesin_total\{topic="lat-[^"]*"\} (\d+)', text, re.M))
        for g, x in re.findall(r'^gregor_gc_collection_ms_sum\{generation="(\d)"\} (\S+)', text, re.M):
            gc_ms[int(g)] += float(x)
        m3 = re.search(r'^gregor_gc_collection_ms_count\{generation="2"\} (\d+)', text, re.M)
        gc_full += int(m3.group(1)) if m3 else 0
        if proc.proc is not None:
            try:
                fields = Path(f"/proc/{proc.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
                cpu += (int(fields[11]) + int(fields[12])) / tick
            except OSError:
                pass
    return Snapshot(time.monotonic(), lags, requests, records, cpu, gc_ms, gc_full, produce_ms)


def bucket_quantile(before: dict[float, int], after: dict[float, int], q: float) -> float:
    """The smallest bucket bound (ms) under which a fraction q of the observations between two cumulative
    histogram snapshots fell (inf: above the last bound; 0: none observed)."""
    delta = sorted((le, n - before.get(le, 0)) for le, n in after.items())
    total = delta[-1][1] if delta else 0
    if total <= 0:
        return 0.0
    for le, n in delta:
        if n >= q * total:
            return le
    return float("inf")


def stalls_between(before: list[dict[float, int]], after: list[dict[float, int]]) -> tuple[int, float]:
    """Lags over STALL_MS between two scrapes (all brokers), and the bucket bound under which every lag of the
    run stayed (inf: above the largest bound)."""
    stalls, worst = 0, 0.0
    for b, a in zip(before, after, strict=True):
        if not a:
            continue
        delta = {le: a[le] - b.get(le, 0) for le in sorted(a)}
        total = delta[max(delta)]
        at_stall = max((n for le, n in delta.items() if le <= STALL_MS), default=0)
        stalls += total - at_stall
        worst = max(worst, bucket_quantile(b, a, 1.0))
    return stalls, worst


def run_one(bs: str, procs: list[BrokerProcess], metrics_urls: list[str], mode: str, rate: int, args: argparse.Namespace,
            topic_configs: dict[str, str], seq: int) -> Run:
    ctx = mp.get_context("spawn")
    n_brokers = len(procs)
    topic = f"lat-{n_brokers}b-{mode}-{rate}-{seq}"
    create_topic(bs, topic, args.partitions, n_brokers, topic_configs)
    transactional = mode == "transactional"
    ring = ctx.Array("q", 2 * COMMIT_RING, lock=False)
    for i in range(0, 2 * COMMIT_RING, 2):
        ring[i] = -1
    expected = ctx.Value("q", -1, lock=False)
    ready = ctx.Event()
    q = ctx.Queue()
    consumer = ctx.Process(target=consumer_main, args=(bs, topic, args.partitions, transactional, ring, expected,
                                                       ready, q), daemon=True)
    consumer.start()
    if not ready.wait(60):
        raise RuntimeError("the consumer did not start")
    before = snapshot(procs, metrics_urls)
    producer = ctx.Process(target=producer_main, args=(bs, topic, args.partitions, mode, rate, args.warmup,
                                                       args.seconds, args.value_bytes, args.commit_ms,
                                                       args.keys if args.soak else 0, args.max_in_flight, ring, q),
                           daemon=True)
    producer.start()
    results: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + args.warmup + args.seconds + 300
    while len(results) < 2 and time.monotonic() < deadline:
        try:
            kind, res = q.get(timeout=1)
        except Exception:  # queue.Empty: check the processes are alive
            if not producer.is_alive() and "producer" not in results:
                raise RuntimeError(f"the producer died (exit {producer.exitcode})") from None
            if not consumer.is_alive() and "consumer" not in results:
                raise RuntimeError(f"the consumer died (exit {consumer.exitcode})") from None
            continue
        results[kind] = res
        if kind == "producer":
            expected.value = res["sent"]
    producer.join(10)
    consumer.join(10)
    after = snapshot(procs, metrics_urls)
    stalls, worst = stalls_between(before.lag, after.lag)
    cpu = (after.cpu_s - before.cpu_s) / (after.at - before.at)
    per_request = (after.records_in - before.records_in) / max(after.produce_requests - before.produce_requests, 1)
    prod, cons = results["producer"], results["consumer"]
    hist = LatencyHistogram.from_state(cons["commit_h" if transactional else "sent_h"])
    run = Run(n_brokers, mode, rate, prod, cons["received"], hist, stalls, worst, cpu, per_request,
              os.getloadavg()[0], "/".join(f"{a - b:.0f}" for a, b in zip(after.gc_ms, before.gc_ms, strict=True))
              + f" ({after.gc_full - before.gc_full})",
              LatencyHistogram.from_state(prod["ack_h"]), bucket_quantile(before.produce_ms, after.produce_ms, 0.99),
              prod["cpu"] + cons["cpu"])
    if transactional:
        run.extra["txn-send"] = LatencyHistogram.from_state(cons["sent_h"])
    try:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bs, "log_level": 0})
        for f in admin.delete_topics([topic]).values():
            f.result(30)
    except Exception as e:  # a leftover topic only costs disk
        print(f"  (could not delete {topic}: {e})")
    return run


# --- reporting -----------------------------------------------------------------------------------------

HEADER = (f"{'brokers':>7} {'mode':<13} {'rate/s':>7} {'sent':>9} {'lost':>5} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'p99.9 ms':>8} {'max ms':>7} {'ack p99':>7} {'brk p99<=':>9} {'prod lag':>8} {'stalls>50':>9} {'loop<=ms':>8} "
          f"{'brk cpu':>7} {'cli cpu':>7} {'rec/req':>7} {'gc ms 0/1/2 (full)':>18} {'load1':>5}")


def fmt_ms(us: float) -> str:
    return f"{us / 1000:.2f}" if us < 100_000 else f"{us / 1000:.0f}"


def row(r: Run, mode: str | None = None, hist: LatencyHistogram | None = None) -> str:
    h = hist or r.hist
    lost = r.producer["measured"] - h.total if mode is None else r.producer["measured"] - h.total
    behind = r.producer["max_lag_ms"]
    lag = f"{behind:.0f}" + ("!" if behind > 100 else "")
    return (f"{r.brokers:>7} {mode or r.mode:<13} {r.rate:>7} {r.producer['sent']:>9} {lost:>5} "
            f"{fmt_ms(h.percentile(0.5)):>7} {fmt_ms(h.percentile(0.99)):>7} {fmt_ms(h.percentile(0.999)):>8} "
            f"{fmt_ms(h.max_us):>7} {fmt_ms(r.ack.percentile(0.99)):>7} {r.broker_p99_ms:>9g} {lag:>8} {r.stalls:>9} "
            f"{r.worst_lag_ms:>8g} {r.broker_cpu:>7.2f} {r.client_cpu:>7.2f} {r.per_request:>7.1f} {r.gc:>18} {r.load1:>5.2f}")


def median_row(runs: list[Run]) -> str:
    def med(f: Any) -> float:
        return statistics.median(f(r) for r in runs)

    r0 = runs[0]
    return (f"{r0.brokers:>7} {'median':<13} {r0.rate:>7} {'':>9} {'':>5} "
            f"{fmt_ms(med(lambda r: r.hist.percentile(0.5))):>7} {fmt_ms(med(lambda r: r.hist.percentile(0.99))):>7} "
            f"{fmt_ms(med(lambda r: r.hist.percentile(0.999))):>8} {fmt_ms(med(lambda r: r.hist.max_us)):>7} "
            f"{fmt_ms(med(lambda r: r.ack.percentile(0.99))):>7} {med(lambda r: r.broker_p99_ms):>9g} "
            f"{'':>8} {med(lambda r: r.stalls):>9.0f} {med(lambda r: r.worst_lag_ms):>8g} "
            f"{med(lambda r: r.broker_cpu):>7.2f} {med(lambda r: r.client_cpu):>7.2f} "
            f"{med(lambda r: r.per_request):>7.1f} {'':>18} {med(lambda r: r.load1):>5.2f}")


# --- the brokers ---------------------------------------------------------------------------------------

BROKER_OVERRIDES = {"metrics.port": "0", "auto.create.topics.enable": "false"}
SOAK_BROKER = {"log.retention.check.interval.ms": "5000", "log.cleaner.backoff.ms": "1000"}
SOAK_TOPIC = {"cleanup.policy": "compact,delete", "segment.bytes": str(8 << 20), "retention.ms": "60000",
              "min.cleanable.dirty.ratio": "0.1", "segment.ms": "30000"}
_METRICS = re.compile(r"metrics endpoint listening on (http://\S+/metrics)")


def metrics_url(proc: BrokerProcess) -> str:
    for line in proc.log_lines:
        m = _METRICS.search(line)
        if m:
            return m.group(1)
    raise RuntimeError("the broker logged no metrics endpoint")


class Brokers:
    """One BrokerProcess, or a LocalCluster of three with its own ZooKeeper."""

    def __init__(self, n: int, overrides: dict[str, str], base: Path) -> None:
        self.n = n
        self.cluster: LocalCluster | None = None
        self.single: BrokerProcess | None = None
        if n == 1:
            self.single = BrokerProcess(base / "broker", {
                **overrides, "offsets.topic.replication.factor": "1",
                "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1"})
        else:
            self.cluster = LocalCluster(n, base / "cluster", overrides)

    def __enter__(self) -> Brokers:
        if self.single is not None:
            self.single.start(60)
        else:
            assert self.cluster is not None
            self.cluster.start(120)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.single is not None:
            self.single.stop(30)
        if self.cluster is not None:
            self.cluster.close()

    @property
    def procs(self) -> list[BrokerProcess]:
        return [self.single] if self.single is not None else (self.cluster.brokers if self.cluster else [])

    @property
    def bootstrap(self) -> str:
        return self.single.bootstrap if self.single is not None else self.cluster.bootstrap  # type: ignore[union-attr]

    def warnings(self) -> list[str]:
        """The stall detector's warnings, each with its stack (the lines after it that start no new entry), and
        the collector schedule's freezes."""
        out: list[str] = []
        for i, p in enumerate(self.procs):
            inside = False
            for line in p.log_lines:
                if line.startswith("["):
                    inside = " WARNING gregor.loop" in line or "froze" in line
                    if inside:
                        out.append(f"broker {i}: {line}")
                elif inside:
                    out[-1] += "\n" + line
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", type=int, nargs="+", default=[1, 3], choices=[1, 3])
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--rates", type=int, nargs="+", default=[5_000, 20_000, 100_000])
    ap.add_argument("--seconds", type=float, default=30.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds sent before measuring")
    ap.add_argument("--repeat", type=int, default=1, help="runs per point (a median row when > 1)")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--commit-ms", type=int, default=100, help="transaction length of the transactional mode")
    ap.add_argument("--max-in-flight", type=int, default=5,
                    help="max.in.flight.requests.per.connection of the producer (5: the Java producer's default and "
                         "the idempotent producer's limit; librdkafka's own default, 1000000, sends a request per "
                         "record or two at linger.ms=0)")
    ap.add_argument("--keys", type=int, default=10_000, help="distinct keys in --soak")
    ap.add_argument("--soak", action="store_true", help="retention, compaction and log rolls on (see above)")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker property for every broker (repeatable)")
    ap.add_argument("--stall-log", action="store_true", help="print the brokers' stall warnings at the end")
    ap.add_argument("--smoke", action="store_true", help="every mode, one broker, 3 s at 2,000 records/s")
    args = ap.parse_args()
    if args.smoke:
        args.brokers, args.rates, args.seconds, args.warmup = [1], [2_000], 3.0, 1.0
    overrides = dict(BROKER_OVERRIDES)
    topic_configs: dict[str, str] = {}
    if args.soak:
        overrides.update(SOAK_BROKER)
        topic_configs.update(SOAK_TOPIC)
    for item in args.override:
        k, _, v = item.partition("=")
        overrides[k.strip()] = v.strip()
    print(f"{os.cpu_count()} cores, value {args.value_bytes} B, {args.partitions} partition(s), linger.ms=0, "
          f"max.in.flight {args.max_in_flight}, "
          f"{args.warmup:g} s warm-up + {args.seconds:g} s measured per run; load average at start "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("transactional: latency from commit_transaction() to delivery; txn-send: from the send (read_committed)")
    print(HEADER, flush=True)
    failed = False
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        for n in args.brokers:
            if n > 1:
                overrides_n = {**overrides, "min.insync.replicas": "2"}
            else:
                overrides_n = overrides
            with Brokers(n, overrides_n, Path(tmp) / f"{n}b") as brokers:
                urls = [metrics_url(p) for p in brokers.procs]
                seq = 0
                for mode in args.modes:
                    for rate in args.rates:
                        runs = []
                        for _ in range(args.repeat):
                            seq += 1
                            r = run_one(brokers.bootstrap, brokers.procs, urls, mode, rate, args, topic_configs, seq)
                            runs.append(r)
                            print(row(r), flush=True)
                            if "txn-send" in r.extra:
                                print(row(r, "txn-send", r.extra["txn-send"]), flush=True)
                            if r.hist.total == 0 or r.producer["errors"]:
                                failed = True
                        if len(runs) > 1:
                            print(median_row(runs), flush=True)
                stalls = brokers.warnings()
                if stalls:
                    print(f"{len(stalls)} stall warning(s) on {n} broker(s)" + (":" if args.stall_log else
                                                                                  " (--stall-log prints them)"))
                    if args.stall_log:
                        for line in stalls:
                            print("  " + line)
    print(f"load average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
