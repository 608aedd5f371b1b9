"""A streaming query in its own process, for the test that SIGKILLs it mid-stream.

    python -m tests.spark.stream_child <bootstrap> <topic> <output dir> <checkpoint dir> <max offsets per trigger>

Reads the topic in bounded micro-batches into a Parquet sink and runs until killed.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> None:
    bootstrap, topic, out, checkpoint, max_offsets = argv
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from gregor.pipeline.jobs import build_session

    spark = build_session("local[2]", "gregor-kill-test", {"spark.ui.enabled": "false",
                                                           "spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    df = (spark.readStream.format("gregor").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", max_offsets).load())
    q = (df.select("partition", "offset", "value").writeStream.format("parquet").option("path", out)
         .option("checkpointLocation", checkpoint).trigger(processingTime="200 milliseconds").start())
    print("started", flush=True)
    q.awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1:])
