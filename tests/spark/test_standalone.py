"""The same pipeline job, submitted with spark-submit to a Spark standalone master and worker started
from pyspark's own launcher (bin/spark-class), gives the same aggregates as plain Python."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gregor.pipeline import reference
from gregor.pipeline.demo import create_topics
from gregor.pipeline.generator import generate_page_views
from gregor.tools.ports import pick_port
from tests.broker_process import BrokerProcess
from tests.spark.util import recent_minute_ms

ROOT = Path(__file__).resolve().parents[2]




class SparkDaemon:
    """A foreground Spark master or worker JVM whose log we watch for a line."""

    def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.lines: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for(self, pattern: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(re.search(pattern, line) for line in self.lines):
            assert self.proc.poll() is None, "".join(self.lines[-30:])
            assert time.monotonic() < deadline, f"no {pattern!r} in:\n" + "".join(self.lines[-30:])
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[str]:
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    env = {**os.environ, "SPARK_HOME": str(spark_home), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable, "SPARK_LOG_DIR": str(tmp_path / "logs")}
    port = pick_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(spark_home / "bin" / "spark-class")
    master = SparkDaemon([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                          str(port), "--webui-port", str(pick_port())], env)
    worker = None
    try:
        master.wait_for(r"I have been elected leader|Starting Spark master")
        worker = SparkDaemon([spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                              "--cores", "2", "--memory", "1g", "--webui-port", str(pick_port()),
                              "--work-dir", str(tmp_path / "work")], env)
        worker.wait_for(r"Successfully registered with master")
        yield url
    finally:
        if worker is not None:
            worker.stop()
        master.stop()


def test_spark_submit_to_a_standalone_cluster(standalone_cluster: str, start_broker: Callable[..., BrokerProcess],
                                              spark: Any, tmp_path: Path) -> None:
    broker = start_broker()
    create_topics(broker.bootstrap, {"page_views": 3, "page_view_stats": 1})
    events = generate_page_views(broker.bootstrap, "page_views", 3_000, events_per_second=10,
                                 start_ms=recent_minute_ms())
    import pyspark

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    out = tmp_path / "out"
    proc = subprocess.run(
        [str(submit), "--master", standalone_cluster, "--conf", f"spark.pyspark.python={sys.executable}",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=512m",
         "examples/activity_job.py", "activity", "--bootstrap-server", broker.bootstrap, "--output", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    # The executors ran on the worker: it keeps a directory per application.
    assert list((tmp_path / "work").glob("app-*/*/stderr"))

    rows = spark.read.parquet(str(out / "page_view_stats")).collect()
    got = {(int(r["window_start"].timestamp() * 1000), r["url"]):
           reference.UrlWindowStats(r["views"], r["unique_visitors"], r["p50_latency_ms"], r["p95_latency_ms"])
           for r in rows}
    expected = reference.page_view_stats(events, 60_000)
    assert len(expected) > 50
    assert got == expected
