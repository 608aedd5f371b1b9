"""Replication throttles: Kafka's ReplicationQuotaManager, for a reassignment's copying.

A leader (leader.replication.throttled.rate) and a follower (follower.replication.throttled.rate)
each hold one byte rate, shared by every partition replica the topic configs
`leader.replication.throttled.replicas` / `follower.replication.throttled.replicas` name for this
broker. Only replicas outside the ISR are held back, so a throttle never slows the replication that
acks=all waits for: it paces copying to a new replica, which joins the ISR when it caught up.

The rate is measured as Kafka measures it: bytes in the last `replication.quota.window.num` samples
of `replication.quota.window.size.seconds`, over the time they span, that span counted as at least
all samples but one. So a throttle begins with that many samples' allowance, as in Kafka.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from gregor.configdef import LONG_MAX


class ReplicationQuota:
    """One broker-wide byte rate over sliding samples (see the module doc). Loop thread only."""

    def __init__(self, rate: int = LONG_MAX, samples: int = 11, sample_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self._samples = samples
        self._sample_s = sample_s
        self._clock = clock
        self._windows: deque[list[float]] = deque()  # [start, bytes], oldest first

    @property
    def active(self) -> bool:
        """A rate is set (LONG_MAX, the default, means none)."""
        return self.rate < LONG_MAX

    def set_rate(self, rate: int) -> None:
        self.rate = rate

    def _expire(self, now: float) -> None:
        horizon = now - self._samples * self._sample_s  # a sample that began this long ago has left
        while self._windows and self._windows[0][0] <= horizon:
            self._windows.popleft()

    def record(self, nbytes: int) -> None:
        if nbytes <= 0 or not self.active:
            return
        now = self._clock()
        self._expire(now)
        if not self._windows or now >= self._windows[-1][0] + self._sample_s:
            self._windows.append([now, 0.0])
        self._windows[-1][1] += nbytes

    def observed_rate(self) -> float:
        now = self._clock()
        self._expire(now)
        if not self._windows:
            return 0.0
        span = max(now - self._windows[0][0], (self._samples - 1) * self._sample_s, self._sample_s)
        return sum(w[1] for w in self._windows) / span

    def exceeded(self) -> bool:
        return self.active and self.observed_rate() > self.rate
