"""Kafka's windowed rate (its metrics library's `Rate` over a `SampledStat`), shared by the
replication throttles (gregor.replication.quota) and the client quotas
(gregor.security.quotas).

Values are added to the newest of at most `samples` samples, each `sample_s` long; a sample
that began `samples * sample_s` ago or earlier has left the window. The rate is the total of
the samples left over the time they span, that span counted as at least `samples - 1` whole
samples (Kafka's `Rate.windowSize`), so a quota begins with that many samples' allowance
instead of throttling the first burst after a quiet spell, as in Kafka.

Sans-IO: the caller passes the time (seconds on any monotonic clock).
"""

from __future__ import annotations

from collections import deque


class SampledRate:
    """One windowed rate; a few hundred bytes, so one per quota entity is affordable."""

    __slots__ = ("_sample_s", "_samples", "_total", "_windows", "last_record_s")

    def __init__(self, samples: int = 11, sample_s: float = 1.0) -> None:
        assert samples >= 1 and sample_s > 0
        self._samples = samples
        self._sample_s = sample_s
        self._windows: deque[list[float]] = deque()  # [start_s, value], oldest first
        self._total = 0.0  # of the windows' values
        self.last_record_s = float("-inf")  # when a value was last recorded (sensor expiry)

    def _expire(self, now: float) -> None:
        horizon = now - self._samples * self._sample_s  # a sample that began this long ago has left
        windows = self._windows
        while windows and windows[0][0] <= horizon:
            self._total -= windows.popleft()[1]
        if not windows:
            self._total = 0.0  # no drift from float sums

    def record(self, value: float, now: float) -> None:
        """Add `value` at `now` (negative to take back what was recorded, as Kafka unrecords)."""
        self._expire(now)
        windows = self._windows
        if not windows or now >= windows[-1][0] + self._sample_s:
            windows.append([now, 0.0])
        windows[-1][1] += value
        self._total += value
        self.last_record_s = now

    def record_and_measure(self, value: float, now: float) -> tuple[float, float]:
        """record(value, now), then (rate, window_s) at `now`: the quota path's one call."""
        self.record(value, now)  # expires the windows that left
        windows = self._windows
        elapsed = now - windows[0][0]
        full = int(elapsed // self._sample_s)
        if full < self._samples - 1:
            elapsed += (self._samples - 1 - full) * self._sample_s
        return self._total / elapsed, elapsed

    def window_s(self, now: float) -> float:
        """The span the rate is measured over: from the oldest sample's start to now, plus the
        whole samples missing to `samples - 1` (Kafka's Rate.windowSize)."""
        self._expire(now)
        elapsed = now - self._windows[0][0] if self._windows else 0.0
        full = int(elapsed // self._sample_s)
        if full < self._samples - 1:
            elapsed += (self._samples - 1 - full) * self._sample_s
        return elapsed

    def rate(self, now: float) -> float:
        """Value per second over the window."""
        self._expire(now)
        if not self._windows:
            return 0.0
        return self._total / self.window_s(now)

    @property
    def full_window_s(self) -> float:
        """samples x sample_s: the longest a throttle may last (see gregor.security.quotas)."""
        return self._samples * self._sample_s
