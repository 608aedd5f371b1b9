"""The reference pipeline against a real broker: its Spark aggregates equal plain-Python ones."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gregor.pipeline import jobs, reference
from gregor.pipeline.events import PageView, app_log_lines, iso_ms
from gregor.pipeline.generator import generate_page_views
from gregor.pipeline.shipper import ship_paths, write_log_file
from tests.broker_process import BrokerProcess
from tests.spark.util import consume_all, create_topic, produce, recent_minute_ms, unique

ROOT = Path(__file__).resolve().parents[2]
START_MS = recent_minute_ms()


def stats_rows(spark: Any, path: Path) -> dict[tuple[int, str], reference.UrlWindowStats]:
    return {(int(r["window_start"].timestamp() * 1000), r["url"]):
            reference.UrlWindowStats(r["views"], r["unique_visitors"], r["p50_latency_ms"], r["p95_latency_ms"])
            for r in spark.read.parquet(str(path)).collect()}


@pytest.fixture(scope="module")
def activity(broker: BrokerProcess) -> tuple[str, list[PageView]]:
    """8,000 page views over ~6.7 minutes of event time, in 4 partitions."""
    topic = create_topic(broker.bootstrap, unique("page_views"), 4)
    events = generate_page_views(broker.bootstrap, topic, 8_000, events_per_second=20, start_ms=START_MS)
    return topic, events


def test_activity_stream_aggregates_equal_plain_python(spark: Any, broker: BrokerProcess,
                                                       activity: tuple[str, list[PageView]], tmp_path: Path) -> None:
    topic, events = activity
    stats_topic = create_topic(broker.bootstrap, unique("page_view_stats"), 1)
    cfg = jobs.StreamConfig(broker.bootstrap, topic, stats_topic, tmp_path / "stats", tmp_path / "checkpoint",
                            source_options={"maxOffsetsPerTrigger": "3000"})
    q = jobs.start_activity_stream(spark, cfg)
    q.awaitTermination(180)
    assert q.exception() is None
    progress = q.recentProgress
    assert sum(p["numInputRows"] for p in progress) == len(events)
    assert all(s.get("numRowsDroppedByWatermark", 0) == 0 for p in progress for s in p["stateOperators"])

    expected = reference.page_view_stats(events, 60_000)
    assert len(expected) > 100
    assert stats_rows(spark, cfg.output_dir) == expected

    # The same rows went to the stats topic, keyed by URL, as JSON.
    published = [json.loads(r.value) for r in consume_all(broker.bootstrap, stats_topic)]
    assert len(published) == len(expected)
    assert all(r.key.decode() == json.loads(r.value)["url"] for r in consume_all(broker.bootstrap, stats_topic))
    assert {(p["url"], p["views"]) for p in published} == {(url, s.views) for (_, url), s in expected.items()}


def test_offline_report_equals_plain_python(spark: Any, broker: BrokerProcess, activity: tuple[str, list[PageView]],
                                            tmp_path: Path) -> None:
    topic, events = activity
    report = jobs.activity_report(spark, broker.bootstrap, topic, tmp_path / "report")
    assert report.events == len(events)
    assert report.users == len({e.user for e in events})
    assert report.sessions == len({e.session for e in events})
    assert [(u, v, n) for u, v, n, _ in report.top_urls] == reference.top_urls(events, 10)
    # Over the whole topic percentile_approx merges per-task summaries: within a rank or two here.
    lat = sorted(e.latency_ms for e in events)
    for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        rank = q * len(lat)
        assert lat[int(rank) - 3] <= report.latency_ms[name] <= lat[int(rank) + 2], name
    assert spark.read.parquet(str(tmp_path / "report" / "views_per_minute")).groupBy().sum("count").first()[0] == len(
        events)


def run_log_errors(spark: Any, bootstrap: str, topic: str, tmp_path: Path) -> dict[tuple[int, str], int]:
    out_topic = create_topic(bootstrap, unique("log_error_counts"), 1)
    cfg = jobs.StreamConfig(bootstrap, topic, out_topic, tmp_path / "errors", tmp_path / "checkpoint")
    q = jobs.start_log_errors_stream(spark, cfg)
    q.awaitTermination(120)
    assert q.exception() is None
    return {(int(r["window_start"].timestamp() * 1000), r["service"]): r["errors"]
            for r in spark.read.parquet(str(cfg.output_dir)).collect()}


def test_log_aggregation_with_our_shipper(spark: Any, broker: BrokerProcess, tmp_path: Path) -> None:
    topic = create_topic(broker.bootstrap, unique("logs"), 2)
    lines = list(app_log_lines(3_000, start_ms=START_MS, lines_per_second=10))
    log_file = tmp_path / "app.log"
    write_log_file(log_file, lines)
    assert ship_paths(broker.bootstrap, topic, [str(log_file)]) == len(lines)
    shipped = consume_all(broker.bootstrap, topic)
    assert sorted(r.value.decode() for r in shipped) == sorted(lines)
    assert all(r.key.decode() in r.value.decode() for r in shipped)  # keyed by service

    expected = reference.error_counts(lines, 60_000)
    assert sum(expected.values()) > 200
    assert run_log_errors(spark, broker.bootstrap, topic, tmp_path) == expected


# --- rsyslog's omkafka (Debian's rsyslog-kafka) --------------------------------------------------

RSYSLOG_PACKAGES = ["rsyslog", "rsyslog-kafka", "libestr0", "libfastjson4", "liblognorm5"]


def _rsyslog_root() -> Path | None:
    """rsyslogd and omkafka.so: the machine's if installed, else Debian's packages unpacked into a
    cache dir (apt-get download + dpkg -x: nothing is installed, no service is touched)."""
    if shutil.which("rsyslogd") and Path("/usr/lib/x86_64-linux-gnu/rsyslog/omkafka.so").exists():
        return Path("/")
    if not (shutil.which("apt-get") and shutil.which("dpkg")):
        return None
    cache = Path(tempfile.gettempdir()) / "gregor-test-rsyslog"
    root = cache / "root"
    if (root / "usr/sbin/rsyslogd").exists():
        return root
    debs = cache / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    os.chmod(debs, 0o777)  # apt's download sandbox user must be able to write here
    got = subprocess.run(["apt-get", "download", *RSYSLOG_PACKAGES], cwd=debs, capture_output=True, text=True,
                         timeout=120)
    if got.returncode != 0:
        return None
    for deb in debs.glob("*.deb"):
        subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True, timeout=60)
    return root if (root / "usr/sbin/rsyslogd").exists() else None


@pytest.fixture
def rsyslog_dir() -> Iterator[Path]:
    """A world-accessible scratch dir: rsyslog runs as `nobody` when the tests run as root."""
    d = Path(tempfile.mkdtemp(prefix="gregor-rsyslog-"))
    os.chmod(d, 0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_log_aggregation_with_rsyslog_omkafka(spark: Any, broker: BrokerProcess, rsyslog_dir: Path,
                                              tmp_path: Path) -> None:
    root = _rsyslog_root()
    if root is None:
        pytest.skip("rsyslog + rsyslog-kafka (omkafka) are not installed and could not be fetched with apt-get download")
    topic = create_topic(broker.bootstrap, unique("rsyslog"), 1)
    app_log, work = rsyslog_dir / "app.log", rsyslog_dir / "work"
    work.mkdir()
    os.chmod(work, 0o777)
    app_log.touch()
    os.chmod(app_log, 0o666)
    conf = rsyslog_dir / "rsyslog.conf"
    conf.write_text(f"""
global(workDirectory="{work}")
module(load="imfile")
module(load="omkafka")
template(name="gregor_line" type="string"
         string="%timereported:::date-rfc3339% %hostname% %syslogtag%%msg:::sp-if-no-1st-sp%%msg:::drop-last-lf%")
input(type="imfile" File="{app_log}" Tag="checkout[4242]:" Facility="local0")
action(type="omkafka" broker=["{broker.bootstrap}"] topic="{topic}" template="gregor_line"
       confParam=["queue.buffering.max.ms=20"])
""")
    lib = root / "usr/lib/x86_64-linux-gnu"
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib)} if root != Path("/") else dict(os.environ)
    cmd = [str(root / "usr/sbin/rsyslogd"), "-n", "-f", str(conf), "-i", str(rsyslog_dir / "rsyslogd.pid"),
           "-M", str(lib / "rsyslog")]
    as_nobody: Any = None
    if os.getuid() == 0:
        def as_nobody() -> None:  # never run a test daemon as root
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=as_nobody)
    try:
        time.sleep(1.0)
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        levels = ["INFO", "ERROR", "WARN", "ERROR", "DEBUG", "FATAL"]
        written = [f"{levels[i % len(levels)]} request {i} handled" for i in range(60)]
        with app_log.open("a") as f:
            for line in written:
                f.write(line + "\n")
        deadline = time.monotonic() + 30
        received = consume_all(broker.bootstrap, topic)
        while len(received) < len(written):
            assert time.monotonic() < deadline, f"rsyslog delivered {len(received)} of {len(written)} lines"
            time.sleep(0.3)
            received = consume_all(broker.bootstrap, topic)
    finally:
        proc.terminate()
        proc.wait(10)
    lines = [r.value.decode() for r in received]
    parsed = [reference.parse_log_line(line) for line in lines]
    assert all(p is not None and p.service == "checkout" for p in parsed), lines[:3]
    assert sorted(f"{p.level} {p.message}" for p in parsed if p) == sorted(written)
    # The stream counts what rsyslog shipped: compare with the same count over the received lines,
    # closing every window by adding one error line two minutes after the last.
    last = max(p.ts_ms for p in parsed if p)
    flush_line = f"{iso_ms(last + 120_000)} host checkout[4242]: ERROR closes the windows"
    produce(broker.bootstrap, topic, [{"value": flush_line.encode()}])
    expected = reference.error_counts(lines + [flush_line], 60_000)
    assert sum(expected.values()) == sum(1 for w in written if w.split()[0] in ("ERROR", "FATAL"))
    assert run_log_errors(spark, broker.bootstrap, topic, tmp_path) == expected


@pytest.mark.timeout(480)
def test_pipeline_demo_command(tmp_path: Path) -> None:
    """`gregor pipeline demo` end to end: its own broker (with its schema registry), generator, shipper,
    streams and report, then the typed step (on by default): Avro page views, a live typed stream and a
    schema change while it runs."""
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "gregor", "pipeline", "demo", "--output", str(out), "--events", "4000",
                           "--minutes", "5", "--log-lines", "1500", "--master", "local[2]"], cwd=ROOT, capture_output=True,
                          text=True, timeout=420, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    m = re.search(r"window aggregates match the plain-Python computation \((\d+) closed windows x urls\); "
                  r"error counts match \((\d+)\)", proc.stdout)
    assert m and int(m.group(1)) > 50 and int(m.group(2)) > 10, proc.stdout[-3000:]
    assert "typed: a batch read with v2 sees country on new records" in proc.stdout, proc.stdout[-3000:]
    assert re.search(r"typed: per-URL views and latency in \S+ \(Avro, read by confluent-kafka's "
                     r"AvroDeserializer\) match the plain-Python sums", proc.stdout), proc.stdout[-3000:]
    for d in ("page_view_stats", "log_error_counts", "report/top_urls", "checkpoints"):
        assert (out / d).exists(), d
    assert "broker stopped" in proc.stdout
