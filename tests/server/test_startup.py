"""`gregor serve`: configuration errors name the property; SIGTERM exits 0 after a clean shutdown."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gregor", "serve", *args], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("override, needle", [
    ("no.such.property=1", "Unknown broker property: no.such.property"),
    ("num.partitions=many", "Invalid value many for configuration num.partitions: Expected value to be a 32-bit"),
    ("auto.create.topics.enable=maybe", "configuration auto.create.topics.enable: Expected value to be either true"),
    ("log.message.timestamp.type=Whenever", "log.message.timestamp.type"),
    ("listeners=SSL://127.0.0.1:9093", "security protocol SSL is not supported"),
    ("num.partitions=0", "Invalid value 0 for configuration num.partitions: Value must be at least 1"),
    # A broker default that no log could load is refused at start, not when the first log opens.
    ("log.index.size.max.bytes=8", "configuration log.index.size.max.bytes: Value must be at least 12"),
])
def test_bad_property_is_a_clear_startup_error(tmp_path: Path, override: str, needle: str) -> None:
    res = _serve("--override", f"log.dirs={tmp_path}", "--override", override)
    assert res.returncode == 2
    assert needle in res.stderr


def test_properties_file(tmp_path: Path, start_broker: Callable[..., BrokerProcess]) -> None:
    props = tmp_path / "server.properties"
    props.write_text("# a comment\nbroker.id=0\nnum.partitions = 3\nlog.retention.hours: 24\nbogus.key=1\n")
    res = _serve(str(props))
    assert res.returncode == 2 and "bogus.key" in res.stderr


def test_sigterm_exits_zero(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data").start()
    assert b.stop() == 0
    assert "shut down cleanly" in b.log_text()
