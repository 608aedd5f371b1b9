"""Acknowledged data survives SIGKILL and clean restarts; retention and timestamps through clients."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.protocol.records import Record, build_batch
from tests.broker_process import BrokerProcess
from tests.wire import WireClient


def _consume(bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float = 30,
             **conf: object) -> list[tuple[int, int, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "durability", "enable.auto.commit": False, **conf})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + timeout_s
    while len(out) < expected and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            out.append((m.partition(), m.offset(), m.value()))
    c.close()
    return out


def test_acked_messages_survive_sigkill(start_broker: Callable[..., BrokerProcess]) -> None:
    b = start_broker()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("durable", 4, 1)])["durable"].result(10)
    acked: list[tuple[int, int, bytes]] = []
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "1", "linger.ms": 2, "message.timeout.ms": 5000})

    def cb(err: object, m: object) -> None:
        if err is None:
            acked.append((m.partition(), m.offset(), m.value()))  # type: ignore[attr-defined]

    # Keep producing while the broker is killed: only acknowledged messages are owed.
    for i in range(20000):
        p.produce("durable", f"msg-{i}".encode() * 3, f"k{i}".encode(), on_delivery=cb)
        p.poll(0)
        if i == 15000:
            p.flush(10)
            b.kill()
    p.flush(10)
    assert len(acked) >= 15000
    b.restart()
    got = _consume(b.bootstrap, "durable", 4, len(acked))
    assert set(acked) <= set(got), f"lost {len(set(acked) - set(got))} acknowledged messages"
    # Offsets did not change and have no holes.
    for part in range(4):
        offs = sorted(o for p_, o, _ in got if p_ == part)
        assert offs == list(range(len(offs)))


def test_clean_shutdown_and_restart(start_broker: Callable[..., BrokerProcess]) -> None:
    b = start_broker()
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all"})
    for i in range(1000):
        p.produce("restart", f"v{i}".encode())
    assert p.flush(10) == 0
    assert b.stop() == 0
    assert "shut down cleanly" in b.log_text()
    b.restart()
    got = _consume(b.bootstrap, "restart", 1, 1000)
    assert [v for _, _, v in got] == [f"v{i}".encode() for i in range(1000)]


def _first_message(c: Consumer, timeout_s: float = 10) -> object:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            return m
    raise AssertionError("no message")


def test_retention_moves_log_start_and_consumers_reset(start_broker: Callable[..., BrokerProcess]) -> None:
    b = start_broker({"log.retention.check.interval.ms": "200", "log.segment.delete.delay.ms": "0"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("retained", 1, 1, config={"segment.bytes": "2000", "retention.ms": "5000"})])[
        "retained"].result(10)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    old_ts = int(time.time() * 1000) - 60_000
    for _ in range(100):  # older than retention.ms: their segments go
        p.produce("retained", b"x" * 100, timestamp=old_ts)
        p.flush(5)
    for i in range(100):  # fresh: kept
        p.produce("retained", f"new-{i}".encode())
        p.flush(5)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "ret", "enable.auto.commit": False})
    tp = TopicPartition("retained", 0)
    deadline = time.monotonic() + 20
    low = high = 0
    while time.monotonic() < deadline:
        low, high = c.get_watermark_offsets(tp, timeout=5)
        if low > 50:
            break
        time.sleep(0.2)
    assert 50 < low <= 100, "old segments were deleted and ListOffsets earliest moved"
    assert high == 200
    c.close()
    assert not (b.data_dir / "retained-0" / "00000000000000000000.log").exists()
    # A consumer asking for a deleted offset gets OFFSET_OUT_OF_RANGE and resets per auto.offset.reset.
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "ret2", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition("retained", 0, 5)])
    assert _first_message(c).offset() == low  # type: ignore[attr-defined]
    c.close()
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "ret3", "enable.auto.commit": False,
                  "auto.offset.reset": "latest"})
    c.assign([TopicPartition("retained", 0, 5)])
    end = time.monotonic() + 10
    while c.position([tp])[0].offset != 200 and time.monotonic() < end:
        c.poll(0.2)
    p.produce("retained", b"after-reset")
    p.flush(5)
    m = _first_message(c)
    assert (m.offset(), m.value()) == (200, b"after-reset")  # type: ignore[attr-defined]
    c.close()


def test_list_offsets_by_timestamp(start_broker: Callable[..., BrokerProcess]) -> None:
    b = start_broker({"log.index.interval.bytes": "100"})
    p = Producer({"bootstrap.servers": b.bootstrap, "batch.num.messages": 7})
    base = 1_700_000_000_000
    for i in range(500):
        p.produce("times", f"{i}".encode(), timestamp=base + i * 10)
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "ts", "enable.auto.commit": False})
    for ts, expected in [(base - 5, 0), (base, 0), (base + 1, 1), (base + 2505, 251), (base + 4990, 499),
                         (base + 4991, -1)]:
        got = c.offsets_for_times([TopicPartition("times", 0, ts)], timeout=10)[0]
        assert got.offset == expected, (ts, got.offset)
    c.close()


def test_log_append_time(start_broker: Callable[..., BrokerProcess]) -> None:
    b = start_broker({"log.message.timestamp.type": "LogAppendTime"})
    p = Producer({"bootstrap.servers": b.bootstrap})
    p.produce("appendtime", b"v", timestamp=1000)
    assert p.flush(10) == 0
    before = int(time.time() * 1000) - 60_000
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "lat", "enable.auto.commit": False})
    c.assign([TopicPartition("appendtime", 0, OFFSET_BEGINNING)])
    m = None
    end = time.monotonic() + 10
    while m is None and time.monotonic() < end:
        m = c.poll(0.5)
    assert m is not None
    ts_type, ts = m.timestamp()
    assert ts_type == 2 and ts > before  # TIMESTAMP_LOG_APPEND_TIME, set by the broker
    c.close()


def test_torn_tail_after_power_cut_is_truncated(start_broker: Callable[..., BrokerProcess]) -> None:
    b = start_broker()
    p = Producer({"bootstrap.servers": b.bootstrap, "batch.num.messages": 10, "linger.ms": 0})
    for i in range(500):
        p.produce("torn", f"{i:05d}".encode() * 10)
    assert p.flush(10) == 0
    b.kill()
    seg = b.data_dir / "torn-0" / "00000000000000000000.log"
    data = seg.read_bytes()
    # A power cut mid-write: the last batch is cut short, and garbage follows an earlier batch's end.
    seg.write_bytes(data[:-37])
    (b.data_dir / "torn-0" / "00000000000000000000.index").write_bytes(b"\xff" * 24)  # a corrupt index
    b.restart()
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "torn"})
    low, high = c.get_watermark_offsets(TopicPartition("torn", 0), timeout=10)
    c.close()
    assert low == 0 and 480 <= high < 500, "only the torn batch is lost"
    values = [v for _, _, v in _consume(b.bootstrap, "torn", 1, high)]
    assert len(values) == high
    assert values == [f"{i:05d}".encode() * 10 for i in range(len(values))]
    assert "truncat" in b.log_text().lower()
    # The log continues at the truncation point with no hole.
    p = Producer({"bootstrap.servers": b.bootstrap})
    p.produce("torn", b"after")
    assert p.flush(10) == 0
    got = _consume(b.bootstrap, "torn", 1, len(values) + 1, timeout_s=10)
    assert got[-1][1:] == (len(values), b"after")


_STRACE = shutil.which("strace") or "/usr/bin/strace"
_SOCKET_WRITE = re.compile(r"\b(write|writev|sendto|sendmsg)\(\d+<TCP:\[127\.0\.0\.1:(\d+)->")


def _syscalls_around_one_produce(b: BrokerProcess, topic: str, tmp_path: Path) -> list[str]:
    """The broker's fsync/write syscalls (every thread, files and sockets named) while one
    acks=1 Produce of one batch is handled."""
    assert b.proc is not None
    out = tmp_path / "strace.txt"
    cmd = [_STRACE, "-f", "-yy", "-qq", "-o", str(out),
           "-e", "trace=fsync,fdatasync,pwrite64,pwritev,write,writev,sendto,sendmsg"]
    for tid in os.listdir(f"/proc/{b.proc.pid}/task"):
        cmd += ["-p", tid]
    tracer = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while not out.exists() and time.monotonic() < deadline:  # attached once it opened its output
            time.sleep(0.05)
        time.sleep(0.5)
        c = WireClient(b.bootstrap)
        r = c.request(0, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": bytes(build_batch([Record(0, 1, b"k", b"v")]))}]}]})
        assert r.responses[0].partition_responses[0].error_code == 0
        c.close()
        time.sleep(0.3)
    finally:
        tracer.terminate()
        _, err = tracer.communicate(timeout=10)
    text = out.read_text()
    assert text, f"strace recorded nothing: {err}"
    return text.splitlines()


def _fsync_between_append_and_ack(lines: list[str], topic: str, port: int) -> bool:
    """Whether the segment the Produce appended to is fsynced after its pwrite and before the
    response is written to the client's socket."""
    seg = f"/{topic}-0/"
    append = next(i for i, ln in enumerate(lines) if "pwrite" in ln and seg in ln and ".log>" in ln)
    ack = next(i for i, ln in enumerate(lines[append:], append)
               if (m := _SOCKET_WRITE.search(ln)) and int(m.group(2)) == port)
    return any(re.search(r"\b(fsync|fdatasync)\(\d+<[^>]*" + re.escape(seg) + r"[^>]*\.log>", ln)
               for ln in lines[append:ack])


def _create_topic(b: BrokerProcess, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(10)


@pytest.mark.skipif(not os.path.exists(_STRACE), reason="strace is not installed (scripts/install.sh installs it)")
@pytest.mark.parametrize("broker_props, topic_configs, synced", [
    ({}, {"flush.messages": "1"}, True),
    ({"log.flush.interval.messages": "1"}, {}, True),
    ({}, {}, False),
], ids=["topic flush.messages=1", "log.flush.interval.messages=1", "defaults"])
def test_flush_messages_1_fsyncs_before_the_ack(start_broker: Callable[..., BrokerProcess], tmp_path: Path,
                                                broker_props: dict[str, str], topic_configs: dict[str, str],
                                                synced: bool) -> None:
    """With flush.messages=1 the batch is on disk when the Produce is acknowledged: strace shows
    an fsync of its segment between the append's pwrite and the response. With the defaults
    (Kafka's: no flush.messages, no flush.ms) there is none: the page cache and replication are
    what an ack rests on (docs/durability.md)."""
    b = start_broker(broker_props)
    _create_topic(b, "synced", topic_configs)
    lines = _syscalls_around_one_produce(b, "synced", tmp_path)
    assert _fsync_between_append_and_ack(lines, "synced", b.port) is synced, "\n".join(
        ln for ln in lines if "synced-0" in ln or "TCP" in ln)
