"""Transactions through real clients against a real broker process: commit and abort with read_committed
and read_uncommitted consumers, the last stable offset, fencing, timeouts, transactional offset commits,
a broker SIGKILLed with transactions decided and open, and consume-transform-produce whose worker is
SIGKILLed 20 times."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]


def create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)


def read(bootstrap: str, topic: str, partitions: int, isolation: str, settle_s: float = 2.0) -> list[tuple[int, int, bytes]]:
    """Everything a consumer of this isolation reads, until nothing new came for `settle_s`."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "isolation.level": isolation})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[tuple[int, int, bytes]] = []
    last = time.monotonic()
    while time.monotonic() - last < settle_s:
        m = c.poll(0.2)
        if m is None or m.error() is not None:
            continue
        out.append((m.partition(), m.offset(), m.value()))
        last = time.monotonic()
    c.close()
    return out


def txn_producer(bootstrap: str, txn_id: str, **conf: object) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 1, **conf})
    p.init_transactions(30)
    return p


def commit_abort_commit(p: Producer, topic: str, n: int) -> None:
    """Three transactions of `n` records over partitions 0 and 1, valued <outcome>-<i>: the middle one aborted."""
    for outcome in ("commit", "abort", "commit"):
        p.begin_transaction()
        for i in range(n):
            p.produce(topic, value=f"{outcome}-{i}".encode(), partition=i % 2)
        if outcome == "commit":
            p.commit_transaction(30)
        else:
            p.flush(30)
            p.abort_transaction(30)


def high_watermark(bootstrap: str, topic: str, isolation: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm", "isolation.level": isolation})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
    finally:
        c.close()


def test_commit_abort_and_the_last_stable_offset(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    create(bs, "txn-basic", 2)
    p = txn_producer(bs, "basic")
    commit_abort_commit(p, "txn-basic", 10)
    committed = read(bs, "txn-basic", 2, "read_committed")
    everything = read(bs, "txn-basic", 2, "read_uncommitted")
    assert len(committed) == 20 and all(v.startswith(b"commit-") for _, _, v in committed)
    assert len(everything) == 30 and sum(v.startswith(b"abort-") for _, _, v in everything) == 10
    # An open transaction holds read_committed consumers (and their watermark) at its first offset.
    create(bs, "txn-lso")
    p.begin_transaction()
    p.produce("txn-lso", value=b"open", partition=0)
    p.flush(30)
    deadline = time.monotonic() + 10
    while high_watermark(bs, "txn-lso", "read_uncommitted") < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert high_watermark(bs, "txn-lso", "read_uncommitted") == 1
    assert high_watermark(bs, "txn-lso", "read_committed") == 0
    assert read(bs, "txn-lso", 1, "read_committed", settle_s=1.0) == []
    p.commit_transaction(30)
    assert high_watermark(bs, "txn-lso", "read_committed") == 2  # past the commit marker
    assert [v for _, _, v in read(bs, "txn-lso", 1, "read_committed", settle_s=1.0)] == [b"open"]


def test_a_second_producer_with_the_same_id_fences_the_first(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    create(bs, "txn-fence")
    old = txn_producer(bs, "fenced-id")
    old.begin_transaction()
    old.produce("txn-fence", value=b"zombie", partition=0)
    old.flush(30)
    new = txn_producer(bs, "fenced-id")  # aborts the old one's open transaction, bumps the epoch
    with pytest.raises(KafkaException) as e:
        old.produce("txn-fence", value=b"zombie-2", partition=0)
        old.flush(10)
        old.commit_transaction(10)
    assert e.value.args[0].fatal()
    new.begin_transaction()
    new.produce("txn-fence", value=b"fresh", partition=0)
    new.commit_transaction(30)
    assert [v for _, _, v in read(bs, "txn-fence", 1, "read_committed")] == [b"fresh"]


def test_transactional_offsets_become_the_groups_only_on_commit(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    create(bs, "txn-offsets")
    c = Consumer({"bootstrap.servers": bs, "group.id": "txn-group", "enable.auto.commit": False})
    p = txn_producer(bs, "offsets-id")

    def committed() -> int:
        return c.committed([TopicPartition("txn-offsets", 0)], 10)[0].offset

    for offset, commit in ((5, False), (7, True)):
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition("txn-offsets", 0, offset)], c.consumer_group_metadata(), 30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
        assert committed() == (7 if commit else -1001)
    c.close()


def test_timed_out_transaction_is_aborted_and_its_producer_fenced(start_broker) -> None:
    b = start_broker({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    bs = b.bootstrap
    create(bs, "txn-timeout")
    p = txn_producer(bs, "slow-id", **{"transaction.timeout.ms": 1000})
    p.begin_transaction()
    p.produce("txn-timeout", value=b"too-slow", partition=0)
    p.flush(30)
    deadline = time.monotonic() + 10
    while high_watermark(bs, "txn-timeout", "read_committed") < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert high_watermark(bs, "txn-timeout", "read_committed") == 2  # the coordinator wrote the abort marker
    with pytest.raises(KafkaException):
        p.commit_transaction(10)
    assert read(bs, "txn-timeout", 1, "read_committed", settle_s=0.5) == []


def test_transactions_survive_a_broker_sigkill(start_broker, tmp_path: Path) -> None:
    data = tmp_path / "data"
    b = start_broker(data_dir=data)
    bs = b.bootstrap
    create(bs, "txn-crash", 2)
    p = txn_producer(bs, "crash-committer")
    commit_abort_commit(p, "txn-crash", 6)
    group = Consumer({"bootstrap.servers": bs, "group.id": "crash-group"})
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition("txn-crash", 0, 3)], group.consumer_group_metadata(), 30)
    p.commit_transaction(30)
    left_open = txn_producer(bs, "crash-open", **{"transaction.timeout.ms": 2000})
    left_open.begin_transaction()
    left_open.produce("txn-crash", value=b"open-at-crash", partition=0)
    left_open.send_offsets_to_transaction([TopicPartition("txn-crash", 0, 5)], group.consumer_group_metadata(), 30)
    left_open.flush(30)
    group.close()
    before = read(bs, "txn-crash", 2, "read_committed")
    assert len(before) == 12
    b.kill()  # SIGKILL
    b2 = start_broker({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}, data_dir=data)
    bs2 = b2.bootstrap
    # The open transaction is aborted after its timeout by the restarted coordinator, from its log.
    after = read(bs2, "txn-crash", 2, "read_committed", settle_s=4.0)
    assert sorted(after) == sorted(before)
    everything = read(bs2, "txn-crash", 2, "read_uncommitted")
    assert sum(v == b"open-at-crash" for _, _, v in everything) == 1
    assert high_watermark(bs2, "txn-crash", "read_committed") == high_watermark(bs2, "txn-crash", "read_uncommitted")
    # The group's offsets came back from __consumer_offsets: the committed transaction's, not the aborted one's.
    g2 = Consumer({"bootstrap.servers": bs2, "group.id": "crash-group"})
    assert g2.committed([TopicPartition("txn-crash", 0)], 30)[0].offset == 3
    g2.close()
    p2 = txn_producer(bs2, "crash-committer")  # the id's state came back: a new epoch
    p2.begin_transaction()
    p2.produce("txn-crash", value=b"after", partition=1)
    p2.commit_transaction(30)
    assert b"after" in [v for _, _, v in read(bs2, "txn-crash", 2, "read_committed")]


def test_consume_transform_produce_is_exactly_once_with_the_worker_killed_20_times(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    n, parts = 3000, 3
    create(bs, "eos-in", parts)
    create(bs, "eos-out", 2)
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 5})
    for i in range(n):
        p.produce("eos-in", value=str(i).encode(), partition=i % parts)
    assert p.flush(30) == 0
    cmd = [sys.executable, "-m", "tests.clients.eos_transformer", bs, "eos-in", "eos-out", "eos-group", "eos-worker",
           str(parts)]
    rnd = random.Random(11)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(20):
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rnd.uniform(0.6, 1.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    committed = read(bs, "eos-out", 2, "read_committed")
    values = sorted(int(v[len(b"out-"):]) for _, _, v in committed)
    assert values == list(range(n))  # every input exactly once
    uncommitted = read(bs, "eos-out", 2, "read_uncommitted")
    assert len(uncommitted) >= len(committed)


def test_kafka_python_transactions_commit_abort_and_offsets(broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTopicPartition

    bs = broker.bootstrap
    create(bs, "kp-txn")
    p = KafkaProducer(bootstrap_servers=bs, transactional_id="kafka-python-txn")
    p.init_transactions()
    p.begin_transaction()
    p.send("kp-txn", b"kp-committed", partition=0)
    p.send_offsets_to_transaction({KTopicPartition("kp-txn", 0): OffsetAndMetadata(3, "", -1)}, "kp-group")
    p.commit_transaction()
    p.begin_transaction()
    p.send("kp-txn", b"kp-aborted", partition=0)
    p.flush()
    p.abort_transaction()
    p.close()
    c = KafkaConsumer(bootstrap_servers=bs, isolation_level="read_committed", auto_offset_reset="earliest",
                      enable_auto_commit=False, consumer_timeout_ms=3000)
    c.assign([KTopicPartition("kp-txn", 0)])
    assert [m.value for m in c] == [b"kp-committed"]
    c.close()
    assert [v for _, _, v in read(bs, "kp-txn", 1, "read_uncommitted")] == [b"kp-committed", b"kp-aborted"]
    g = Consumer({"bootstrap.servers": bs, "group.id": "kp-group"})
    assert g.committed([TopicPartition("kp-txn", 0)], 10)[0].offset == 3
    g.close()


def test_aiokafka_transactions_commit_and_abort(broker: BrokerProcess) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    bs = broker.bootstrap
    create(bs, "aio-txn")

    async def run() -> list[bytes]:
        p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id="aiokafka-txn")
        await p.start()
        try:
            async with p.transaction():
                await p.send_and_wait("aio-txn", b"aio-committed", partition=0)
            await p.begin_transaction()
            await p.send_and_wait("aio-txn", b"aio-aborted", partition=0)
            await p.abort_transaction()
        finally:
            await p.stop()
        c = AIOKafkaConsumer("aio-txn", bootstrap_servers=bs, isolation_level="read_committed",
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        try:
            got = await c.getmany(timeout_ms=3000)
            return [m.value for ms in got.values() for m in ms]
        finally:
            await c.stop()

    assert asyncio.run(run()) == [b"aio-committed"]
    assert len(read(bs, "aio-txn", 1, "read_uncommitted")) == 2


def test_kcat_transactional_produce_and_read_committed(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    create(bs, "kcat-txn")
    r = subprocess.run(["kcat", "-P", "-b", bs, "-t", "kcat-txn", "-p", "0", "-X", "transactional.id=kcat-txn"],
                       input=b"one\ntwo\nthree\n", capture_output=True, timeout=60)
    assert r.returncode == 0 and b"Transaction successfully committed" in r.stderr, r.stderr
    out = subprocess.run(["kcat", "-C", "-b", bs, "-t", "kcat-txn", "-p", "0", "-o", "beginning", "-e",
                          "-X", "isolation.level=read_committed", "-f", "%o %s\\n"],
                         capture_output=True, timeout=60)
    assert out.stdout.decode().split("\n")[:3] == ["0 one", "1 two", "2 three"]
