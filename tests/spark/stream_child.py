"""A streaming query in its own process, for the test that SIGKILLs it mid-stream.

    python -m tests.spark.stream_child <bootstrap> <topic> <output dir> <checkpoint dir> <max offsets per trigger>
        [<output topic>]

Reads the topic in bounded micro-batches into a Parquet sink (or, given an output topic, into the
gregor sink with `transactional` on: value = partition:offset:value) and runs until killed.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> None:
    bootstrap, topic, out, checkpoint, max_offsets = argv[:5]
    out_topic = argv[5] if len(argv) > 5 else None
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from gregor.pipeline.jobs import build_session

    spark = build_session("local[2]", "gregor-kill-test", {"spark.ui.enabled": "false",
                                                           "spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    df = (spark.readStream.format("gregor").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", max_offsets).load())
    if out_topic is None:
        w = df.select("partition", "offset", "value").writeStream.format("parquet").option("path", out)
    else:
        w = (transformed(df).writeStream.format("gregor").option("kafka.bootstrap.servers", bootstrap)
             .option("topic", out_topic).option("transactional", "true"))
    q = w.option("checkpointLocation", checkpoint).trigger(processingTime="200 milliseconds").start()
    print("started", flush=True)
    q.awaitTermination()


def transformed(df: object) -> object:
    """What the exactly-once test writes: each input record once, as partition:offset:value."""
    from pyspark.sql import functions as F

    return df.select(F.concat_ws(":", F.col("partition").cast("string"), F.col("offset").cast("string"),
                                 F.col("value").cast("string")).alias("value"))  # type: ignore[attr-defined]


if __name__ == "__main__":
    main(sys.argv[1:])
