"""The console's admin-reading layer: the cluster as JSON-ready dicts, read through the Kafka protocol.

Everything goes through clients any Kafka user has: confluent-kafka's AdminClient (Metadata,
DescribeCluster, DescribeConfigs, IncrementalAlterConfigs, CreateTopics, DeleteTopics, ListGroups,
DescribeGroups, OffsetFetch, ListOffsets), a Consumer for browsing and a Producer for test messages,
plus DescribeLogDirs on Gregor's codec (confluent-kafka's admin client has none) for partition sizes.
So the console works against any Gregor cluster and against Kafka, with the ACLs of its principal.

Every call is bounded: by the request timeout (`request_timeout_s`), browsing by MAX_BROWSE_RECORDS
records and BROWSE_DEADLINE_S seconds, a shown key or value by MAX_SHOWN_BYTES. Failures become
ConsoleError, which the server turns into a JSON error with an HTTP status.
"""

from __future__ import annotations

import base64
import threading
import time
import uuid
from typing import Any

from gregor.tools.common import _host_port, client_config, client_security_config, kafka_message

MAX_BROWSE_RECORDS = 500  # records returned by one browse request, at most
DEFAULT_BROWSE_RECORDS = 50
BROWSE_DEADLINE_S = 5.0  # one browse request stops reading after this long
MAX_SHOWN_BYTES = 64 * 1024  # a key or value longer than this is cut (the record's full size is still shown)
MAX_HEADERS = 64  # headers accepted on one produced test message
MAX_PARTITIONS = 10_000  # partitions of one created topic, at most (a typo in the form must not create a million)


class ConsoleError(Exception):
    """A failure the console reports as JSON: `status` is the HTTP status, `error` Kafka's error name
    when the broker gave one."""

    def __init__(self, message: str, status: int = 400, error: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error = error


def _kafka_failure(what: str, e: BaseException) -> ConsoleError:
    """A ConsoleError for a failed client call: UNKNOWN_TOPIC_OR_PART and GROUP_ID_NOT_FOUND are 404,
    a timeout or an unreachable broker 504, authorization failures 403, anything else 400."""
    from confluent_kafka import KafkaError

    err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
    if err is None:
        if isinstance(e, TimeoutError):
            return ConsoleError(f"{what}: no answer from the cluster in time", 504, "REQUEST_TIMED_OUT")
        return ConsoleError(f"{what}: {e}", 400)
    name = _kafka_name(err)
    status = 400
    if err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.GROUP_ID_NOT_FOUND):
        status = 404
    elif err.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                        KafkaError.REQUEST_TIMED_OUT):
        status = 504
    elif "AUTHORIZATION" in name:
        status = 403
    return ConsoleError(f"{what}: {kafka_message(e)}", status, name)


def _kafka_name(err: Any) -> str:
    """Kafka's name for a broker error code (INVALID_TOPIC_EXCEPTION, where librdkafka says
    TOPIC_EXCEPTION); librdkafka's own name, without its leading underscore, for a client-side error."""
    from gregor.protocol.errors import ErrorCode

    try:
        return ErrorCode(err.code()).name
    except ValueError:
        return str(err.name()).lstrip("_")


def _bytes_view(data: bytes | None) -> dict[str, Any] | None:
    """A key or value for the browser: base64 of at most MAX_SHOWN_BYTES, the text when it is UTF-8,
    the full size and whether it was cut. The page renders text, JSON or hex from this."""
    if data is None:
        return None
    shown = data[:MAX_SHOWN_BYTES]
    try:
        text: str | None = shown.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {"b64": base64.b64encode(shown).decode("ascii"), "text": text, "size": len(data),
            "truncated": len(data) > len(shown)}


class ClusterReader:
    """One AdminClient and one Producer shared by all requests (both are thread-safe); consumers are
    made per browse request (assign, read, close), so no group state is ever left behind."""

    def __init__(self, bootstrap: str, props: dict[str, str] | None = None, request_timeout_s: float = 10.0) -> None:
        from confluent_kafka.admin import AdminClient

        self.bootstrap = bootstrap
        self.props = dict(props or {})
        self.request_timeout_s = request_timeout_s
        self._security = client_security_config(self.props)
        timeout_ms = int(request_timeout_s * 1000)
        self.admin = AdminClient(client_config(bootstrap, **{"socket.timeout.ms": timeout_ms}, **self._security))
        self._producer: Any = None
        self._producer_lock = threading.Lock()

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self.request_timeout_s)

    def _wait(self, future: Any, what: str) -> Any:
        from confluent_kafka import KafkaException

        try:
            return future.result(timeout=self.request_timeout_s + 1)
        except (KafkaException, TimeoutError) as e:
            raise _kafka_failure(what, e) from None

    # --- brokers ---------------------------------------------------------------------------------

    def cluster(self) -> dict[str, Any]:
        """Brokers, controller and cluster id (DescribeCluster)."""
        desc = self._wait(self.admin.describe_cluster(request_timeout=self.request_timeout_s), "describe cluster")
        controller = desc.controller.id if desc.controller is not None else None
        brokers = [{"id": n.id, "host": n.host, "port": n.port, "rack": n.rack, "controller": n.id == controller}
                   for n in sorted(desc.nodes, key=lambda n: n.id)]
        return {"cluster_id": desc.cluster_id, "controller": controller, "brokers": brokers,
                "bootstrap": self.bootstrap}

    # --- topics ----------------------------------------------------------------------------------

    def _metadata(self, topic: str | None = None) -> Any:
        from confluent_kafka import KafkaException

        try:
            # All topics: a Metadata request for every topic never auto-creates one.
            return self.admin.list_topics(timeout=self.request_timeout_s)
        except KafkaException as e:
            raise _kafka_failure("metadata", e) from None

    def partition_sizes(self, brokers: list[tuple[int, str, int]]) -> dict[tuple[str, int], int]:
        """Partition -> size in bytes on its leader's log dir, from every broker's DescribeLogDirs
        (the largest copy when several brokers answer). A broker that does not answer (or a Kafka
        broker that refuses) leaves its partitions out: sizes are shown as unknown, not as an error."""
        from gregor.tools.common import ToolError
        from gregor.tools.log_dirs import describe_broker
        from gregor.tools.quotas import secured_connection

        sizes: dict[tuple[str, int], int] = {}
        for broker_id, host, port in brokers:
            try:
                conn = secured_connection(host, port, min(self.request_timeout_s, 5.0), self.props)
            except (ToolError, OSError):
                continue
            try:
                for r in describe_broker(conn, broker_id):
                    for t in r.topics:
                        for p in t.partitions:
                            key = (t.name, p.partition_index)
                            sizes[key] = max(sizes.get(key, 0), p.partition_size)
            except (ToolError, OSError, ValueError):
                continue
            finally:
                conn.close()
        return sizes

    def topics(self) -> dict[str, Any]:
        """Every topic with its partitions (leader, replicas, ISR, size) and totals."""
        md = self._metadata()
        brokers = [(b.id, b.host, b.port) for b in md.brokers.values()]
        sizes = self.partition_sizes(brokers)
        out = []
        for name in sorted(md.topics):
            t = md.topics[name]
            out.append(self._topic_json(name, t, sizes))
        return {"topics": out, "sizes_known": bool(sizes)}

    @staticmethod
    def _topic_json(name: str, t: Any, sizes: dict[tuple[str, int], int]) -> dict[str, Any]:
        parts = []
        for pid in sorted(t.partitions):
            p = t.partitions[pid]
            parts.append({"partition": pid, "leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isrs),
                          "size": sizes.get((name, pid)),
                          "under_replicated": len(p.isrs) < len(p.replicas),
                          "error": p.error.name() if p.error is not None else None})
        known = [p["size"] for p in parts if p["size"] is not None]
        return {"name": name, "internal": name.startswith("__"), "partitions": parts,
                "partition_count": len(parts), "replication_factor": len(parts[0]["replicas"]) if parts else 0,
                "size": sum(known) if known else None,
                "under_replicated": sum(1 for p in parts if p["under_replicated"]),
                "error": t.error.name() if t.error is not None else None}

    def topic(self, name: str) -> dict[str, Any]:
        """One topic with its partitions and high watermarks; 404 when it does not exist."""
        md = self._metadata()
        t = md.topics.get(name)
        if t is None:
            raise ConsoleError(f"Topic '{name}' does not exist.", 404, "UNKNOWN_TOPIC_OR_PARTITION")
        sizes = self.partition_sizes([(b.id, b.host, b.port) for b in md.brokers.values()])
        out = self._topic_json(name, t, sizes)
        offsets = self._offsets(name, list(t.partitions))
        for p in out["partitions"]:
            p["log_start_offset"], p["high_watermark"] = offsets.get(p["partition"], (None, None))
        return out

    def _offsets(self, topic: str, partitions: list[int]) -> dict[int, tuple[int | None, int | None]]:
        """partition -> (earliest, latest) offsets, by ListOffsets."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        out: dict[int, tuple[int | None, int | None]] = {}
        if not partitions:
            return out
        earliest = self.admin.list_offsets({TopicPartition(topic, p): OffsetSpec.earliest() for p in partitions},
                                           request_timeout=self.request_timeout_s)
        latest = self.admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in partitions},
                                         request_timeout=self.request_timeout_s)
        for tp, f in latest.items():
            lo = self._wait(earliest[tp], f"offsets of {topic}-{tp.partition}").offset
            hi = self._wait(f, f"offsets of {topic}-{tp.partition}").offset
            out[tp.partition] = (lo, hi)
        return out

    def topic_configs(self, name: str) -> dict[str, Any]:
        """A topic's configs with Kafka's sources (DescribeConfigs); sensitive values are never sent."""
        from confluent_kafka.admin import ConfigResource, ResourceType

        res = ConfigResource(ResourceType.TOPIC, name)
        futures = self.admin.describe_configs([res], request_timeout=self.request_timeout_s)
        entries = self._wait(futures[res], f"describe configs of topic '{name}'")
        configs = []
        for key in sorted(entries):
            e = entries[key]
            configs.append({"name": key, "value": None if e.is_sensitive else e.value,
                            "source": _config_source(e.source),
                            "default": bool(e.is_default), "read_only": bool(e.is_read_only),
                            "sensitive": bool(e.is_sensitive)})
        return {"topic": name, "configs": configs}

    def alter_topic_configs(self, name: str, set_: dict[str, str], delete: list[str]) -> dict[str, Any]:
        """IncrementalAlterConfigs: SET each of `set_`, DELETE (back to the default) each of `delete`."""
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

        ops = [ConfigEntry(k, str(v), incremental_operation=AlterConfigOpType.SET) for k, v in set_.items()]
        ops += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete]
        if not ops:
            raise ConsoleError("nothing to change: give 'set' and/or 'delete'")
        res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=ops)
        futures = self.admin.incremental_alter_configs([res], request_timeout=self.request_timeout_s)
        self._wait(futures[res], f"alter configs of topic '{name}'")
        return self.topic_configs(name)

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: dict[str, str]) -> dict[str, Any]:
        from confluent_kafka.admin import NewTopic

        if not 1 <= partitions <= MAX_PARTITIONS:
            raise ConsoleError(f"partitions must be between 1 and {MAX_PARTITIONS}")
        new = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                       config={k: str(v) for k, v in configs.items()})
        futures = self.admin.create_topics([new], request_timeout=self.request_timeout_s,
                                           operation_timeout=self.request_timeout_s)
        self._wait(futures[name], f"create topic '{name}'")
        return {"created": name}

    def delete_topic(self, name: str) -> dict[str, Any]:
        futures = self.admin.delete_topics([name], request_timeout=self.request_timeout_s,
                                           operation_timeout=self.request_timeout_s)
        self._wait(futures[name], f"delete topic '{name}'")
        return {"deleted": name}

    # --- consumer groups -------------------------------------------------------------------------

    def groups(self) -> dict[str, Any]:
        """Every group the coordinators know (ListGroups), with state and type where the broker says."""
        res = self._wait(self.admin.list_consumer_groups(request_timeout=self.request_timeout_s), "list groups")
        out = []
        for g in sorted(res.valid, key=lambda g: g.group_id):
            out.append({"group_id": g.group_id, "state": _enum_name(getattr(g, "state", None)),
                        "type": _enum_name(getattr(g, "type", None)),
                        "simple": bool(getattr(g, "is_simple_consumer_group", False))})
        return {"groups": out, "errors": [kafka_message(e) for e in res.errors]}

    def group(self, group_id: str) -> dict[str, Any]:
        """One group: state, members and their assignments, and per partition the committed offset,
        the high watermark and the lag (high watermark - committed; no commit: the whole log counts)."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        desc = self._wait(self.admin.describe_consumer_groups([group_id], request_timeout=self.request_timeout_s)[
            group_id], f"describe group '{group_id}'")
        state = _enum_name(desc.state)
        owners: dict[tuple[str, int], str] = {}
        members = []
        for m in desc.members:
            tps = sorted((tp.topic, tp.partition) for tp in (m.assignment.topic_partitions if m.assignment else []))
            for tp in tps:
                owners[tp] = m.member_id
            members.append({"member_id": m.member_id, "client_id": m.client_id, "host": m.host,
                            "group_instance_id": getattr(m, "group_instance_id", None),
                            "assignment": [{"topic": t, "partition": p} for t, p in tps]})
        if state == "DEAD" and not members:
            raise ConsoleError(f"Consumer group '{group_id}' does not exist.", 404, "GROUP_ID_NOT_FOUND")
        committed_res = self._wait(self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id)], request_timeout=self.request_timeout_s)[group_id],
            f"offsets of group '{group_id}'")
        committed = {(tp.topic, tp.partition): tp.offset for tp in committed_res.topic_partitions}
        keys = sorted(set(committed) | set(owners))
        latest: dict[tuple[str, int], int] = {}
        if keys:
            futures = self.admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in keys},
                                              request_timeout=self.request_timeout_s)
            for tp, f in futures.items():
                try:
                    latest[(tp.topic, tp.partition)] = f.result(timeout=self.request_timeout_s + 1).offset
                except Exception:  # a deleted topic's old commit: no watermark, no lag
                    continue
        partitions = []
        total = 0
        for key in keys:
            c = committed.get(key)
            c = c if c is not None and c >= 0 else None
            hw = latest.get(key)
            lag = None if hw is None else hw - (c if c is not None else 0)
            if lag is not None:
                lag = max(lag, 0)
                total += lag
            partitions.append({"topic": key[0], "partition": key[1], "committed": c, "high_watermark": hw,
                               "lag": lag, "member_id": owners.get(key)})
        coordinator = desc.coordinator.id if getattr(desc, "coordinator", None) is not None else None
        return {"group_id": group_id, "state": state, "type": _enum_name(getattr(desc, "type", None)),
                "protocol": desc.partition_assignor, "coordinator": coordinator, "members": members,
                "partitions": partitions, "total_lag": total, "time_ms": int(time.time() * 1000)}

    # --- messages --------------------------------------------------------------------------------

    def browse(self, topic: str, partition: int, offset: int | None, timestamp_ms: int | None,
               limit: int) -> dict[str, Any]:
        """Up to `limit` records of one partition from `offset` (or from the first record at or after
        `timestamp_ms`, or the last `limit` records when neither is given), read by an assigned consumer
        with no group; stops at the high watermark or after BROWSE_DEADLINE_S."""
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

        limit = max(1, min(limit, MAX_BROWSE_RECORDS))
        md = self._metadata()
        t = md.topics.get(topic)
        if t is None:
            raise ConsoleError(f"Topic '{topic}' does not exist.", 404, "UNKNOWN_TOPIC_OR_PARTITION")
        if partition not in t.partitions:
            raise ConsoleError(f"Topic '{topic}' has no partition {partition} (it has {len(t.partitions)}).", 404,
                               "UNKNOWN_TOPIC_OR_PARTITION")
        consumer = Consumer(client_config(self.bootstrap, **{
            "group.id": f"gregor-console-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
            "enable.partition.eof": True, "socket.timeout.ms": int(self.request_timeout_s * 1000),
            "fetch.max.bytes": 8 * 1024 * 1024, **self._security}))
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                       timeout=self.request_timeout_s)
            start = offset
            if timestamp_ms is not None:
                found = consumer.offsets_for_times([TopicPartition(topic, partition, timestamp_ms)],
                                                   timeout=self.request_timeout_s)[0]
                start = found.offset if found.offset >= 0 else high
            elif start is None:
                start = max(low, high - limit)
            start = max(start, low)
            records: list[dict[str, Any]] = []
            if start < high:
                consumer.assign([TopicPartition(topic, partition, start)])
                deadline = time.monotonic() + BROWSE_DEADLINE_S
                while len(records) < limit and time.monotonic() < deadline:
                    batch = consumer.consume(num_messages=limit - len(records), timeout=0.5)
                    done = False
                    for msg in batch:
                        if msg.error() is not None:
                            if msg.error().code() == KafkaError._PARTITION_EOF:
                                done = True
                                continue
                            raise ConsoleError(f"reading {topic}-{partition}: {msg.error().str()}", 502,
                                               _kafka_name(msg.error()))
                        records.append(_record_json(msg))
                        if msg.offset() + 1 >= high:
                            done = True
                    if done:
                        break
            return {"topic": topic, "partition": partition, "log_start_offset": low, "high_watermark": high,
                    "start_offset": start, "records": records[:limit], "limit": limit}
        except KafkaException as e:
            raise _kafka_failure(f"reading {topic}-{partition}", e) from None
        finally:
            consumer.close()

    def produce(self, topic: str, partition: int | None, key: str | None, value: str | None,
                headers: list[tuple[str, str]]) -> dict[str, Any]:
        """Produce one test message (acks=all) and wait for its offset."""
        from confluent_kafka import KafkaException, Producer

        if len(headers) > MAX_HEADERS:
            raise ConsoleError(f"at most {MAX_HEADERS} headers")
        with self._producer_lock:
            if self._producer is None:
                self._producer = Producer(client_config(self.bootstrap, **{
                    "acks": "all", "message.timeout.ms": int(self.request_timeout_s * 1000),
                    "socket.timeout.ms": int(self.request_timeout_s * 1000), **self._security}))
        md = self._metadata()
        t = md.topics.get(topic)
        if t is None:  # checked first: producing to a missing topic could auto-create it
            raise ConsoleError(f"Topic '{topic}' does not exist.", 404, "UNKNOWN_TOPIC_OR_PARTITION")
        if partition is not None and partition not in t.partitions:
            raise ConsoleError(f"Topic '{topic}' has no partition {partition}.", 404, "UNKNOWN_TOPIC_OR_PARTITION")
        result: dict[str, Any] = {}
        done = threading.Event()

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                result["error"] = err
            else:
                result.update(topic=msg.topic(), partition=msg.partition(), offset=msg.offset())
            done.set()

        kwargs: dict[str, Any] = {"key": key.encode() if key is not None else None,
                                  "value": value.encode() if value is not None else None,
                                  "headers": [(k, v.encode()) for k, v in headers], "on_delivery": on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        try:
            self._producer.produce(topic, **kwargs)
        except (KafkaException, BufferError) as e:
            raise _kafka_failure(f"produce to '{topic}'", e) from None
        deadline = time.monotonic() + self.request_timeout_s + 1
        while not done.is_set() and time.monotonic() < deadline:
            self._producer.poll(0.1)
        if not done.is_set():
            raise ConsoleError(f"produce to '{topic}': no acknowledgement in time", 504, "REQUEST_TIMED_OUT")
        if "error" in result:
            err = result["error"]
            raise ConsoleError(f"produce to '{topic}': {err.str()}", 400, _kafka_name(err))
        return result


def _record_json(msg: Any) -> dict[str, Any]:
    ts_type, ts = msg.timestamp()
    headers = [{"key": k, "value": _bytes_view(v)} for k, v in (msg.headers() or [])]
    return {"offset": msg.offset(), "timestamp": ts if ts_type else None, "key": _bytes_view(msg.key()),
            "value": _bytes_view(msg.value()), "headers": headers}


def _config_source(source: Any) -> str:
    """Kafka's ConfigSource name (DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG, ...) for the client's int or enum."""
    from confluent_kafka.admin import ConfigSource

    try:
        return ConfigSource(int(getattr(source, "value", source))).name
    except (ValueError, TypeError):
        return str(source)


def _enum_name(v: Any) -> str | None:
    if v is None:
        return None
    return str(getattr(v, "name", v))


def check_bootstrap(bootstrap: str) -> None:
    """Raise UsageError for a --bootstrap-server that does not parse (the console starts anyway when
    the cluster is down: its pages then show the error)."""
    for server in bootstrap.split(","):
        if server.strip():
            _host_port(server)
