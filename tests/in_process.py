"""The real Broker in the test's own process, on an event loop thread of its own with real sockets: for the
tests that reach into its objects (its metadata store's session, a second broker id registered in its
memory) while they talk to it over the wire."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from gregor.broker.broker import Broker
from gregor.config import BrokerConfig


class InProcessBroker:
    """Started at construction (`on_start(broker)` runs on its loop once it listens); `call` runs a function
    on its loop, `stop` shuts it down cleanly."""

    def __init__(self, props: dict[str, str], on_start: Callable[[Broker], None] | None = None) -> None:
        self.config = BrokerConfig(props)
        self.loop = asyncio.new_event_loop()
        self.started = threading.Event()
        self._on_start = on_start
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._main(),), daemon=True)
        self.thread.start()
        assert self.started.wait(30), "broker did not start"

    async def _main(self) -> None:
        self.broker = Broker(self.config)
        await self.broker.start()
        if self._on_start is not None:
            self._on_start(self.broker)
        self.started.set()
        await self.broker.wait_stopped()
        await self.broker.shutdown()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker.bound_ports[0]}"

    def wait_loaded(self, timeout_s: float = 20.0) -> None:
        """Until every log on disk is loaded (the broker answers before, reporting partitions as loading)."""
        deadline = time.monotonic() + timeout_s
        while self.broker.log_manager.loading and time.monotonic() < deadline:
            time.sleep(0.02)

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        async def run() -> Any:
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.broker.request_stop)
        self.thread.join(30)
        self.loop.close()
