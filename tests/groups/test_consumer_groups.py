"""Consumer groups through real clients and real member processes (SIGKILLed mid-stream)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.broker_process import BrokerProcess
from tests.groups.common import complete_lines, fill_topic, read_records, start_worker

GROUP_BROKER = {"group.initial.rebalance.delay.ms": "300", "group.min.session.timeout.ms": "1000"}


def _assignments(path: Path) -> list[tuple[float, list[int]]]:
    out = []
    for ln in complete_lines(path):
        if ln.startswith("# assigned"):
            _, _, at, *parts = ln.split()
            out.append((float(at), sorted(int(x) for x in (parts[0] if parts else "").split(",") if x)))
    return out


def _last_assignment(path: Path) -> list[int]:
    found = _assignments(path)
    return found[-1][1] if found else []


def _first_assignment_after(path: Path, t: float) -> list[int]:
    return next((parts for at, parts in _assignments(path) if at >= t), [])


def test_three_members_split_six_partitions(start_broker: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    b = start_broker(GROUP_BROKER)
    fill_topic(b, "orders", 6, 60_000)
    outs = [tmp_path / f"w{i}.txt" for i in range(3)]
    procs = [start_worker(b, "g1", "orders", "auto", out) for out in outs]
    for p in procs:
        assert p.wait(120) == 0
    values = read_records(outs)
    assert len(values) == 60_000 and set(values) == set(range(60_000)), "each message processed exactly once"
    # At some generation the three members held two partitions each, together all six. (Not necessarily the
    # last one: members join and leave on their own clocks, and whoever leaves last may briefly get all six.)
    held = [[parts for _, parts in _assignments(o) if len(parts) == 2] for o in outs]
    assert any(sorted(a + b + c) == list(range(6)) for a in held[0] for b in held[1] for c in held[2]), \
        [_assignments(o) for o in outs]


@pytest.mark.parametrize("mode", ["alo", "amo"])
def test_sigkill_member_partitions_move_and_resume_from_commit(
        start_broker: Callable[..., BrokerProcess], tmp_path: Path, mode: str) -> None:
    b = start_broker(GROUP_BROKER)
    n = 6000
    fill_topic(b, "jobs", 6, n)
    outs = [tmp_path / f"w{i}.txt" for i in range(3)]
    procs = [start_worker(b, "g2", "jobs", mode, out, delay_ms=2) for out in outs]
    deadline = time.monotonic() + 30
    while len(read_records(outs)) < n // 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    victim_parts = _last_assignment(outs[0])
    procs[0].kill()  # SIGKILL mid-stream: no LeaveGroup, no final commit
    procs[0].wait()
    killed_at = time.monotonic()
    killed_wall = time.time()
    for p in procs[1:]:
        assert p.wait(120) == 0
    values = read_records(outs)
    counts = Counter(values)
    if mode == "alo":
        assert set(values) == set(range(n)), "at-least-once: nothing skipped"
    else:
        assert max(counts.values()) == 1, "at-most-once: nothing processed twice"
        assert len(values) >= n - len(victim_parts), "at most one in-flight message lost per partition"
    survivors = sorted(_first_assignment_after(outs[1], killed_wall) + _first_assignment_after(outs[2], killed_wall))
    assert survivors == list(range(6)), "the killed member's partitions moved to the survivors"
    assert time.monotonic() - killed_at < 60


def test_offsets_and_group_survive_broker_restart(start_broker: Callable[..., BrokerProcess]) -> None:
    b = start_broker(GROUP_BROKER)
    fill_topic(b, "resume", 3, 300)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g3", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe(["resume"])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 150 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            seen += 1
            c.commit(message=m, asynchronous=False)
    committed = {tp.partition: tp.offset for tp in c.committed([TopicPartition("resume", p) for p in range(3)])}
    c.close()
    assert sum(max(o, 0) for o in committed.values()) == 150  # -1001: nothing committed on that partition
    assert b.stop() == 0
    b.restart()
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g3", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    after = {tp.partition: tp.offset for tp in c.committed([TopicPartition("resume", p) for p in range(3)], timeout=10)}
    assert after == committed
    c.subscribe(["resume"])
    rest = 0
    deadline = time.monotonic() + 30
    while rest < 150 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            assert m.offset() >= max(committed[m.partition()], 0), "resumed from the committed offset"
            rest += 1
    c.close()
    assert rest == 150
    # SIGKILL too: committed offsets are in the log, not only in checkpoints.
    b.kill()
    b.restart()
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g3"})
    again = {tp.partition: tp.offset for tp in c.committed([TopicPartition("resume", p) for p in range(3)], timeout=10)}
    c.close()
    assert again == committed


def test_cooperative_sticky_group(start_broker: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    b = start_broker(GROUP_BROKER)
    fill_topic(b, "coop", 6, 6000)
    outs = [tmp_path / f"w{i}.txt" for i in range(2)]
    conf = {"partition.assignment.strategy": "cooperative-sticky"}
    procs = [start_worker(b, "g4", "coop", "auto", out, extra=conf) for out in outs]
    for p in procs:
        assert p.wait(120) == 0
    values = read_records(outs)
    assert sorted(values) == list(range(6000)), "every message exactly once"
    # Incremental (cooperative) assignments: each member worked on some of the partitions.
    worked = [{int(ln.split()[0]) for ln in complete_lines(o) if ln and not ln.startswith("#")} for o in outs]
    assert all(worked) and worked[0] | worked[1] == set(range(6))


def test_kafka_python_group(start_broker: Callable[..., BrokerProcess]) -> None:
    from kafka import KafkaConsumer

    b = start_broker(GROUP_BROKER)
    fill_topic(b, "kp-group", 4, 2000)
    consumers = [KafkaConsumer("kp-group", bootstrap_servers=b.bootstrap, group_id="kp", auto_offset_reset="earliest",
                               session_timeout_ms=6000, heartbeat_interval_ms=500) for _ in range(2)]
    seen: list[int] = []
    lock = threading.Lock()
    deadline = time.monotonic() + 60

    def run(c: KafkaConsumer) -> None:
        # One thread per member, as applications run them: polled in turn from one thread, a member
        # blocked in a rebalance waits for the other to rejoin, which is not polled until it returns.
        while time.monotonic() < deadline:
            with lock:
                if len(seen) >= 2000 and all(m.assignment() for m in consumers):
                    return
            for records in c.poll(200).values():
                with lock:
                    seen.extend(int(r.value) for r in records)

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in consumers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(70)
    assignments = [sorted(tp.partition for tp in c.assignment()) for c in consumers]
    for c in consumers:
        c.commit()
        c.close()
    assert sorted(seen) == list(range(2000))
    assert sorted(assignments[0] + assignments[1]) == [0, 1, 2, 3] and all(assignments)


def test_aiokafka_group(start_broker: Callable[..., BrokerProcess]) -> None:
    from aiokafka import AIOKafkaConsumer

    b = start_broker(GROUP_BROKER)
    fill_topic(b, "aio-group", 4, 2000)

    async def run() -> tuple[list[int], list[list[int]]]:
        consumers = [AIOKafkaConsumer("aio-group", bootstrap_servers=b.bootstrap, group_id="aio",
                                      auto_offset_reset="earliest") for _ in range(2)]
        for c in consumers:
            await c.start()
        seen: list[int] = []
        try:
            async with asyncio.timeout(60):
                while len(seen) < 2000:
                    for c in consumers:
                        for records in (await c.getmany(timeout_ms=200)).values():
                            seen.extend(int(r.value) for r in records)
            assignments = [sorted(tp.partition for tp in c.assignment()) for c in consumers]
            for c in consumers:
                await c.commit()
        finally:
            for c in consumers:
                await c.stop()
        return seen, assignments

    seen, assignments = asyncio.run(run())
    assert sorted(seen) == list(range(2000))
    assert sorted(assignments[0] + assignments[1]) == [0, 1, 2, 3] and all(assignments)
