"""What schema-checked topics cost: produce throughput with confluent.value.schema.validation on and off.

Usage: python benchmarks/bench_schema_validation.py [--records 2000000] [--runs 3] [--value-bytes 200]
       [--compression none|lz4|zstd|snappy|gzip] [--producers 1] [--raw-requests 1000] [--smoke]

One broker process runs its own schema registry (schema.registry.listeners) on a tmpfs data dir. Two
one-partition topics differ only in confluent.value.schema.validation (true / false). The records are
Avro values of --value-bytes bytes in Confluent's wire format (magic byte, schema id, Avro body), made by
confluent-kafka's AvroSerializer against the broker's registry (1,000 distinct records, cycled).

Each run produces --records records to each topic in turn (the order alternates between runs), with
librdkafka's producer through confluent-kafka at its default batching (batch.size 1 MB, up to 10,000
records a batch, linger.ms 5: batches of a few thousand 200-byte records under load), acks=1, from
--producers processes at once (one by default). Printed per run and topic: records/s and MB/s of the
producers, and the broker's CPU (user+system from /proc) per record. The medians end it, with the
ratios on/off: the issue's target is produce throughput with validation on within 10% of off.

A Python producer tops out near 1M records/s of its own; on a 2-core machine producer and broker also
share the cores, so the broker's CPU per record is the steadier figure of what validation costs it.

So each run also drives the broker to its own limit (unless --raw-requests 0): Produce requests built once
(v9, acks=1, one uncompressed batch of the same records filling librdkafka's default batch.size of
1 MB: ~4,700 records of 200 B) are sent --raw-requests times over one connection, 8 in flight, by a client that does nothing
per record; every answer is checked for errors. Those records/s are the broker's, with validation on and off.

Before the runs, the in-process cost of the record walk on one such batch is printed: the framing walk
alone, and the walk that also reads the schema ids (gregor.protocol.record_walk).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from gregor.protocol import apis, validator  # noqa: E402
from gregor.protocol.frames import decode_response, encode_request  # noqa: E402
from gregor.protocol.records import HEADER_SIZE, Record, build_batch  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402

SCHEMA = {"type": "record", "name": "PageView", "namespace": "bench",
          "fields": [{"name": "url", "type": "string"}, {"name": "user", "type": "string"},
                     {"name": "ms", "type": "long"}, {"name": "bytes", "type": "int"}]}
DISTINCT = 1000
_LISTENING = re.compile(r"Schema registry listening on (\S+)")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def registry_url(broker: BrokerProcess, timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in broker.log_lines:
            m = _LISTENING.search(line)
            if m:
                return m.group(1).rstrip(",")
        time.sleep(0.1)
    raise SystemExit("the broker's schema registry did not start:\n" + broker.log_text()[-2000:])


def make_values(url: str, topics: list[str], value_bytes: int) -> list[bytes]:
    """DISTINCT Avro records of exactly value_bytes bytes (wire format included), registered under every topic."""
    client = SchemaRegistryClient({"url": url})
    out: list[bytes] = []
    deadline = time.monotonic() + 60
    for topic in topics:
        ser = AvroSerializer(client, json.dumps(SCHEMA))
        ctx = SerializationContext(topic, MessageField.VALUE)
        while True:
            try:
                probe = ser({"url": "", "user": "u", "ms": 0, "bytes": 0}, ctx)
                break
            except Exception as e:  # the registry's primary is elected a moment after it listens
                if time.monotonic() > deadline:
                    raise SystemExit(f"cannot register the schema: {e}") from None
                time.sleep(0.3)
        if out:
            continue
        assert probe is not None
        for i in range(DISTINCT):
            rec = {"url": "", "user": f"user-{i % 97}", "ms": 1_700_000_000_000 + i, "bytes": i}
            pad = value_bytes - len(ser(rec, ctx) or b"")
            url = "/p/" + ("x" * max(pad - 1, 0))  # the url's length varint grows past 63 bytes: trim to fit
            while len(v := ser({**rec, "url": url}, ctx) or b"") > value_bytes and url:
                url = url[:-1]
            out.append(v)
    return out


def produce(args: tuple[str, str, list[bytes], int, str]) -> tuple[float, int]:
    """One producer process: `records` records to `topic`; returns (seconds, records delivered). Delivery
    reports come for failures only (delivery.report.only.error), so the client spends no Python per record
    on them."""
    bootstrap, topic, values, records, compression = args
    failed = [0]

    def on_delivery(err: Any, _msg: Any) -> None:
        failed[0] += 1

    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "compression.type": compression,
                  "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
                  "delivery.report.only.error": True, "on_delivery": on_delivery})
    p.list_topics(topic, timeout=30)
    n = len(values)
    send, poll = p.produce, p.poll
    t0 = time.perf_counter()
    for i in range(records):
        try:
            send(topic, values[i % n], partition=0)
        except BufferError:
            poll(0.005)
            send(topic, values[i % n], partition=0)
        if not i % 10_000:
            poll(0)
    p.flush(300)
    wall = time.perf_counter() - t0
    if failed[0]:
        raise SystemExit(f"{failed[0]} records to {topic} were not delivered")
    return wall, records


RAW_BATCH_BYTES = 1_000_000  # librdkafka's default batch.size
RAW_IN_FLIGHT = 8
PRODUCE = apis.BY_KEY[0]


def produce_raw(bootstrap: str, topic: str, values: list[bytes], requests: int) -> int:
    """Pre-built Produce requests, pipelined (see the module docstring); returns the records appended."""
    count = RAW_BATCH_BYTES // (max(len(v) for v in values) + 12)  # + the record's own framing
    batch = build_batch([Record(i, int(time.time() * 1000), None, values[i % len(values)]) for i in range(count)])
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
    frame = encode_request(PRODUCE, 9, 1, "bench-raw", body)
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = sock.makefile("rb")
        sent = answered = 0
        while answered < requests:
            while sent < requests and sent - answered < RAW_IN_FLIGHT:
                sock.sendall(frame)
                sent += 1
            size = struct.unpack(">i", reader.read(4))[0]
            _, resp = decode_response(reader.read(size), PRODUCE, 9)
            part = resp.responses[0].partition_responses[0]
            if part.error_code:
                raise SystemExit(f"{topic}: Produce failed with error {part.error_code}: {part.error_message}")
            answered += 1
    return requests * count


def walk_cost(values: list[bytes]) -> None:
    """The validation of one librdkafka-sized batch in this process, off and on: the whole of validate_batches
    (header, CRC32C, walk) and the walk alone. CPU time of this process (time.process_time), the two
    interleaved 30 times, so that other processes on the machine change both alike."""
    count = RAW_BATCH_BYTES // (max(len(v) for v in values) + 12)
    batch = build_batch([Record(i, int(time.time() * 1000), None, values[i % len(values)]) for i in range(count)])
    buf, body, now = memoryview(bytearray(batch)), bytes(batch[HEADER_SIZE:]), int(time.time() * 1000)

    def rules(fields: int) -> validator.ValidationRules:
        return validator.ValidationRules.for_topic(
            max_message_bytes=RAW_BATCH_BYTES + 4096, decompression_ratio=64, decompression_max_bytes=1 << 27,
            compacted=False, log_append_time=False, timestamp_before_max_ms=2**62, timestamp_after_max_ms=2**62,
            schema_fields=fields)

    off, on = rules(0), rules(validator.VALUE_FIELD)
    calls = {
        "validate_batches, validation off": lambda: validator.validate_batches(buf, off, now),
        "validate_batches, validation on": lambda: validator.validate_batches(buf, on, now),
        "walk (framing)": lambda: validator.walk(body, count, True, count - 1),
        "walk_ids (framing + ids)": lambda: validator.walk_ids(body, count, True, count - 1, validator.VALUE_FIELD),
    }
    spent = dict.fromkeys(calls, 0.0)
    for _ in range(30):
        for name, call in calls.items():
            t0 = time.process_time()
            for _ in range(20):
                call()
            spent[name] += time.process_time() - t0
    for name, total in spent.items():
        per = total / 600
        print(f"  {name:34} {per * 1e6:7.1f} us per batch of {count:,} records ({len(batch) / 1e6:.2f} MB), "
              f"{per / count * 1e9:5.1f} ns/record")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--value-bytes", type=int, default=200)
    ap.add_argument("--compression", default="none", choices=["none", "lz4", "zstd", "snappy", "gzip"])
    ap.add_argument("--producers", type=int, default=1)
    ap.add_argument("--raw-requests", type=int, default=1000, help="pre-built Produce requests per run and topic")
    ap.add_argument("--smoke", action="store_true", help="a tiny run for CI: 20,000 records, 1 run")
    args = ap.parse_args()
    if args.smoke:
        args.records, args.runs, args.raw_requests = 20_000, 1, min(args.raw_requests, 20)
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=base) as d:
        # Retention keeps the tmpfs small: each topic holds at most its last 512 MB (checked every 2 s).
        broker = BrokerProcess(Path(d) / "data", {"schema.registry.listeners": "http://127.0.0.1:0",
                                                  "group.initial.rebalance.delay.ms": "0",
                                                  "log.retention.check.interval.ms": "2000"}).start()
        try:
            assert broker.proc is not None
            pid = broker.proc.pid
            topics = {"off": "bench-plain", "on": "bench-checked"}
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            bounded = {"retention.bytes": str(512 << 20), "segment.bytes": str(64 << 20)}
            futures = admin.create_topics([
                NewTopic(topics["off"], 1, 1, config=bounded),
                NewTopic(topics["on"], 1, 1, config={**bounded, "confluent.value.schema.validation": "true"})])
            for f in futures.values():
                f.result(30)
            values = make_values(registry_url(broker), list(topics.values()), args.value_bytes)
            size = statistics.mean(len(v) for v in values)
            print(f"broker {broker.bootstrap} (pid {pid}, data on {base or 'disk'}); {args.runs} runs of "
                  f"{args.records:,} Avro records of {size:.0f} B per topic, compression {args.compression}, "
                  f"{args.producers} producer(s), {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
            walk_cost(values)
            results: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
            raw: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
            per_producer = args.records // args.producers
            with multiprocessing.get_context("spawn").Pool(args.producers) as pool:
                for topic in topics.values():  # warm up: producer processes, connections, the id cache
                    pool.map(produce, [(broker.bootstrap, topic, values, 5000, args.compression)] * args.producers)
                for run in range(args.runs):
                    order = ["off", "on"] if run % 2 == 0 else ["on", "off"]
                    for which in order:
                        job = (broker.bootstrap, topics[which], values, per_producer, args.compression)
                        c0, t0 = cpu_seconds(pid), time.perf_counter()
                        done = pool.map(produce, [job] * args.producers)
                        wall = time.perf_counter() - t0
                        cpu = cpu_seconds(pid) - c0
                        n = sum(r for _, r in done)
                        rate = n / wall
                        results[which].append((rate, cpu / n))
                        print(f"  run {run + 1} validation {which:3}: {rate:>11,.0f} rec/s {rate * size / 1e6:7.1f} MB/s"
                              f"   broker CPU {cpu:5.2f} s = {cpu / wall * 100:3.0f}% of a core,"
                              f" {cpu / n * 1e6:.3f} us/record   (librdkafka)", flush=True)
                    for which in (order if args.raw_requests else []):
                        c0, t0 = cpu_seconds(pid), time.perf_counter()
                        n = produce_raw(broker.bootstrap, topics[which], values, args.raw_requests)
                        wall = time.perf_counter() - t0
                        cpu = cpu_seconds(pid) - c0
                        raw[which].append((n / wall, cpu / n))
                        print(f"  run {run + 1} validation {which:3}: {n / wall:>11,.0f} rec/s {n / wall * size / 1e6:7.1f} MB/s"
                              f"   broker CPU {cpu:5.2f} s = {cpu / wall * 100:3.0f}% of a core,"
                              f" {cpu / n * 1e6:.3f} us/record   (pre-built requests)", flush=True)
        finally:
            broker.stop()
    for label, runs in (("librdkafka", results), ("pre-built requests", raw)):
        if not runs["off"]:
            continue
        med = {k: (statistics.median(r for r, _ in v), statistics.median(c for _, c in v)) for k, v in runs.items()}
        for k in ("off", "on"):
            print(f"{label}: median validation {k:3}: {med[k][0]:>11,.0f} rec/s, broker {med[k][1] * 1e6:.3f} us/record")
        pairs = statistics.median(on[0] / off[0] for on, off in zip(runs["on"], runs["off"], strict=True))
        print(f"{label}: on/off throughput {med['on'][0] / med['off'][0]:.3f} (median of the runs' own ratios "
              f"{pairs:.3f}), broker CPU per record {med['on'][1] / med['off'][1]:.3f}")


if __name__ == "__main__":
    main()
