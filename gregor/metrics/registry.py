"""The broker's metrics, counted where the work is already done, and their Prometheus text form.

Names follow the JMX exporter's usual rules for Kafka's MBeans (kafka.server:type=BrokerTopicMetrics,
name=BytesInPerSec,topic=t -> kafka_server_brokertopicmetrics_bytesin_total{topic="t"}), so dashboards
and alerts written for Kafka read Gregor with few changes.

BrokerMetrics counts on the hot path: bytes and messages in per topic (the record batch bytes a Produce
appended, as Kafka's BytesInPerSec), bytes out per topic (the record bytes of consumer Fetch responses),
and per API the request count, errors per error code and Kafka's RequestMetrics time split - queue (frame
received -> handler start), local (handler), remote (parked in the purgatory: a Future answer), send
(response built -> handed to the socket) as sums (means by rate(_sum)/rate(_count)) and the total as a
histogram of fixed buckets so Prometheus computes percentiles (histogram_quantile). Plain ints in dicts
and lists: a few hundred nanoseconds a request, and nothing at all while the endpoint is off (the broker
then has no BrokerMetrics and every hook is one `is None` test). What is computed from the broker's state
at scrape time, and the endpoint itself, are gregor.broker.metrics_endpoint's.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable
from typing import Any

from gregor.protocol import apis
from gregor.protocol.errors import ErrorCode

log = logging.getLogger("gregor.metrics")

# Upper bounds (ms) of the request time histograms: fine below a millisecond (loopback requests), up to
# Fetch's long polls (fetch.max.wait.ms 500 by default) and acks=all waits (request.timeout.ms 30 s).
TIME_BUCKETS_MS: tuple[float, ...] = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000,
                                      10000, 30000)
# Upper bounds (ms) of the log flush (fsync) time histogram.
FLUSH_BUCKETS_MS: tuple[float, ...] = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 5000)
# Upper bounds (ms) of the event loop's lag (gregor.broker.loop_monitor): a heartbeat normally runs within
# a millisecond of its time; the latency targets care about 5, 20 and 50 ms; stalls warn from 100 ms.
LOOP_LAG_BUCKETS_MS: tuple[float, ...] = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
# Upper bounds (ms) of the garbage collector's pauses: young collections take tens of microseconds, a full
# one of a large heap hundreds of milliseconds.
GC_BUCKETS_MS: tuple[float, ...] = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000)

# Kafka's RequestMetrics times: the four parts (summaries: sum and count), then the total (a histogram).
TIME_METRICS = ("requestqueuetimems", "localtimems", "remotetimems", "responsesendtimems", "totaltimems")

_ERROR_NAMES: dict[int, str] = {int(e): e.name for e in ErrorCode}


# The same bounds in integer nanoseconds: the request path adds and compares ints (no float division per
# request); the exposition divides once per scrape.
TIME_BUCKETS_NS: tuple[int, ...] = tuple(round(b * 1_000_000) for b in TIME_BUCKETS_MS)
NS_PER_MS = 1_000_000


def _ms(value: float, unit: int) -> float:
    """A value in 1/unit ms as ms: exact ints stay ints (so a bucket bound reads le="1", not "1.0")."""
    if unit == 1:
        return value
    return value // unit if value % unit == 0 else value / unit


class Histogram:
    """Fixed buckets: counts per bucket (the last one +Inf), the sum and the count. Bounded by its buckets.
    `unit` is how many of the observed unit make a millisecond (1 for ms, NS_PER_MS for ns): exposed in ms."""

    __slots__ = ("bounds", "bounds_ms", "counts", "sum", "unit")

    def __init__(self, bounds: tuple[float, ...], unit: int = 1) -> None:
        self.bounds = bounds
        self.bounds_ms = bounds if unit == 1 else tuple(_ms(b, unit) for b in bounds)
        self.counts = [0] * (len(bounds) + 1)
        self.sum: float = 0
        self.unit = unit

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value


class RequestStats:
    """One API's RequestMetrics: requests, errors per code, the total time histogram and, for the parts of
    that time (queue, local, remote, send), their sums (with `requests`, their means): one bisect a request.
    Times are kept as integer nanoseconds."""

    __slots__ = ("errors", "name", "part_ns", "requests", "total")

    def __init__(self, name: str) -> None:
        self.name = name
        self.requests = 0
        self.errors: dict[int, int] = {}  # error code -> responses (or topics, partitions) that carried it
        self.part_ns = [0, 0, 0, 0]  # queue, local, remote, send
        self.total = Histogram(TIME_BUCKETS_NS, NS_PER_MS)


class BrokerMetrics:
    """What the hot path counts. One per broker; None on the broker when metrics are off."""

    def __init__(self) -> None:
        # Kafka's BrokerTopicMetrics, per topic (label cardinality: the topics clients produce to / fetch from
        # on this broker, which exist: unknown topics fail before they are counted).
        self.bytes_in: dict[str, int] = {}
        self.messages_in: dict[str, int] = {}
        self.bytes_out: dict[str, int] = {}
        # RequestMetrics per API key (a fixed set: the APIs with a handler).
        self.requests: dict[int, RequestStats] = {}
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.failed_authentication: dict[str, int] = {}  # listener -> SASL and TLS handshake failures
        self.log_flush = Histogram(FLUSH_BUCKETS_MS)
        self.loop_lag = Histogram(LOOP_LAG_BUCKETS_MS)
        self.gc_collections = [Histogram(GC_BUCKETS_MS) for _ in range(3)]  # per generation

    def record_gc(self, generation: int, ms: float) -> None:
        self.gc_collections[generation].observe(ms)

    # --- hot path --------------------------------------------------------------------------------
    def record_append(self, topic: str, size_bytes: int, messages: int) -> None:
        self.bytes_in[topic] = self.bytes_in.get(topic, 0) + size_bytes
        self.messages_in[topic] = self.messages_in.get(topic, 0) + messages

    def record_fetch(self, topic: str, size_bytes: int) -> None:
        self.bytes_out[topic] = self.bytes_out.get(topic, 0) + size_bytes

    def stats(self, api_key: int) -> RequestStats:
        s = self.requests.get(api_key)
        if s is None:
            api = apis.BY_KEY.get(api_key)
            s = self.requests[api_key] = RequestStats(api.name if api is not None else str(api_key))
        return s

    def record_request(self, api_key: int, body: Any, queue_ns: int, local_ns: int, remote_ns: int,
                       send_ns: int) -> None:
        """A response was handed to the socket: count it, its error codes and its times."""
        s = self.requests.get(api_key) or self.stats(api_key)
        s.requests += 1
        parts = s.part_ns
        parts[0] += queue_ns
        parts[1] += local_ns
        parts[2] += remote_ns
        parts[3] += send_ns
        total = queue_ns + local_ns + remote_ns + send_ns
        h = s.total
        h.counts[_bisect(TIME_BUCKETS_NS, total)] += 1
        h.sum += total
        if body is not None:
            walk = _ERROR_WALKS.get(api_key)
            if walk is None or not _count_errors_at(body, walk[0], walk[1], s.errors):
                count_errors(body, s.errors)

    def record_failed_authentication(self, listener: str) -> None:
        self.failed_authentication[listener] = self.failed_authentication.get(listener, 0) + 1


_bisect = bisect.bisect_left


def _dict(obj: Any) -> dict[str, Any] | None:
    return obj if type(obj) is dict else getattr(obj, "__dict__", None)


# Where the hot APIs keep their per-partition error codes (topics array, partitions array): walked directly
# instead of looking at every field of every partition (Kafka's errorCounts is per response type, too).
_ERROR_WALKS: dict[int, tuple[str, str]] = {0: ("responses", "partition_responses"), 1: ("responses", "partitions")}


def _count_errors_at(body: Any, topics_key: str, partitions_key: str, out: dict[int, int]) -> bool:
    """count_errors for a response of the known shape {error_code?, topics_key: [{partitions_key: [{error_code}]}]}:
    False (nothing counted) when the body is not of that shape, so the generic walk counts it."""
    if type(body) is not dict:
        return False
    topics = body.get(topics_key)
    if type(topics) is not list:
        return False
    counted: list[int] = []
    for t in topics:
        if type(t) is not dict:
            return False
        for p in t.get(partitions_key) or ():
            if type(p) is not dict:
                return False
            code = p.get("error_code")
            if code:
                counted.append(code)
    code = body.get("error_code")
    if code:
        counted.append(code)
    for code in counted:
        out[code] = out.get(code, 0) + 1
    return True


def count_errors(body: Any, out: dict[int, int]) -> None:
    """Kafka's errorCounts: the non-zero error codes of a response - its own and, two array levels down,
    its topics' and partitions' (Produce and Fetch answer per partition). Successes are not counted
    (Kafka's error="NONE" series is the request count minus these)."""
    d = _dict(body)
    if d is None:
        return
    code = d.get("error_code")
    if code:
        out[code] = out.get(code, 0) + 1
    for v in d.values():
        if type(v) is not list or not v:
            continue
        for item in v:
            di = _dict(item)
            if di is None:
                break  # an array of numbers or strings
            code = di.get("error_code")
            if code:
                out[code] = out.get(code, 0) + 1
            for w in di.values():
                if type(w) is not list or not w:
                    continue
                for leaf in w:
                    dl = _dict(leaf)
                    if dl is None:
                        break
                    code = dl.get("error_code")
                    if code:
                        out[code] = out.get(code, 0) + 1


# --- exposition ---------------------------------------------------------------------------------------
def _esc(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict[str, object]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items()) + "}"


def _num(v: float) -> str:
    if isinstance(v, int):
        return str(v)
    return repr(float(v))


class Exposition:
    """Prometheus text format 0.0.4, one family at a time (HELP and TYPE once per name)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, doc: str, samples: Iterable[tuple[dict[str, object], float]]) -> None:
        self.lines.append(f"# HELP {name} {doc}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            self.lines.append(f"{name}{_labels(labels)} {_num(value)}")

    def histogram(self, name: str, doc: str, series: Iterable[tuple[dict[str, object], Histogram]]) -> None:
        self.lines.append(f"# HELP {name} {doc}")
        self.lines.append(f"# TYPE {name} histogram")
        for labels, h in series:
            acc = 0
            for bound, n in zip(h.bounds_ms, h.counts, strict=False):
                acc += n
                self.lines.append(f"{name}_bucket{_labels({**labels, 'le': _num(bound)})} {acc}")
            acc += h.counts[-1]
            self.lines.append(f"{name}_bucket{_labels({**labels, 'le': '+Inf'})} {acc}")
            self.lines.append(f"{name}_sum{_labels(labels)} {_num(_ms(h.sum, h.unit))}")
            self.lines.append(f"{name}_count{_labels(labels)} {acc}")

    def text(self) -> bytes:
        return ("\n".join(self.lines) + "\n").encode()
