"""The commands that need more than a broker name the install command when it is missing, in one line,
instead of failing half-way with an ImportError (the extras' packages are made unimportable here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools.cli import env


def without(tmp_path: Path, *packages: str) -> dict[str, str]:
    """The child's environment, with `packages` unimportable in it (a sitecustomize on its path)."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "class Missing:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {packages!r}:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Missing())\n")
    e = env()
    e["PYTHONPATH"] = f"{tmp_path}:{e['PYTHONPATH']}"
    return e


def gregor(tmp_path: Path, e: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gregor", *args], cwd=tmp_path, env=e, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("command", [("pipeline", "demo"), ("pipeline", "report")])
def test_pipeline_without_spark_names_the_install(tmp_path: Path, command: tuple[str, ...]) -> None:
    res = gregor(tmp_path, without(tmp_path, "pyspark", "pyarrow"), *command)
    assert res.returncode == 1, res
    assert res.stderr.splitlines() == [
        f"Error: gregor {' '.join(command)} needs pyspark, pyarrow, not installed here. In the Gregor checkout, "
        "scripts/install.sh spark installs it (a Java runtime from Debian, and pyspark, pyarrow, pandas and the typed codecs (gregor[typed])); "
        "elsewhere: apt-get install openjdk-17-jre-headless; pip install 'gregor[spark]'"]
    assert not (tmp_path / "pipeline-demo").exists()


def test_cluster_up_without_kazoo_names_the_install(tmp_path: Path) -> None:
    res = gregor(tmp_path, without(tmp_path, "kazoo"), "cluster", "up", "--dir", str(tmp_path / "c"))
    assert res.returncode == 1, res
    assert res.stderr.startswith("Error: gregor cluster up needs kazoo, not installed here. In the Gregor "
                                 "checkout, scripts/install.sh cluster installs it"), res.stderr
    assert len(res.stderr.splitlines()) == 1 and not (tmp_path / "c").exists()


def test_a_broker_with_zookeeper_connect_without_kazoo_names_the_install(tmp_path: Path) -> None:
    res = gregor(tmp_path, without(tmp_path, "kazoo"), "serve", "--override", "zookeeper.connect=127.0.0.1:1",
                 "--override", "broker.id=1", "--override", f"log.dirs={tmp_path / 'data'}",
                 "--override", "listeners=PLAINTEXT://127.0.0.1:0")
    assert res.returncode == 1, res
    assert res.stderr.splitlines()[-1] == ("gregor: cannot start: zookeeper.connect needs the ZooKeeper client "
                                           "(No module named 'kazoo'): run scripts/install.sh cluster (or pip "
                                           "install 'gregor[cluster]')")
