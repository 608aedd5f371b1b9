"""The event loop's stall detector: how late the loop runs a heartbeat, and who held it when it was late.

Every request of a broker passes through its one event loop, so anything that holds the loop (a
blocking call, a long computation, a garbage collection) delays every client at once: it is the tail
of the end-to-end latency. The loop runs a heartbeat callback every HEARTBEAT_MS; how late each one
runs is the loop's lag, observed into the `gregor_eventloop_lag_ms` histogram.

The loop itself only sees a stall once it is over, when the code that caused it has returned. So a
watchdog thread sleeps until the next heartbeat would be `gregor.loop.stall.warn.ms` overdue; if it
still has not run by then, the watchdog reads the loop thread's current Python stack
(sys._current_frames) while the loop is still blocked, and once the heartbeat runs it logs one
WARNING with the stall's length and that stack. Idle, this costs a timer callback every HEARTBEAT_MS
on the loop and a few wake-ups a second of the watchdog.

The watchdog needs the GIL to read a stack: a stall inside one C call that keeps the GIL (a garbage
collection, above all) leaves it nothing to read until the call has returned. Collections are timed
through gc.callbacks instead (the `gregor_gc_collection_ms` histogram, per generation), and the
warning names those that ran during the stall.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gregor.configdef import Settings, setting

log = logging.getLogger("gregor.loop")

# A timer wake-up of an idle process costs ~120 us of CPU here: a beat every 50 ms (and the watchdog's ~10
# wake-ups a second) keeps an idle broker's cost near 3.5 ms a second. Lags are measured at each beat, so a
# longer interval samples less often but not less precisely.
HEARTBEAT_MS = 50
# Collections shorter than this are counted in the histogram only, not kept to be named in a warning.
GC_NOTABLE_MS = 1.0
GC_NOTABLE_KEPT = 32  # the last notable collections kept to match against a stall
STACK_FRAMES = 30  # innermost frames of the blocked loop thread printed in a warning
STALLS_KEPT = 64  # stalls ended but not yet logged (the watchdog logs them within moments)
STILL_BLOCKED_S = 10.0  # a loop blocked this long is reported before it resumes (a deadlock, a hung call)


@dataclass(frozen=True, slots=True)
class LoopMonitorSettings(Settings):
    stall_warn_ms: int = setting("gregor.loop.stall.warn.ms")


@dataclass(frozen=True, slots=True)
class Collection:
    """One garbage collection that took at least GC_NOTABLE_MS."""

    start: float  # time.monotonic()
    ms: float
    generation: int
    thread: str


class LoopMonitor:
    """The heartbeat on one loop, its watchdog thread and the collector's timing. `start` on the loop's
    thread; `stop` from anywhere. `observe_lag_ms` and `observe_gc_ms(generation, ms)` receive every
    lag and every collection's time (the metrics; None when metrics are off)."""

    def __init__(self, settings: LoopMonitorSettings, observe_lag_ms: Callable[[float], None] | None = None,
                 observe_gc_ms: Callable[[int, float], None] | None = None,
                 interval_ms: float = HEARTBEAT_MS) -> None:
        self.warn_s = settings.stall_warn_ms / 1000.0
        self.interval_s = interval_ms / 1000.0
        self.observe_lag_ms = observe_lag_ms
        self.observe_gc_ms = observe_gc_ms
        self.stalls = 0  # stalls past the threshold so far (each logged once)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0  # when the next heartbeat is due (time.monotonic())
        self._beat_cpu = 0.0  # the loop thread's CPU time at the last heartbeat (time.thread_time())
        # Stalls ended, for the watchdog to log: (due, lag, the loop thread's CPU seconds since the beat before).
        self._ended: collections.deque[tuple[float, float, float]] = collections.deque(maxlen=STALLS_KEPT)
        self._captured: tuple[float, str] | None = None  # (the due time it belongs to, the stack)
        self._collections: collections.deque[Collection] = collections.deque(maxlen=GC_NOTABLE_KEPT)
        self._gc_start = 0.0
        self._wake = threading.Event()
        self._stopping = False
        self._watchdog: threading.Thread | None = None

    # --- on the loop --------------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._due = time.monotonic() + self.interval_s
        self._beat_cpu = time.thread_time()
        self._timer = self._loop.call_later(self.interval_s, self._beat)
        gc.callbacks.append(self._on_gc)
        self._watchdog = threading.Thread(target=self._watch, name="gregor-loop-watchdog", daemon=True)
        self._watchdog.start()

    def _beat(self) -> None:
        now = time.monotonic()
        lag = now - self._due
        if self.observe_lag_ms is not None:
            self.observe_lag_ms(lag * 1000.0 if lag > 0 else 0.0)
        cpu = time.thread_time()
        if lag >= self.warn_s:
            self._ended.append((self._due, lag, cpu - self._beat_cpu))
            self._wake.set()
        self._beat_cpu = cpu
        self._due = now + self.interval_s
        assert self._loop is not None
        self._timer = self._loop.call_later(self.interval_s, self._beat)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = time.monotonic()
            return
        ms = (time.monotonic() - self._gc_start) * 1000.0
        gen = info["generation"]
        if self.observe_gc_ms is not None:
            self.observe_gc_ms(gen, ms)
        if ms >= GC_NOTABLE_MS:
            self._collections.append(Collection(self._gc_start, ms, gen, threading.current_thread().name))

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        self._stopping = True
        self._wake.set()
        if self._watchdog is not None and self._watchdog is not threading.current_thread():
            self._watchdog.join(5)
        self._watchdog = None

    # --- the watchdog thread --------------------------------------------------------------------------
    def _watch(self) -> None:
        reported_stuck = -1.0
        while not self._stopping:
            due = self._due
            now = time.monotonic()
            if now >= due + self.warn_s and (self._captured is None or self._captured[0] != due):
                self._captured = (due, self._loop_stack())
            if self._captured is not None and self._captured[0] == self._due:  # still blocked: watch for its end
                if now - due >= STILL_BLOCKED_S and reported_stuck != due:
                    reported_stuck = due
                    log.warning("event loop blocked for %.1f s so far; the loop thread at %.0f ms:\n%s",
                                now - due, self.warn_s * 1000, self._captured[1])
                wait = 0.01
            else:
                wait = max(due + self.warn_s - now, 0.001)
            self._wake.wait(wait)
            self._wake.clear()
            while self._ended:
                self._report(*self._ended.popleft(), reported_stuck)

    def _loop_stack(self) -> str:
        frame = sys._current_frames().get(self._loop_thread)
        if frame is None:
            return "  (no Python frame)"
        stack = traceback.format_stack(frame)[-STACK_FRAMES:]
        return "".join(stack).rstrip("\n")

    def _report(self, due: float, lag_s: float, cpu_s: float, reported_stuck: float) -> None:
        """One stall's WARNING. Its CPU time says what kind it was: a loop thread on a CPU all along was
        busy (the stack says with what); one that was not waited, in a blocking call (the stack shows it)
        or for a CPU (a busy machine: then the watchdog often could not run either, and has no stack)."""
        self.stalls += 1
        captured = self._captured
        stack = captured[1] if captured is not None and captured[0] == due else None
        gcs = [c for c in list(self._collections) if c.start + c.ms / 1000.0 >= due and c.start <= due + lag_s]
        wall_ms = (lag_s + self.interval_s) * 1000
        head = (f"event loop blocked for {lag_s * 1000:.0f} ms (gregor.loop.stall.warn.ms={self.warn_s * 1000:.0f}); "
                f"its thread ran {min(cpu_s * 1000, wall_ms):.0f} ms of the last {wall_ms:.0f} ms on a CPU "
                f"(load average {os.getloadavg()[0]:.2f})")
        if gcs:
            head += "; garbage collection during it: " + _summarize(gcs)
        if reported_stuck == due:
            log.warning("%s; it has resumed", head)
        elif stack is not None:
            log.warning("%s; the loop thread at %.0f ms:\n%s", head, self.warn_s * 1000, stack)
        elif gcs:
            log.warning("%s; no stack: the collection held the interpreter until it ended", head)
        else:
            log.warning("%s; no stack: the watchdog did not run until it ended (a C call holding the interpreter, "
                        "or no CPU for this process)", head)


def _summarize(gcs: list[Collection]) -> str:
    """Collections per generation: how many, their time, the longest, and the threads that ran them."""
    out = []
    for gen in sorted({c.generation for c in gcs}):
        of = [c for c in gcs if c.generation == gen]
        threads = ", ".join(sorted({c.thread for c in of}))
        if len(of) == 1:
            out.append(f"generation {gen} {of[0].ms:.0f} ms (on {threads})")
        else:
            out.append(f"{len(of)} of generation {gen} {sum(c.ms for c in of):.0f} ms, the longest "
                       f"{max(c.ms for c in of):.0f} ms (on {threads})")
    return "; ".join(out)
