"""Spark takes the typed columns: a Python data source whose executors decode Avro payloads with
gregor.typed (registry lookups made in the executor) and yield them as Arrow batches of the Spark type
the driver derived; collect() returns what was produced, corrupt rows kept in PERMISSIVE mode."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroSerializer  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402

from gregor.typed.codec import CORRUPT_COLUMN  # noqa: E402
from gregor.typed.columns import ColumnOptions, TypedColumn  # noqa: E402
from tests.schema_registry.conftest import unique  # noqa: E402
from tests.spark.conftest import spark  # noqa: E402,F401  (the shared SparkSession fixture)
from tests.typed.conftest import ctx  # noqa: E402
from tests.typed.test_avro import ALL_TYPES  # noqa: E402

pytestmark = pytest.mark.timeout(300)


class TypedTestSource(DataSource):
    """Reads an Arrow IPC file of binary values and decodes them as valueFormat says."""

    @classmethod
    def name(cls) -> str:
        return "typedtest"

    def _column(self) -> TypedColumn:
        return TypedColumn.for_options(ColumnOptions.from_options(self.options, "value", self.options["topic"]))

    def schema(self) -> Any:
        from pyspark.sql.types import BinaryType, StructField, StructType
        col = self._column()
        return StructType([StructField("value", col.spark_type()), StructField(CORRUPT_COLUMN, BinaryType())])

    def reader(self, schema: Any) -> DataSourceReader:
        return TypedTestReader(dict(self.options), self._column().pinned())


class TypedTestReader(DataSourceReader):
    def __init__(self, options: dict[str, str], pinned: ColumnOptions) -> None:
        self.path = options["path"]
        self.pinned = pinned

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0), InputPartition(1)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        col = TypedColumn.for_options(self.pinned)  # made in the executor: its own registry client and cache
        values = pa.ipc.open_file(self.path).read_all().column("value").combine_chunks()
        half = len(values) // 2
        part = values.slice(0, half) if partition.value == 0 else values.slice(half)
        out = col.decode(part)
        yield pa.RecordBatch.from_arrays([out.value, out.corrupt], names=["value", CORRUPT_COLUMN])


def test_spark_reads_typed_avro_columns(spark: Any, sr_client: SchemaRegistryClient, registry_url: str,  # noqa: F811
                                        tmp_path: Path) -> None:
    topic = unique("sparktyped")
    ser = AvroSerializer(sr_client, json.dumps(ALL_TYPES), conf={"auto.register.schemas": True})
    rows = []
    for i in range(40):
        rows.append({"b": bool(i % 2), "i": i, "l": -i, "f": 0.5, "d": i / 3, "s": f"s{i}", "by": b"\x00" * (i % 3),
                     "fx": b"abcd", "date": dt.date(2026, 1, 1) + dt.timedelta(days=i),
                     "tsu": dt.datetime(2026, 1, 1, 0, 0, i, tzinfo=dt.UTC), "dec": decimal.Decimal(f"{i}.125"),
                     "decf": decimal.Decimal(f"-{i}.50"), "id": f"00000000-0000-0000-0000-{i:012d}",
                     "u": [None, i, f"x{i}", {"x": i}][i % 4], "il": i, "nested": [{"m": {"k": str(i)}}, None]})
    payloads = [ser(r, ctx(topic)) for r in rows]
    payloads[7] = b"\x00\x00\x00\x00\x01garbage"
    path = tmp_path / "values.arrow"
    with pa.ipc.new_file(str(path), pa.schema([("value", pa.binary())])) as w:
        w.write_table(pa.table({"value": pa.array(payloads, pa.binary())}))
    spark.dataSource.register(TypedTestSource)
    df = (spark.read.format("typedtest").option("path", str(path)).option("topic", topic)
          .option("valueFormat", "avro").option("mode", "PERMISSIVE").option("schema.registry.url", registry_url).load())
    assert df.schema["value"].dataType.fieldNames()[:3] == ["b", "i", "l"]
    got = sorted(df.collect(), key=lambda r: (r["value"] is None, r["value"]["i"] if r["value"] else 0))
    assert len(got) == 40
    assert got[-1]["value"] is None and got[-1][CORRUPT_COLUMN] == payloads[7]
    good = [r for r in got if r["value"] is not None]
    for r in good:
        v, want = r["value"].asDict(recursive=True), rows[r["value"]["i"]]
        assert r[CORRUPT_COLUMN] is None
        assert (v["s"], v["l"], v["date"], v["dec"], v["decf"], v["id"]) == (
            want["s"], want["l"], want["date"], want["dec"], want["decf"], want["id"])
        assert v["tsu"].replace(tzinfo=None) == want["tsu"].astimezone().replace(tzinfo=None)  # Spark: session zone
        assert v["nested"] == [{"m": {"k": str(want["i"])}}, None]
        member = [None, {"member0": want["i"], "member1": None, "member2": None},
                  {"member0": None, "member1": f"x{want['i']}", "member2": None},
                  {"member0": None, "member1": None, "member2": {"x": want["i"]}}][want["i"] % 4]
        assert v["u"] == member
