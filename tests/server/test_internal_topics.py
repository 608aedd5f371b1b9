"""Internal topics belong to the broker (issue 8, finding 1).

Clients may not create, delete or add partitions to `__consumer_offsets` or `__transaction_state`;
the broker still creates `__consumer_offsets` itself, logging one line. And whatever lands in
`__consumer_offsets`, the broker starts again: the group coordinator skips records and batches it
cannot decode, naming partition and offset, and keeps the offsets around them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic

from gregor.coordinator.group import records as rec
from gregor.coordinator.group.coordinator import OFFSETS_TOPIC, partition_for
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import HEADER_SIZE, Record, build_batch, compute_crc, iter_headers
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from tests.broker_process import BrokerProcess
from tests.server.admin_wire import create_partitions, create_topic, delete_topic, error_of, metadata
from tests.wire import WireClient

GROUP = "replayed"


def _produce(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, partition=0)
    assert p.flush(10) == 0


def _commit(bootstrap: str, topic: str, offset: int) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def _committed(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        c.close()


def _lying_batch() -> bytes:
    """A batch whose CRC is right but whose only record claims to run past the end of the batch."""
    good = bytearray(build_batch([Record(0, 1, rec.group_key(GROUP), b"x" * 20)]))
    good[HEADER_SIZE] = 0x7E  # record length varint: 63, beyond the bytes present
    good[17:21] = compute_crc(good, 0, len(good)).to_bytes(4, "big")
    return bytes(good)


def _append_garbage(data_dir: Path) -> int:
    """Append, through the storage API while the broker is stopped, records no coordinator can read:
    garbage keys, a real offset key with a garbage value, unknown schema versions, truncated fields,
    and a batch whose records do not parse. Returns the partition written."""
    p = partition_for(GROUP, 50)
    lg = Log.open(str(data_dir / f"{OFFSETS_TOPIC}-{p}"), LogConfig(cleanup_policy="compact"))
    try:
        batches = [
            build_batch([
                Record(0, 1, b"\xff", b"\x00"),  # key shorter than its version field
                Record(1, 1, rec.offset_key(GROUP, "data", 0), b"\x00\x03\x00\x00"),  # truncated offset value
                Record(2, 1, b"\x00\x09garbage", b"garbage"),  # unknown key version
                Record(3, 1, rec.group_key(GROUP), b"\x00\x03\x00\x10abc"),  # truncated group value
                Record(4, 1, rec.offset_key(GROUP, "data", 0), b"\x7f\x7f" + b"\x00" * 30),  # unknown value version
                Record(5, 1, b"\x00\x01\x7f\xff\xff\xff", None),  # string length past the end (a tombstone)
            ]),
            _lying_batch(),
        ]
        for b in batches:
            buf = bytearray(b)
            lg.append_as_leader(buf, list(iter_headers(buf)), 0, 1_700_000_000_000)
        lg.flush()
    finally:
        lg.close()
    return p


def test_unreadable_offsets_records_are_skipped_at_restart(
        start_broker: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    broker = start_broker(data_dir=tmp_path / "b")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("data", 1, 1)])["data"].result(10)
    _produce(broker.bootstrap, "data", 20)
    _commit(broker.bootstrap, "data", 5)
    assert broker.stop() == 0

    p = _append_garbage(tmp_path / "b")
    broker.restart()  # the landed broker refused to start here
    assert _committed(broker.bootstrap, "data") == 5
    warned = [line for line in broker.log_lines if "unreadable" in line and f"{OFFSETS_TOPIC}-{p}" in line]
    assert any(re.search(r"at offset \d+", line) for line in warned), broker.log_text()
    # The lying batch is skipped by the coordinator, unless log recovery already dropped it (loudly).
    assert any("batch" in line for line in warned) or "truncat" in broker.log_text().lower()

    _commit(broker.bootstrap, "data", 7)  # commits after the garbage keep working, and survive a crash
    broker.kill()
    broker.restart()
    assert _committed(broker.bootstrap, "data") == 7


def test_clients_cannot_create_delete_or_grow_internal_topics(start_broker: Callable[..., BrokerProcess]) -> None:
    broker = start_broker()
    c = WireClient(broker.bootstrap)
    for name in (OFFSETS_TOPIC, "__transaction_state"):
        code, msg = error_of(create_topic(c, name, 1))
        assert code == ErrorCode.INVALID_TOPIC_EXCEPTION and "internal topic" in msg, (name, code, msg)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with pytest.raises(KafkaException, match="internal topic"):
        admin.create_topics([NewTopic(OFFSETS_TOPIC, 3, 1)])[OFFSETS_TOPIC].result(10)

    # The broker's own creation still works: the first group commit creates __consumer_offsets, with
    # offsets.topic.num.partitions partitions and one log line for them all.
    admin.create_topics([NewTopic("data", 1, 1)])["data"].result(10)
    _produce(broker.bootstrap, "data", 3)
    _commit(broker.bootstrap, "data", 2)
    t = metadata(c, OFFSETS_TOPIC).topics[0]
    assert t.error_code == 0 and t.is_internal and len(t.partitions) == 50

    code, msg = error_of(delete_topic(c, OFFSETS_TOPIC))
    assert code == ErrorCode.INVALID_TOPIC_EXCEPTION and "not allowed to be marked for deletion" in msg
    with pytest.raises(KafkaException, match="Invalid topic"):  # librdkafka's DeleteTopics v4 carries no message
        admin.delete_topics([OFFSETS_TOPIC])[OFFSETS_TOPIC].result(10)
    code, msg = error_of(create_partitions(c, OFFSETS_TOPIC, 60))
    assert code == ErrorCode.INVALID_PARTITIONS and "internal topic" in msg
    with pytest.raises(KafkaException):
        admin.create_partitions([NewPartitions(OFFSETS_TOPIC, 60)])[OFFSETS_TOPIC].result(10)
    assert len(metadata(c, OFFSETS_TOPIC).topics[0].partitions) == 50
    assert _committed(broker.bootstrap, "data") == 2

    # Logs are created in the background: their line comes when all are.
    broker.wait_for_log(re.compile(f"created.*{OFFSETS_TOPIC}|{OFFSETS_TOPIC}.*created"))
    mentions = [line for line in broker.log_lines if OFFSETS_TOPIC in line and "created" in line]
    assert len(mentions) == 1, mentions


def test_clients_cannot_alter_internal_topic_configs(start_broker: Callable[..., BrokerProcess]) -> None:
    """Found by the fuzzer: IncrementalAlterConfigs min.insync.replicas=4096 on __consumer_offsets was
    accepted, and from then on no group could store its state. Groups keep committing after the refusal."""
    broker = start_broker()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("data", 1, 1)])["data"].result(10)
    _produce(broker.bootstrap, "data", 3)
    _commit(broker.bootstrap, "data", 1)
    res = ConfigResource(ConfigResource.Type.TOPIC, OFFSETS_TOPIC, incremental_configs=[
        ConfigEntry("min.insync.replicas", "4096", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match="internal topic"):
        admin.incremental_alter_configs([res])[res].result(10)
    with pytest.raises(KafkaException, match="internal topic"):
        admin.incremental_alter_configs([res], validate_only=True)[res].result(10)
    _commit(broker.bootstrap, "data", 3)
    assert _committed(broker.bootstrap, "data") == 3
    assert not [line for line in broker.log_lines if " ERROR " in line]


def test_an_offset_commit_too_large_for_the_offsets_log_is_answered(
        start_broker: Callable[..., BrokerProcess]) -> None:
    """Found by the fuzzer: an OffsetCommit whose records outgrow __consumer_offsets' segment.bytes
    made the storage error escape the handler (a traceback, the connection closed). Kafka answers
    INVALID_COMMIT_OFFSET_SIZE; the connection stays open and smaller commits still work."""
    broker = start_broker({"offsets.topic.segment.bytes": str(1 << 20)})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("wide", 300, 1)])["wide"].result(10)
    _produce(broker.bootstrap, "wide", 1)
    c = WireClient(broker.bootstrap)
    body = {"group_id": "big", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "wide", "partitions": [
                {"partition_index": p, "committed_offset": 0, "committed_leader_epoch": -1,
                 "committed_metadata": "m" * 4000} for p in range(300)]}]}
    deadline = time.monotonic() + 20
    while True:  # the first commit may find the offsets topic's logs still being created
        resp = c.request(8, 7, body)
        codes = {p.error_code for p in resp.topics[0].partitions}
        if codes != {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS} and codes != {ErrorCode.COORDINATOR_NOT_AVAILABLE} \
                or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert codes == {ErrorCode.INVALID_COMMIT_OFFSET_SIZE}, codes
    assert c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code == 0
    _commit(broker.bootstrap, "wide", 1)
    assert "Traceback" not in broker.log_text()
