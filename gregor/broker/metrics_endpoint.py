"""The Prometheus endpoint (`metrics.port`): what the broker's state says at scrape time, and the HTTP server.

Computed at scrape time from the broker's state (`collect`): partition counts (under-replicated,
under-min-ISR, offline, leaders), log size and segment count per hosted partition, purgatory sizes,
open connections per listener, consumer group lag per group and partition this broker leads (as
kafka-exporter's kafka_consumergroup_lag), beside the hot path's counters (gregor.metrics.registry).

The HTTP server is a few lines of asyncio in the broker's own loop, bounded as the Kafka listeners are:
at most METRICS_MAX_CONNECTIONS scrapers at once, one GET of at most METRICS_MAX_REQUEST_BYTES per
connection, answered and closed, and a scraper that does not send its request within
METRICS_REQUEST_TIMEOUT_S is dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gregor.controller.controller import Controller
from gregor.coordinator.group.coordinator import GroupCoordinator
from gregor.metadata.cache import MetadataCache
from gregor.metadata.store import PartitionState
from gregor.metrics.registry import _ERROR_NAMES, NS_PER_MS, TIME_METRICS, BrokerMetrics, Exposition, _num
from gregor.network.connection import Connection
from gregor.replication.purgatory import DelayedOperation, Purgatory
from gregor.replication.replica_manager import ReplicaManager
from gregor.storage.log_manager import LogManager

log = logging.getLogger("gregor.metrics")

METRICS_MAX_CONNECTIONS = 16  # scrapers served at once; more are closed at once
METRICS_MAX_REQUEST_BYTES = 8192  # request line and headers of one GET
METRICS_REQUEST_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class MetricsSources:
    """What a scrape reads: the hot path's counters and the broker's components, as they are at scrape time."""

    metrics: BrokerMetrics
    replica_manager: ReplicaManager
    log_manager: LogManager
    controller: Controller
    metadata_cache: MetadataCache
    group_coordinator: GroupCoordinator
    listener_names: tuple[str, ...]
    connections: Callable[[], Iterable[Connection]]  # the open client connections


def collect(src: MetricsSources) -> bytes:
    """Every metric, as Prometheus text: the hot path's counters and what the broker's state says now."""
    m = src.metrics
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

    rm = src.replica_manager
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
             [({}, len(src.log_manager.offline_dirs))])
    e.family("kafka_server_replicamanager_isrshrinks_total", "counter",
             "ISR shrinks written by this broker as leader (IsrShrinksPerSec).", [({}, m.isr_shrinks)])
    e.family("kafka_server_replicamanager_isrexpands_total", "counter",
             "ISR expansions written by this broker as leader (IsrExpandsPerSec).", [({}, m.isr_expands)])

    active = bool(getattr(src.controller, "active", False))
    offline = 0
    if active:
        offline = sum(1 for st in _partition_states(src) if st.leader < 0)
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

    e.histogram("gregor_eventloop_lag_ms",
                "How late the event loop ran a heartbeat due every 50 ms, ms: the time it was held by other work.",
                [({}, m.loop_lag)])
    e.histogram("gregor_gc_collection_ms", "Time of each garbage collection, ms, per generation (the whole "
                "interpreter waits for one).",
                (({"generation": g}, h) for g, h in enumerate(m.gc_collections)))

    kinds: dict[str, int] = {"Produce": 0, "Fetch": 0}
    for op in _parked_operations(rm.purgatory):
        kind = type(op).__name__.removeprefix("Delayed")
        kinds[kind] = kinds.get(kind, 0) + 1
    e.family("kafka_server_delayedoperationpurgatory_purgatorysize", "gauge",
             "Requests parked in the purgatory, per kind of delayed operation.",
             (({"delayedOperation": k}, v) for k, v in sorted(kinds.items())))

    per_listener: dict[str, int] = dict.fromkeys(src.listener_names, 0)
    for conn in list(src.connections()):
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
             "(as kafka-exporter's).", _group_lag(src))
    return e.text()


def _partition_states(src: MetricsSources) -> Iterable[PartitionState]:
    for md in list(src.metadata_cache.topics().values()):
        yield from md.partitions.values()


def _parked_operations(purgatory: Purgatory) -> set[DelayedOperation]:
    ops: set[DelayedOperation] = set()
    for watchers in list(purgatory._watchers.values()):
        ops.update(op for op in watchers if not op.completed)
    return ops


def _group_lag(src: MetricsSources) -> list[tuple[dict[str, object], float]]:
    """Committed offsets of every group this broker coordinates, against the HW of partitions it leads
    (a partition led elsewhere is that broker's to report: labels stay bounded by what is hosted here)."""
    gc = src.group_coordinator
    rm = src.replica_manager
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

    def __init__(self, sources: MetricsSources) -> None:
        self.sources = sources
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
                status, ctype, body = "200 OK", "text/plain; version=0.0.4; charset=utf-8", collect(self.sources)
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
