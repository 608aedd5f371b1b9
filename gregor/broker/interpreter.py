"""The interpreter's process-wide settings, chosen for the broker's tail latency: the GIL's switch
interval and the garbage collector's schedule.

The event loop shares the interpreter with the broker's other threads: the log cleaner, the executor
running flushes, checkpoints and log loading, the ZooKeeper client. A thread that wants the GIL while
another computes waits for the switch interval (5 ms by default), and the loop thread asks for it again
after every system call it makes, so a busy background thread adds milliseconds to every request.
`tune_interpreter` sets the interval to SWITCH_INTERVAL_S: more switches a second between busy threads
(each costs microseconds), much shorter waits for the loop.

CPython's collector stops the whole interpreter, the event loop with it, for the length of a
collection, and a full (generation-2) collection walks every container object of the process: some
40,000 once the broker has imported its modules and started, 20-80 ms on this machine, and more with
many partitions. Started by allocations, it lands anywhere: in the middle of a Produce, or from the
log cleaner's thread. So:
- what the broker holds once its logs are loaded (modules, classes, the partitions' state) is frozen
  (gc.freeze): the collector never walks it again. A full collection comes first, so no garbage is
  frozen with it.
- a periodic check (`check`, every CHECK_INTERVAL_MS) freezes what has accumulated in the old
  generation since (new partitions, producers, groups, connections) once it passes REFREEZE_OBJECTS,
  after a full collection of that part only: a pause bounded by REFREEZE_OBJECTS instead of one that
  grows with the heap;
- a frozen object that later becomes garbage in a reference cycle (a closed connection, a deleted
  partition) is freed only once unfrozen: when the frozen part has grown by half since everything was
  last collected, the next check unfreezes, collects and freezes everything again. That one is a full
  pause, at a rate that falls as the heap grows, and in exchange the frozen garbage stays within half
  of the heap.
Both are process-wide: a broker run as its own process (`run_broker`) owns them; brokers built inside
another program (tests) leave them alone unless told otherwise.
"""

from __future__ import annotations

import gc
import logging
import sys
import time

log = logging.getLogger("gregor.broker")

# The GIL switch interval (seconds; CPython's default is 0.005): an asyncio loop sleeping 2 ms at a time
# beside a busy Python thread woke 12 ms late at the median with 5 ms, 1.3 ms late with 1 ms.
SWITCH_INTERVAL_S = 0.001

CHECK_INTERVAL_MS = 30_000
# Unfrozen old objects that make the check collect and freeze them (a few ms of pause here; in a 3-minute
# soak with compaction and retention the old generation never reached it).
REFREEZE_OBJECTS = 5_000
# Growth of the frozen part, relative to the last collection of everything, that makes the check collect
# everything once.
FULL_GROWTH = 0.5


def tune_interpreter() -> None:
    """The settings of a process that is one broker (see the module's docstring)."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


class CollectorSchedule:
    """Freezes the broker's long-lived objects and keeps the collector's old generation small."""

    def __init__(self) -> None:
        self.frozen_after_full = 0  # gc.get_freeze_count() after the last collection of everything
        self.pauses_ms: list[float] = []  # the pauses this schedule itself caused (for the log and tests)

    def freeze_loaded(self, what: str) -> None:
        """Collect everything once and freeze what survives: the broker's state after a load."""
        self._full(what)

    def check(self) -> None:
        """The periodic check: freeze the old generation's growth, or collect everything when the frozen
        part has grown too much since it last was."""
        frozen = gc.get_freeze_count()
        if self.frozen_after_full and frozen > self.frozen_after_full * (1 + FULL_GROWTH):
            self._full(f"the frozen objects grew from {self.frozen_after_full} to {frozen}")
            return
        old = len(gc.get_objects(generation=2))
        if old < REFREEZE_OBJECTS:
            return
        t0 = time.monotonic()
        gc.collect(2)  # the frozen objects are not walked: only what is new since the last freeze
        gc.freeze()
        ms = (time.monotonic() - t0) * 1000
        self.pauses_ms.append(ms)
        log.info("froze %d objects that reached the collector's old generation, in %.0f ms", old, ms)

    def _full(self, why: str) -> None:
        t0 = time.monotonic()
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.frozen_after_full = gc.get_freeze_count()
        ms = (time.monotonic() - t0) * 1000
        self.pauses_ms.append(ms)
        log.info("collected everything and froze %d objects (%s), in %.0f ms", self.frozen_after_full, why, ms)
