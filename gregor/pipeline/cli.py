"""`gregor pipeline ...`: the reference pipeline's commands (hooked into gregor/cli.py).

    gregor pipeline demo                      # everything, with a broker of its own
    gregor pipeline generate --events 100000 --rate 2000
    gregor pipeline ship-logs --follow /var/log/app.log
    gregor pipeline activity|log-errors|report --output out/
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gregor.tools.extras import SPARK, require


def cmd_demo(args: argparse.Namespace) -> int:
    require(SPARK, "gregor pipeline demo")
    from gregor.pipeline.demo import run_demo

    result = run_demo(args.output.resolve(), bootstrap=args.bootstrap_server, events=args.events,
                      minutes=args.minutes, rate=args.rate,
                      log_lines=args.log_lines, master=args.master, seed=args.seed,
                      replication_factor=args.replication_factor, say=lambda line: print(line, flush=True),
                      typed=_typed(args), schema_registry_url=args.schema_registry_url)
    return 0 if result.ok else 1


def _typed(args: argparse.Namespace) -> bool:
    """The typed step runs unless asked not to; on a broker of the user's it needs that cluster's registry."""
    if args.typed is not None:
        return bool(args.typed)
    return args.bootstrap_server is None or args.schema_registry_url is not None


def cmd_generate(args: argparse.Namespace) -> int:
    from gregor.pipeline.generator import generate_page_views

    events = generate_page_views(args.bootstrap_server, args.topic, args.events, seed=args.seed, rate_per_s=args.rate)
    print(f"Produced {len(events):,} page views to {args.topic}.", file=sys.stderr)
    return 0


def cmd_ship_logs(args: argparse.Namespace) -> int:
    from gregor.pipeline.shipper import ship_paths

    try:
        n = ship_paths(args.bootstrap_server, args.topic, args.files, follow_files=args.follow)
    except KeyboardInterrupt:
        return 0
    print(f"Shipped {n:,} lines to {args.topic}.", file=sys.stderr)
    return 0


def cmd_job(args: argparse.Namespace) -> int:
    require(SPARK, f"gregor pipeline {args.job}")
    from gregor.pipeline.submit import run_job

    return run_job(args.job, args, master=args.master)


def add_subcommands(sub: Any) -> None:
    from gregor.pipeline.submit import add_job_arguments

    p = sub.add_parser("pipeline", help="the reference data pipeline on Spark (demo, generator, shipper, jobs)")
    psub = p.add_subparsers(dest="pipeline_command", required=True)

    d = psub.add_parser("demo", help="run generator, log shipper, streaming jobs and report end to end")
    d.add_argument("--bootstrap-server", default=None, help="use this broker (default: start one)")
    d.add_argument("--output", type=Path, default=Path("pipeline-demo"), help="where outputs go")
    d.add_argument("--events", type=int, default=20_000, help="page views to generate")
    d.add_argument("--minutes", type=float, default=10.0, help="minutes of event time the page views span "
                                                                 "(backfilled as fast as possible)")
    d.add_argument("--rate", type=float, default=0.0, help="produce live at this many page views per second "
                                                           "instead (event time = wall clock)")
    d.add_argument("--log-lines", type=int, default=6_000)
    d.add_argument("--replication-factor", type=int, default=-1,
                   help="of the topics it creates (default: the cluster's default.replication.factor)")
    d.add_argument("--master", default="local[*]")
    d.add_argument("--seed", type=int, default=1)
    d.add_argument("--typed", action=argparse.BooleanOptionalAction, default=None,
                   help="the typed step after the bytes pipeline: Avro page views on a schema-checked topic, a "
                        "live typed stream and a schema change while it runs (default: on, unless "
                        "--bootstrap-server is given without --schema-registry-url; the demo's own broker "
                        "runs a schema registry)")
    d.add_argument("--schema-registry-url", default=None,
                   help="with --bootstrap-server: the registry of the typed step")
    d.set_defaults(func=cmd_demo)

    g = psub.add_parser("generate", help="produce page-view events")
    g.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    g.add_argument("--topic", default="page_views")
    g.add_argument("--events", type=int, default=10_000)
    g.add_argument("--rate", type=float, default=0.0, help="events per second (0: as fast as possible)")
    g.add_argument("--seed", type=int, default=1)
    g.set_defaults(func=cmd_generate)

    s = psub.add_parser("ship-logs", help="ship log lines from files or stdin to a topic")
    s.add_argument("files", nargs="*", help="log files ('-' or none: stdin)")
    s.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    s.add_argument("--topic", default="logs")
    s.add_argument("--follow", action="store_true", help="keep shipping lines appended to the file")
    s.set_defaults(func=cmd_ship_logs)

    for job, help_text in (("activity", "streaming page-view statistics per minute and URL"),
                           ("log-errors", "streaming error counts per service per minute"),
                           ("report", "batch report over the whole page_views topic")):
        j = psub.add_parser(job, help=help_text)
        add_job_arguments(j, with_master=True)
        j.set_defaults(func=cmd_job, job=job)
