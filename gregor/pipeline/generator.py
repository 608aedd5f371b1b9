"""Produce page views to the `page_views` topic, as fast as possible or at a chosen rate.

Records are keyed by user, so one user's views stay in order within a partition. With a rate, event
times follow the wall clock (a live feed); without one, the events backfill simulated time ending
now, as fast as the producer goes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from gregor.pipeline.events import PageView, page_views


def make_producer(bootstrap: str, **extra: Any) -> Any:
    """An idempotent producer (acks=all): its retries across a leader change neither duplicate nor
    reorder, so the pipeline's ground truth survives a broker dying under it."""
    from confluent_kafka import Producer

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "linger.ms": 10, "partitioner": "murmur2_random",
                            "queue.buffering.max.messages": 500_000, "enable.idempotence": True}
    conf.update(extra)
    return Producer(conf)


def produce_all(producer: Any, topic: str, records: Iterable[tuple[bytes | None, bytes]], *,
                rate_per_s: float = 0.0, on_progress: Callable[[int], None] | None = None) -> int:
    """Produce (key, value) pairs, paced to `rate_per_s` if > 0; flush and fail on any undelivered one."""
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    started = time.monotonic()
    count = 0
    for key, value in records:
        while True:
            try:
                producer.produce(topic, value, key, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
        if rate_per_s > 0:
            ahead_s = count / rate_per_s - (time.monotonic() - started)
            if ahead_s > 0:
                producer.poll(ahead_s)
        elif count % 10_000 == 0:
            producer.poll(0)
        if on_progress is not None and count % 10_000 == 0:
            on_progress(count)
    remaining = producer.flush(60)
    if errors or remaining:
        raise RuntimeError(f"{len(errors)} records failed, {remaining} undelivered; first error: "
                           f"{errors[0] if errors else 'timeout'}")
    return count


def generate_page_views(bootstrap: str, topic: str, n: int, *, seed: int = 1, rate_per_s: float = 0.0,
                        events_per_second: float = 50.0, start_ms: int | None = None) -> list[PageView]:
    """Produce `n` page views and return them (the ground truth for checks).

    Without a rate, event times end about now and span n / events_per_second seconds; with a rate,
    they start now and advance at that rate, so event time tracks the wall clock.
    """
    now_ms = int(time.time() * 1000)
    if start_ms is None:
        start_ms = now_ms if rate_per_s > 0 else now_ms - int(n * 1000 / events_per_second)
    eps = rate_per_s if rate_per_s > 0 else events_per_second
    events = list(page_views(n, seed=seed, start_ms=start_ms, events_per_second=eps))
    produce_all(make_producer(bootstrap), topic, ((e.user.encode(), e.to_json()) for e in events),
                rate_per_s=rate_per_s)
    return events
