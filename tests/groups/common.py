"""Helpers shared by the group tests: fill a topic, run member processes, read what they processed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess


def fill_topic(b: BrokerProcess, name: str, partitions: int, n: int) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(name, str(i).encode(), f"key-{i}".encode())
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(30) == 0


# Every worker started, so that a test failing before it waits for its workers does not leave them running
# (they would take CPU from the tests after it): conftest.py kills what is left after each test.
STARTED: list[subprocess.Popen[bytes]] = []


def start_worker(b: BrokerProcess, group: str, topic: str, mode: str, out: Path, delay_ms: int = 0,
            extra: dict[str, object] | None = None) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.groups.worker", b.bootstrap, group, topic, mode, str(out),
                             str(delay_ms), json.dumps(extra or {})], cwd=Path(__file__).resolve().parents[2],
                            stderr=subprocess.DEVNULL)
    STARTED.append(proc)
    return proc


def complete_lines(path: Path) -> list[str]:
    """A worker's output lines. Its last line may be partial: a running worker is still writing it, or a
    SIGKILLed one was cut off mid-line; only complete lines (ending in a newline) count."""
    if not path.exists():
        return []
    text = path.read_text()
    return text[:text.rfind("\n") + 1].splitlines()


def read_records(paths: list[Path]) -> list[int]:
    """The record values the workers wrote."""
    return [int(line.split()[2]) for p in paths for line in complete_lines(p) if line and not line.startswith("#")]
