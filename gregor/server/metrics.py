"""The Prometheus endpoint (`metrics.port`): the one place that defines every metric the broker exports.

Names follow the JMX exporter's usual rules for Kafka's MBeans (kafka.server:type=BrokerTopicMetrics,
name=BytesInPerSec,topic=t -> kafka_server_brokertopicmetrics_bytesin_total{topic="t"}), so dashboards
and alerts written for Kafka read Gregor with few changes; consumer lag follows kafka-exporter's
kafka_consumergroup_lag.

Two kinds of metric, kept apart for the hot path's sake:

- Counted where the work is already done (BrokerMetrics): bytes and messages in per topic (the record
  batch bytes a Produce appended, as Kafka's BytesInPerSec), bytes out per topic (the record bytes of
  consumer Fetch responses), and per API the request count, errors per error code and Kafka's
  RequestMetrics time split - queue (frame received -> handler start), local (handler), remote (parked
  in the purgatory: a Future answer), send (response built -> handed to the socket) as sums (means by
  rate(_sum)/rate(_count)) and the total as a histogram of fixed buckets so Prometheus computes
  percentiles (histogram_quantile). Plain ints in
  dicts and lists: a few hundred nanoseconds a request, and nothing at all while the endpoint is off
  (the broker then has no BrokerMetrics and every hook is one `is None` test).
- Computed at scrape time from the broker's state (`collect`): partition counts (under-replicated,
  under-min-ISR, offline, leaders), log size and segment count per hosted partition, purgatory sizes,
  open connections per listener, consumer group lag per group and partition this broker leads.

The HTTP server is a few lines of asyncio in the broker's own loop, bounded as the Kafka listeners are:
at most METRICS_MAX_CONNECTIONS scrapers at once, one GET of at most METRICS_MAX_REQUEST_BYTES per
connection, answered and closed, and a scraper that does not send its request within
METRICS_REQUEST_TIMEOUT_S is dropped.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from gregor.protocol import apis
from gregor.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from gregor.server.broker import Broker

log = logging.getLogger("gregor.metrics")

METRICS_MAX_CONNECTIONS = 16  # scrapers served at once; more are closed at once
METRICS_MAX_REQUEST_BYTES = 8192  # request line and headers of one GET
METRICS_REQUEST_TIMEOUT_S = 10.0

# Upper bounds (ms) of the request time histograms: fine below a millisecond (loopback requests), up to
# Fetch's long polls (fetch.max.wait.ms 500 by default) and acks=all waits (request.timeout.ms 30 s).
TIME_BUCKETS_MS: tuple[float, ...] = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000,
                                      10000, 30000)
# Upper bounds (ms) of the log flush (fsync) time histogram.
FLUSH_BUCKETS_MS: tuple[float, ...] = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 5000)

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


def collect(broker: Broker) -> bytes:
    """Every metric, as Prometheus text: the hot path's counters and what the broker's state says now."""
    m: BrokerMetrics | None = broker.metrics
    assert m is not None
    e = Exposition()
    e.family("kafka_server_brokertopicmetrics_bytesin_total", "counter",
             "Record batch bytes appended by Produce requests, per topic (Kafka's BytesInPerSec).",
             (({"topic": t}, v) for t, v in sorted(m.bytes_in.items())))
    e.family("kafka_server_brokertopicmetrics_messagesin_total", "counter",
             "Records appended by Produce requests, per topic (MessagesInPerSec).",
             (({"topic": t}, v) for t, v in sorted(m.messages_in.items())))
    e.family("kafka_server_brokertopicmetrics_bytesout_total", "counter",
             "Record bytes sent to consumers in Fetch responses, per topic (BytesOutPerSec; followers excluded).",
             (({"topic": t}, v) for t, v in sorted(m.bytes_out.items())))
    reqs = sorted(m.requests.values(), key=lambda s: s.name)
    e.family("kafka_network_requestmetrics_requests_total", "counter",
             "Requests answered, per API (RequestsPerSec).", (({"request": s.name}, s.requests) for s in reqs))
    e.family("kafka_network_requestmetrics_errors_total", "counter",
             "Error codes in responses (top level, per topic and per partition), per API and error (ErrorsPerSec).",
             (({"request": s.name, "error": _ERROR_NAMES.get(code, str(code))}, n)
              for s in reqs for code, n in sorted(s.errors.items())))
    docs = ("Time requests waited after they were received until their handler started (RequestQueueTimeMs).",
            "Time in the requests' handlers (LocalTimeMs).",
            "Time requests waited in the purgatory: acks=all, fetch.min.bytes, flushes (RemoteTimeMs).",
            "Time from responses built until handed to the socket, behind earlier responses (ResponseSendTimeMs).")
    for i, suffix in enumerate(TIME_METRICS[:4]):  # summaries without quantiles: rate(_sum) / rate(_count)
        name = f"kafka_network_requestmetrics_{suffix}"
        e.lines.append(f"# HELP {name} {docs[i]}")
        e.lines.append(f"# TYPE {name} summary")
        for s in reqs:
            e.lines.append(f'{name}_sum{{request="{s.name}"}} {_num(s.part_ns[i] / NS_PER_MS)}')
            e.lines.append(f'{name}_count{{request="{s.name}"}} {s.requests}')
    e.histogram("kafka_network_requestmetrics_totaltimems",
                "Total time from request received to response written, ms (TotalTimeMs; histogram_quantile).",
                (({"request": s.name}, s.total) for s in reqs))

    rm = broker.replica_manager
    parts = list(rm.partitions.values())
    leaders = [p for p in parts if p.is_leader]
    under = sum(1 for p in leaders if len(p.isr) < len(p.replicas))
    under_min = sum(1 for p in leaders if len(p.isr) < p.min_insync_replicas)
    e.family("kafka_server_replicamanager_partitioncount", "gauge", "Partitions hosted by this broker.",
             [({}, len(parts))])
    e.family("kafka_server_replicamanager_leadercount", "gauge", "Partitions this broker leads.",
             [({}, len(leaders))])
    e.family("kafka_server_replicamanager_underreplicatedpartitions", "gauge",
             "Partitions this broker leads whose ISR is smaller than their replica set.", [({}, under)])
    e.family("kafka_cluster_partition_underminisr", "gauge",
             "Partitions this broker leads whose ISR is smaller than min.insync.replicas (sum over partitions).",
             [({}, under_min)])
    e.family("kafka_server_replicamanager_offlinereplicacount", "gauge",
             "Hosted partitions whose log failed to load or be created.", [({}, len(rm.offline))])
    e.family("kafka_log_logmanager_offlinelogdirectorycount", "gauge",
             "Log dirs of this broker that failed (JBOD: their partitions are offline here).",
             [({}, len(broker.log_manager.offline_dirs))])
    e.family("kafka_server_replicamanager_isrshrinks_total", "counter",
             "ISR shrinks written by this broker as leader (IsrShrinksPerSec).", [({}, m.isr_shrinks)])
    e.family("kafka_server_replicamanager_isrexpands_total", "counter",
             "ISR expansions written by this broker as leader (IsrExpandsPerSec).", [({}, m.isr_expands)])

    active = bool(getattr(broker.controller, "active", False))
    offline = 0
    if active:
        offline = sum(1 for st in _partition_states(broker) if st.leader < 0)
    e.family("kafka_controller_kafkacontroller_activecontrollercount", "gauge",
             "1 on the active controller, 0 elsewhere (the cluster's sum must be 1).", [({}, int(active))])
    e.family("kafka_controller_kafkacontroller_offlinepartitionscount", "gauge",
             "Partitions without a leader (reported by the active controller only).", [({}, offline)])

    sizes: list[tuple[dict[str, object], float]] = []
    segments: list[tuple[dict[str, object], float]] = []
    for (topic, index), p in sorted(rm.partitions.items()):
        if not p.has_log:
            continue
        lg = p.log
        labels: dict[str, object] = {"topic": topic, "partition": index}
        sizes.append((labels, lg.size_bytes))
        segments.append((labels, lg.num_segments))
    e.family("kafka_log_log_size", "gauge", "Bytes of a hosted partition's log segments (Log Size).", sizes)
    e.family("kafka_log_log_numlogsegments", "gauge", "Segments of a hosted partition's log (NumLogSegments).",
             segments)
    e.histogram("kafka_log_logflushstats_logflushrateandtimems",
                "Time of each log flush (fsync) in ms (LogFlushRateAndTimeMs).", [({}, m.log_flush)])

    kinds: dict[str, int] = {"Produce": 0, "Fetch": 0}
    for op in _parked_operations(rm.purgatory):
        kind = type(op).__name__.removeprefix("Delayed")
        kinds[kind] = kinds.get(kind, 0) + 1
    e.family("kafka_server_delayedoperationpurgatory_purgatorysize", "gauge",
             "Requests parked in the purgatory, per kind of delayed operation.",
             (({"delayedOperation": k}, v) for k, v in sorted(kinds.items())))

    per_listener: dict[str, int] = {spec.name: 0 for spec in broker.config.listener_specs}
    for conn in list(broker.socket_server.connections):
        name = conn.listener.name
        per_listener[name] = per_listener.get(name, 0) + 1
    e.family("kafka_server_socketserver_connections", "gauge", "Open client connections, per listener.",
             (({"listener": k}, v) for k, v in sorted(per_listener.items())))
    failed = {name: m.failed_authentication.get(name, 0) for name in per_listener}
    failed.update(m.failed_authentication)
    e.family("kafka_server_socketserver_failedauthentication_total", "counter",
             "Failed SASL authentications and TLS handshakes, per listener (failed-authentication-total).",
             (({"listener": k}, v) for k, v in sorted(failed.items())))

    e.family("kafka_consumergroup_lag", "gauge",
             "Records a group's committed offset is behind the high watermark, per partition this broker leads "
             "(as kafka-exporter's).", _group_lag(broker))
    return e.text()


def _partition_states(broker: Broker) -> Iterable[Any]:
    for md in list(broker.metadata_cache.topics().values()):
        yield from md.partitions.values()


def _parked_operations(purgatory: Any) -> set[Any]:
    ops: set[Any] = set()
    for watchers in list(purgatory._watchers.values()):
        ops.update(op for op in watchers if not op.completed)
    return ops


def _group_lag(broker: Broker) -> list[tuple[dict[str, object], float]]:
    """Committed offsets of every group this broker coordinates, against the HW of partitions it leads
    (a partition led elsewhere is that broker's to report: labels stay bounded by what is hosted here)."""
    gc = broker.group_coordinator
    rm = broker.replica_manager
    out: list[tuple[dict[str, object], float]] = []
    for gid, g in sorted(list(gc.groups.items())):
        for (topic, index), om in sorted(list(getattr(g, "offsets", {}).items())):
            p = rm.partitions.get((topic, index))
            if p is None or not p.is_leader:
                continue
            committed = om.offset
            if committed < 0:
                continue
            out.append(({"group": gid, "topic": topic, "partition": index}, max(p.high_watermark - committed, 0)))
    return out


# --- the endpoint ------------------------------------------------------------------------------------
class MetricsServer:
    """GET /metrics over HTTP/1.0-style single requests, in the broker's loop."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.server: asyncio.AbstractServer | None = None
        self.open = 0
        self.port = -1

    async def start(self, host: str, port: int) -> int:
        self.server = await asyncio.start_server(self._serve, host, port, limit=METRICS_MAX_REQUEST_BYTES)
        self.port = self.server.sockets[0].getsockname()[1]
        log.info("metrics endpoint listening on http://%s:%d/metrics", host, self.port)
        return self.port

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open >= METRICS_MAX_CONNECTIONS:
            writer.close()
            return
        self.open += 1
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), METRICS_REQUEST_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
                return
            line = head.split(b"\r\n", 1)[0].split()
            if len(line) < 2 or line[0] not in (b"GET", b"HEAD"):
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"only GET\n"
            elif line[1].split(b"?", 1)[0] not in (b"/metrics", b"/"):
                status, ctype, body = "404 Not Found", "text/plain", b"try /metrics\n"
            else:
                status, ctype, body = "200 OK", "text/plain; version=0.0.4; charset=utf-8", collect(self.broker)
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                         f"Connection: close\r\n\r\n".encode())
            if line and line[0] != b"HEAD":
                writer.write(body)
            await asyncio.wait_for(writer.drain(), METRICS_REQUEST_TIMEOUT_S)
        except Exception as exc:  # a scraper's error must not reach the loop's handler
            log.debug("metrics request failed: %r", exc)
        finally:
            self.open -= 1
            writer.close()
