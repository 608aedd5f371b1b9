"""Produce and consume throughput against a real broker process, with the broker's CPU share.

Usage: python benchmarks/bench_throughput.py [--records N] [--partitions 1 8] [--value-bytes 100]
       [--compression none|gzip|snappy|lz4|zstd] [--acks all|1] [--rdkafka-performance PATH] [--no-baseline]
       [--idempotence] [--authorizer] [--smoke (tiny, for CI: it still runs end to end)]

Clients: confluent-kafka (librdkafka) in this process, and optionally librdkafka's C
rdkafka_performance example (built outside this repo) so the Python client is not the
bottleneck. 100-byte values (--value-bytes; random hex, so about 2:1 compressible), acks=1 (--acks), producer
compression --compression. --idempotence turns on the idempotent producer (which needs
acks=all: compare it with a plain run at --acks all). Prints records/s and MB/s for each run and the
broker's CPU use (user+system seconds / wall seconds) while it ran, and this process's (the
client's), so it shows which side is the limit, and how long each waited for a CPU held by
other processes (on a shared machine the figures are only as good as that wait is small).

Before each produce run it writes the same volume (records x value bytes) sequentially into
the broker's data directory's filesystem - buffered 1 MiB writes, fsync at the end, as `dd
conv=fsync` does - and prints that rate and the produce rate as a share of it: disk and page
cache speed vary several-fold between machines of the same kind and from hour to hour, so
large-message produce throughput is judged against the disk measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.broker_process import BrokerProcess  # noqa: E402

VALUE = b"x" * 100


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Measure:
    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __enter__(self) -> Measure:
        self.t0 = time.perf_counter()
        self.c0 = cpu_seconds(self.pid)
        self.own0 = _own_cpu_seconds()
        self.wait0 = run_queue_wait_seconds(self.pid), run_queue_wait_seconds(os.getpid())
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.t0
        self.cpu = cpu_seconds(self.pid) - self.c0
        self.own = _own_cpu_seconds() - self.own0
        self.wait = (run_queue_wait_seconds(self.pid) - self.wait0[0], run_queue_wait_seconds(os.getpid()) - self.wait0[1])


def run_queue_wait_seconds(pid: int) -> float:
    """Seconds the threads of `pid` were ready to run but waited for a CPU (schedstat's run delay): on
    a shared machine this says how much of a run's time was lost to other processes."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[1])
        except (OSError, IndexError, ValueError):
            pass  # a thread that ended meanwhile
    return total / 1e9


def _own_cpu_seconds() -> float:
    """This process's CPU (all threads: the Python client and librdkafka's), to show which side is the limit."""
    t = os.times()
    return t.user + t.system


def report(label: str, n: int, m: Measure, value_bytes: int = 100) -> None:
    print(f"{label:<48} {n / m.wall:>12,.0f} rec/s {n * value_bytes / m.wall / 1e6:>8.1f} MB/s"
          f"   broker CPU {m.cpu / m.wall * 100:5.1f}%, client {m.own / m.wall * 100:5.1f}% of one core"
          f" ({m.wall:.2f} s; waited for a CPU: broker {m.wait[0] / m.wall * 100:.0f}%,"
          f" client {m.wait[1] / m.wall * 100:.0f}%)")


def sequential_write(directory: Path, nbytes: int, chunk_bytes: int = 1 << 20) -> float:
    """MB/s of a buffered sequential write of `nbytes` into `directory`, fsync included (the
    file is removed after), so the dirty pages it made do not slow the run that follows."""
    chunk = os.urandom(chunk_bytes)
    path = directory / "sequential-write-baseline.tmp"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        t0 = time.perf_counter()
        left = nbytes
        while left > 0:
            left -= os.write(fd, chunk if left >= chunk_bytes else chunk[:left])
        os.fsync(fd)
        wall = time.perf_counter() - t0
    finally:
        os.close(fd)
        path.unlink()
    mb_s = nbytes / wall / 1e6
    print(f"{'sequential write, same volume, same filesystem':<48} {mb_s:>27.1f} MB/s"
          f"   ({nbytes / 1e6:,.0f} MB in {wall:.2f} s, fsync at end)")
    return mb_s


def produce_n(p: Producer, topic: str, value: bytes, n: int) -> None:
    """Hand `n` records to the producer as fast as its local queue takes them."""
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:  # the local queue is full: serve delivery reports, then retry
                p.poll(0.005)


def python_produce(bootstrap: str, topic: str, n: int, pid: int, value: bytes = VALUE,
                   compression: str = "none", acks: str = "1", baseline_mb_s: float | None = None,
                   idempotence: bool = False) -> None:
    # A 64 MiB local queue, as a user tuning for throughput would keep it: with room for the whole
    # run (it was 2 GB), every 10 KiB value landed in fresh memory and the client spent more CPU in
    # page faults (system time) than the broker spent on the request; bounded, librdkafka reuses
    # freed buffers (client CPU ~1.26 s -> ~0.7 s for 1 GB at 10 KiB, measured).
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.size": 1_000_000,
                  "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 65536,
                  "compression.type": compression, "enable.idempotence": idempotence})
    # One message first, outside the measure: an idempotent librdkafka producer waits for its producer
    # id on a 500 ms timer when it starts (client-side), which is not the throughput being measured.
    p.produce(topic, value)
    p.flush(30)
    with Measure(pid) as m:
        produce_n(p, topic, value, n)
        p.flush(120)
    report(f"produce confluent-kafka {topic} ({compression}, acks={acks}{', idempotent' if idempotence else ''})",
           n, m, len(value))
    if baseline_mb_s:
        print(f"{'  produce / sequential write':<48} {n * len(value) / m.wall / 1e6 / baseline_mb_s * 100:>27.0f} %")


def python_consume(bootstrap: str, topic: str, partitions: int, n: int, pid: int, value_bytes: int = 100) -> None:
    # librdkafka backs off fetching for fetch.queue.backoff.ms (1 s) whenever its local queue is over
    # queued.min.messages or queued.max.messages.kbytes (64 MiB); at these rates that idles the
    # consumer most of the time, so keep it short, as a user tuning for throughput would.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.queue.backoff.ms": 1, "queued.min.messages": 1_000_000})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = 0
    with Measure(pid) as m:
        while got < n:
            for msg in c.consume(10000, 1.0):
                if msg.error() is None:
                    got += 1
    c.close()
    report(f"consume confluent-kafka {topic}", got, m, value_bytes)


def rdkafka_perf(binary: str, bootstrap: str, topic: str, n: int, pid: int, produce: bool, partitions: int,
                 acks: str = "1", idempotence: bool = False) -> None:
    if produce:
        args = [binary, "-P", "-t", topic, "-b", bootstrap, "-s", "100", "-c", str(n), "-X", f"acks={acks}",
                "-X", "linger.ms=5", "-X", "batch.size=1000000", "-u",
                "-X", f"enable.idempotence={str(idempotence).lower()}"]
    else:
        args = [binary, "-C", "-t", topic, "-b", bootstrap, "-o", "beginning", "-c", str(n), "-u", "-e"]
        args += ["-p", ",".join(str(p) for p in range(partitions))] if partitions > 1 else ["-p", "0"]
    with Measure(pid) as m:
        res = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        print(f"rdkafka_performance failed: {res.stderr[-2000:]}")
        return
    report(f"{'produce' if produce else 'consume'} rdkafka_performance {topic}", n, m)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--value-bytes", type=int, default=len(VALUE))
    ap.add_argument("--compression", default="none", choices=("none", "gzip", "snappy", "lz4", "zstd"))
    ap.add_argument("--acks", default="1", choices=("all", "-1", "1", "0"), help="the producers' acks")
    ap.add_argument("--rdkafka-performance", default=os.environ.get("RDKAFKA_PERFORMANCE"))
    ap.add_argument("--bootstrap", help="use a running broker instead of starting one (CPU share not measured)")
    ap.add_argument("--data-dir", type=Path, help="with --bootstrap: the broker's data dir, for the sequential-write "
                    "baseline (default: a temporary directory)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the sequential-write baseline")
    ap.add_argument("--idempotence", action="store_true", help="idempotent producers (implies --acks all)")
    ap.add_argument("--authorizer", action="store_true",
                    help="run the broker with Kafka's ACL authorizer, the client an ordinary principal allowed by "
                         "ACLs (every Produce and Fetch is checked per topic)")
    ap.add_argument("--smoke", action="store_true", help="a tiny end-to-end run, for CI (its figures mean nothing)")
    args = ap.parse_args()
    if args.smoke:
        args.records, args.partitions = 2_000, [1]
    if args.idempotence:
        args.acks = "all"
    with tempfile.TemporaryDirectory() as d:
        broker = None
        if args.bootstrap:
            bootstrap, pid = args.bootstrap, os.getpid()
        else:
            broker = BrokerProcess(Path(d) / "data").start() if not args.authorizer else \
                authorized_broker(Path(d) / "data")
            assert broker.proc is not None
            bootstrap, pid = broker.bootstrap, broker.proc.pid
        print(f"broker {bootstrap}, {args.records:,} records of {args.value_bytes} bytes, {os.cpu_count()} cores")
        value = os.urandom(args.value_bytes // 2).hex().encode() + b"x" * (args.value_bytes % 2)  # compressible 2:1
        admin = AdminClient({"bootstrap.servers": bootstrap})
        try:
            for parts in args.partitions:
                topic = f"bench-py-{parts}"
                admin.create_topics([NewTopic(topic, parts, 1)])[topic].result(10)
                baseline = None if args.no_baseline else \
                    sequential_write(args.data_dir or Path(d), args.records * args.value_bytes)
                python_produce(bootstrap, topic, args.records, pid, value, args.compression, args.acks, baseline,
                               args.idempotence)
                python_consume(bootstrap, topic, parts, args.records, pid, args.value_bytes)
                if args.rdkafka_performance:
                    topic = f"bench-c-{parts}"
                    admin.create_topics([NewTopic(topic, parts, 1)])[topic].result(10)
                    rdkafka_perf(args.rdkafka_performance, bootstrap, topic, args.records, pid, True, parts,
                                 args.acks, args.idempotence)
                    rdkafka_perf(args.rdkafka_performance, bootstrap, topic, args.records, pid, False, parts)
        finally:
            if broker is not None:
                broker.stop()


def authorized_broker(data: Path) -> BrokerProcess:
    """A broker with the ACL authorizer where User:ANONYMOUS is no super user but allowed by ACLs (on the
    literal "*" topic and group, and the cluster): set up as a super user, then restarted without one."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    b = BrokerProcess(data, {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                             "super.users": "User:ANONYMOUS"}).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    acls = [AclBinding(rt, name, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*", AclOperation.ALL,
                       AclPermissionType.ALLOW)
            for rt, name in ((ResourceType.TOPIC, "*"), (ResourceType.GROUP, "*"), (ResourceType.BROKER, "kafka-cluster"))]
    for f in admin.create_acls(acls).values():
        f.result(10)
    b.stop()
    b.overrides["super.users"] = ""
    return b.restart()


if __name__ == "__main__":
    main()
