"""Produce validation through a real socket (issue 8, findings 4, 5 and 10, and internal topics).

Each crafted batch is built with build_batch and then corrupted. Every test ends the same way:
the connection that sent it still answers, the log end offset did not move, a confluent-kafka
consumer reads the earlier good data, and after a broker restart that data is still served.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from gregor.protocol import apis, compression
from gregor.protocol.errors import ErrorCode
from gregor.protocol.frames import decode_response
from gregor.protocol.records import _OFF_CRC, HEADER_SIZE, Header, Record, build_batch, compute_crc
from tests.broker_process import BrokerProcess
from tests.server.hostile import zero_bomb
from tests.wire import WireClient

NOW_MS = int(time.time() * 1000)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("validation"), {"auto.create.topics.enable": "false"}).start()
    yield b
    b.kill()


# --- helpers -------------------------------------------------------------------------------------


def _create(c: WireClient, name: str, **configs: str) -> None:
    resp = c.request(19, 5, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                                         "configs": [{"name": k.replace("_", "."), "value": v}
                                                     for k, v in configs.items()]}],
                             "timeout_ms": 5000, "validate_only": False})
    assert resp.topics[0].error_code == 0, resp


def _produce(c: WireClient, topic: str, records: bytes, version: int = 9, acks: int = 1):  # noqa: ANN202
    body = {"transactional_id": None, "acks": acks, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": bytes(records)}]}]}
    return c.request(0, version, body).responses[0].partition_responses[0]


def _leo(c: WireClient, topic: str) -> int:
    r = c.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    p = r.topics[0].partitions[0]
    assert p.error_code == 0
    return p.offset


def _good(n: int = 3, start: int = 0, key: bytes | None = b"k", codec: int = compression.NONE) -> bytes:
    return build_batch([Record(i, NOW_MS + i, key + b"%d" % (start + i) if key else None, b"good-%d" % (start + i))
                        for i in range(n)], codec=codec)


def _recrc(b: bytearray) -> bytes:
    struct.pack_into(">I", b, _OFF_CRC, compute_crc(b, 0, len(b)))
    return bytes(b)


def _raw_batch(body: bytes, count: int = 1, codec: int = compression.NONE) -> bytes:
    """A batch whose records section is exactly `body` (CRC valid)."""
    b = bytearray(build_batch([Record(0, NOW_MS, b"k", b"v")]))[:HEADER_SIZE] + body
    struct.pack_into(">i", b, 8, len(b) - 12)
    struct.pack_into(">h", b, 21, codec)
    struct.pack_into(">i", b, 23, count - 1)
    struct.pack_into(">i", b, 57, count)
    return _recrc(b)


def _consume(bootstrap: str, topic: str, n: int, timeout_s: float = 20.0) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"v-{uuid.uuid4()}", "enable.auto.commit": False,
                  "fetch.queue.backoff.ms": 1})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append(m.value())
    finally:
        c.close()
    return out


def _setup(broker: BrokerProcess, **configs: str) -> tuple[WireClient, str, list[bytes]]:
    """A new topic with three good records; returns (connection, topic, their values)."""
    c = WireClient(broker.bootstrap)
    topic = f"t-{uuid.uuid4().hex[:8]}"
    _create(c, topic, **configs)
    codec = compression.ZSTD if configs.get("compression_type") == "zstd" else compression.NONE
    r = _produce(c, topic, _good(codec=codec))
    assert (r.error_code, r.base_offset) == (0, 0)
    return c, topic, [b"good-0", b"good-1", b"good-2"]


def _still_fine(broker: BrokerProcess, c: WireClient, topic: str, values: list[bytes], restart: bool = True) -> None:
    assert c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code == 0
    assert _leo(c, topic) == len(values)
    assert _consume(broker.bootstrap, topic, len(values)) == values
    c.close()
    if restart:
        assert broker.stop() == 0
        broker.restart()
        c2 = WireClient(broker.bootstrap)
        assert _leo(c2, topic) == len(values)
        c2.close()
        assert _consume(broker.bootstrap, topic, len(values)) == values


def _rss_peak_kib(broker: BrokerProcess) -> int:
    assert broker.proc is not None
    with open(f"/proc/{broker.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


# --- finding 4: lying batches --------------------------------------------------------------------


def test_batch_claiming_2_31_records_is_refused(broker: BrokerProcess) -> None:
    c, topic, values = _setup(broker)
    lie = bytearray(build_batch([Record(0, NOW_MS, b"k", b"v")]))
    struct.pack_into(">i", lie, 23, 2**31 - 2)  # last offset delta
    struct.pack_into(">i", lie, 57, 2**31 - 1)  # records count
    r = _produce(c, topic, _recrc(lie))
    assert r.error_code == ErrorCode.CORRUPT_MESSAGE, r
    assert "record 1" in r.error_message
    _still_fine(broker, c, topic, values)


def test_record_length_past_the_batch_is_refused(broker: BrokerProcess) -> None:
    c, topic, values = _setup(broker)
    b = bytearray(_good(2))
    b[HEADER_SIZE] = 0x7E  # the first record's length: 63 bytes, past the batch
    r = _produce(c, topic, _recrc(b))
    assert r.error_code == ErrorCode.CORRUPT_MESSAGE and "length out of range" in r.error_message
    _still_fine(broker, c, topic, values, restart=False)


# --- finding 5: decompression bombs ------------------------------------------------------------


def test_zstd_bomb_of_2_gib_is_refused_on_plain_and_compacted_topics(broker: BrokerProcess) -> None:
    bomb = _raw_batch(zero_bomb(compression.ZSTD, 2 << 30), codec=compression.ZSTD)
    assert len(bomb) < 200_000
    c, topic, values = _setup(broker)
    cc, ctopic, cvalues = _setup(broker, cleanup_policy="compact")
    for conn, t in ((c, topic), (cc, ctopic)):
        r = _produce(conn, t, bomb, version=7)  # as found: Produce v7 (no error messages before v8)
        assert r.error_code == ErrorCode.MESSAGE_TOO_LARGE, r
        r = _produce(conn, t, bomb, version=9)
        assert r.error_code == ErrorCode.MESSAGE_TOO_LARGE, r
        assert "gregor.batch.decompressed.max.ratio" in r.error_message and "max.message.bytes" in r.error_message
    assert _rss_peak_kib(broker) < 256 * 1024  # 2 GiB bomb; 4.2 GB peak before (measured ~106 MiB now)
    _still_fine(broker, cc, ctopic, cvalues, restart=False)
    _still_fine(broker, c, topic, values)


def test_gzip_lz4_and_snappy_bombs_are_refused(broker: BrokerProcess) -> None:
    c, topic, values = _setup(broker)
    gzip_bomb = _raw_batch(zero_bomb(compression.GZIP, 512 << 20), codec=compression.GZIP)
    lz4_bomb = _raw_batch(zero_bomb(compression.LZ4, 200 << 20), codec=compression.LZ4)
    snappy_lie = _raw_batch(b"\xff\xff\xff\xff\x07" + bytes(100), codec=compression.SNAPPY)  # preamble: 2 GiB
    for bomb in (gzip_bomb, lz4_bomb, snappy_lie):
        assert len(bomb) < 1_000_000
        r = _produce(c, topic, bomb)
        assert r.error_code == ErrorCode.MESSAGE_TOO_LARGE, r
    assert _rss_peak_kib(broker) < 256 * 1024
    _still_fine(broker, c, topic, values)


@pytest.mark.parametrize("configs", [{"compression_type": "zstd"}, {"cleanup_policy": "compact"}, {}],
                         ids=["zstd-topic", "compacted", "plain"])
def test_undecodable_records_answer_corrupt_message(broker: BrokerProcess, configs: dict[str, str]) -> None:
    """Finding 10: on zstd-configured and compacted topics these closed the connection."""
    c, topic, values = _setup(broker, **configs)
    header_rec = build_batch([Record(0, NOW_MS, b"k", b"v", [Header("h", b"x")])])
    body = bytearray(header_rec[HEADER_SIZE:])
    body[body.index(b"\x02h")] = 0x01  # header key length -1: a null header key
    cases = {
        "truncated varint": _raw_batch(b"\x80"),
        "null header key": _raw_batch(bytes(body)),
        "record length out of range": _raw_batch(b"\x7e\x00\x00\x00\x02k\x02v\x00"),
    }
    good = _good(20)[HEADER_SIZE:]
    for codec in (compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD):
        frame = compression.compress(codec, good)
        cases[f"bad {compression.NAMES[codec]} frame"] = _raw_batch(frame[: len(frame) // 2], 20, codec)
        cases[f"garbage {compression.NAMES[codec]}"] = _raw_batch(b"\x01garbage, not a frame" * 3, 20, codec)
    for name, batch in cases.items():
        r = _produce(c, topic, batch)
        assert r.error_code == ErrorCode.CORRUPT_MESSAGE, (name, r)
    _still_fine(broker, c, topic, values, restart=False)


def test_keyless_records_on_a_compacted_topic_get_record_errors(broker: BrokerProcess) -> None:
    c, topic, values = _setup(broker, cleanup_policy="compact")
    batch = build_batch([Record(0, NOW_MS, b"k", b"v"), Record(1, NOW_MS, None, b"v"), Record(2, NOW_MS, None, b"v")],
                        codec=compression.LZ4)
    r = _produce(c, topic, batch)
    assert r.error_code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in r.record_errors] == [1, 2]
    _still_fine(broker, c, topic, values, restart=False)


def test_timestamps_outside_kip_937_bounds(broker: BrokerProcess) -> None:
    c, topic, values = _setup(broker, message_timestamp_before_max_ms="86400000")
    future = build_batch([Record(0, NOW_MS + 2 * 3_600_000, b"k", b"v")])  # after.max.ms: 1 hour by default
    r = _produce(c, topic, future)
    assert r.error_code == ErrorCode.INVALID_TIMESTAMP and "message.timestamp.after.max.ms" in r.error_message
    past = build_batch([Record(0, NOW_MS, b"k", b"v"), Record(1, NOW_MS - 2 * 86_400_000, b"k", b"v")])
    r = _produce(c, topic, past)
    assert r.error_code == ErrorCode.INVALID_TIMESTAMP and [e.batch_index for e in r.record_errors] == [1]
    _still_fine(broker, c, topic, values, restart=False)


# --- finding 10: stored bad records and ListOffsets MAX_TIMESTAMP ----------------------------------


def test_list_offsets_max_timestamp_survives_a_bad_stored_record(broker: BrokerProcess) -> None:
    c, topic, values = _setup(broker)
    late = build_batch([Record(0, NOW_MS + 1000, b"k", b"late", [Header("h", b"x")])])
    assert _produce(c, topic, late).error_code == 0
    values = values + [b"late"]
    c.close()
    assert broker.stop() == 0
    log_file = broker.data_dir / f"{topic}-0" / ("0" * 20 + ".log")
    data = bytearray(log_file.read_bytes())
    pos = data.rindex(b"\x02h\x02x")  # the stored header of the last record
    data[pos] = 0x01  # a null header key; the CRC is made valid again
    start = len(data) - len(late)
    struct.pack_into(">I", data, start + _OFF_CRC, compute_crc(data, start, len(late)))
    log_file.write_bytes(bytes(data))
    broker.restart()
    c = WireClient(broker.bootstrap)
    r = c.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -3}]}]})
    p = r.topics[0].partitions[0]
    assert p.error_code == 0
    assert (p.offset, p.timestamp) in ((3, NOW_MS + 1000), (2, NOW_MS + 2))  # (2: if recovery dropped the batch)
    assert c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code == 0
    c.close()


# --- internal topics ---------------------------------------------------------------------------------


def test_produce_to_internal_topics_is_refused_and_groups_still_commit(broker: BrokerProcess) -> None:
    c, topic, values = _setup(broker)
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    consumer.close()
    for internal in ("__consumer_offsets", "__transaction_state"):
        body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
                "topic_data": [{"name": internal, "partition_data": [{"index": i, "records": _good(key=b"garbage")}
                                                                      for i in (0, 1)]}]}
        for p in c.request(0, 9, body).responses[0].partition_responses:
            assert p.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
            assert p.error_message == f"Cannot append to internal topic {internal}"
    _still_fine(broker, c, topic, values)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
    consumer.close()
    assert tp.offset == 2  # the group's commit survived the garbage and the restart


# --- off the event loop --------------------------------------------------------------------------------


def test_large_batches_validate_off_the_loop_and_append_in_request_order(broker: BrokerProcess) -> None:
    c, topic, values = _setup(broker)
    big = build_batch([Record(i, NOW_MS, b"k", b"x" * 1000) for i in range(1000)])  # ~1 MB: validated on the pool
    big_zstd = build_batch([Record(i, NOW_MS, b"k", bytes(50_000)) for i in range(1000)],
                           codec=compression.ZSTD)  # 50 MB expanded: past the inline budget
    small = _good(1, start=9)
    corr = [c.send(0, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
                          "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": b}]}]})
            for b in (big_zstd, small, big, small)]
    other = WireClient(broker.bootstrap)
    t0 = time.monotonic()
    assert _produce(other, topic, small).error_code == 0  # another client is answered meanwhile
    other_s = time.monotonic() - t0
    offsets = []
    for cid in corr:
        got, resp = decode_response(c.recv_frame(), apis.BY_KEY[0], 9)
        assert got == cid
        pr = resp.responses[0].partition_responses[0]
        assert pr.error_code == 0, pr
        offsets.append(pr.base_offset)
    assert offsets == sorted(offsets)  # appended in request order although the small ones validated first
    assert other_s < 5
    other.close()
    c.close()


def test_acks_0_offloaded_batch_is_appended_before_the_next_request(broker: BrokerProcess) -> None:
    """acks=0 gets no response, but its off-loop validation still holds the connection's later appends."""
    c, topic, values = _setup(broker)
    big_zstd = build_batch([Record(i, NOW_MS, b"k", bytes(50_000)) for i in range(1000)], codec=compression.ZSTD)
    c.send(0, 9, {"transactional_id": None, "acks": 0, "timeout_ms": 5000,
                  "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": big_zstd}]}]})
    r = _produce(c, topic, _good(1, start=9))
    assert (r.error_code, r.base_offset) == (0, 3 + 1000)
    bomb = _raw_batch(zero_bomb(compression.ZSTD, 1 << 30), codec=compression.ZSTD)
    c.send(0, 9, {"transactional_id": None, "acks": 0, "timeout_ms": 5000,
                  "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": bomb}]}]})
    r = _produce(c, topic, _good(1, start=10))  # waits for the bomb's validation: refused, nothing appended
    assert (r.error_code, r.base_offset) == (0, 3 + 1000 + 1)
    assert _leo(c, topic) == 3 + 1000 + 2


def _max_latency_while_validating(broker: BrokerProcess, topic: str, batches: list[bytes]) -> float:
    """The slowest ApiVersions round trip on a second connection while the first sends `batches`."""
    import threading

    sender = WireClient(broker.bootstrap, timeout_s=60)
    errors: list[object] = []

    def send_all() -> None:
        cids = [sender.send(0, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
                                   "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": b}]}]})
                for b in batches]
        for cid in cids:
            got, resp = decode_response(sender.recv_frame(), apis.BY_KEY[0], 9)
            pr = resp.responses[0].partition_responses[0]
            if got != cid or pr.error_code:
                errors.append(pr)

    probe = WireClient(broker.bootstrap)
    t = threading.Thread(target=send_all)
    t.start()
    worst = 0.0
    while t.is_alive():
        t0 = time.monotonic()
        assert probe.request(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code == 0
        worst = max(worst, time.monotonic() - t0)
    t.join()
    assert not errors, errors
    probe.close()
    sender.close()
    return worst


def test_other_clients_are_answered_while_large_batches_validate(start_broker) -> None:  # noqa: ANN001
    """The same heavy batches (zstd, ~60 MB of records each) stall the event loop when validated on it
    (gregor.validation.offload.bytes set out of reach) and not when validated on the pool."""
    heavy = build_batch([Record(i, NOW_MS, b"k%d" % i, bytes(600)) for i in range(100_000)], codec=compression.ZSTD)
    worst = {}
    for name, offload in (("inline", str(2**28)), ("pool", "262144")):
        b = start_broker({"gregor.validation.offload.bytes": offload})
        c = WireClient(b.bootstrap)
        _create(c, "heavy")
        c.close()
        worst[name] = _max_latency_while_validating(b, "heavy", [heavy] * 6)
        b.kill()
    print("worst ApiVersions round trip while validating:", worst)
    assert worst["pool"] < worst["inline"] / 2, worst
