"""Transactions on a 3-broker cluster (RF 3, min.insync.replicas 2): the transaction coordinator is the
leader of the id's __transaction_state partition and moves with it; markers reach followers through
replication. A consume-transform-produce worker keeps exactly-once while the coordinator's broker and
the broker leading its output are SIGKILLed (and restarted) under it, and while it is killed itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def test_spark_sink_transaction_outlives_its_group_coordinator_being_killed(
        make_cluster: Callable[..., LocalCluster]) -> None:
    """The transactional Spark sink keeps a task slot's producer between micro-batches. Its group's
    coordinator is SIGKILLed in between, and the producer learns Metadata without that broker: with
    librdkafka 2.10-2.16 the next send_offsets_to_transaction waits forever (librdkafka#5511); the sink
    gives up on that producer past its timeout and writes the batch with a new one, once."""
    import pyarrow as pa

    from gregor.spark import sink
    from gregor.spark.options import parse_sink_options

    c = make_cluster(3)
    create_topic(c.bootstrap, "sink-out", 1, 3, {"min.insync.replicas": "2"})
    # transaction.timeout.ms bounds each transactional call (librdkafka caps them at it), so the sink's wait.
    opts = parse_sink_options({"kafka.bootstrap.servers": c.bootstrap, "topic": "sink-out", "transactional": "true",
                               "kafka.transaction.timeout.ms": "5000", "kafka.log_level": "0"})
    query = "killed-coordinator"
    txn_id = f"{opts.transactional_id_prefix}{query}-0"

    def rows(batch: int) -> Any:
        return iter([pa.RecordBatch.from_pydict({"value": [f"b{batch}-{i}" for i in range(100)]})])

    try:
        assert sink.write_transactional(opts, rows(0), query, 0, 0) == 100
        group_partition = partition_for(txn_id, 50)
        coordinator = c.wait_leader("__consumer_offsets", group_partition)
        c.kill(coordinator)
        c.wait_leader("__consumer_offsets", group_partition, not_in=(coordinator,), timeout_s=60)
        kept = sink._TXN_CLIENTS[txn_id].producer
        for _ in range(3):  # its next Metadata, without the killed broker: the broker's handle is decommissioned
            kept.list_topics(timeout=10)
            time.sleep(0.3)
        # In a thread: were the sink to wait on the stuck producer, the test fails instead of hanging (a
        # thread blocked in librdkafka with the GIL released is out of pytest-timeout's reach).
        outcome: list[Any] = []

        def batch_1() -> None:
            try:
                outcome.append(sink.write_transactional(opts, rows(1), query, 1, 0))
            except Exception as e:
                outcome.append(e)

        writer = threading.Thread(target=batch_1, daemon=True)
        writer.start()
        writer.join(120)
        assert outcome == [100], outcome or "batch 1 not written within 120 s"
        assert sink.write_transactional(opts, rows(1), query, 1, 0) == 0  # a replay of batch 1: skipped
    finally:
        for kept_id in list(sink._TXN_CLIENTS):  # this process is not a Spark worker: let the clients go
            sink._drop_txn_clients(kept_id)
    got = sorted(v.decode() for v in _read(c.bootstrap, "sink-out", 1, "read_committed"))
    assert got == sorted([f"b0-{i}" for i in range(100)] + [f"b1-{i}" for i in range(100)])
