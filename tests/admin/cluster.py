"""An in-process cluster for the tools' tests: several real Broker objects sharing one
EmbeddedMetadataStore, each with its own log dir and a 127.0.0.1:0 listener, on one event loop in a
thread (so blocking clients run in the test's thread)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gregor.broker.broker import Broker
from gregor.config import BrokerConfig
from gregor.metadata.embedded import EmbeddedMetadataStore
from gregor.metadata.store import PartitionState, StateUpdate


class InProcessCluster:
    def __init__(self, root: Path, ids: list[int], racks: dict[int, str] | None = None,
                 props: dict[str, str] | None = None) -> None:
        self.store = EmbeddedMetadataStore(str(root / "metadata"), ids[0])
        # The cluster only ever stops as a whole, at a test's end, where a controlled shutdown of each
        # broker in turn finds no controller or no replica to hand a leadership to, and retries
        # controlled.shutdown.retry.backoff.ms (5 s) apart: 10-20 s of teardown per test for nothing.
        self.configs = {
            b: BrokerConfig({"broker.id": str(b), "log.dirs": str(root / f"broker-{b}"),
                             "listeners": "PLAINTEXT://127.0.0.1:0", "controlled.shutdown.enable": "false",
                             **({"broker.rack": racks[b]} if racks and b in racks else {}), **(props or {})})
            for b in ids
        }
        self.brokers: dict[int, Broker] = {}
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._main(),), daemon=True)
        self.thread.start()
        assert self._started.wait(30), "cluster did not start"
        # Until the brokers run a controller (issue 10's ctl slice) none is elected: name one so Metadata
        # has a controller_id. Once they do, theirs stands (electing again would bump its epoch and fence it).
        if self.store.snapshot().controller_id == -1:
            self.store.elect_controller(ids[0])
        deadline = time.monotonic() + 20
        while any(b.log_manager.loading for b in self.brokers.values()) and time.monotonic() < deadline:
            time.sleep(0.02)

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        for b, config in self.configs.items():
            self.brokers[b] = Broker(config, self.store)
            await self.brokers[b].start()
        self._started.set()
        await self._stop.wait()
        # All at once: a broker stopped alone waits (up to 5 s) for the others' replica fetches parked
        # on it; together, each one's fetchers stop as its connections are drained.
        for broker in self.brokers.values():
            broker.request_stop()
        await asyncio.gather(*(broker.shutdown() for broker in self.brokers.values()))

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.bound_ports[0]}" for b in self.brokers.values())

    def port(self, broker_id: int) -> int:
        return self.brokers[broker_id].bound_ports[0]

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        async def run() -> Any:
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(20)

    def wait_for(self, check: Callable[[], bool], timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while not self.call(check):
            assert time.monotonic() < deadline, "condition not reached"
            time.sleep(0.05)

    def set_state(self, topic: str, partition: int, leader: int, isr: list[int]) -> None:
        """Write a partition's state as the controller would (fenced by no epoch), and wait until every
        broker's cache has it."""
        cur = self.store.snapshot().topics[topic].partitions[partition]
        new = PartitionState(cur.replicas, leader, cur.leader_epoch + 1, isr)
        (res,) = self.store.update_partition_states([StateUpdate(topic, partition, new, cur.version)])
        assert isinstance(res, int), res
        self.wait_for(lambda: all(
            (s := b.metadata_cache.partition_state(topic, partition)) is not None and s.leader == leader
            and s.isr == isr for b in self.brokers.values()))

    def stop(self) -> None:
        assert self._stop is not None
        self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(60)
        self.loop.close()
        self.store.close()
