"""Shared fixtures: real broker processes on loopback, each with its own data dir."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Start brokers with property overrides; all are killed at the end of the test."""
    started: list[BrokerProcess] = []

    def start(overrides: dict[str, str] | None = None, data_dir: Path | None = None) -> BrokerProcess:
        d = data_dir or tmp_path / f"broker-{len(started)}"
        b = BrokerProcess(d, overrides).start()
        started.append(b)
        return b

    yield start
    for b in started:
        b.kill()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker shared by a test module (auto topic creation on, 1 partition by default)."""
    b = BrokerProcess(tmp_path_factory.mktemp("broker")).start()
    yield b
    b.kill()
