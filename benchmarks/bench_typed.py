"""Rows/s of decoding Confluent-framed Avro values into typed Arrow columns (gregor.typed), by three designs
measured in the same run, and what a typed read costs next to a binary one.

Usage: python benchmarks/bench_typed.py [--records N] [--runs 3] [--batch 65536] [--smoke]

The records are page views of ~200 bytes in Avro (9 fields: strings, longs, an enum, a nullable string,
a timestamp-millis), serialized by confluent-kafka's AvroSerializer against a `gregor schema-registry`
in front of a broker process on this machine. One process, one core, the column cut in batches of
--batch rows as a reader hands them over; each design decodes every batch into the same Arrow type:

  (a) fastavro per record: schemaless_reader -> dict -> pa.array (gregor.typed's per-record path)
  (b) the batch's payloads wrapped in an in-memory Avro object container file (one block) and read by
      polars.read_avro (Rust), then cast to Spark's Arrow types (skipped when polars is not installed)
  (c) gregor.typed's C decoder (a program compiled from the fastavro-parsed schema writes the Arrow
      buffers; the path decode_column takes)

Each line gives the median rows/s by the wall clock and per CPU second of this process (the latter
shows the cost when other processes share the cores). Then the typed read as a whole at the library level: gregor.client.read_arrow of the topic (binary
values) against read_arrow followed by decode_column of the value column, medians of --runs, and their
ratio (the issue asks a Spark typed read for at least 50% of the binary read's rows/s). Registry
requests made during the timed decodes are counted (the lookups are cached: expect 0).
--smoke runs it tiny, to check that it works.

--spark adds a Spark figure on local[2]: a minimal Python data source (below: read_arrow_batches of one
partition per task, values binary or decoded by gregor.typed in the executors) counted by `count()`,
binary against typed Avro, medians of --runs. It stands in for the `gregor` source's typed read, whose
wiring lives in gregor.spark.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

import gregor.client as gc  # noqa: E402
from gregor.typed import RegistryClient  # noqa: E402
from gregor.typed.avro_codec import AvroDecoder, AvroSchema  # noqa: E402
from gregor.typed.codec import ColumnDecoder  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402
from tests.schema_registry.conftest import RegistryProcess, wait_writable  # noqa: E402

TOPIC = "typed-bench"
SCHEMA = {"type": "record", "name": "PageView", "namespace": "bench", "fields": [
    {"name": "url", "type": "string"},
    {"name": "user_id", "type": "string"},
    {"name": "session", "type": "string"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "duration_ms", "type": "long"},
    {"name": "bytes_sent", "type": "long"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["VIEW", "CLICK", "SCROLL", "LEAVE"]}},
    {"name": "referrer", "type": ["null", "string"], "default": None},
    {"name": "country", "type": "string"},
]}


def record(i: int) -> dict[str, Any]:
    return {"url": f"https://shop.example.com/catalog/electronics/laptops/item/{i % 5000:05d}?ref=homepage&utm=mail&page={i % 17}",
            "user_id": f"user-{(i * 7919) % 1_000_000:07d}", "session": f"{i * 2654435761 % 2**64:032x}",
            "ts": 1_790_000_000_000 + i * 3, "duration_ms": (i * 37) % 60_000, "bytes_sent": (i * 1031) % 2_000_000,
            "kind": ["VIEW", "CLICK", "SCROLL", "LEAVE"][i % 4],
            "referrer": None if i % 3 == 0 else f"https://search.example.org/q?term=item{i % 977}",
            "country": ["NL", "DE", "FR", "US", "JP"][i % 5]}


def _long(v: int) -> bytes:
    z = (v << 1) ^ (v >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


class PolarsDecoder:
    """(b): the payloads as one block of an in-memory object container file, read by polars."""

    def __init__(self, schema_text: str, target: pa.DataType) -> None:
        import polars
        self.pl = polars
        self.target = target
        self.sync = os.urandom(16)
        meta = {"avro.schema": schema_text.encode(), "avro.codec": b"null"}
        header = bytearray(b"Obj\x01") + _long(len(meta))
        for k, v in meta.items():
            header += _long(len(k)) + k.encode() + _long(len(v)) + v
        self.header = bytes(header + b"\x00" + self.sync)

    def container(self, col: pa.Array) -> bytes:
        """The object container file: the frames' 5-byte headers cut off (a copy of every payload)."""
        bufs = col.buffers()
        offs = np.frombuffer(bufs[1], dtype="<i4", count=len(col) + 1, offset=col.offset * 4).tolist()
        data = memoryview(bufs[2])
        body = b"".join([data[offs[i] + 5:offs[i + 1]] for i in range(len(col))])
        return self.header + _long(len(col)) + _long(len(body)) + body + self.sync

    def read(self, ocf: bytes) -> pa.Array:
        table = self.pl.read_avro(io.BytesIO(ocf)).to_arrow()
        arr = pa.StructArray.from_arrays([c.combine_chunks() for c in table.columns], names=table.column_names)
        return arr.cast(self.target)  # large_string, a dictionary for the enum, ms timestamps: Spark's types

    def decode(self, col: pa.Array) -> pa.Array:
        return self.read(self.container(col))


def polars_decoder(schema_text: str, target: pa.DataType) -> PolarsDecoder | None:
    try:
        return PolarsDecoder(schema_text, target)
    except ImportError:
        return None


def _spark_source() -> Any:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class BenchSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "benchtyped"

        def _column(self) -> Any:
            from gregor.typed.columns import ColumnOptions, TypedColumn
            return TypedColumn.for_options(ColumnOptions.from_options(self.options, "value", self.options["topic"]))

        def schema(self) -> Any:
            from pyspark.sql.types import BinaryType, LongType, StructField, StructType
            return StructType([StructField("offset", LongType()), StructField("value", self._column().spark_type()),
                               StructField("_corrupt_record", BinaryType())])

        def reader(self, schema: Any) -> DataSourceReader:
            return BenchReader(self.options["bootstrap"], self.options["topic"], int(self.options["partitions"]),
                               self._column().pinned())

    class BenchReader(DataSourceReader):
        def __init__(self, bootstrap: str, topic: str, partitions: int, opts: Any) -> None:
            self.bootstrap, self.topic, self.n, self.opts = bootstrap, topic, partitions, opts

        def partitions(self) -> list[Any]:
            return [InputPartition(p) for p in range(self.n)]

        def read(self, partition: Any) -> Any:
            from gregor.typed.columns import TypedColumn
            col = TypedColumn.for_options(self.opts)
            for b in gc.read_arrow_batches(self.bootstrap, self.topic, [partition.value], columns=["offset", "value"]):
                out = col.decode(b.column(1))
                yield pa.RecordBatch.from_arrays([b.column(0), out.value, out.corrupt],
                                                 names=["offset", "value", "_corrupt_record"])

    return BenchSource


def spark_rates(bootstrap: str, topic: str, partitions: int, registry_url: str, rows: int, runs: int) -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("bench-typed").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        spark.dataSource.register(_spark_source())
        results = {}
        for fmt in ("binary", "avro"):
            df = (spark.read.format("benchtyped").option("bootstrap", bootstrap).option("topic", topic)
                  .option("partitions", str(partitions)).option("valueFormat", fmt)
                  .option("schema.registry.url", registry_url).load())
            assert df.count() == rows
            results[fmt] = rate(lambda df=df: df.count(), rows, runs)
            print(f"{'Spark local[2] count(), ' + fmt + ' value':<44} {results[fmt][0]:>12,.0f} rows/s")
        print(f"Spark typed Avro read = {100 * results['avro'][0] / results['binary'][0]:.0f}% of the binary read's rows/s")
    finally:
        spark.stop()


def rate(fn: Callable[[], Any], rows: int, runs: int) -> tuple[float, float]:
    """(rows/s by the wall clock, rows/s per CPU second of this process), medians of `runs`."""
    wall, cpu = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return rows / statistics.median(wall), rows / statistics.median(cpu)


def show(what: str, r: tuple[float, float], extra: str = "") -> None:
    print(f"{what:<44} {r[0]:>12,.0f} rows/s  ({r[1]:>12,.0f} per CPU second){extra}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=65536)
    ap.add_argument("--slow-records", type=int, default=100_000, help="records for the per-record design (a)")
    ap.add_argument("--smoke", action="store_true", help="a tiny run, to check that the benchmark works")
    ap.add_argument("--spark", action="store_true", help="add the Spark local[2] binary/typed comparison")
    ap.add_argument("--partitions", type=int, default=2)
    args = ap.parse_args()
    if args.smoke:
        args.records, args.runs, args.slow_records, args.batch = 5000, 1, 2000, 1024

    with tempfile.TemporaryDirectory(prefix="bench-typed-") as tmp:
        broker = BrokerProcess(Path(tmp), {"group.initial.rebalance.delay.ms": "0"}).start()
        registry_proc = None
        try:
            registry_proc = RegistryProcess(broker.bootstrap).start()
            wait_writable(registry_proc.url)
            sr = SchemaRegistryClient({"url": registry_proc.url})
            ser = AvroSerializer(sr, json.dumps(SCHEMA))
            ctx = SerializationContext(TOPIC, MessageField.VALUE)
            template = [ser(record(i), ctx) for i in range(10_000)]
            values = [template[i % len(template)] for i in range(args.records)]
            avg = sum(map(len, values)) / len(values)
            print(f"{args.records} records, {avg:.0f} bytes each on average (Avro payload + 5-byte header), "
                  f"batches of {args.batch}")
            col = pa.array(values, pa.binary())
            batches = [col.slice(i, args.batch) for i in range(0, len(col), args.batch)]

            registry = RegistryClient.from_options({"schema.registry.url": registry_proc.url})
            info = registry.version(f"{TOPIC}-value").info
            fast = ColumnDecoder(AvroDecoder(AvroSchema(info, registry), registry), registry)
            slow = ColumnDecoder(AvroDecoder(AvroSchema(info, registry), registry, fast=False), registry)
            target = fast.arrow_type
            fast.decode(batches[0])
            slow.decode(batches[0].slice(0, 10))
            before = registry.requests_sent

            slow_batches = batches[: max(1, args.slow_records // args.batch)]
            slow_rows = sum(len(b) for b in slow_batches)
            r_a = rate(lambda: [slow.decode(b) for b in slow_batches], slow_rows, args.runs)
            pdec = polars_decoder(info.schema, target)
            r_b = r_b_read = None
            if pdec is not None:
                check = pdec.decode(batches[0])
                assert check.equals(fast.decode(batches[0]).value), "polars read something else"
                r_b = rate(lambda: [pdec.decode(b) for b in batches], len(col), args.runs)
                files = [pdec.container(b) for b in batches]
                r_b_read = rate(lambda: [pdec.read(f) for f in files], len(col), args.runs)
            r_c = rate(lambda: [fast.decode(b) for b in batches], len(col), args.runs)
            sent = registry.requests_sent - before
            show("(a) fastavro per record -> pa.array", r_a)
            if r_b and r_b_read:
                show("(b) container file -> polars.read_avro", r_b)
                show("    of which polars.read_avro + cast alone", r_b_read)
            else:
                print("(b) polars not installed: skipped")
            show("(c) C decoder (gregor.typed)", r_c, f"  {r_c[0] * avg / 1e6:.0f} MB/s")
            print(f"registry requests during the timed decodes: {sent}")

            from confluent_kafka.admin import AdminClient, NewTopic
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic(TOPIC, args.partitions, 1)])[TOPIC].result(30)
            p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "batch.size": 1 << 20,
                          "compression.type": "none"})
            for i, v in enumerate(values):
                while True:
                    try:
                        p.produce(TOPIC, value=v, partition=i % args.partitions)
                        break
                    except BufferError:
                        p.poll(0.1)
            assert p.flush(60) == 0
            del p
            gc.read_arrow(broker.bootstrap, TOPIC)  # warm the page cache

            def typed_read() -> None:
                for b in gc.read_arrow_batches(broker.bootstrap, TOPIC):
                    fast.decode(b.column(b.schema.get_field_index("value")))

            def binary_read() -> None:
                for _ in gc.read_arrow_batches(broker.bootstrap, TOPIC):
                    pass

            r_bin = rate(binary_read, len(col), args.runs)
            r_typed = rate(typed_read, len(col), args.runs)
            show("read_arrow_batches, binary value", r_bin)
            show("read_arrow_batches + decode_column (C)", r_typed,
                 f"  = {100 * r_typed[0] / r_bin[0]:.0f}% of binary (wall)")
            if args.spark:
                spark_rates(broker.bootstrap, TOPIC, args.partitions, registry_proc.url, len(col), args.runs)
        finally:
            if registry_proc is not None:
                registry_proc.kill()
            broker.kill()


if __name__ == "__main__":
    main()
