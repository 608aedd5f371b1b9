"""Real registries: `gregor schema-registry` child processes in front of a real broker, and a small
HTTP client that shows status, headers and body as curl would."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.broker_process import BrokerProcess

V1 = "application/vnd.schemaregistry.v1+json"
_LISTENING = re.compile(r"Schema registry listening on (\S+)")
# A short session, so a killed primary is replaced in seconds; the group starts at once.
FAST_GROUP = {"schema.registry.session.timeout.ms": "6000", "schema.registry.heartbeat.interval.ms": "500"}


class RegistryProcess:
    """One `gregor schema-registry` process; `url` once started."""

    def __init__(self, bootstrap: str, overrides: dict[str, str] | None = None, listeners: str = "http://127.0.0.1:0",
                 command_config: Path | None = None) -> None:
        self.bootstrap = bootstrap
        self.overrides = {**FAST_GROUP, **(overrides or {})}
        self.listeners = listeners
        self.command_config = command_config
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.lines: list[str] = []

    def start(self, timeout_s: float = 60.0) -> RegistryProcess:
        cmd = [sys.executable, "-m", "gregor", "schema-registry", "--bootstrap-server", self.bootstrap,
               "--listeners", self.listeners]
        if self.command_config is not None:
            cmd += ["--command-config", str(self.command_config)]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        ready = threading.Event()

        def read() -> None:
            assert self.proc is not None and self.proc.stderr is not None
            for line in self.proc.stderr:
                self.lines.append(line.rstrip("\n"))
                m = _LISTENING.search(line)
                if m and not ready.is_set():
                    self.url = m.group(1).rstrip(",")
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("schema registry did not start:\n" + "\n".join(self.lines))
        return self

    def log(self) -> str:
        return "\n".join(self.lines)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


def http(method: str, url: str, body: Any = None, *, headers: dict[str, str] | None = None,
         raw: bytes | None = None, timeout_s: float = 30.0) -> Reply:
    """One request as curl would send it (JSON body with the v1 content type unless told otherwise)."""
    hdrs = {"Content-Type": V1} if body is not None or raw is not None else {}
    hdrs.update(headers or {})
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return Reply(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read())
    except urllib.error.HTTPError as e:
        return Reply(e.code, {k.lower(): v for k, v in e.headers.items()}, e.read())


def wait_writable(url: str, subject: str = "_probe-", timeout_s: float = 30.0) -> None:
    """Wait until the registry at `url` has a primary (a write on a fresh group waits for the election)."""
    deadline = time.monotonic() + timeout_s
    while True:
        r = http("PUT", f"{url}/config/{subject}", {"compatibility": "BACKWARD"})
        if r.status == 200:
            http("DELETE", f"{url}/config/{subject}")
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"no primary after {timeout_s} s: {r.status} {r.body!r}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def sr_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("sr-broker"), {"group.initial.rebalance.delay.ms": "0"}).start()
    yield b
    b.kill()


@pytest.fixture
def start_registry(sr_broker: BrokerProcess) -> Iterator[Callable[..., RegistryProcess]]:
    """Start registries against the module's broker; all are killed at the end of the test. The registries of
    one test share a topic and a group of their own."""
    started: list[RegistryProcess] = []
    own = {"schema.registry.topic": unique("_schemas"), "schema.registry.group.id": unique("schema-registry")}

    def start(overrides: dict[str, str] | None = None, **kw: Any) -> RegistryProcess:
        r = RegistryProcess(kw.pop("bootstrap", sr_broker.bootstrap), {**own, **(overrides or {})}, **kw).start()
        started.append(r)
        return r

    yield start
    for r in started:
        r.kill()


def unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns() % 10**9}"
