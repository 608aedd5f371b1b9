"""A real `gregor serve` child process on a free loopback port with its own data dir.

Used by the tests (which SIGKILL and restart it), the benchmarks and `gregor pipeline demo`.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from gregor.tools.ports import pick_port

_LISTENING = re.compile(r"listening on (.*) \(cluster id")
_ENDPOINT = re.compile(r"([A-Za-z0-9_-]+)://[^,]*:(\d+)")


def _pin_port(spec: str, ports: dict[str, int]) -> str:
    """A listener asked for on port 0 gets a port picked for it (gregor/tools/ports.py: one a restart
    finds free again, unlike a kernel-chosen ephemeral one), the same one on every restart."""
    name, _, addr = spec.strip().partition("://")
    host, _, port = addr.rpartition(":")
    if port == "0":
        return f"{name}://{host}:{ports.get(name.upper()) or pick_port()}"
    return spec.strip()


class BrokerProcess:
    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.ports: dict[str, int] = {}  # listener name -> bound port, once started
        self.log_lines: list[str] = []
        self._reader: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def bootstrap_of(self, listener: str) -> str:
        """host:port of one listener (by name, e.g. "SASL_SSL")."""
        return f"127.0.0.1:{self.ports[listener.upper()]}"

    def start(self, timeout_s: float = 15.0, wait_loaded: bool | None = None) -> BrokerProcess:
        """Start and wait until it listens and, with `wait_loaded`, has loaded its logs (the broker
        answers before that, reporting partitions still loading as such). By default it waits for the
        logs unless this is a KRaft controller-only node, which has none (it reports ready when its
        controller listener serves)."""
        if wait_loaded is None:
            wait_loaded = self.overrides.get("process.roles", "").strip().lower() != "controller"
        if not self.port and "listeners" not in self.overrides:
            self.port = pick_port()
        props = {"log.dirs": str(self.data_dir), "listeners": f"PLAINTEXT://127.0.0.1:{self.port}"}
        props.update(self.overrides)
        if "listeners" in self.overrides:  # ports picked once, kept by every restart
            props["listeners"] = ",".join(_pin_port(spec, self.ports) for spec in self.overrides["listeners"].split(","))
        cmd = [sys.executable, "-m", "gregor", "serve"]
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        ready = threading.Event()
        loaded = threading.Event()

        def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.log_lines.append(line.rstrip("\n"))
                m = _LISTENING.search(line)
                if m and not ready.is_set():
                    self.ports = {e.group(1): int(e.group(2)) for e in _ENDPOINT.finditer(m.group(1))}
                    self.port = next(iter(self.ports.values()))
                    ready.set()
                if "all logs loaded:" in line:  # the broker's own line, not the collector's "(all logs loaded)"
                    loaded.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout_s
        while not ready.is_set() or (wait_loaded and not loaded.is_set()):
            if self.proc.poll() is not None:
                raise RuntimeError("broker exited during start:\n" + "\n".join(self.log_lines))
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("broker did not start in time:\n" + "\n".join(self.log_lines))
            (loaded if ready.is_set() else ready).wait(0.05)
        return self

    def stop(self, timeout_s: float = 20.0) -> int:
        """SIGTERM and wait: a clean shutdown. Returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:  # a shutdown that hangs is killed, and reported by its exit code
            self.proc.kill()
            code = self.proc.wait(5)
        if self._reader is not None:
            self._reader.join(5)
        return code

    def kill(self) -> None:
        """SIGKILL: no flush, no checkpoint, as in a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> BrokerProcess:
        """Start again on the same data dir and the same port."""
        return self.start()

    def log_text(self) -> str:
        return "\n".join(self.log_lines)

    def wait_for_log(self, needle: str | re.Pattern[str], timeout_s: float = 10.0, since: int = 0) -> str:
        """The first log line from index `since` on that contains `needle` (a compiled pattern: that it
        matches, `search`), waiting for it: the broker's output reaches `log_lines` through a reader
        thread, a moment after the broker wrote it. `since = len(log_lines)` before an action skips what
        was logged earlier."""
        deadline = time.monotonic() + timeout_s
        while True:
            for line in self.log_lines[since:]:
                if (needle.search(line) is not None) if isinstance(needle, re.Pattern) else needle in line:
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(f"no log line with {needle!r} within {timeout_s} s:\n" + self.log_text()[-4000:])
            time.sleep(0.05)
