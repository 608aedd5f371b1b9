"""Restart always succeeds: altered segments after a clean shutdown are recovered (loudly) and
served from their last valid batch; the broker answers while its logs load, reporting the
partitions still loading as Kafka does; a first start does not claim an unclean shutdown."""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import Record, build_batch, iter_headers
from tests.broker_process import BrokerProcess
from tests.wire import WireClient


def _produce_body(topic: str, records: bytes, acks: int = 1) -> dict:
    return {"transactional_id": None, "acks": acks, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}


def _consume_all(bootstrap: str, topic: str, timeout_s: float = 30) -> list[tuple[int, bytes]]:
    """Every record up to the end of partition 0; fails on any consumer error (a CRC error, say)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "recovery", "enable.auto.commit": False,
                  "enable.partition.eof": True, "check.crcs": True})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(f"consumer error: {m.error()}")
            out.append((m.offset(), m.value()))
    finally:
        c.close()
    raise AssertionError(f"no end of partition after {len(out)} records")


def _segments(data_dir: Path, topic: str) -> list[Path]:
    return sorted((data_dir / f"{topic}-0").glob("*.log"))


def _batches(path: Path) -> list[tuple[int, int, int]]:
    """(base offset, next offset, position) of each batch in a segment file."""
    return [(h.base_offset, h.next_offset, h.position) for h in iter_headers(path.read_bytes())]


def _flip_last_batch_of_middle_segment(data_dir: Path) -> int:
    seg = _segments(data_dir, "altered")[1]
    data = bytearray(seg.read_bytes())
    data[-3] ^= 0xFF  # inside the last record's value: only the CRC can tell
    seg.write_bytes(bytes(data))
    return _batches(_segments(data_dir, "altered")[1])[-1][0]


def _truncate_active_segment_mid_batch(data_dir: Path) -> int:
    seg = _segments(data_dir, "altered")[-1]
    last_base = _batches(seg)[-1][0]
    os.truncate(seg, seg.stat().st_size - 5)
    return last_base


@pytest.mark.parametrize("alter", [_flip_last_batch_of_middle_segment, _truncate_active_segment_mid_batch],
                         ids=["middle segment's last batch altered", "active segment truncated mid-batch"])
def test_segment_altered_after_clean_shutdown_is_recovered(
    start_broker: Callable[..., BrokerProcess], tmp_path: Path, alter: Callable[[Path], int]
) -> None:
    """Before: the broker refused to start (active segment cut mid-batch) or served the altered
    batch (consumers saw a CRC error, or nothing more)."""
    data_dir = tmp_path / "data"
    b = start_broker({"log.segment.bytes": "1200"}, data_dir=data_dir)
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(60):
        p.produce("altered", f"value-{i:04d}".encode() * 4)
        p.flush(10)  # one batch per message
    assert b.stop() == 0
    assert len(_segments(data_dir, "altered")) >= 3
    keep = alter(data_dir)
    b.restart()
    got = _consume_all(b.bootstrap, "altered")
    assert got == [(i, f"value-{i:04d}".encode() * 4) for i in range(keep)]
    log_text = b.log_text()
    assert "altered-0" in log_text and "sanity check after a clean shutdown" in log_text
    assert f"the log now ends at offset {keep}" in log_text and "were lost" in log_text
    # Appends continue from the last valid batch.
    c = WireClient(b.bootstrap)
    r = c.request(0, 9, _produce_body("altered", bytes(build_batch([Record(0, 1, None, b"after")]))))
    assert r.responses[0].partition_responses[0].error_code == 0
    assert r.responses[0].partition_responses[0].base_offset == keep
    c.close()


def test_first_start_logs_no_unclean_shutdown(start_broker: Callable[..., BrokerProcess]) -> None:
    b = start_broker()
    assert "unclean" not in b.log_text().lower()
    assert "a new log dir" in b.log_text()


def _write_big_log(path: Path, batches: int) -> None:
    """`batches` one-record batches at offsets 0..n-1. The base offset is outside the CRC, so
    one batch is copied and only its base offset patched."""
    one = bytes(build_batch([Record(0, 1_700_000_000_000, None, b"x")], base_offset=0))
    buf = bytearray(one * batches)
    for i in range(batches):
        struct.pack_into(">q", buf, i * len(one), i)
    path.mkdir(parents=True, exist_ok=True)
    for f in path.iterdir():
        f.unlink()
    (path / f"{0:020d}.log").write_bytes(buf)


def _metadata(c: WireClient, *topics: str) -> dict[tuple[str, int], tuple[int, int]]:
    r = c.request(3, 1, {"topics": [{"name": t} for t in topics]})
    return {(t.name, p.partition_index): (p.error_code, p.leader_id) for t in r.topics for p in t.partitions}


def _latest_offset(c: WireClient, topic: str) -> tuple[int, int]:
    r = c.request(2, 1, {"replica_id": -1, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    part = r.topics[0].partitions[0]
    return part.error_code, part.offset


def test_broker_answers_while_logs_load(start_broker: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    """A log that takes seconds to recover: the broker answers within a second of listening,
    says the partition is loading (Metadata LEADER_NOT_AVAILABLE, Produce NOT_LEADER_OR_FOLLOWER)
    and serves the other partitions; then the loaded log serves all its records. Before, the
    broker loaded every log before listening and never reported a partition as loading."""
    data_dir = tmp_path / "data"
    b = start_broker(data_dir=data_dir)
    c = WireClient(b.bootstrap)
    for t in ("big", "small"):
        r = c.request(19, 5, {"topics": [{"name": t, "num_partitions": 1, "replication_factor": 1,
                                          "assignments": [], "configs": []}],
                              "timeout_ms": 5000, "validate_only": False})
        assert r.topics[0].error_code == 0
        r = c.request(0, 9, _produce_body(t, bytes(build_batch([Record(0, 1, None, b"first")]))))
        assert r.responses[0].partition_responses[0].error_code == 0
    c.close()
    assert b.stop() == 0
    n = 600_000
    _write_big_log(data_dir / "big-0", n)
    (data_dir / ".kafka_cleanshutdown").unlink()  # as after a crash: the big log is recovered batch by batch
    t_start = time.monotonic()
    first_line = len(b.log_lines)
    b.start(wait_loaded=False)

    def since_restart() -> str:
        return "\n".join(b.log_lines[first_line:])

    listening = time.monotonic()
    c = WireClient(b.bootstrap)
    r = c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert r.error_code == 0 and time.monotonic() - listening < 1.0
    md = _metadata(c, "big", "small")
    assert md[("big", 0)] == (ErrorCode.LEADER_NOT_AVAILABLE, -1), md
    r = c.request(0, 9, _produce_body("big", bytes(build_batch([Record(0, 1, None, b"early")]))))
    assert r.responses[0].partition_responses[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert "all logs loaded" not in since_restart()  # all of the above happened while loading
    deadline = time.monotonic() + 120
    while "all logs loaded" not in since_restart():
        assert time.monotonic() < deadline, since_restart()
        time.sleep(0.1)
    loaded_after = time.monotonic() - t_start
    assert _metadata(c, "big", "small") == {("big", 0): (0, 0), ("small", 0): (0, 0)}
    assert _latest_offset(c, "big") == (0, n)
    assert _latest_offset(c, "small") == (0, 1)
    c.close()
    print(f"loaded {n} batches in {loaded_after:.1f} s after the start; answered {listening - t_start:.2f} s after it")


def test_an_unloadable_log_leaves_only_its_partition_offline(start_broker: Callable[..., BrokerProcess],
                                                             tmp_path: Path) -> None:
    """Before: one log that could not be opened stopped the broker from starting at all."""
    data_dir = tmp_path / "data"
    b = start_broker(data_dir=data_dir)
    c = WireClient(b.bootstrap)
    r = c.request(19, 5, {"topics": [{"name": "two", "num_partitions": 2, "replication_factor": 1,
                                      "assignments": [], "configs": []}], "timeout_ms": 5000, "validate_only": False})
    assert r.topics[0].error_code == 0
    batch = bytes(build_batch([Record(0, 1, None, b"v")]))
    for p in (0, 1):
        body = _produce_body("two", batch)
        body["topic_data"][0]["partition_data"][0]["index"] = p
        assert c.request(0, 9, body).responses[0].partition_responses[0].error_code == 0
    c.close()
    assert b.stop() == 0
    seg = data_dir / "two-1" / f"{0:020d}.log"
    seg.unlink()
    seg.mkdir()  # cannot be opened as a file, not even by recovery
    before = len(b.log_lines)
    b.restart()
    b.wait_for_log("every log open", timeout_s=60, since=before)  # after a clean shutdown logs open as it serves
    c = WireClient(b.bootstrap)
    md = _metadata(c, "two")
    assert md[("two", 0)] == (0, 0) and md[("two", 1)][0] == ErrorCode.KAFKA_STORAGE_ERROR, md
    codes = []
    for p in (0, 1):
        body = _produce_body("two", batch)
        body["topic_data"][0]["partition_data"][0]["index"] = p
        codes.append(c.request(0, 9, body).responses[0].partition_responses[0].error_code)
    assert codes == [0, ErrorCode.KAFKA_STORAGE_ERROR]
    c.close()
    assert "two-1" in b.log_text() and "stays offline" in b.log_text()
    assert seg.is_dir()  # left as it was, for an operator
