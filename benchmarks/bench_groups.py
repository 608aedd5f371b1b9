"""Consumer group benchmarks against a real broker process.

Usage: python benchmarks/bench_groups.py [--records N] [--groups G] [--seconds S]
       python benchmarks/bench_groups.py --smoke   # tiny, for CI: it still runs end to end

1. Group consume throughput: 3 confluent-kafka consumers (separate processes) in one group over
   a 6-partition topic, against one consumer using assign() on all partitions.
2. Failover: SIGKILL one of 3 members; time until the survivors consume the killed member's
   partitions (session.timeout.ms is printed alongside).
3. Coordinator load: G groups, each with one member that joined and synced, committing
   offsets every second and heartbeating every 3 s (raw protocol over 10 connections);
   prints the broker's CPU share.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from benchmarks.bench_throughput import Measure  # noqa: E402
from gregor.protocol import apis  # noqa: E402
from gregor.protocol.frames import decode_response, encode_request  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402

FAST_CONSUMER = {"fetch.queue.backoff.ms": 1, "queued.min.messages": 1_000_000}


def _fill(bootstrap: str, topic: str, partitions: int, n: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000,
                  "queue.buffering.max.messages": 2_000_000})
    for _ in range(n):
        try:
            p.produce(topic, b"x" * 100)
        except BufferError:
            p.poll(0.01)
            p.produce(topic, b"x" * 100)
    p.flush(60)


def _group_member(bootstrap: str, topic: str, group: str, stop_at: int, counter: mp.Value) -> None:  # type: ignore[type-arg]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, **FAST_CONSUMER})
    c.subscribe([topic])
    while counter.value < stop_at:
        msgs = c.consume(10000, 0.2)
        n = sum(1 for m in msgs if m.error() is None)
        if n:
            with counter.get_lock():
                counter.value += n
    c.close()


def throughput(bootstrap: str, pid: int, n: int) -> None:
    _fill(bootstrap, "grp-bench", 6, n)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "assign-bench", "enable.auto.commit": False,
                  **FAST_CONSUMER})
    c.assign([TopicPartition("grp-bench", p, OFFSET_BEGINNING) for p in range(6)])
    got = 0
    with Measure(pid) as m:
        while got < n:
            got += sum(1 for x in c.consume(10000, 1.0) if x.error() is None)
    c.close()
    single = n / m.wall
    print(f"single consumer, assign():          {single:>12,.0f} rec/s  broker CPU {m.cpu / m.wall * 100:5.1f}%")
    counter = mp.Value("q", 0)
    procs = [mp.Process(target=_group_member, args=(bootstrap, "grp-bench", "bench-group", n, counter))
             for _ in range(3)]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    while counter.value == 0:
        time.sleep(0.001)
    t_first = time.perf_counter()
    with Measure(pid) as m:
        while counter.value < n:
            time.sleep(0.001)
    steady = counter.value / (time.perf_counter() - t_first)
    for p in procs:
        p.join()
    print(f"3 consumers in a group, from first record: {steady:>12,.0f} rec/s  broker CPU "
          f"{m.cpu / m.wall * 100:5.1f}%  ratio {steady / single:.2f}")
    print(f"   (process start + join + sync before the first record: {t_first - t0:.2f} s)")


def failover(bootstrap: str, n: int) -> None:
    _fill(bootstrap, "fail-bench", 6, n)
    counter = mp.Value("q", 0)
    procs = [mp.Process(target=_group_member, args=(bootstrap, "fail-bench", "fail-group", 10 * n, counter))
             for _ in range(3)]
    for p in procs:
        p.start()
    while counter.value < n // 4:
        time.sleep(0.01)
    procs[0].kill()
    killed = time.perf_counter()
    # The survivors finish the topic only after they took over the killed member's partitions.
    while counter.value < n and time.perf_counter() - killed < 60:
        time.sleep(0.01)
    resumed = time.perf_counter() - killed
    for p in procs[1:]:
        p.kill()
    print(f"SIGKILL of a member -> all partitions consumed again: {resumed:.2f} s (session.timeout.ms 6000)")


async def _coordinator_load(bootstrap: str, groups: int, seconds: int) -> int:
    host, port = bootstrap.rsplit(":", 1)
    conns = [await asyncio.open_connection(host, int(port)) for _ in range(10)]
    cid = 0
    requests = 0

    async def call(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], key: int, version: int, body: dict) -> object:
        nonlocal cid, requests
        cid += 1
        reader, writer = conn
        writer.write(encode_request(apis.BY_KEY[key], version, cid, "bench", body))
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        requests += 1
        return decode_response(await reader.readexactly(size), apis.BY_KEY[key], version)[1]

    async def member(i: int) -> None:
        conn = conns[i % len(conns)]
        lock = locks[i % len(conns)]
        group = f"load-{i}"
        join = {"group_id": group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
                "group_instance_id": f"inst-{i}", "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"}]}
        async with lock:
            r = await call(conn, 11, 5, join)
        member_id, gen = r.member_id, r.generation_id  # type: ignore[attr-defined]
        async with lock:
            await call(conn, 14, 3, {"group_id": group, "generation_id": gen, "member_id": member_id,
                                     "group_instance_id": f"inst-{i}", "assignments": [{"member_id": member_id,
                                                                                       "assignment": b""}]})
        end = time.monotonic() + seconds
        tick = 0
        while time.monotonic() < end:
            async with lock:
                await call(conn, 8, 7, {"group_id": group, "generation_id_or_member_epoch": gen,
                                        "member_id": member_id, "group_instance_id": f"inst-{i}",
                                        "topics": [{"name": "load-topic", "partitions": [
                                            {"partition_index": 0, "committed_offset": tick,
                                             "committed_metadata": ""}]}]})
                if tick % 3 == 0:
                    await call(conn, 12, 3, {"group_id": group, "generation_id": gen, "member_id": member_id,
                                             "group_instance_id": f"inst-{i}"})
            tick += 1
            await asyncio.sleep(1.0)

    locks = [asyncio.Lock() for _ in conns]
    await asyncio.gather(*(member(i) for i in range(groups)))
    for _, w in conns:
        w.close()
    return requests


def coordinator_load(bootstrap: str, pid: int, groups: int, seconds: int) -> None:
    with Measure(pid) as m:
        requests = asyncio.run(_coordinator_load(bootstrap, groups, seconds))
    print(f"{groups} groups committing every 1 s for {seconds} s: {requests / m.wall:,.0f} req/s, "
          f"broker CPU {m.cpu / m.wall * 100:5.1f}% of one core")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--smoke", action="store_true", help="a tiny end-to-end run, for CI (its figures mean nothing)")
    args = ap.parse_args()
    if args.smoke:
        args.records, args.groups, args.seconds = 3_000, 5, 2
    with tempfile.TemporaryDirectory() as d:
        broker = BrokerProcess(Path(d) / "data", {"group.initial.rebalance.delay.ms": "0"}).start()
        assert broker.proc is not None
        try:
            print(f"broker {broker.bootstrap}, {os.cpu_count()} cores")
            throughput(broker.bootstrap, broker.proc.pid, args.records)
            failover(broker.bootstrap, args.records)
            coordinator_load(broker.bootstrap, broker.proc.pid, args.groups, args.seconds)
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
