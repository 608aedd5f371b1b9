"""The pipeline's aggregates computed in plain Python: the oracle the Spark jobs are checked against.

Same definitions as the Spark jobs in `gregor.pipeline.jobs`: tumbling one-minute windows aligned to
the epoch, a window reported once the watermark (max event time seen minus the delay) reaches its
end, exact distinct counts, and nearest-rank percentiles (what Spark's percentile_approx returns
when a group holds fewer values than its accuracy).
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from gregor.pipeline.events import ERROR_LEVELS, PageView, parse_iso_ms

WINDOW_MS = 60_000

# `<time> <host> <service>[<pid>]: <LEVEL> <message>`; the same pattern is used by the Spark job.
LOG_LINE = re.compile(r"^(\S+)\s+(\S+)\s+([^\s\[:]+)(?:\[\d+\])?:\s+([A-Za-z]+)\b\s?(.*)$")


@dataclass(frozen=True)
class UrlWindowStats:
    views: int
    unique_visitors: int
    p50_latency_ms: int
    p95_latency_ms: int


def nearest_rank(sorted_values: list[int], q: float) -> int:
    """The smallest value with at least a fraction q of the values at or below it."""
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def window_start(ts_ms: int, window_ms: int = WINDOW_MS) -> int:
    return ts_ms - ts_ms % window_ms


def closed_windows_end(max_event_ms: int, watermark_delay_ms: int) -> int:
    """Windows ending at or before this instant have been emitted by an append-mode query."""
    return max_event_ms - watermark_delay_ms


def page_view_stats(events: Iterable[PageView], watermark_delay_ms: int, *,
                    window_ms: int = WINDOW_MS) -> dict[tuple[int, str], UrlWindowStats]:
    """(window start ms, url) -> stats, for the windows the watermark has closed."""
    groups: dict[tuple[int, str], list[PageView]] = defaultdict(list)
    max_ts = None
    for e in events:
        ts = e.timestamp_ms
        max_ts = ts if max_ts is None else max(max_ts, ts)
        groups[(window_start(ts, window_ms), e.url)].append(e)
    if max_ts is None:
        return {}
    horizon = closed_windows_end(max_ts, watermark_delay_ms)
    out = {}
    for (start, url), evs in groups.items():
        if start + window_ms > horizon:
            continue
        lat = sorted(e.latency_ms for e in evs)
        out[(start, url)] = UrlWindowStats(len(evs), len({e.user for e in evs}), nearest_rank(lat, 0.5),
                                           nearest_rank(lat, 0.95))
    return out


@dataclass(frozen=True)
class ParsedLogLine:
    ts_ms: int
    host: str
    service: str
    level: str
    message: str


def parse_log_line(line: str) -> ParsedLogLine | None:
    m = LOG_LINE.match(line.rstrip("\n"))
    if not m:
        return None
    try:
        ts = parse_iso_ms(m.group(1))
    except ValueError:
        return None
    return ParsedLogLine(ts, m.group(2), m.group(3), m.group(4).upper(), m.group(5))


def error_counts(lines: Iterable[str], watermark_delay_ms: int, *,
                 window_ms: int = WINDOW_MS) -> dict[tuple[int, str], int]:
    """(window start ms, service) -> number of ERROR/CRITICAL/FATAL lines, for closed windows.

    The watermark follows the error lines only: Spark pushes the job's level filter below the
    watermark operator, so other lines never advance it."""
    errors = [p for p in map(parse_log_line, lines) if p is not None and p.level in ERROR_LEVELS]
    if not errors:
        return {}
    horizon = closed_windows_end(max(p.ts_ms for p in errors), watermark_delay_ms)
    counts: Counter[tuple[int, str]] = Counter()
    for p in errors:
        start = window_start(p.ts_ms, window_ms)
        if start + window_ms <= horizon:
            counts[(start, p.service)] += 1
    return dict(counts)


def top_urls(events: Iterable[PageView], n: int = 10) -> list[tuple[str, int, int]]:
    """The offline report's top URLs: (url, views, unique visitors), most viewed first, then by url."""
    views: Counter[str] = Counter()
    users: dict[str, set[str]] = defaultdict(set)
    for e in events:
        views[e.url] += 1
        users[e.url].add(e.user)
    ranked = sorted(views.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return [(url, v, len(users[url])) for url, v in ranked]
