"""The idempotent producer through real sockets and real broker processes (issue 9).

Raw-wire tests (tests.wire) send exactly the batches Kafka's rules are about: a retried batch,
a sequence gap, an older epoch; then the broker is SIGKILLed or stopped and restarted and the
producer state must come back. The fault-hook test has two real clients produce through a broker
that drops connections after appending, and checks the log holds every message exactly once.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kafka import KafkaAdminClient, KafkaProducer
from kafka import TopicPartition as KTopicPartition

from gregor.metadata.embedded import EmbeddedMetadataStore
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import Record, build_batch, iter_records
from tests.broker_process import BrokerProcess
from tests.server.admin_wire import create_topic, fetch
from tests.wire import WireClient

PRODUCE, API_VERSIONS, INIT_PRODUCER_ID, DESCRIBE_PRODUCERS = 0, 18, 22, 61


def init_producer_id(c: WireClient, transactional_id: str | None = None) -> tuple[int, int, int]:
    r = c.request(INIT_PRODUCER_ID, 4, {"transactional_id": transactional_id, "transaction_timeout_ms": 60000,
                                        "producer_id": -1, "producer_epoch": -1})
    return r.error_code, r.producer_id, r.producer_epoch


def send(c: WireClient, topic: str, pid: int, epoch: int, seq: int, n: int = 1, transactional: bool = False,
         transactional_id: str | None = None):  # noqa: ANN201
    now = int(time.time() * 1000)
    batch = build_batch([Record(i, now, None, f"{pid}:{seq + i}".encode()) for i in range(n)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=transactional)
    r = c.request(PRODUCE, 9, {"transactional_id": transactional_id, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return r.responses[0].partition_responses[0]


def values(c: WireClient, topic: str) -> list[bytes]:
    out: list[bytes] = []
    offset = 0
    while True:
        p = fetch(c, topic, 0, offset)
        assert p.error_code == 0
        recs = [r for r in iter_records(bytes(p.records or b"")) if r.offset >= offset]
        if not recs:
            return out
        out += [r.value for r in recs]
        offset = recs[-1].offset + 1


def describe(c: WireClient, topic: str) -> list:  # noqa: ANN201
    r = c.request(DESCRIBE_PRODUCERS, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]})
    p = r.topics[0].partitions[0]
    assert p.error_code == 0, p
    return list(p.active_producers)


@pytest.fixture
def wire(start_broker: Callable[..., BrokerProcess]):  # noqa: ANN201
    b = start_broker({"auto.create.topics.enable": "false"})
    c = WireClient(b.bootstrap)
    yield b, c
    c.close()


def test_api_versions_advertise_init_producer_id_and_describe_producers(wire) -> None:  # noqa: ANN001
    _, c = wire
    keys = {k.api_key: (k.min_version, k.max_version) for k in c.request(API_VERSIONS, 3, {
        "client_software_name": "t", "client_software_version": "1"}).api_keys}
    assert keys[INIT_PRODUCER_ID] == (0, 5) and keys[DESCRIBE_PRODUCERS] == (0, 0)


def test_duplicate_gap_and_old_epoch(wire) -> None:  # noqa: ANN001
    _, c = wire
    assert create_topic(c, "idem", 1).error_code == 0
    err, pid, epoch = init_producer_id(c)
    assert err == 0 and pid >= 0 and epoch == 0
    err2, pid2, _ = init_producer_id(c)
    assert err2 == 0 and pid2 != pid
    first = send(c, "idem", pid, 0, 0, n=3)
    assert first.error_code == 0 and first.base_offset == 0
    assert send(c, "idem", pid, 0, 3, n=2).base_offset == 3
    again = send(c, "idem", pid, 0, 0, n=3)  # a retry of the first batch
    assert again.error_code == 0 and again.base_offset == 0
    gap = send(c, "idem", pid, 0, 7)  # 5 and 6 never arrived
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert send(c, "idem", pid, 1, 0).base_offset == 5  # a new epoch starts at 0
    old = send(c, "idem", pid, 0, 5)
    assert old.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert values(c, "idem") == [f"{pid}:{i}".encode() for i in range(5)] + [f"{pid}:0".encode()]
    (p,) = describe(c, "idem")
    assert (p.producer_id, p.producer_epoch, p.last_sequence, p.current_txn_start_offset) == (pid, 1, 0, -1)
    admin = KafkaAdminClient(bootstrap_servers=wire[0].bootstrap)
    try:
        got = admin.describe_producers([KTopicPartition("idem", 0)])[KTopicPartition("idem", 0)]
        assert [(s.producer_id, s.producer_epoch, s.last_sequence) for s in got.active_producers] == [(pid, 1, 0)]
    finally:
        admin.close()


def test_transactional_init_checks_the_timeout_and_describe_shows_the_open_transaction(wire) -> None:  # noqa: ANN001
    _, c = wire
    assert create_topic(c, "tx", 1).error_code == 0
    too_long = c.request(INIT_PRODUCER_ID, 4, {"transactional_id": "my-txn", "transaction_timeout_ms": 900_001,
                                               "producer_id": -1, "producer_epoch": -1})
    assert too_long.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT  # transaction.max.timeout.ms
    err, pid, epoch = init_producer_id(c, "my-txn")
    assert err == 0 and epoch == 0
    assert init_producer_id(c, "my-txn")[1:] == (pid, 1)  # the same id again: fenced by a new epoch
    assert send(c, "tx", pid, 1, 0, n=2, transactional=True, transactional_id="my-txn").error_code == 0
    (p,) = describe(c, "tx")
    assert (p.producer_id, p.producer_epoch, p.current_txn_start_offset) == (pid, 1, 0)


def _rebuilt_lines(b: BrokerProcess, topic: str) -> list[str]:
    return [ln for ln in b.log_lines if f"{topic}-0: producer state rebuilt" in ln]


def test_sigkill_restart_rebuilds_state_and_clean_restart_reads_the_snapshot(wire) -> None:  # noqa: ANN001
    b, c = wire
    assert create_topic(c, "crash", 1).error_code == 0
    _, pid, _ = init_producer_id(c)
    for seq in range(0, 20, 2):
        assert send(c, "crash", pid, 0, seq, n=2).error_code == 0
    c.close()
    b.kill()
    b.restart()
    c = WireClient(b.bootstrap)
    assert len(_rebuilt_lines(b, "crash")) == 1  # no snapshot after a crash: the log was replayed
    retry = send(c, "crash", pid, 0, 18, n=2)
    assert retry.error_code == 0 and retry.base_offset == 18
    assert send(c, "crash", pid, 0, 21).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert send(c, "crash", pid, 0, 20).base_offset == 20
    _, pid_after, _ = init_producer_id(c)
    assert pid_after > pid  # ids come from a block reserved after the last one: never handed out twice
    c.close()

    assert b.stop() == 0
    snap = Path(b.data_dir) / "crash-0" / f"{21:020d}.snapshot"
    assert snap.exists(), os.listdir(Path(b.data_dir) / "crash-0")
    b.log_lines.clear()
    b.restart()
    c = WireClient(b.bootstrap)
    assert _rebuilt_lines(b, "crash") == []  # read from the snapshot: nothing replayed
    assert send(c, "crash", pid, 0, 20).base_offset == 20  # still deduplicated
    assert values(c, "crash") == [f"{pid}:{i}".encode() for i in range(21)]
    c.close()


def test_producer_expiry(start_broker: Callable[..., BrokerProcess]) -> None:
    b = start_broker({"producer.id.expiration.ms": "1500", "producer.id.expiration.check.interval.ms": "100"})
    c = WireClient(b.bootstrap)
    assert create_topic(c, "expire", 1).error_code == 0
    _, pid, _ = init_producer_id(c)
    assert send(c, "expire", pid, 0, 0).error_code == 0
    assert send(c, "expire", pid, 0, 5).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert [p.producer_id for p in describe(c, "expire")] == [pid]
    deadline = time.monotonic() + 15
    while describe(c, "expire") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert describe(c, "expire") == []
    assert send(c, "expire", pid, 0, 5).error_code == 0  # unknown again: any sequence starts it
    c.close()


# --- two real clients through a broker that drops connections after appending --------------------

DROP_EVERY = 5


def _confluent(bootstrap: str, topic: str, n: int, idempotent: bool, errors: list[str]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": idempotent,
                  "retry.backoff.ms": 20, "reconnect.backoff.ms": 10, "message.timeout.ms": 60000,
                  "batch.num.messages": 2000})

    def cb(err: object, _m: object) -> None:
        if err is not None:
            errors.append(f"confluent: {err}")

    for i in range(n):
        while True:
            try:
                p.produce(topic, b"c:%d" % i, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    if p.flush(60):
        errors.append("confluent: messages left unsent")


def _kafka_python(bootstrap: str, topic: str, n: int, idempotent: bool, errors: list[str]) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, enable_idempotence=idempotent,
                      retry_backoff_ms=20, reconnect_backoff_ms=10, batch_size=64 * 1024,
                      **({} if idempotent else {"max_in_flight_requests_per_connection": 5, "retries": 100}))
    futures = [p.send(topic, b"k:%d" % i) for i in range(n)]
    p.flush(60)
    for f in futures[-1:]:
        try:
            f.get(30)
        except Exception as e:  # reported, not raised: the test's assertion names it
            errors.append(f"kafka-python: {e!r}")
    p.close(10)


def _produce_with_faults(b: BrokerProcess, topic: str, per_client: int, idempotent: bool) -> dict[str, list[int]]:
    c = WireClient(b.bootstrap)
    assert create_topic(c, topic, 1).error_code == 0
    c.close()
    errors: list[str] = []
    threads = [threading.Thread(target=fn, args=(b.bootstrap, topic, per_client, idempotent, errors))
               for fn in (_confluent, _kafka_python)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:5]
    cons = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "idem-check", "enable.auto.commit": False,
                     "fetch.queue.backoff.ms": 1})
    cons.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    lo, hi = cons.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    got: dict[str, list[int]] = {"c": [], "k": []}
    deadline = time.monotonic() + 60
    count = 0
    while count < hi - lo and time.monotonic() < deadline:
        for m in cons.consume(10000, 0.5):
            assert m.error() is None, m.error()
            who, num = m.value().split(b":")
            got[who.decode()].append(int(num))
            count += 1
    cons.close()
    assert count == hi - lo
    return got


def test_fault_hook_idempotent_clients_write_each_message_exactly_once(
        start_broker: Callable[..., BrokerProcess]) -> None:
    b = start_broker({"gregor.test.fault.drop.produce.response.after.append": str(DROP_EVERY)})
    n = 50_000
    got = _produce_with_faults(b, "exactly-once", n, idempotent=True)
    drops = len([ln for ln in b.log_lines if "test fault: connection dropped" in ln])
    assert drops >= 5, drops  # the hook fired: clients did retry appended batches
    assert got["c"] == list(range(n)) and got["k"] == list(range(n))


def test_fault_hook_without_idempotence_duplicates(start_broker: Callable[..., BrokerProcess]) -> None:
    """The control: the same faults without idempotence leave duplicates, so the test above can fail."""
    b = start_broker({"gregor.test.fault.drop.produce.response.after.append": str(DROP_EVERY)})
    n = 10_000
    got = _produce_with_faults(b, "at-least-once", n, idempotent=False)
    assert set(got["c"]) == set(range(n)) and set(got["k"]) == set(range(n))  # nothing lost...
    assert len(got["c"]) + len(got["k"]) > 2 * n  # ...but retried batches were written twice



def test_producer_id_blocks_never_overlap_across_reopen(tmp_path: Path) -> None:
    s = EmbeddedMetadataStore(str(tmp_path), 0)
    assert s.allocate_producer_ids(1000) == (0, 1000)
    assert s.allocate_producer_ids(10) == (1000, 10)
    s.close()
    assert EmbeddedMetadataStore(str(tmp_path), 0).allocate_producer_ids(1000) == (1010, 1000)
