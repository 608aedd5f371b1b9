"""The Prometheus endpoint (metrics.port): a real broker, real clients, scraped over HTTP."""

from __future__ import annotations

import os
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.metrics.registry import Histogram, count_errors
from gregor.protocol.errors import ErrorCode
from tests.broker_process import BrokerProcess

_URL = re.compile(r"metrics endpoint listening on (http://\S+/metrics)")
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def metrics_url(b: BrokerProcess) -> str:
    """The endpoint the broker logged (the last one: a restart with metrics.port=0 binds anew)."""
    urls = _URL.findall(b.log_text())
    assert urls, "no metrics endpoint logged"
    return str(urls[-1])


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    out: Samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a Prometheus sample: {line!r}"
        labels = frozenset(_LABEL.findall(m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def value(samples: Samples, name: str, **labels: object) -> float:
    want = {(k, str(v)) for k, v in labels.items()}
    found = [v for (n, ls), v in samples.items() if n == name and want <= ls]
    assert found, f"{name}{labels} not exported"
    return sum(found)


@pytest.fixture(scope="module")
def mbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("metrics"), {"metrics.port": "0"}).start()
    yield b
    b.kill()


def _create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)


def _log_bytes_on_disk(b: BrokerProcess, topic: str) -> int:
    d = Path(b.data_dir) / f"{topic}-0"
    return sum(f.stat().st_size for f in d.iterdir() if f.suffix == ".log")


def test_produce_counts_bytes_and_messages_in(mbroker: BrokerProcess) -> None:
    """Bytes in is Kafka's BytesInPerSec: the record batch bytes appended, which are the bytes the client
    sent as record sets (batches are stored exactly as on the wire) - the log's size on disk."""
    url = metrics_url(mbroker)
    topic = "metrics-in"
    _create(mbroker.bootstrap, topic)
    before = scrape(url)
    n, size = 2000, 100
    p = Producer({"bootstrap.servers": mbroker.bootstrap, "linger.ms": 5, "compression.type": "none"})
    for i in range(n):
        p.produce(topic, value=os.urandom(size), key=str(i).encode())
    assert p.flush(15) == 0
    after = scrape(url)
    bytes_in = value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
    on_disk = _log_bytes_on_disk(mbroker, topic)
    assert abs(bytes_in - on_disk) <= 0.01 * on_disk, (bytes_in, on_disk)
    assert bytes_in >= n * size  # the values alone; batch and record framing on top
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == n
    produce_before = value(before, "kafka_network_requestmetrics_requests_total", request="Produce") \
        if any(n_ == "kafka_network_requestmetrics_requests_total" and ("request", "Produce") in ls
               for n_, ls in before) else 0
    assert value(after, "kafka_network_requestmetrics_requests_total", request="Produce") > produce_before
    # the total time histogram is consistent: +Inf bucket == count, for every API seen
    count = value(after, "kafka_network_requestmetrics_totaltimems_count", request="Produce")
    inf = value(after, "kafka_network_requestmetrics_totaltimems_bucket", request="Produce", le="+Inf")
    assert count == inf > 0
    assert value(after, "kafka_log_log_size", topic=topic, partition=0) == on_disk
    assert value(after, "kafka_log_log_numlogsegments", topic=topic, partition=0) == 1
    assert value(after, "kafka_server_replicamanager_leadercount") >= 1
    assert value(after, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(after, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(after, "kafka_server_socketserver_connections", listener="PLAINTEXT") >= 1


def test_flush_messages_fsyncs_are_timed(mbroker: BrokerProcess) -> None:
    """flush.messages=1: the produce path's own fsyncs (off the loop, before the answer) count in Kafka's
    LogFlushRateAndTimeMs, as the periodic flushes do."""
    url = metrics_url(mbroker)
    topic = "metrics-flush"
    admin = AdminClient({"bootstrap.servers": mbroker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"flush.messages": "1"})])[topic].result(10)
    name = "kafka_log_logflushstats_logflushrateandtimems"
    before = value(scrape(url), f"{name}_count")
    p = Producer({"bootstrap.servers": mbroker.bootstrap, "linger.ms": 0, "max.in.flight": 1})
    for i in range(5):  # one request at a time: every append is its own flush
        p.produce(topic, value=b"f%d" % i)
        assert p.flush(10) == 0
    s = scrape(url)
    assert value(s, f"{name}_count") - before >= 5
    assert value(s, f"{name}_bucket", le="+Inf") == value(s, f"{name}_count")
    assert value(s, f"{name}_sum") > 0


def test_fetch_bytes_out_and_consumer_lag(mbroker: BrokerProcess) -> None:
    url = metrics_url(mbroker)
    topic, group, n = "metrics-lag", "metrics-group", 300
    _create(mbroker.bootstrap, topic)
    p = Producer({"bootstrap.servers": mbroker.bootstrap})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i)
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": mbroker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = 0
        deadline = time.monotonic() + 15
        while got < n and time.monotonic() < deadline:
            got += len(c.consume(500, 1.0))
        assert got == n
        c.commit(offsets=[TopicPartition(topic, 0, 120)], asynchronous=False)  # 180 behind the end
    finally:
        c.close()
    s = scrape(url)
    assert value(s, "kafka_consumergroup_lag", group=group, topic=topic, partition=0) == n - 120
    assert value(s, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) >= _log_bytes_on_disk(mbroker, topic)
    assert value(s, "kafka_network_requestmetrics_requests_total", request="Fetch") > 0
    assert value(s, "kafka_network_requestmetrics_requests_total", request="OffsetCommit") >= 1
    # parked Fetches show a remote time; the queue, local and send histograms are exported for each API
    for suffix in ("requestqueuetimems", "localtimems", "remotetimems", "responsesendtimems"):
        assert value(s, f"kafka_network_requestmetrics_{suffix}_count", request="Fetch") > 0


def test_errors_counted_per_code(mbroker: BrokerProcess) -> None:
    """A consumer fetching past the end gets OFFSET_OUT_OF_RANGE (then resets): counted for Fetch."""
    url = metrics_url(mbroker)
    topic = "metrics-err"
    _create(mbroker.bootstrap, topic)
    c = Consumer({"bootstrap.servers": mbroker.bootstrap, "group.id": "g-err", "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 1_000_000)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            c.poll(0.2)
            errors = [v for (n, ls), v in scrape(url).items() if n == "kafka_network_requestmetrics_errors_total"
                      and ("request", "Fetch") in ls and ("error", "OFFSET_OUT_OF_RANGE") in ls]
            if errors:
                break
    finally:
        c.close()
    assert errors and errors[0] >= 1


def test_endpoint_answers_only_get_metrics(mbroker: BrokerProcess) -> None:
    url = metrics_url(mbroker)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url.replace("/metrics", "/nope"), timeout=5)
    assert e.value.code == 404
    host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:  # an oversized request is dropped
        sock.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n")
        assert sock.recv(100) == b""
    assert scrape(url)  # and the endpoint still serves


def test_off_by_default(start_broker) -> None:  # type: ignore[no-untyped-def]
    b = start_broker()
    assert "metrics endpoint" not in b.log_text()
    assert b.proc is not None
    listening = _listening_ports(b.proc.pid)
    assert listening == {b.port}, listening


def _listening_ports(pid: int) -> set[int]:
    """TCP ports the process listens on, from /proc (socket inodes of its fds in LISTEN state)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


# --- sans-IO parts ----------------------------------------------------------------------------------
def test_count_errors_walks_topics_and_partitions() -> None:
    body = {"throttle_time_ms": 0, "error_code": 0, "responses": [
        {"topic": "a", "partitions": [{"partition_index": 0, "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER},
                                      {"partition_index": 1, "error_code": 0}]},
        {"topic": "b", "partitions": [{"partition_index": 0, "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER}]}]}
    out: dict[int, int] = {}
    count_errors(body, out)
    assert out == {ErrorCode.NOT_LEADER_OR_FOLLOWER: 2}
    out = {}
    count_errors({"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}, out)
    assert out == {ErrorCode.COORDINATOR_NOT_AVAILABLE: 1}


def test_histogram_buckets() -> None:
    h = Histogram((1.0, 10.0))
    for v in (0.5, 1.0, 5, 50):
        h.observe(v)
    assert h.counts == [2, 1, 1]
    assert h.sum == 56.5


def test_failed_sasl_authentication_counted_per_listener(start_broker) -> None:  # type: ignore[no-untyped-def]
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
    b = start_broker({"listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
                      "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
                      "inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
                      "sasl.jaas.config": jaas, "metrics.port": "0"})
    url = metrics_url(b)
    name = "kafka_server_socketserver_failedauthentication_total"
    assert value(scrape(url), name, listener="SASL_PLAINTEXT") == 0
    p = Producer({"bootstrap.servers": f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}", "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "wrong", "log_level": 0})
    deadline = time.monotonic() + 10
    failed = 0.0
    while time.monotonic() < deadline and not failed:
        p.poll(0.2)
        failed = value(scrape(url), name, listener="SASL_PLAINTEXT")
    assert failed >= 1
    s = scrape(url)
    assert value(s, name, listener="PLAINTEXT") == 0
    assert value(s, "kafka_server_socketserver_connections", listener="PLAINTEXT") == 0
