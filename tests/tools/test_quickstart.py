"""quickstart.sh stops with one clear line when port 9092 is taken, before installing anything."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from tests.tools.cli import REPO


def test_port_9092_taken(tmp_path: Path) -> None:
    # A copy of the script next to a stand-in installer that records being run: the real one must
    # not run (it would install packages), and must not be reached.
    shutil.copy(REPO / "quickstart.sh", tmp_path / "quickstart.sh")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "install.sh").write_text("touch install-ran\nexit 1\n")
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
        res = subprocess.run(["bash", str(tmp_path / "quickstart.sh")], capture_output=True, text=True, timeout=30)
    finally:
        if holder is not None:
            holder.close()
    assert res.returncode == 1, res
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("quickstart: port 9092 is already in use"), res.stderr
    assert not (tmp_path / "install-ran").exists()
