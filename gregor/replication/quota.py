"""Replication throttles: Kafka's ReplicationQuotaManager, for a reassignment's copying.

A leader (leader.replication.throttled.rate) and a follower (follower.replication.throttled.rate)
each hold one byte rate, shared by every partition replica the topic configs
`leader.replication.throttled.replicas` / `follower.replication.throttled.replicas` name for this
broker. Only replicas outside the ISR are held back, so a throttle never slows the replication that
acks=all waits for: it paces copying to a new replica, which joins the ISR when it caught up.

The rate is measured as Kafka measures it (gregor.rate.SampledRate, shared with the client
quotas): bytes in the last `replication.quota.window.num` samples of
`replication.quota.window.size.seconds`, over the time they span, that span counted as at least
all samples but one. So a throttle begins with that many samples' allowance, as in Kafka.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gregor.configdef import LONG_MAX
from gregor.rate import SampledRate


class ReplicationQuota:
    """One broker-wide byte rate over sliding samples (see the module doc). Loop thread only."""

    def __init__(self, rate: int = LONG_MAX, samples: int = 11, sample_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self._clock = clock
        self._rate = SampledRate(samples, sample_s)

    @property
    def active(self) -> bool:
        """A rate is set (LONG_MAX, the default, means none)."""
        return self.rate < LONG_MAX

    def set_rate(self, rate: int) -> None:
        self.rate = rate

    def record(self, nbytes: int) -> None:
        if nbytes <= 0 or not self.active:
            return
        self._rate.record(nbytes, self._clock())

    def observed_rate(self) -> float:
        return self._rate.rate(self._clock())

    def exceeded(self) -> bool:
        return self.active and self.observed_rate() > self.rate
