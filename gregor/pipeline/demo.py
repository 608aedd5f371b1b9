"""`gregor pipeline demo`: the whole reference pipeline in one command.

Starts a broker if none is given, creates the topics, produces page views and ships application
logs, runs the two streaming jobs (Trigger.AvailableNow: drain what is there, close the windows the
watermark allows, stop), runs the offline report, checks the streaming aggregates against the same
aggregates computed in plain Python, and prints where every output is.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gregor.pipeline import reference
from gregor.pipeline.events import PageView, app_log_lines, parse_iso_ms
from gregor.pipeline.generator import generate_page_views
from gregor.pipeline.shipper import ship_paths, write_log_file
from gregor.pipeline.topics import create_topics, read_topic
from gregor.tools.local_broker import BrokerProcess

TOPICS = {"page_views": 4, "page_view_stats": 1, "logs": 2, "log_error_counts": 1}


@dataclass
class DemoResult:
    bootstrap: str
    output_dir: Path
    windows: int
    windows_checked: bool
    error_windows: int
    errors_checked: bool
    report: Any
    typed: Any = None  # gregor.pipeline.typed_events.TypedResult, with --typed

    @property
    def ok(self) -> bool:
        return self.windows_checked and self.errors_checked and (self.typed is None or self.typed.ok)


def run_demo(output_dir: Path, *, bootstrap: str | None = None, events: int = 20_000, minutes: float = 10.0,
             rate: float = 0.0, log_lines: int = 6_000, master: str = "local[*]", seed: int = 1,
             replication_factor: int = -1, say: Any = print, typed: bool = False,
             schema_registry_url: str | None = None) -> DemoResult:
    """Run the pipeline end to end; `say` receives progress lines.

    With `typed`, the typed step follows (gregor.pipeline.typed_events): against the broker's own
    schema registry when the demo starts the broker, else against `schema_registry_url`.

    Without a rate the events backfill `minutes` of event time ending now (so the watermark closes
    all but the last minute's windows); with a rate they are produced live at that pace.
    """
    output_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("page_view_stats", "log_error_counts", "report", "checkpoints", "broker-data"):
        shutil.rmtree(output_dir / stale, ignore_errors=True)  # outputs of an earlier run
    broker = None
    suffix = ""
    if typed and bootstrap is not None:
        if not schema_registry_url:
            raise ValueError("the typed step on a broker of yours needs its schema registry's URL")
        suffix = f"_{int(time.time())}"  # topics of its own: the checks count what this run produced
    if bootstrap is None:
        overrides: dict[str, str] = {}
        if typed:
            from gregor.tools.ports import pick_port
            schema_registry_url = f"http://127.0.0.1:{pick_port()}"
            overrides["schema.registry.listeners"] = schema_registry_url
        broker = BrokerProcess(output_dir / "broker-data", overrides).start()
        bootstrap = broker.bootstrap
        say(f"started a broker on {bootstrap} (data in {broker.data_dir})"
            + (f", its schema registry on {schema_registry_url}" if typed else ""))
    try:
        create_topics(bootstrap, TOPICS, replication_factor)
        return _run(output_dir, bootstrap, events, minutes, rate, log_lines, master, seed, say,
                    schema_registry_url if typed else None, suffix)
    finally:
        if broker is not None:
            broker.stop()
            say("broker stopped")


def _run(out: Path, bootstrap: str, events: int, minutes: float, rate: float, log_lines: int, master: str,
         seed: int, say: Any, registry_url: str | None = None, suffix: str = "") -> DemoResult:
    from gregor.pipeline import jobs

    say(f"starting Spark ({master})")
    spark = jobs.build_session(master, "gregor-pipeline-demo")
    spark.sparkContext.setLogLevel("WARN")
    activity = jobs.StreamConfig(bootstrap, "page_views", "page_view_stats", out / "page_view_stats",
                                 out / "checkpoints" / "page_view_stats",
                                 source_options={"maxOffsetsPerTrigger": "10000"})
    logs_cfg = jobs.StreamConfig(bootstrap, "logs", "log_error_counts", out / "log_error_counts",
                                 out / "checkpoints" / "log_error_counts")
    try:
        live = None
        if rate > 0:
            # Live: the streaming query runs while the generator produces; it is stopped afterwards
            # and the drain below restarts it from its checkpoint.
            live = jobs.start_activity_stream(spark, dataclasses.replace(activity, trigger="processing-time=5 seconds"))
            say(f"activity stream running every 5 s while {events:,} page views are produced at {rate:g}/s")
        span_s = events / rate if rate > 0 else minutes * 60
        t0 = time.monotonic()
        produced = generate_page_views(bootstrap, "page_views", events, seed=seed, rate_per_s=rate,
                                       events_per_second=events / span_s)
        say(f"produced {len(produced):,} page views to page_views in {time.monotonic() - t0:.1f} s")
        if live is not None:
            live.stop()
            say(f"live query stopped after {sum(p['numInputRows'] for p in live.recentProgress):,} page views")

        log_file = out / "app.log"
        lines = app_log_lines(log_lines, seed=seed + 1, start_ms=parse_iso_ms(produced[0].timestamp),
                              lines_per_second=log_lines / span_s)
        log_file.unlink(missing_ok=True)
        write_log_file(log_file, lines)
        shipped = ship_paths(bootstrap, "logs", [str(log_file)])
        say(f"shipped {shipped:,} log lines from {log_file} to logs")

        t0 = time.monotonic()
        jobs.start_activity_stream(spark, activity).awaitTermination()
        stats = spark.read.parquet(str(activity.output_dir)).collect() if activity.output_dir.exists() else []
        say(f"activity stream (Trigger.AvailableNow): {len(stats):,} (window, url) rows in "
            f"{time.monotonic() - t0:.1f} s")

        jobs.start_log_errors_stream(spark, logs_cfg).awaitTermination()
        errs = spark.read.parquet(str(logs_cfg.output_dir)).collect() if logs_cfg.output_dir.exists() else []
        say(f"log errors stream (Trigger.AvailableNow): {len(errs):,} (window, service) rows")

        report = jobs.activity_report(spark, bootstrap, "page_views", out / "report")
        say("offline report (batch read of the whole page_views topic):")
        say(report.format())
        typed_result = None
        if registry_url is not None:
            from gregor.pipeline.typed_events import run_typed_step
            typed_result = run_typed_step(spark, bootstrap, registry_url, out, min(events, 4_000), seed=seed,
                                          say=say, suffix=suffix)
    finally:
        spark.stop()

    truth = [PageView.from_json(v) for v in read_topic(bootstrap, "page_views")]
    expected = reference.page_view_stats(truth, 60_000)
    got = {(int(r["window_start"].timestamp() * 1000), r["url"]):
           reference.UrlWindowStats(r["views"], r["unique_visitors"], r["p50_latency_ms"], r["p95_latency_ms"])
           for r in stats}
    logged = [v.decode("utf-8", "replace") for v in read_topic(bootstrap, "logs")]
    expected_errors = reference.error_counts(logged, 60_000)
    got_errors = {(int(r["window_start"].timestamp() * 1000), r["service"]): r["errors"] for r in errs}
    result = DemoResult(bootstrap, out, len(stats), got == expected, len(errs), got_errors == expected_errors, report,
                        typed_result)
    if not expected:
        say("no window is closed yet: the events must span more than a window plus the watermark delay "
            "(2 minutes); use more --minutes, or more --events at this --rate")
    say(f"window aggregates {'match' if result.windows_checked else 'DO NOT match'} the plain-Python "
        f"computation ({len(expected)} closed windows x urls); error counts "
        f"{'match' if result.errors_checked else 'DO NOT match'} ({len(expected_errors)})")
    say("outputs:")
    typed_topics = f", page_views_avro{suffix}, page_view_counts_avro{suffix}" if typed_result is not None else ""
    say(f"  topics on {bootstrap}: page_views, page_view_stats, logs, log_error_counts{typed_topics}")
    say(f"  Parquet: {activity.output_dir}  {logs_cfg.output_dir}  {out / 'report'}")
    say(f"  checkpoints: {out / 'checkpoints'}   application log: {log_file}")
    return result
