"""Every benchmark still runs: each one's smoke mode, end to end at a tiny size, as a subprocess.

Benchmarks run on demand, so nothing else notices when one stops starting (bench_spark.py imported a
class that had moved). Each smoke run must exit 0 and print its figures (what the patterns below
match); the figures themselves measure nothing at this size. The benchmarks of the storage layer
take their sizes as arguments instead of a --smoke flag. scripts/fault_campaign.py (ZooKeeper and KRaft) has its own short
run (tests/cluster/test_fault_campaign.py); benchmarks/fuzzlib.py is the fuzzer's library.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
NOT_BENCHMARKS = {"__init__.py", "fuzzlib.py"}


@dataclass(frozen=True)
class Smoke:
    script: str
    args: tuple[str, ...]
    figures: tuple[str, ...]  # regexes (re.M) that its output must match
    timeout_s: float = 120.0


SMOKES = [
    Smoke("bench_throughput.py", ("--smoke",), (r"^produce confluent-kafka .* rec/s", r"^consume confluent-kafka .* rec/s")),
    Smoke("bench_metadata.py", ("store", "--smoke"), (r"^store 1 x 10: total [\d.]+ s",)),
    Smoke("bench_metadata.py", ("broker", "--smoke"), (r"^broker 1 x 10: CreateTopics acknowledged in [\d.]+ s",)),
    Smoke("bench_metrics.py", ("--smoke",), (r"scraped bytes in [\d,]+ vs", r"^consume +median rec/s on +[\d,]+")),
    Smoke("bench_quotas.py", ("--smoke",), (r"^median: none \d+ records/s", r"quota work per Produce request .* us")),
    # Without librdkafka's rdkafka_performance (built outside the repo) it can only say so.
    Smoke("bench_rdkafka.py", ("--smoke",), (r"^(median consume: +[\d,]+ rec/s|skipped: no rdkafka_performance)",)),
    Smoke("bench_tls.py", ("--smoke",), (r"^SSL / PLAINTEXT: produce \d+%, consume \d+%",)),
    Smoke("fuzz_broker.py", ("--smoke",), (r"^seed 1: 300 inputs", r"restart ok: True", r"^findings: 0")),
    Smoke("bench_storage.py", ("--mb", "2", "--rounds", "1", "--segment-mb", "1"),
          (r"^append 100 KiB batches .* appends/s", r"read, max_bytes +64 KiB: .* MB/s")),
    Smoke("bench_cleaner.py", ("--mb", "1", "--keys", "100", "--segment-mb", "1", "--codecs", "none,zstd"),
          (r"zstd +first clean: .* MB/s", r"appends +during a clean .* appends/s")),
    Smoke("bench_partitions.py", ("--partitions", "20", "--topics", "2", "--sample", "2"),
          (r"^create: [\d.]+ s", r"^restart to serving: [\d.]+ s", r"^SIGTERM shutdown after restart: [\d.]+ s \(exit code 0\)")),
    Smoke("bench_groups.py", ("--smoke",), (r"^single consumer, assign\(\): +[\d,]+ rec/s",
                                           r"^5 groups committing every 1 s for 2 s: [\d,]+ req/s")),
    Smoke("bench_cluster.py", ("--smoke",), (r"^end-to-end latency at 500/s \(acks=all\): p50 [\d.]+ ms",
                                            r"^leader failover .* median [\d.]+ s",
                                            r"^controlled shutdown: \d+ of 30 leaderships moved")),
    Smoke("bench_arrow_reader.py", ("--smoke",), (r"^read_arrow: median [\d.]+ M rows/s",
                                                 r"^confluent-kafka: median [\d.]+ M rows/s; ratio")),
    Smoke("bench_latency.py", ("--smoke",), (r"^ +1 acks1 +\d+ +\d+ +0 ", r"^ +1 transactional +\d+ +\d+ +0 ")),
    Smoke("bench_raft.py", ("--smoke",), (r"start of a 3-node quorum from nothing: [\d.]+ s",
                                         r"failover after SIGKILL of the leader.*new leader in [\d.]+ s")),
    Smoke("bench_schema_validation.py", ("--smoke",), (r"^librdkafka: on/off throughput [\d.]+",
                                                      r"validate_batches, validation on +[\d.]+ us per batch")),
    Smoke("bench_typed.py", ("--smoke",), (r"^\(c\) C decoder \(gregor.typed\) +[\d,]+ rows/s",
                                          r"^read_arrow_batches \+ decode_column \(C\) +[\d,]+ rows/s")),
    Smoke("bench_kraft.py", ("--smoke",), (r"^kraft: start of 3 brokers [\d.]+ s",
                                           r"^kraft: CreateTopics of 10 partitions acknowledged in [\d.]+ s",
                                           r"^kraft: controller failover \(SIGKILL, 1x\): new controller median",
                                           r"^kraft: partition leader failover \(SIGKILL, short sessions.*median [\d.]+ s"),
          180.0),
    # Spark: a JVM and Python workers start, ~20 s on an idle machine.
    Smoke("bench_transactions.py", ("--smoke",), (r"^  idempotent \(no transactions\): +[\d,]+ rec/s",
                                                 r"spark sink, 1,000 rows: at least once [\d,]+ rows/s"), 300.0),
    Smoke("bench_spark.py", ("--smoke",), (r"^\| gregor \| [\d,]+ / [\d,]+ \|", r"^\| parquet \| [\d,]+ / [\d,]+ \|", r"^sink: [\d,]+ rows/s"), 300.0),
]


def test_every_benchmark_has_a_smoke_run() -> None:
    scripts = {p.name for p in BENCHMARKS.glob("*.py")} - NOT_BENCHMARKS
    assert scripts == {s.script for s in SMOKES}


@pytest.mark.parametrize("smoke", [pytest.param(s, marks=pytest.mark.timeout(s.timeout_s + 60),
                                                id=" ".join((s.script, *s.args)))
                                   for s in SMOKES])
def test_benchmark_smoke_run(smoke: Smoke) -> None:
    # PYTHONPATH: this checkout's gregor, benchmarks and tests, whichever tree the venv was installed from.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, str(BENCHMARKS / smoke.script), *smoke.args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=smoke.timeout_s)
    took = time.monotonic() - t0
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"exit {res.returncode} after {took:.1f} s:\n{out[-4000:]}"
    missing = [f for f in smoke.figures if not re.search(f, res.stdout, re.M)]
    assert not missing, f"no figure matching {missing} in:\n{res.stdout[-4000:]}"
