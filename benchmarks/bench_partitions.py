"""Many partitions on one broker: create, restart to serving, SIGTERM shutdown, memory and descriptors.

    python benchmarks/bench_partitions.py [--partitions 10000] [--topics 100] [--dir DIR]
                                          [--per-request 10] [--sample 20] [--override k=v ...]

Starts a real `gregor serve` child process (gregor.tools.local_broker) on a fresh data dir and prints:
- create: from the first CreateTopics sent until every CreateTopics is answered (the broker answers
  once the logs exist) and a produce + fetch to each of `--sample` random partitions works;
- shutdown: SIGTERM to process exit (a clean shutdown: flush, checkpoints, clean-shutdown marker);
- restart: from starting the process until a Metadata of every topic shows every partition with a
  leader and a produce to a random partition is acknowledged (earlier sampled data is fetched back);
- peak RSS (VmHWM from /proc) and open descriptors, measured after the create and after the restart.
`max.broker.partitions` is raised to the count asked for (Kafka's name; 10,000 by default).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import socket
import struct
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from gregor.protocol import apis
from gregor.protocol.frames import decode_response, encode_request
from gregor.protocol.records import Record, build_batch, iter_records
from gregor.protocol.schema import Struct
from gregor.tools.local_broker import BrokerProcess

PRODUCE, FETCH, METADATA, CREATE_TOPICS = 0, 1, 3, 19


class Client:
    """A blocking client on the package's codec: one request at a time, or pipelined with `send`/`receive`."""

    def __init__(self, bootstrap: str, timeout_s: float = 300.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.correlation_id = 0
        self.pending: list[tuple[int, int, int]] = []

    def send(self, api_key: int, version: int, body: Any) -> None:
        self.correlation_id += 1
        self.sock.sendall(encode_request(apis.BY_KEY[api_key], version, self.correlation_id, "bench", body))
        self.pending.append((self.correlation_id, api_key, version))

    def receive(self) -> Struct:
        cid, api_key, version = self.pending.pop(0)
        size = struct.unpack(">i", self._exact(4))[0]
        got, resp = decode_response(self._exact(size), apis.BY_KEY[api_key], version)
        assert got == cid
        return resp

    def request(self, api_key: int, version: int, body: Any) -> Struct:
        self.send(api_key, version, body)
        return self.receive()

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def create_topics_body(names: list[str], partitions: int) -> dict[str, Any]:
    return {"topics": [{"name": n, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                        "configs": []} for n in names], "timeout_ms": 600_000, "validate_only": False}


def metadata(c: Client, topics: list[str]) -> Struct:
    return c.request(METADATA, 12, {"topics": [{"topic_id": uuid.UUID(int=0), "name": t} for t in topics],
                                    "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False})


def produce(c: Client, topic: str, p: int, value: bytes) -> int:
    batch = build_batch([Record(0, int(time.time() * 1000), None, value)])
    resp = c.request(PRODUCE, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": p, "records": batch}]}]})
    return int(resp.responses[0].partition_responses[0].error_code)


def fetch_values(c: Client, topic: str, p: int) -> list[bytes]:
    resp = c.request(FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{"partition": p, "current_leader_epoch": -1, "fetch_offset": 0,
                                                      "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    part = resp.responses[0].partitions[0]
    if part.error_code:
        raise RuntimeError(f"fetch {topic}-{p}: error {part.error_code}")
    return [bytes(r.value) for r in iter_records(bytes(part.records or b""))]


def proc_status(pid: int) -> tuple[int, int, int]:
    """(VmHWM KiB, VmRSS KiB, open descriptors) of a live process."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            fields[k] = v.strip()
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return int(fields["VmHWM"].split()[0]), int(fields["VmRSS"].split()[0]), fds


def all_online(c: Client, topics: list[str], partitions: int) -> bool:
    try:
        resp = metadata(c, topics)
    except (ConnectionError, OSError):
        return False
    for t in resp.topics:
        if t.error_code or len(t.partitions) != partitions:
            return False
        if any(p.error_code or p.leader_id < 0 for p in t.partitions):
            return False
    return len(resp.topics) == len(topics)


def connect_when_listening(port: int, deadline: float) -> Client:
    while True:
        try:
            return Client(f"127.0.0.1:{port}")
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.002)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=10_000, help="partitions in all")
    ap.add_argument("--topics", type=int, default=100, help="topics (partitions are spread evenly over them)")
    ap.add_argument("--per-request", type=int, default=10, help="topics per CreateTopics request")
    ap.add_argument("--sample", type=int, default=20, help="partitions produced to and fetched from")
    ap.add_argument("--dir", help="data dir (default: a fresh one in /tmp, removed at the end)")
    ap.add_argument("--port", type=int, default=0, help="listener port (default: a free one below the ephemeral range)")
    ap.add_argument("--override", action="append", default=[], help="broker property k=v")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds allowed for each phase")
    args = ap.parse_args()
    per_topic = args.partitions // args.topics
    if per_topic * args.topics != args.partitions:
        ap.error("--partitions must be a multiple of --topics")
    tmp = None
    if args.dir:
        data = Path(args.dir)
    else:
        tmp = tempfile.mkdtemp(prefix="bench-partitions-")
        data = Path(tmp) / "data"
    port = args.port or _free_low_port()
    overrides = {"max.broker.partitions": str(max(args.partitions + 100, 10_000)),
                 "listeners": f"PLAINTEXT://127.0.0.1:{port}", "auto.create.topics.enable": "false"}
    overrides.update(kv.split("=", 1) for kv in args.override)  # type: ignore[arg-type]
    topics = [f"t{i:05d}" for i in range(args.topics)]
    rng = random.Random(7)
    sample = [(rng.choice(topics), rng.randrange(per_topic)) for _ in range(args.sample)]
    broker = BrokerProcess(data, overrides)
    broker.port = port
    try:
        broker.start(timeout_s=args.timeout)
        assert broker.proc is not None
        c = Client(broker.bootstrap, timeout_s=args.timeout)
        t0 = time.monotonic()
        for i in range(0, len(topics), args.per_request):
            c.send(CREATE_TOPICS, 5, create_topics_body(topics[i:i + args.per_request], per_topic))
        errors = []
        while c.pending:
            for t in c.receive().topics:
                if t.error_code:
                    errors.append(f"{t.name}: {t.error_code} {t.error_message}")
        answered_s = time.monotonic() - t0
        if errors:
            raise SystemExit(f"CreateTopics failed: {errors[:3]}")
        for j, (t, p) in enumerate(sample):
            if produce(c, t, p, b"v%d" % j):
                raise SystemExit(f"produce to {t}-{p} failed")
            if b"v%d" % j not in fetch_values(c, t, p):
                raise SystemExit(f"fetch from {t}-{p} lacks what was produced")
        create_s = time.monotonic() - t0
        hwm, rss, fds = proc_status(broker.proc.pid)
        print(f"partitions {args.partitions} ({args.topics} topics x {per_topic})")
        print(f"create: {create_s:.2f} s ({create_s / args.partitions * 1000:.2f} ms/partition; "
              f"CreateTopics answered in {answered_s:.2f} s)")
        print(f"after create: peak RSS {hwm / 1024:.0f} MiB, RSS {rss / 1024:.0f} MiB, open fds {fds}")
        c.close()

        t0 = time.monotonic()
        broker.proc.send_signal(signal.SIGTERM)
        code = broker.proc.wait(args.timeout)
        shutdown_s = time.monotonic() - t0
        print(f"SIGTERM shutdown: {shutdown_s:.2f} s (exit code {code})")

        broker.log_lines.clear()
        t0 = time.monotonic()
        broker.start(timeout_s=args.timeout, wait_loaded=False)
        deadline = t0 + args.timeout
        c = connect_when_listening(port, deadline)
        while not all_online(c, topics, per_topic):
            if time.monotonic() > deadline:
                raise SystemExit("restart: partitions not online in time")
            time.sleep(0.01)
        online_s = time.monotonic() - t0
        t, p = rng.choice(topics), rng.randrange(per_topic)
        while produce(c, t, p, b"after-restart"):
            if time.monotonic() > deadline:
                raise SystemExit("restart: produce not answered in time")
            time.sleep(0.01)
        restart_s = time.monotonic() - t0
        for j, (t, p) in enumerate(sample[:5]):
            if b"v%d" % j not in fetch_values(c, t, p):
                raise SystemExit(f"after restart {t}-{p} lacks what was produced")
        hwm, rss, fds = proc_status(broker.proc.pid)
        print(f"restart to serving: {restart_s:.2f} s (all partitions with leaders in Metadata after {online_s:.2f} s)")
        print(f"after restart: peak RSS {hwm / 1024:.0f} MiB, RSS {rss / 1024:.0f} MiB, open fds {fds}")
        c.close()
        t0 = time.monotonic()
        broker.proc.send_signal(signal.SIGTERM)
        code = broker.proc.wait(args.timeout)
        print(f"SIGTERM shutdown after restart: {time.monotonic() - t0:.2f} s (exit code {code})")
    finally:
        broker.kill()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _free_low_port() -> int:
    """A free port below the ephemeral range, so no client connection takes it while the broker restarts."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    for port in random.Random(os.getpid()).sample(range(20_000, max(20_001, low - 1)), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port")


if __name__ == "__main__":
    main()
