"""`gregor serve`: configuration errors name the property; SIGTERM exits 0 after a clean shutdown, which
loses nothing acknowledged; a clean restart serves logs before opening them all."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gregor.protocol.records import iter_records
from tests.broker_process import BrokerProcess
from tests.server.admin_wire import create_topic, fetch, produce
from tests.wire import WireClient


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gregor", "serve", *args], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("override, needle", [
    ("no.such.property=1", "Unknown broker property: no.such.property"),
    ("num.partitions=many", "Invalid value many for configuration num.partitions: Expected value to be a 32-bit"),
    ("auto.create.topics.enable=maybe", "configuration auto.create.topics.enable: Expected value to be either true"),
    ("log.message.timestamp.type=Whenever", "log.message.timestamp.type"),
    ("listeners=SSL://127.0.0.1:9093", "a TLS listener needs ssl.keystore.location"),
    ("listeners=INTERNAL://127.0.0.1:9093", "listener INTERNAL has no security protocol"),
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


def _fetch_values(c: WireClient, topic: str, p: int) -> list[bytes]:
    got = fetch(c, topic, p)
    assert got.error_code == 0, (topic, p, got.error_code)
    return [r.value for r in iter_records(bytes(got.records or b""))]


def test_clean_restart_opens_logs_on_first_use_and_a_sigkill_still_recovers(tmp_path: Path) -> None:
    """After a clean shutdown the logs are not loaded before serving: each opens on first use (or in
    the background). What such a log served before, it serves after; a SIGKILL afterwards (logs opened
    or not) is recovered completely at the next start."""
    n = 300
    b = BrokerProcess(tmp_path / "data").start()
    c = WireClient(b.bootstrap, timeout_s=60)
    assert create_topic(c, "many", n).error_code == 0
    for p in range(n):
        assert produce(c, "many", p, [b"a%d" % p]).error_code == 0
    c.close()
    assert b.stop() == 0
    b.log_lines.clear()
    b.start()
    c = WireClient(b.bootstrap, timeout_s=60)
    assert _fetch_values(c, "many", 150) == [b"a150"]  # first touched now
    for p in range(0, n, 2):
        assert produce(c, "many", p, [b"b%d" % p]).error_code == 0
    assert "fails its sanity check" not in b.log_text() and "recover" not in b.log_text().lower()
    b.kill()
    b.start()
    c = WireClient(b.bootstrap, timeout_s=60)
    for p in range(n):
        assert _fetch_values(c, "many", p) == [b"a%d" % p] + ([b"b%d" % p] if p % 2 == 0 else [])
    c.close()
    assert b.stop() == 0


def test_sigterm_under_load_loses_nothing_acknowledged(tmp_path: Path) -> None:
    """A producer keeps writing to 100 partitions while the broker is stopped with SIGTERM: everything
    acknowledged (acks=1) is there after the restart, at the offset it was acknowledged with."""
    n = 100
    b = BrokerProcess(tmp_path / "data").start()
    admin = WireClient(b.bootstrap, timeout_s=60)
    assert create_topic(admin, "busy", n).error_code == 0
    admin.close()
    acked: list[tuple[int, int, bytes]] = []
    stop = threading.Event()

    def produce_until_refused() -> None:
        c = WireClient(b.bootstrap, timeout_s=10)
        i = 0
        while not stop.is_set():
            value = b"m%d" % i
            try:
                res = produce(c, "busy", i % n, [value])
            except (OSError, ConnectionError):
                return
            if res.error_code:
                return
            acked.append((i % n, res.base_offset, value))
            i += 1

    t = threading.Thread(target=produce_until_refused, daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while len(acked) < 500 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert b.stop() == 0
    stop.set()
    t.join(30)
    assert len(acked) >= 500
    b.start()
    c = WireClient(b.bootstrap, timeout_s=60)
    got = {p: _fetch_values(c, "busy", p) for p in range(n)}
    for p, offset, value in acked:
        assert got[p][offset] == value, (p, offset)
    assert b.stop() == 0
