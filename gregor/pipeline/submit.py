"""Entry point for running the pipeline's Spark jobs, locally or under spark-submit.

`gregor pipeline activity|log-errors|report` call `run_job` with `--master local[*]`; under
spark-submit (examples/activity_job.py) the master comes from spark-submit and `--master` is left
out, so the very same job code runs on a standalone cluster.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

JOBS = ("activity", "log-errors", "report")


def add_job_arguments(p: argparse.ArgumentParser, *, with_master: bool) -> None:
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    p.add_argument("--output", type=Path, default=Path("pipeline-out"),
                   help="directory for Parquet outputs and checkpoints")
    p.add_argument("--trigger", default="available-now",
                   help="'available-now' (process what is there, then stop) or 'processing-time=10 seconds' (run "
                        "until interrupted)")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument("--watermark", default="1 minute", help="watermark delay, e.g. '1 minute'")
    if with_master:
        p.add_argument("--master", default="local[*]")


def run_job(job: str, args: argparse.Namespace, master: str | None) -> int:
    from gregor.pipeline import jobs

    spark = jobs.build_session(master, f"gregor-{job}")
    try:
        out: Path = args.output
        if job == "report":
            report = jobs.activity_report(spark, args.bootstrap_server, "page_views", out / "report")
            print(report.format())
            print(f"report tables written under {out / 'report'}")
            return 0
        topics = {"activity": ("page_views", "page_view_stats"), "log-errors": ("logs", "log_error_counts")}[job]
        options = {}
        if args.max_offsets_per_trigger:
            options["maxOffsetsPerTrigger"] = str(args.max_offsets_per_trigger)
        cfg = jobs.StreamConfig(args.bootstrap_server, topics[0], topics[1], out / topics[1],
                                out / "checkpoints" / topics[1], watermark_delay=args.watermark,
                                trigger=args.trigger, source_options=options)
        start = jobs.start_activity_stream if job == "activity" else jobs.start_log_errors_stream
        query = start(spark, cfg)
        try:
            query.awaitTermination()
        except KeyboardInterrupt:
            query.stop()
        print(f"{job}: results in topic {topics[1]} and Parquet {cfg.output_dir}; checkpoint {cfg.checkpoint_dir}")
        return 0
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    """`spark-submit [...] examples/activity_job.py [activity|log-errors|report] --bootstrap-server ...`"""
    parser = argparse.ArgumentParser(prog="activity_job.py", description="Gregor pipeline job for spark-submit")
    parser.add_argument("job", nargs="?", default="activity", choices=JOBS)
    add_job_arguments(parser, with_master=False)
    args = parser.parse_args(argv)
    return run_job(args.job, args, master=None)


if __name__ == "__main__":
    sys.exit(main())
