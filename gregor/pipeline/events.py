"""Synthetic but plausible inputs: page-view events and application log lines.

Both are deterministic for a seed, so a test can regenerate exactly what was produced, and both carry
their own event time: a run can backfill minutes of simulated traffic in seconds, or follow the wall
clock for a live demo.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta

URLS = [
    "/", "/search", "/cart", "/checkout", "/login", "/account", "/help", "/blog",
    *(f"/products/{i}" for i in range(1, 25)),
    *(f"/blog/post-{i}" for i in range(1, 9)),
]
REFERRERS = ["", "", "", "https://www.google.com/", "https://duckduckgo.com/", "https://news.ycombinator.com/",
             "https://twitter.com/", "https://www.bing.com/", "internal"]
SERVICES = ["checkout", "search", "auth", "catalog", "payments"]
LEVELS = ["DEBUG", "INFO", "INFO", "INFO", "INFO", "WARN", "ERROR"]
ERROR_LEVELS = ("ERROR", "CRITICAL", "FATAL")
SESSION_GAP_MS = 30 * 60 * 1000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_ms(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC with milliseconds, e.g. 2026-11-21T10:00:00.123Z."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def parse_iso_ms(text: str) -> int:
    """The inverse of iso_ms, floored to the millisecond; also takes rsyslog's RFC 3339 timestamps
    (offsets, microseconds). Integer arithmetic: float seconds would misplace exact millisecond edges."""
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return (dt - _EPOCH) // timedelta(milliseconds=1)


@dataclass(frozen=True)
class PageView:
    """One page view, as it travels in the `page_views` topic (JSON, keyed by user)."""

    user: str
    session: str
    url: str
    referrer: str
    latency_ms: int
    timestamp: str  # ISO 8601 UTC, millisecond precision

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @staticmethod
    def from_json(data: bytes) -> PageView:
        return PageView(**json.loads(data))

    @property
    def timestamp_ms(self) -> int:
        return parse_iso_ms(self.timestamp)


def page_views(n: int, *, seed: int = 1, start_ms: int, events_per_second: float = 50.0, users: int = 400,
               jitter_ms: int = 3000) -> Iterator[PageView]:
    """`n` page views starting at `start_ms`, `events_per_second` of event time apart on average.

    Users and URLs follow skewed popularity (a few are hot), latency is log-normal around 120 ms
    with a long tail, and a user's session changes after 30 minutes without a view. Event times
    are jittered back by up to `jitter_ms`, so the stream is slightly out of order, as real
    clickstreams are; a watermark longer than the jitter drops nothing.
    """
    rnd = random.Random(seed)
    step_ms = 1000.0 / events_per_second
    user_weights = [1.0 / (i + 1) ** 0.8 for i in range(users)]
    url_weights = [1.0 / (i + 1) ** 1.1 for i in range(len(URLS))]
    last_seen: dict[int, tuple[int, int]] = {}  # user -> (last ts, session number)
    for i in range(n):
        ts = int(start_ms + i * step_ms) - rnd.randint(0, jitter_ms)
        u = rnd.choices(range(users), user_weights)[0]
        prev = last_seen.get(u)
        session = prev[1] if prev and ts - prev[0] < SESSION_GAP_MS else (prev[1] + 1 if prev else 0)
        last_seen[u] = (max(ts, prev[0]) if prev else ts, session)
        url = rnd.choices(URLS, url_weights)[0]
        referrer = rnd.choice(REFERRERS)
        if referrer == "internal":
            referrer = "https://shop.example.com" + rnd.choice(URLS)
        latency = int(math.exp(rnd.gauss(math.log(120), 0.6)))
        yield PageView(user=f"user-{u}", session=f"user-{u}-s{session}", url=url, referrer=referrer,
                       latency_ms=latency, timestamp=iso_ms(ts))


def log_line(ts_ms: int, host: str, service: str, pid: int, level: str, message: str) -> str:
    """A line in rsyslog's RSYSLOG_FileFormat: `<RFC 3339 time> <host> <tag>: <LEVEL> <message>`.

    Our shipper sends these lines as they are; rsyslog's omkafka sends the same shape when given the
    template in docs/spark.md, so the aggregation parses one format.
    """
    return f"{iso_ms(ts_ms)} {host} {service}[{pid}]: {level} {message}"


def app_log_lines(n: int, *, seed: int = 2, start_ms: int, lines_per_second: float = 20.0) -> Iterator[str]:
    """`n` application log lines from a few services, in time order, about 1 in 7 at ERROR."""
    rnd = random.Random(seed)
    step_ms = 1000.0 / lines_per_second
    messages = {
        "DEBUG": ["cache lookup key=%d", "pool size=%d"],
        "INFO": ["request handled in %d ms", "user %d logged in", "order %d created"],
        "WARN": ["slow query took %d ms", "retrying upstream call attempt=%d"],
        "ERROR": ["upstream timeout after %d ms", "payment declined code=%d", "db connection reset id=%d"],
    }
    for i in range(n):
        ts = int(start_ms + i * step_ms)
        service = rnd.choice(SERVICES)
        level = rnd.choice(LEVELS)
        msg = rnd.choice(messages[level]) % rnd.randint(1, 5000)
        yield log_line(ts, f"web-{rnd.randint(1, 3)}", service, 1000 + SERVICES.index(service), level, msg)
