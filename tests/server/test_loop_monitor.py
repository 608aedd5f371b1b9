"""The event loop's stall detector, in a real broker: a test holds the broker's loop the way a blocking call,
a long computation or a full garbage collection would, and the broker's WARNING must name what held it,
once, with its length, while `gregor_eventloop_lag_ms` on the metrics endpoint counts the lag.

The broker runs in this process (on its own loop thread, with real sockets) so that the test can put its
own function on the broker's loop; a real client sees the stall as a late acknowledgement.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from gregor.broker.broker import Broker
from gregor.config import BrokerConfig
from tests.broker_process import BrokerProcess

_BLOCKED = re.compile(r"event loop blocked for (\d+) ms")


class LoopBroker:
    """The real Broker on an event loop in a thread of this process, with its metrics endpoint on."""

    def __init__(self, data_dir: Path, warn_ms: int) -> None:
        self.config = BrokerConfig({"log.dirs": str(data_dir), "listeners": "PLAINTEXT://127.0.0.1:0",
                                    "metrics.port": "0", "gregor.loop.stall.warn.ms": str(warn_ms)})
        self.loop = asyncio.new_event_loop()
        self.started = threading.Event()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._main(),), daemon=True)
        self.thread.start()
        assert self.started.wait(30), "broker did not start"

    async def _main(self) -> None:
        self.broker = Broker(self.config)
        await self.broker.start()
        self.started.set()
        await self.broker.wait_stopped()
        await self.broker.shutdown()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker.bound_ports[0]}"

    def run_on_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` as a callback of the broker's loop (it holds the loop while it runs)."""
        self.loop.call_soon_threadsafe(fn, *args)

    def lag_buckets(self) -> dict[str, int]:
        assert self.broker.metrics_server is not None
        url = f"http://127.0.0.1:{self.broker.metrics_server.port}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        return {m.group(1): int(m.group(2))
                for m in re.finditer(r'^gregor_eventloop_lag_ms_bucket\{le="([^"]+)"\} (\d+)', text, re.M)}

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.broker.request_stop)
        self.thread.join(30)
        self.loop.close()


@pytest.fixture
def loop_broker(tmp_path: Path) -> Iterator[LoopBroker]:
    b = LoopBroker(tmp_path / "data", warn_ms=50)
    yield b
    b.stop()


class StallLog(logging.Handler):
    """The stall detector's warnings (logger gregor.loop), from whichever thread logs them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def wait_for_any(self, *needles: str, timeout_s: float = 10.0) -> list[str]:
        """The warnings naming all of `needles`, once there is one. A loaded machine can starve the loop
        thread of a CPU at any moment, and the detector rightly warns of that too: the tests look for
        their own stall's warnings among those."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(all(n in m for n in needles) for m in self.messages):
                break
            time.sleep(0.02)
        mine = [m for m in self.messages if all(n in m for n in needles)]
        assert mine, f"no warning naming {needles}: {self.messages}"
        return mine

    def wait_for_one(self, *needles: str, timeout_s: float = 10.0) -> str:
        (msg,) = self.wait_for_any(*needles, timeout_s=timeout_s)
        return msg


@pytest.fixture
def stall_log() -> Iterator[StallLog]:
    h = StallLog()
    logger = logging.getLogger("gregor.loop")
    logger.addHandler(h)
    old = logger.level
    logger.setLevel(logging.WARNING)
    yield h
    logger.removeHandler(h)
    logger.setLevel(old)


def hold_the_loop_in_a_blocking_call(seconds: float) -> None:
    time.sleep(seconds)  # as an fsync or a blocking socket call on the loop would


def hold_the_loop_computing(seconds: float) -> None:
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:  # Python code holding the interpreter
        n += 1


def _over(buckets: dict[str, int], bound: str) -> int:
    """Lags counted above `bound` ms."""
    return buckets["+Inf"] - buckets[bound]


def test_a_blocking_call_is_named_once_with_its_length_and_counted(loop_broker: LoopBroker,
                                                                   stall_log: StallLog) -> None:
    p = Producer({"bootstrap.servers": loop_broker.bootstrap, "linger.ms": 0})
    p.produce("stalls", b"before")
    assert p.flush(30) == 0
    deadline = time.monotonic() + 10
    while loop_broker.lag_buckets()["+Inf"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)  # until the first heartbeat
    before = loop_broker.lag_buckets()
    assert before["+Inf"] > 0

    held: list[float] = []  # when the loop was taken, then when it was let go

    def hold_and_tell() -> None:
        held.append(time.monotonic())
        hold_the_loop_in_a_blocking_call(0.4)
        held.append(time.monotonic())

    loop_broker.run_on_loop(hold_and_tell)
    deadline = time.monotonic() + 10
    while not held and time.monotonic() < deadline:
        time.sleep(0.001)  # the loop is held from now on
    acked: list[float] = []
    p.produce("stalls", b"during", on_delivery=lambda err, msg: acked.append(time.monotonic()))
    assert p.flush(30) == 0
    # The client waited for the loop: its acknowledgement came only once the loop was let go. Measured
    # against the hold's own times, not the time of sending: a sleep before sending can overshoot on a
    # loaded machine (the client then waited less than the hold, though it did wait).
    assert len(held) == 2 and acked and acked[0] >= held[1], (held, acked)

    msg = stall_log.wait_for_one("hold_the_loop_in_a_blocking_call")
    blocked_ms = int(_BLOCKED.search(msg).group(1))  # type: ignore[union-attr]
    assert 350 <= blocked_ms < 5000, msg
    assert "hold_the_loop_in_a_blocking_call" in msg and "time.sleep(seconds)" in msg, msg
    assert "gregor.loop.stall.warn.ms=50" in msg

    after = loop_broker.lag_buckets()
    assert _over(after, "200") - _over(before, "200") >= 1
    time.sleep(0.5)
    assert len([m for m in stall_log.messages if "hold_the_loop" in m]) == 1, stall_log.messages  # one a stall


def test_python_code_holding_the_loop_is_named(loop_broker: LoopBroker, stall_log: StallLog) -> None:
    loop_broker.run_on_loop(hold_the_loop_computing, 0.3)
    msg = stall_log.wait_for_one("hold_the_loop_computing")
    assert "while time.monotonic() < end" in msg, msg
    assert int(_BLOCKED.search(msg).group(1)) >= 250, msg  # type: ignore[union-attr]


def test_a_garbage_collection_is_named(loop_broker: LoopBroker, stall_log: StallLog) -> None:
    """A collection keeps the interpreter for its whole length: no stack can be read during it, so the
    warning names the collection (timed by gc.callbacks) instead."""
    garbage: list[Any] = [[i] for i in range(1_500_000)]  # a heap a full collection takes a while to walk

    def collect_on_the_loop() -> None:
        gc.collect()

    loop_broker.run_on_loop(collect_on_the_loop)
    # building the heap runs collections of its own (each rightly warned of): at least one is named
    stall_log.wait_for_any("garbage collection during it", "generation 2", timeout_s=20)
    del garbage


def test_a_delay_under_the_threshold_is_counted_not_logged(tmp_path: Path, stall_log: StallLog) -> None:
    b = LoopBroker(tmp_path / "data", warn_ms=300)
    try:
        before = b.lag_buckets()
        # 150 ms: the heartbeat due within 50 ms of its start runs at least 100 ms late, under the 300 ms threshold
        b.run_on_loop(hold_the_loop_in_a_blocking_call, 0.15)
        deadline = time.monotonic() + 10
        while _over(b.lag_buckets(), "50") == _over(before, "50") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _over(b.lag_buckets(), "50") > _over(before, "50")
        time.sleep(0.5)
        assert not [m for m in stall_log.messages if "hold_the_loop" in m]
    finally:
        b.stop()


def test_a_broker_process_exports_the_lag_histogram(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", {"metrics.port": "0"}).start()
    try:
        url = re.findall(r"metrics endpoint listening on (http://\S+/metrics)", b.log_text())[-1]

        def count() -> int:
            text = urllib.request.urlopen(url, timeout=10).read().decode()
            m = re.search(r"^gregor_eventloop_lag_ms_count (\d+)$", text, re.M)
            assert m, "gregor_eventloop_lag_ms not exported"
            assert re.search(r'^gregor_gc_collection_ms_count\{generation="2"\} \d+$', text, re.M)
            return int(m.group(1))

        first = count()
        time.sleep(2.0)
        assert count() - first >= 10  # a heartbeat every 50 ms: ~40 in 2 s on an idle broker
    finally:
        b.stop()


def test_a_bad_threshold_is_a_configuration_error(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "gregor", "serve", "--override", f"log.dirs={tmp_path}",
                        "--override", "gregor.loop.stall.warn.ms=0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "gregor.loop.stall.warn.ms" in r.stderr, r.stderr
