"""quickstart.sh installs the broker and nothing else, serves and round-trips a message, and stops with one
clear line when port 9092 is taken, before installing anything; scripts/install.sh installs what each use
needs (the measure on a fresh machine, pip downloads included, is in the README's quick start)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.tools.cli import REPO

# What a broker must not need: the extras (cluster, spark, test) and what they bring.
EXTRAS = ("kazoo", "pyspark", "pyarrow", "pandas", "playwright", "aiokafka", "kafka")


def quickstart_copy(tmp_path: Path, installer: str) -> Path:
    """quickstart.sh in a folder of its own, next to a stand-in scripts/install.sh."""
    shutil.copy(REPO / "quickstart.sh", tmp_path / "quickstart.sh")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "install.sh").write_text(installer)
    return tmp_path / "quickstart.sh"


def test_port_9092_taken(tmp_path: Path) -> None:
    # The stand-in installer records being run: the real one must not run (it would install packages),
    # and must not be reached.
    script = quickstart_copy(tmp_path, "touch install-ran\nexit 1\n")
    holder = socket.socket()
    try:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", 9092))
        holder.listen(1)
    except OSError:
        holder.close()
        holder = None  # something else holds 9092 already: the script must say so all the same
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", 9092)) != 0:
                pytest.skip("port 9092 is bound but not listening; cannot set up the case")
    try:
        res = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30)
    finally:
        if holder is not None:
            holder.close()
    assert res.returncode == 1, res
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("quickstart: port 9092 is already in use"), res.stderr
    assert not (tmp_path / "install-ran").exists()


def test_quickstart_serves_and_round_trips_without_the_extras(tmp_path: Path) -> None:
    """The real script, broker and tools; only the installer is a stand-in: it records what it was asked
    for and makes a .venv whose `gregor` runs this checkout with the extras' packages made unimportable."""
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 9092)) == 0:
            pytest.skip("port 9092 is in use: the quickstart's broker needs it")
    blocker = tmp_path / "no-extras"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class NoExtras:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {EXTRAS!r}:\n"
        "            raise ImportError(f'{name} is an extra: a broker must not need it')\n"
        "sys.meta_path.insert(0, NoExtras())\n")
    venv_bin = tmp_path / ".venv" / "bin"
    script = quickstart_copy(tmp_path, f"""echo "$@" > install-args
mkdir -p {venv_bin}
printf 'PATH={venv_bin}:$PATH\\n' > {venv_bin}/activate
printf '#!/bin/sh\\nPYTHONPATH={blocker}:{REPO} exec {sys.executable} -m gregor "$@"\\n' > {venv_bin}/gregor
chmod +x {venv_bin}/gregor
""")
    proc = subprocess.Popen(["bash", str(script)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 90
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("Broker running on 127.0.0.1:9092") or time.monotonic() > deadline:
                break
        out = "\n".join(lines)
        assert lines and lines[-1].startswith("Broker running on 127.0.0.1:9092"), out
        assert (tmp_path / "install-args").read_text().split() == ["broker"]
        assert "hello\tGregor" in lines and "world\tsays hello" in lines, out
        assert "is an extra" not in out and "Traceback" not in out, out
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the script stops its broker cleanly
        rest = proc.communicate(timeout=30)[0]
        assert "shut down cleanly" in rest, rest
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def dry_run(*targets: str, path: str | None = None) -> list[str]:
    env = {**os.environ, "PATH": path} if path is not None else None
    bash = shutil.which("bash") or "/bin/bash"  # found before PATH is narrowed
    res = subprocess.run([bash, str(REPO / "scripts" / "install.sh"), "--dry-run", *targets], env=env,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def test_install_broker_installs_the_package_alone() -> None:
    assert dry_run("broker") == ["Debian packages: none", "Python: pip install -e '.'"]


def test_install_for_the_tests_installs_everything_on_a_bare_machine(tmp_path: Path) -> None:
    # A PATH with none of kcat, strace, openssl, java, chromium: all of them are to be installed.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "dirname").symlink_to(shutil.which("dirname") or "/usr/bin/dirname")
    debian, python = dry_run("test", path=str(tmp_path / "bin"))
    assert set(debian.removeprefix("Debian packages: ").split()) >= {
        "kcat", "strace", "openssl", "openjdk-17-jre-headless", "chromium"}
    assert python == "Python: pip install -e '.[cluster,spark,test]'"
    assert dry_run("cluster", "spark")[1] == "Python: pip install -e '.[cluster,spark]'"


def test_install_without_a_target_says_how() -> None:
    res = subprocess.run(["bash", str(REPO / "scripts" / "install.sh")], capture_output=True, text=True, timeout=30)
    assert res.returncode == 2
    assert "scripts/install.sh broker" in res.stderr and "scripts/install.sh test" in res.stderr
