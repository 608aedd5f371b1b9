"""Transactions on a 3-broker cluster (RF 3, min.insync.replicas 2): the transaction coordinator is the
leader of the id's __transaction_state partition and moves with it; markers reach followers through
replication. A consume-transform-produce worker keeps exactly-once while the coordinator's broker and
the broker leading its output are SIGKILLed (and restarted) under it, and while it is killed itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from gregor.coordinator.group.metadata_manager import partition_for
from gregor.coordinator.transaction.state_manager import TRANSACTION_STATE_TOPIC
from gregor.tools.local_cluster import LocalCluster, create_topic

ROOT = Path(__file__).resolve().parents[2]
TXN_ID = "cluster-eos-worker"


def _read(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "isolation.level": isolation})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[bytes] = []
    last = time.monotonic()
    while time.monotonic() - last < 3:
        m = c.poll(0.2)
        if m is None or m.error() is not None:
            continue
        out.append(m.value())
        last = time.monotonic()
    c.close()
    return out


def test_exactly_once_survives_killing_the_coordinator_and_output_leader(
        make_any_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    c = make_any_cluster(3, overrides={"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"})
    n, parts = 4000, 3
    create_topic(c.bootstrap, "eos-in", parts, 3, {"min.insync.replicas": "2"})
    create_topic(c.bootstrap, "eos-out", 2, 3, {"min.insync.replicas": "2"})
    p = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(n):
        p.produce("eos-in", value=str(i).encode(), partition=i % parts)
    assert p.flush(60) == 0

    cmd = [sys.executable, "-m", "tests.clients.eos_transformer", c.bootstrap, "eos-in", "eos-out", "eos-group",
           TXN_ID, str(parts)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    log_path = tmp_path / "workers.log"

    def worker() -> subprocess.Popen[bytes]:
        # stderr to a file, not an unread pipe: librdkafka logs every failed connection to stderr while
        # brokers are killed, and a worker blocked writing to a full 64 KiB pipe would hang. -X faulthandler:
        # a worker that does not finish is sent SIGABRT and dumps its threads' Python stacks into the log.
        with open(log_path, "ab") as err:
            return subprocess.Popen([cmd[0], "-X", "faulthandler", *cmd[1:]], cwd=ROOT, env=env,
                                    stdout=subprocess.DEVNULL, stderr=err)

    def log_tail() -> str:
        return log_path.read_bytes().decode(errors="replace")[-4000:] if log_path.exists() else ""

    # 1. The coordinator's broker dies under a running worker, and comes back.
    proc = worker()
    state_partition = partition_for(TXN_ID, 50)
    coordinator = c.wait_leader(TRANSACTION_STATE_TOPIC, state_partition, timeout_s=60)
    time.sleep(1.0)
    c.kill(coordinator)
    new = c.wait_leader(TRANSACTION_STATE_TOPIC, state_partition, not_in=(coordinator,))
    assert new != coordinator
    time.sleep(1.5)
    c.restart(coordinator)
    # 2. The worker itself is killed mid-run a few times.
    for _ in range(3):
        time.sleep(0.8)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc = worker()
    # 3. The leader of an output partition dies under the new worker.
    time.sleep(1.0)
    out_leader = c.leader_of("eos-out", 0)
    c.kill(out_leader)
    c.wait_leader("eos-out", 0, not_in=(out_leader,))
    time.sleep(1.0)
    c.restart(out_leader)
    # Then workers run until the output is complete: a worker exits when it saw no input for a while
    # (or non-zero, on a failure it cannot retry, or on a transaction stalled by the client bug that
    # eos_transformer's docstring names) and the next one resumes from the committed offsets.
    deadline = time.monotonic() + 240
    while True:
        try:
            proc.wait(max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler: its stacks into the log
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise AssertionError(f"the worker did not finish; workers' stderr:\n{log_tail()}") from None
        if len(set(_read(c.bootstrap, "eos-out", 2, "read_committed"))) >= n:
            break
        assert time.monotonic() < deadline, log_tail()
        proc = worker()
    committed = _read(c.bootstrap, "eos-out", 2, "read_committed")
    values = sorted(int(v[len(b"out-"):]) for v in committed)
    assert values == list(range(n)), f"{len(values)} outputs, {len(set(values))} distinct, {n} inputs"
    everything = _read(c.bootstrap, "eos-out", 2, "read_uncommitted")
    assert len(everything) >= len(committed)
