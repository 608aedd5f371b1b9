"""`gregor.spark`: a PySpark Python Data Source, `format("gregor")`, for Gregor and any Kafka broker.

Options, schema and semantics are those of Spark's own Kafka source and sink, so a job moves between
the two by changing the format name::

    import gregor.spark
    gregor.spark.register(spark)
    df = (spark.readStream.format("gregor")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "page_views")
          .load())

Executors import this package when they unpickle readers and writers: install it in the interpreter
that PYSPARK_PYTHON names on every worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gregor.spark.errors import DataLossError, GregorOptionError, GregorSourceError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DataLossError", "GregorOptionError", "GregorSourceError", "register"]

FORMAT = "gregor"


def register(spark: SparkSession) -> None:
    """Make `format("gregor")` available in this session (needed once per SparkSession)."""
    from gregor.spark.source import GregorDataSource

    spark.dataSource.register(GregorDataSource)
