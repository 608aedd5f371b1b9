"""What creating 10,000 partitions costs the metadata store, and how long the event loop stalls meanwhile.

    python benchmarks/bench_metadata.py store    # the store alone, in this process
    python benchmarks/bench_metadata.py broker   # a real `gregor serve` over the wire
    python benchmarks/bench_metadata.py store|broker --smoke   # tiny, for CI: it still runs end to end

Both shapes: 100 topics x 100 partitions (100 writes, or 100 CreateTopics requests) and 1 topic x 10,000.
`store` times each store write and, with a 1 ms ticker on an event loop, the loop's worst lateness: stores
with `apply` (the journal) are written from a worker thread as TopicAdmin does; older stores, whose writes
ran on the loop, are written on the loop. `broker` times CreateTopics (timeout_ms=0: the metadata path, not
log creation) while another connection sends ApiVersions every 2 ms and records the slowest answer.
Run it with PYTHONPATH pointing at the tree to measure (it runs against older trees too).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: keep PYTHONPATH's gregor first, then this checkout's
    sys.path.append(str(Path(__file__).resolve().parent.parent))

from gregor.metadata.embedded import EmbeddedMetadataStore  # noqa: E402
from gregor.metadata.store import BrokerInfo, PartitionState, TopicMetadata  # noqa: E402

SHAPES = [(100, 100), (1, 10_000)]


def _topic(name: str, n: int) -> TopicMetadata:
    return TopicMetadata(name, uuid.uuid4(), {p: PartitionState([0], 0, isr=[0]) for p in range(n)})


async def _store_run(topics: int, parts: int) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    with tempfile.TemporaryDirectory() as d:
        store: Any = EmbeddedMetadataStore(d, 0)
        store.register_broker(BrokerInfo(0, "127.0.0.1", 9092))
        worst = 0.0
        done = False

        async def ticker() -> None:
            nonlocal worst
            while not done:
                t = time.perf_counter()
                await asyncio.sleep(0.001)
                worst = max(worst, time.perf_counter() - t - 0.001)

        layouts = [_topic(f"t{i}", parts) for i in range(topics)]  # built before: the store's cost alone
        tick = asyncio.ensure_future(ticker())
        await asyncio.sleep(0.01)
        slowest = 0.0
        t0 = time.perf_counter()
        for topic in layouts:
            t1 = time.perf_counter()
            if hasattr(store, "apply"):
                await loop.run_in_executor(None, store.create_topic, topic)
            else:
                store.create_topic(topic)
                await asyncio.sleep(0)
            slowest = max(slowest, time.perf_counter() - t1)
        total = time.perf_counter() - t0
        done = True
        await tick
        t2 = time.perf_counter()
        store.close()
        close = time.perf_counter() - t2
    return {"total_s": total, "slowest_write_ms": slowest * 1000, "loop_stall_ms": worst * 1000, "close_ms": close * 1000}


async def _idle_stall(seconds: float) -> float:
    """The loop's worst lateness with nothing else running: the machine's noise floor, in ms."""
    worst = 0.0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        await asyncio.sleep(0.001)
        worst = max(worst, time.perf_counter() - t - 0.001)
    return worst * 1000


def bench_store(shapes: list[tuple[int, int]]) -> None:
    print(f"idle loop: worst lateness {asyncio.run(_idle_stall(0.5)):.1f} ms in 0.5 s (noise floor)", flush=True)
    for topics, parts in shapes:
        r = asyncio.run(_store_run(topics, parts))
        print(f"store {topics} x {parts}: total {r['total_s']:.3f} s, slowest write {r['slowest_write_ms']:.1f} ms, "
              f"loop stall {r['loop_stall_ms']:.1f} ms, close {r['close_ms']:.0f} ms", flush=True)


def _broker_run(topics: int, parts: int) -> tuple[float, float]:
    """(seconds until every CreateTopics was acknowledged, slowest ApiVersions meanwhile in ms)."""
    from gregor.tools.local_broker import BrokerProcess
    from tests.wire import WireClient

    with tempfile.TemporaryDirectory() as d:
        b = BrokerProcess(Path(d), {"auto.create.topics.enable": "false"}).start()
        try:
            worst = 0.0
            stop = threading.Event()

            def ping() -> None:
                nonlocal worst
                c = WireClient(b.bootstrap, timeout_s=60)
                while not stop.is_set():
                    t = time.perf_counter()
                    c.request(18, 3, {"client_software_name": "bench", "client_software_version": "1"})
                    worst = max(worst, time.perf_counter() - t)
                    time.sleep(0.002)
                c.close()

            th = threading.Thread(target=ping)
            th.start()
            c = WireClient(b.bootstrap, timeout_s=120)
            t0 = time.perf_counter()
            for i in range(topics):
                resp = c.request(19, 5, {"topics": [{"name": f"t{i}", "num_partitions": parts,
                                                     "replication_factor": 1, "assignments": [], "configs": []}],
                                         "timeout_ms": 0, "validate_only": False})
                assert resp.topics[0].error_code == 0, resp
            total = time.perf_counter() - t0
            stop.set()
            th.join()
            c.close()
            return total, worst * 1000
        finally:
            b.kill()


def bench_broker(shapes: list[tuple[int, int]]) -> None:
    for topics, parts in shapes:
        total, worst = _broker_run(topics, parts)
        print(f"broker {topics} x {parts}: CreateTopics acknowledged in {total:.3f} s, "
              f"slowest ApiVersions meanwhile {worst:.0f} ms", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["store", "broker"])
    ap.add_argument("--smoke", action="store_true", help="a tiny end-to-end run, for CI (its figures mean nothing)")
    args = ap.parse_args()
    shapes = [(2, 5), (1, 10)] if args.smoke else SHAPES
    bench_store(shapes) if args.what == "store" else bench_broker(shapes)
