"""The replication throttle's rate measurement (Kafka's windowed rate), on a fake clock."""

from __future__ import annotations

from gregor.configdef import LONG_MAX
from gregor.replication.quota import ReplicationQuota


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_unlimited_by_default_records_nothing() -> None:
    q = ReplicationQuota(clock=Clock())
    assert not q.active and q.rate == LONG_MAX
    q.record(10**12)
    assert not q.exceeded() and q.observed_rate() == 0


def test_rate_over_the_windows_with_kafkas_initial_allowance() -> None:
    clock = Clock()
    q = ReplicationQuota(1000, samples=3, sample_s=1.0, clock=clock)
    # The span counts as at least (samples - 1) windows: 2,000 bytes at once is within 1,000 B/s.
    q.record(2000)
    assert q.observed_rate() == 1000 and not q.exceeded()
    q.record(1)
    assert q.exceeded()
    clock.now += 1.5  # a new sample: 1.5 s elapsed, one whole sample, plus the one missing: 2.5 s
    q.record(1)
    assert not q.exceeded() and q.observed_rate() == 2002 / 2.5
    q.record(1000)
    assert q.exceeded()
    clock.now += 2.0  # the first sample left the 3: 1,001 bytes over the 2 s since the second began
    assert not q.exceeded() and q.observed_rate() == 500.5
    q.set_rate(LONG_MAX)
    assert not q.active and not q.exceeded()
