"""Polling until something is true: what the tests wait for (a broker's metadata, a store's events, log
files written in the background). One loop, so every wait fails the same way: an AssertionError naming
what did not happen."""

from __future__ import annotations

import time
from collections.abc import Callable

POLL_S = 0.02


def wait_for(cond: Callable[[], object], timeout_s: float = 10.0, what: str = "the condition") -> float:
    """Poll `cond` until it is true; fail the test once `timeout_s` passed without. Returns the seconds it
    took (timing tests bound it)."""
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 <= timeout_s, f"timed out after {timeout_s:g} s waiting for {what}"
        time.sleep(POLL_S)
    return time.monotonic() - t0
