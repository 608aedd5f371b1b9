"""Bad input gets a clear answer and the broker keeps serving everyone else."""

from __future__ import annotations

import struct

import pytest

from gregor.protocol import compression
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import Record, build_batch
from tests.broker_process import BrokerProcess
from tests.wire import WireClient


def _still_serving(bootstrap: str) -> None:
    c = WireClient(bootstrap)
    resp = c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert resp.error_code == 0
    c.close()


def _produce_body(topic: str, records: bytes, acks: int = 1) -> dict:
    return {"transactional_id": None, "acks": acks, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}


def _batch(n: int = 3, value_size: int = 10) -> bytearray:
    return bytearray(build_batch([Record(i, 1_700_000_000_000 + i, b"k", b"v" * value_size) for i in range(n)]))


@pytest.fixture(scope="module")
def strict_broker(tmp_path_factory: pytest.TempPathFactory) -> BrokerProcess:
    b = BrokerProcess(tmp_path_factory.mktemp("strict"), {
        "auto.create.topics.enable": "false",
        "socket.request.max.bytes": "200000",
        "message.max.bytes": "5000",
    }).start()
    yield b  # type: ignore[misc]
    b.kill()


def _create(c: WireClient, name: str, partitions: int = 1) -> int:
    resp = c.request(19, 5, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                          "assignments": [], "configs": []}], "timeout_ms": 5000, "validate_only": False})
    return resp.topics[0].error_code


def test_oversized_frame_closes_only_that_connection(strict_broker: BrokerProcess) -> None:
    c = WireClient(strict_broker.bootstrap)
    c.send_raw(struct.pack(">i", 300_000) + b"\0" * 100)
    assert c.closed_by_peer()
    _still_serving(strict_broker.bootstrap)
    assert "exceeds socket.request.max.bytes" in strict_broker.log_text()


def test_garbage_and_unknown_api_close_connection(strict_broker: BrokerProcess) -> None:
    c = WireClient(strict_broker.bootstrap)
    c.send_raw(struct.pack(">i", 3) + b"\x01\x02\x03")  # shorter than a request header
    assert c.closed_by_peer()
    c = WireClient(strict_broker.bootstrap)
    c.send_raw(struct.pack(">ihhi", 10, 999, 0, 1) + b"\xff\xff")  # unknown API key 999
    assert c.closed_by_peer()
    c = WireClient(strict_broker.bootstrap)
    # A Metadata v1 request whose topic array claims more entries than there are bytes.
    c.send_raw(struct.pack(">ihhih", 14, 3, 1, 7, -1) + struct.pack(">i", 1000))
    assert c.closed_by_peer()
    c = WireClient(strict_broker.bootstrap)
    c.send_raw(struct.pack(">ihhih", 10, 0, 2, 9, -1))  # Produce v2: below Kafka 4.0's minimum
    assert c.closed_by_peer()
    _still_serving(strict_broker.bootstrap)


def test_api_versions_too_new_gets_v0_error_reply(strict_broker: BrokerProcess) -> None:
    c = WireClient(strict_broker.bootstrap)
    c.send_raw(struct.pack(">ihhih", 10, 18, 99, 42, -1))
    frame = c.recv_frame()
    cid, err, n = struct.unpack_from(">ihi", frame, 0)
    assert (cid, err) == (42, ErrorCode.UNSUPPORTED_VERSION)
    keys = {struct.unpack_from(">hhh", frame, 10 + 6 * i)[0]: struct.unpack_from(">hhh", frame, 10 + 6 * i)[1:]
            for i in range(n)}
    assert keys[18] == (0, 4)
    assert keys[0] == (0, 11)  # advertised from v0 like Kafka 4.0 (librdkafka needs it to compress)...
    assert keys[1] == (4, 12)  # ...while Fetch shows its real floor
    resp = c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})  # same connection works
    assert resp.error_code == 0


def test_record_errors(strict_broker: BrokerProcess) -> None:
    c = WireClient(strict_broker.bootstrap)
    assert _create(c, "errors") == 0
    bad = _batch()
    bad[-1] ^= 0xFF  # corrupt a byte covered by the CRC
    r = c.request(0, 9, _produce_body("errors", bytes(bad)))
    assert r.responses[0].partition_responses[0].error_code == ErrorCode.CORRUPT_MESSAGE
    big = build_batch([Record(0, 1, None, b"x" * 6000)])
    r = c.request(0, 9, _produce_body("errors", big))
    assert r.responses[0].partition_responses[0].error_code == ErrorCode.MESSAGE_TOO_LARGE
    r = c.request(0, 9, _produce_body("no-such-topic", bytes(_batch())))
    assert r.responses[0].partition_responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    r = c.request(0, 9, _produce_body("errors", bytes(_batch()), acks=5))
    assert r.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_REQUIRED_ACKS
    ok = c.request(0, 9, _produce_body("errors", bytes(_batch())))
    assert ok.responses[0].partition_responses[0].error_code == 0
    assert ok.responses[0].partition_responses[0].base_offset == 0  # nothing bad was appended


def test_compressed_batch_passes_through(strict_broker: BrokerProcess) -> None:
    c = WireClient(strict_broker.bootstrap)
    assert _create(c, "compressed") == 0
    batch = build_batch([Record(i, 1000 + i, b"k%d" % i, b"v" * 50) for i in range(20)], codec=compression.ZSTD)
    r = c.request(0, 9, _produce_body("compressed", batch))
    assert r.responses[0].partition_responses[0].error_code == 0
    f = c.request(1, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                          "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                          "topics": [{"topic": "compressed", "partitions": [
                              {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                               "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                          "forgotten_topics_data": [], "rack_id": ""})
    data = bytes(f.responses[0].partitions[0].records)
    assert data[16:] == batch[16:]  # identical after base offset and leader epoch: no recompression


def test_unknown_topic_and_illegal_names(strict_broker: BrokerProcess) -> None:
    c = WireClient(strict_broker.bootstrap)
    md = c.request(3, 12, {"topics": [{"topic_id": None, "name": "missing"}], "allow_auto_topic_creation": True,
                           "include_topic_authorized_operations": False})
    assert md.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # auto-create is off here
    for name in ["bad name", "a" * 250, "..", ""]:
        assert _create(c, name) == ErrorCode.INVALID_TOPIC_EXCEPTION, name
    assert _create(c, "dup.topic") == 0
    assert _create(c, "dup_topic") == ErrorCode.INVALID_TOPIC_EXCEPTION  # collides with dup.topic
    assert _create(c, "dup.topic") == ErrorCode.TOPIC_ALREADY_EXISTS
