"""One SparkSession (local[2]) for every Spark test: starting one costs 5-10 s here.

Workers run this interpreter (PYSPARK_PYTHON), the one with gregor installed. The whole directory
is skipped when pyspark or Java is missing (install the `spark` extra and a JRE).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java runtime (Spark needs one: apt-get install openjdk-17-jre-headless)", allow_module_level=True)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from gregor.pipeline.jobs import build_session

    session = build_session("local[2]", "gregor-tests", {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.streaming.stopTimeout": "30s",
        "spark.driver.memory": "1g",
    })
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
