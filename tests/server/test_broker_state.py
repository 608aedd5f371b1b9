"""What a broker owns it creates, hands to its request handlers and shuts down; test-only faults are off
unless their property is set."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gregor.api.faults import FaultSettings, ProduceFaults
from gregor.broker.broker import Broker
from gregor.config import BrokerConfig


def test_produce_faults_are_none_unless_their_property_is_set() -> None:
    assert ProduceFaults.from_settings(FaultSettings.from_config(BrokerConfig())) is None
    faults = ProduceFaults.from_settings(FaultSettings.from_config(
        BrokerConfig({"gregor.test.fault.drop.produce.response.after.append": "3"})))
    assert faults is not None
    assert [faults.drop_response() for _ in range(6)] == [False, False, True, False, False, True]


def test_each_broker_owns_its_request_state_and_shuts_it_down(tmp_path: Path) -> None:
    def config(name: str) -> BrokerConfig:
        return BrokerConfig({"log.dirs": str(tmp_path / name), "listeners": "PLAINTEXT://127.0.0.1:0"})

    async def run() -> tuple[Broker, Broker]:
        a, b = Broker(config("a")), Broker(config("b"))
        for broker in (a, b):
            await broker.start()
        for broker in (a, b):
            await broker.shutdown()
        return a, b

    a, b = asyncio.run(run())
    services = a.dispatcher.services
    assert services.produce is a.produce and services.fetch_sessions is a.fetch_sessions
    assert a.produce is not b.produce and a.fetch_sessions is not b.fetch_sessions
    assert a.produce.faults is None
    for broker in (a, b):  # the validation pool is shut down with its broker
        with pytest.raises(RuntimeError):
            broker.produce.pool.submit(int)
