"""Acceptance: a producer whose client-id is limited to 1 MB/s (producer_byte_rate=1048576) is held
to within 10% of it over 30 s, while an unlimited producer on the same broker at the same time is
not slowed (never throttled, far above 1 MB/s; its solo rate is printed beside it).

Both are confluent-kafka producers in threads of this process, sending as fast as they can; the
rate is what the broker acknowledged. The broker measures rates over quota.window.num=2 samples
of 1 s: with Kafka's default of 11 a greedy producer's throughput saws with the 11 s window (it
starts with 10 s of allowance, Kafka's initial window, and bursts again as a burst leaves the
window), so a 30 s average swings by +-10-25% with where the bursts fall; 2 samples keep the same
algorithm and formula with a period short enough for a 30 s run to average out.

The producers send batches of at most BATCH_BYTES (100 KB, a tenth of a second of the quota). With
librdkafka's default batch.size of 1 MB a throttled producer's next request carries a whole second of
quota at once (it accumulates while muted), and whether the run's last such request lands inside or
after the 30 s moved the average: 0.99-1.11 x quota over seven runs, against 0.996-1.002 with 100 KB
batches. The broker enforces the same either way; the coarser the requests, the coarser the average.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from tests.broker_process import BrokerProcess
from tests.security.quota_client import alter, entity

QUOTA = 1048576
RUN_S = 30.0
VALUE = b"q" * 1000
BATCH_BYTES = 100_000

pytestmark = pytest.mark.serial  # rates within 10%, and an unlimited producer's far above 1 MB/s


@pytest.fixture(scope="module")
def qbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("quota-throughput"), {"quota.window.num": "2"}).start()
    yield b
    b.kill()


class Run(threading.Thread):
    """Produce as fast as the client lets us for `seconds`; count acknowledged bytes."""

    def __init__(self, bootstrap: str, client_id: str, topic: str, seconds: float) -> None:
        super().__init__(daemon=True)
        self.acked = 0
        self.errors = 0
        self.throttle_events = 0
        self.seconds = seconds
        self.topic = topic
        self.producer: Producer | None = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                                  "acks": 1, "queue.buffering.max.kbytes": 4096, "batch.size": BATCH_BYTES,
                                  "throttle_cb": self._throttled})

    def _throttled(self, ev: object) -> None:
        self.throttle_events += 1

    def _delivered(self, err: object, msg: object) -> None:
        if err is None:
            self.acked += len(VALUE)
        else:
            self.errors += 1

    def run(self) -> None:
        p = self.producer
        assert p is not None
        end = time.monotonic() + self.seconds
        while time.monotonic() < end:
            try:
                p.produce(self.topic, VALUE, on_delivery=self._delivered)
            except BufferError:
                p.poll(0.01)
                continue
            p.poll(0)
        self.acked_at_end = self.acked  # what was acknowledged within the run
        p.flush(15)
        self.producer = None  # destroyed now, not reconnecting to a stopped broker at the end

def test_limited_producer_held_to_1mb_while_unlimited_is_not_slowed(qbroker: BrokerProcess) -> None:
    bs = qbroker.bootstrap
    alter(bs, [(entity(client="quota-limited"), {"producer_byte_rate": float(QUOTA)})])
    solo = Run(bs, "quota-free-solo", "quota-free", 5.0)
    solo.start()
    solo.join()
    solo_rate = solo.acked_at_end / 5.0

    limited = Run(bs, "quota-limited", "quota-limited", RUN_S)
    free = Run(bs, "quota-free", "quota-free", RUN_S)
    limited.start()
    free.start()
    limited.join()
    free.join()
    limited_rate = limited.acked_at_end / RUN_S
    free_rate = free.acked_at_end / RUN_S
    print(f"limited {limited_rate / QUOTA:.3f} x quota, unlimited {free_rate / 1e6:.1f} MB/s "
          f"(solo {solo_rate / 1e6:.1f} MB/s), throttle events {limited.throttle_events}")
    assert limited.errors == 0 and free.errors == 0
    assert abs(limited_rate - QUOTA) <= 0.10 * QUOTA, limited_rate / QUOTA
    assert limited.throttle_events > 0 and free.throttle_events == 0
    # Not slowed by the quota: never throttled, and far above 1 MB/s. Its solo rate is printed, not
    # asserted: beside another producer thread (one GIL) and the broker on a shared 2-core machine it
    # measured 0.46-0.65 of it, the machine's share, not the quota's.
    assert free_rate > 20 * QUOTA, (free_rate, solo_rate)
    alter(bs, [(entity(client="quota-limited"), {"producer_byte_rate": None})])
