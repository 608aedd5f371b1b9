"""The pipeline's Spark jobs, written against `format("gregor")` exactly as one would against Spark's
Kafka source, so they run unchanged on `local[*]` and on a cluster (see gregor.pipeline.submit).

- activity stream: page views -> per one-minute event-time window and URL: views, unique visitors,
  p50/p95 latency; emitted once the watermark closes the window, to the `page_view_stats` topic and
  to Parquet (for offline analysis).
- activity report: a batch read of the whole `page_views` topic -> totals, top URLs, referrers,
  traffic per minute.
- log errors stream: log lines -> ERROR/CRITICAL/FATAL lines per service per minute, to the
  `log_error_counts` topic and Parquet.

Both streams write through foreachBatch: the batch is cached once and written to the topic and to
`<output>/batch_id=<n>/` with mode overwrite, so a micro-batch replayed after a crash rewrites its
own Parquet directory instead of duplicating it (the topic copy is at least once, as Spark's Kafka
sink is).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gregor.pipeline.events import ERROR_LEVELS
from gregor.pipeline.reference import LOG_LINE

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

PAGE_VIEW_SCHEMA = ("user STRING, session STRING, url STRING, referrer STRING, latency_ms INT, "
                    "timestamp STRING")
# percentile_approx accuracy: groups smaller than this get exact (nearest-rank) percentiles.
PERCENTILE_ACCURACY = 10_000


def build_session(master: str | None = "local[*]", app_name: str = "gregor-pipeline",
                  conf: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession with the gregor format registered.

    `master=None` leaves the master to spark-submit. Workers run PYSPARK_PYTHON, which must be an
    interpreter with gregor installed: default it to this one (right for local mode).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import gregor.spark

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.showConsoleProgress": "false",
    }
    settings.update(conf or {})
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    gregor.spark.register(spark)
    return spark


def read_stream(spark: SparkSession, bootstrap: str, topic: str, **options: str) -> DataFrame:
    reader = (spark.readStream.format("gregor").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def parse_page_views(records: DataFrame) -> DataFrame:
    """Kafka records of JSON page views -> typed columns plus `event_time`."""
    from pyspark.sql import functions as F

    return (records.select(F.from_json(F.col("value").cast("string"), PAGE_VIEW_SCHEMA).alias("v"))
            .select("v.*")
            .withColumn("event_time", F.to_timestamp("timestamp"))
            .where(F.col("event_time").isNotNull()))


def page_view_stats(views: DataFrame, watermark_delay: str = "1 minute") -> DataFrame:
    """Per one-minute window and URL: views, unique visitors, p50/p95 latency."""
    from pyspark.sql import functions as F

    return (views.withWatermark("event_time", watermark_delay)
            .groupBy(F.window("event_time", "1 minute"), "url")
            .agg(F.count(F.lit(1)).alias("views"),
                 F.size(F.collect_set("user")).alias("unique_visitors"),
                 F.percentile_approx("latency_ms", 0.5, PERCENTILE_ACCURACY).alias("p50_latency_ms"),
                 F.percentile_approx("latency_ms", 0.95, PERCENTILE_ACCURACY).alias("p95_latency_ms"))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                    "url", "views", "unique_visitors", "p50_latency_ms", "p95_latency_ms"))


def parse_logs(records: DataFrame) -> DataFrame:
    """Kafka records of log lines -> event_time, host, service, level, message (unparsable lines dropped)."""
    from pyspark.sql import functions as F

    line = F.col("value").cast("string")
    pattern = LOG_LINE.pattern

    def group(i: int) -> Column:
        return F.regexp_extract(line, pattern, i)

    return (records.select(F.to_timestamp(group(1)).alias("event_time"), group(2).alias("host"),
                           group(3).alias("service"), F.upper(group(4)).alias("level"), group(5).alias("message"))
            .where(F.col("event_time").isNotNull() & (F.col("service") != "")))


def error_counts(logs: DataFrame, watermark_delay: str = "1 minute") -> DataFrame:
    """ERROR/CRITICAL/FATAL lines per one-minute window and service.

    Spark pushes the level filter below the watermark, so the watermark follows the error lines
    only (gregor.pipeline.reference.error_counts does the same)."""
    from pyspark.sql import functions as F

    return (logs.withWatermark("event_time", watermark_delay)
            .where(F.col("level").isin(*ERROR_LEVELS))
            .groupBy(F.window("event_time", "1 minute"), "service")
            .agg(F.count(F.lit(1)).alias("errors"))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                    "service", "errors"))


def to_records(df: DataFrame, key_column: str) -> DataFrame:
    """Rows -> (key, value JSON) for the gregor sink."""
    from pyspark.sql import functions as F

    return df.select(F.col(key_column).cast("string").alias("key"),
                     F.to_json(F.struct(*[F.col(c) for c in df.columns])).alias("value"))


@dataclass
class StreamConfig:
    """Where a streaming job reads and writes."""

    bootstrap: str
    input_topic: str
    output_topic: str
    output_dir: Path
    checkpoint_dir: Path
    watermark_delay: str = "1 minute"
    trigger: str = "available-now"  # or "processing-time=<interval>", e.g. "processing-time=10 seconds"
    source_options: dict[str, str] = field(default_factory=dict)


def _trigger(writer: Any, trigger: str) -> Any:
    if trigger == "available-now":
        return writer.trigger(availableNow=True)
    if trigger.startswith("processing-time="):
        return writer.trigger(processingTime=trigger.split("=", 1)[1])
    raise ValueError(f"unknown trigger {trigger!r}: use 'available-now' or 'processing-time=<interval>'")


def _sink_both(cfg: StreamConfig, key_column: str) -> Callable[[DataFrame, int], None]:
    """foreachBatch: the batch to the output topic and to <output_dir>/batch_id=<n> (idempotent)."""
    out = str(cfg.output_dir)

    def write(batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        try:
            if batch.count() == 0:
                return
            (to_records(batch, key_column).write.format("gregor").mode("append")
             .option("kafka.bootstrap.servers", cfg.bootstrap).option("topic", cfg.output_topic).save())
            batch.write.mode("overwrite").parquet(f"{out}/batch_id={batch_id}")
        finally:
            batch.unpersist()

    return write


def _start(df: DataFrame, cfg: StreamConfig, key_column: str, name: str) -> StreamingQuery:
    writer = (df.writeStream.outputMode("append").queryName(name).foreachBatch(_sink_both(cfg, key_column))
              .option("checkpointLocation", str(cfg.checkpoint_dir)))
    return _trigger(writer, cfg.trigger).start()


def start_activity_stream(spark: SparkSession, cfg: StreamConfig) -> StreamingQuery:
    views = parse_page_views(read_stream(spark, cfg.bootstrap, cfg.input_topic, **cfg.source_options))
    return _start(page_view_stats(views, cfg.watermark_delay), cfg, "url", "page_view_stats")


def start_log_errors_stream(spark: SparkSession, cfg: StreamConfig) -> StreamingQuery:
    logs = parse_logs(read_stream(spark, cfg.bootstrap, cfg.input_topic, **cfg.source_options))
    return _start(error_counts(logs, cfg.watermark_delay), cfg, "service", "log_error_counts")


@dataclass
class ActivityReport:
    """The offline report's figures (also written to Parquet under <output>/report/)."""

    events: int
    users: int
    sessions: int
    first_event: Any
    last_event: Any
    latency_ms: dict[str, int]
    top_urls: list[tuple[str, int, int, int]]  # url, views, unique visitors, p95 latency
    top_referrers: list[tuple[str, int]]
    busiest_minutes: list[tuple[Any, int]]

    def format(self) -> str:
        lines = [f"page views: {self.events:,} by {self.users:,} users in {self.sessions:,} sessions, "
                 f"{self.first_event} .. {self.last_event}",
                 "latency: " + ", ".join(f"{k} {v} ms" for k, v in self.latency_ms.items()),
                 "top URLs (views, unique visitors, p95 latency):"]
        lines += [f"  {url:<20} {v:>8,} {u:>8,} {p95:>6} ms" for url, v, u, p95 in self.top_urls]
        lines.append("top referrers:")
        lines += [f"  {r:<40} {n:>8,}" for r, n in self.top_referrers]
        lines.append("busiest minutes:")
        lines += [f"  {m} {n:>8,}" for m, n in self.busiest_minutes]
        return "\n".join(lines)


def activity_report(spark: SparkSession, bootstrap: str, topic: str, output_dir: Path | None = None) -> ActivityReport:
    """Batch job over the whole topic (earliest to latest offsets at planning time)."""
    from pyspark.sql import functions as F

    records = (spark.read.format("gregor").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", topic).load())
    views = parse_page_views(records).cache()
    try:
        pct = F.percentile_approx("latency_ms", [0.5, 0.95, 0.99], PERCENTILE_ACCURACY)
        totals = views.agg(F.count(F.lit(1)).alias("events"), F.countDistinct("user").alias("users"),
                           F.countDistinct("session").alias("sessions"), F.min("event_time").alias("first"),
                           F.max("event_time").alias("last"), pct.alias("pct")).first()
        top = (views.groupBy("url").agg(F.count(F.lit(1)).alias("views"),
                                        F.countDistinct("user").alias("unique_visitors"),
                                        F.percentile_approx("latency_ms", 0.95, PERCENTILE_ACCURACY)
                                        .alias("p95_latency_ms"))
               .orderBy(F.desc("views"), "url").limit(10))
        referrers = (views.where(F.col("referrer") != "")
                     .withColumn("referrer_host", F.regexp_extract("referrer", r"^https?://([^/]+)", 1))
                     .groupBy("referrer_host").count().orderBy(F.desc("count"), "referrer_host").limit(10))
        minutes = (views.groupBy(F.window("event_time", "1 minute").start.alias("minute")).count()
                   .orderBy(F.desc("count"), "minute").limit(5))
        if output_dir is not None:
            top.write.mode("overwrite").parquet(str(output_dir / "top_urls"))
            referrers.write.mode("overwrite").parquet(str(output_dir / "top_referrers"))
            (views.groupBy(F.window("event_time", "1 minute").start.alias("minute")).count()
             .write.mode("overwrite").parquet(str(output_dir / "views_per_minute")))
        pcts = totals["pct"] or [0, 0, 0]
        return ActivityReport(
            events=totals["events"], users=totals["users"], sessions=totals["sessions"],
            first_event=totals["first"], last_event=totals["last"],
            latency_ms={"p50": pcts[0], "p95": pcts[1], "p99": pcts[2]},
            top_urls=[(r["url"], r["views"], r["unique_visitors"], r["p95_latency_ms"]) for r in top.collect()],
            top_referrers=[(r["referrer_host"], r["count"]) for r in referrers.collect()],
            busiest_minutes=[(r["minute"], r["count"]) for r in minutes.collect()],
        )
    finally:
        views.unpersist()
