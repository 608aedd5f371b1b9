"""`gregor transactions` (kafka-transactions.sh) against a broker process: list and describe a
transaction a confluent-kafka producer keeps open, then abort it by its start offset, after which a
read_committed consumer reads past it."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.tools.cli import gregor


def _lso(bs: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bs, "group.id": "lso", "isolation.level": "read_committed"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
    finally:
        c.close()


def test_list_describe_and_abort_a_hanging_transaction(start_broker) -> None:
    bs = start_broker().bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic("hang", 1, 1)]).values():
        f.result(30)
    done = Producer({"bootstrap.servers": bs, "transactional.id": "finished"})
    done.init_transactions(30)
    done.begin_transaction()
    done.produce("hang", value=b"ok", partition=0)
    done.commit_transaction(30)  # offsets 0 and its marker 1
    hanging = Producer({"bootstrap.servers": bs, "transactional.id": "stuck", "transaction.timeout.ms": 600000})
    hanging.init_transactions(30)
    hanging.begin_transaction()
    hanging.produce("hang", value=b"stuck", partition=0)
    hanging.flush(30)  # offset 2, never committed
    assert _lso(bs, "hang") == 2

    listed = gregor("transactions", "--bootstrap-server", bs, "list")
    assert listed.returncode == 0, listed.stderr
    rows = {ln.split()[0]: ln.split() for ln in listed.stdout.splitlines()[1:]}
    assert rows["finished"][3] == "CompleteCommit" and rows["stuck"][3] == "Ongoing"

    described = gregor("transactions", "describe", "--transactional-id", "stuck", "--bootstrap-server", bs)
    assert described.returncode == 0, described.stderr
    header, row = described.stdout.splitlines()
    fields = dict(zip(header.split(), row.split(), strict=True))
    assert fields["TransactionState"] == "Ongoing" and fields["TopicPartitions"] == "hang-0"
    assert fields["TransactionTimeoutMs"] == "600000"
    missing = gregor("transactions", "describe", "--transactional-id", "nobody", "--bootstrap-server", bs)
    assert missing.returncode != 0 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr

    wrong = gregor("transactions", "abort", "--topic", "hang", "--partition", "0", "--start-offset", "1",
                   "--bootstrap-server", bs)
    assert wrong.returncode != 0 and "no open transaction starts at offset 1" in wrong.stderr
    aborted = gregor("transactions", "abort", "--topic", "hang", "--partition", "0", "--start-offset", "2",
                     "--bootstrap-server", bs)
    assert aborted.returncode == 0, aborted.stderr
    deadline = time.monotonic() + 10
    while _lso(bs, "hang") < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _lso(bs, "hang") == 4  # past the abort marker the tool wrote
