"""The source's fixed schema (Spark's Kafka source schema) and its Arrow twin.

Arrow batches handed back from read() must match the schema exactly (Spark compares them), so the
Arrow schema is derived from the Spark one with pyspark's own converter rather than written twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

HEADERS_DDL = "array<struct<key:string,value:binary>>"


def source_schema(include_headers: bool) -> StructType:
    """key, value, topic, partition, offset, timestamp, timestampType (+ headers), all nullable."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects for `schema` (int32 ints, timestamp[us, tz=UTC], ...)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")
