"""Broker configuration: the one table of broker properties, with Kafka's names, types and defaults.

A broker is configured from a server.properties-style file plus `--override key=value`;
every property is declared once, in BROKER_PROPS, with its type, default, bounds,
documentation and Kafka's update mode (read-only, per-broker, cluster-wide: which of them
dynamic broker configs may alter), so an unknown or ill-typed property is a startup error
that names it. The properties that are topic configs' broker-level synonyms (log.segment.bytes,
log.retention.hours, ...) and the log cleaner's are defined with the topic-config table in
gregor.storage.config and only listed here, so each has one definition.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from gregor.config import kraft
from gregor.config.schema_registry import REGISTRY_PROPS, RegistryConfig
from gregor.configdef import CLUSTER_WIDE, LONG_MAX, PER_BROKER, READ_ONLY, ConfigError, Prop, format_value
from gregor.known_configs import KNOWN_PROPS
from gregor.security.config import SASL_MECHANISM_PREFIXES, SECURITY_PROPS, listener_overridable
from gregor.security.listeners import (
    ListenerSpec,
    inter_broker_listener_name,
    parse_advertised,
    parse_listeners,
    protocol_map,
)
from gregor.security.password_encoder import encoders_from_config
from gregor.storage.config import (
    CLEANER_PROPS,
    CLEANUP_POLICIES,
    COMPRESSION_TYPES,
    TIMESTAMP_TYPES,
    TOPIC_CONFIGS,
    LogConfig,
    broker_synonym_props,
)
from gregor.storage.errors import InvalidConfigError

__all__ = ["BROKER_PROPS", "CLEANUP_POLICIES", "COMPRESSION_TYPES", "CLUSTER_WIDE", "LONG_MAX", "PER_BROKER",
           "READ_ONLY", "TIMESTAMP_TYPES", "TOPIC_CONFIGS", "BrokerConfig", "ConfigError", "Prop", "format_value",
           "read_properties", "validate_topic_configs"]


# replica.selector.class: the one selector implemented, under Kafka's class name.
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
# Kafka's per-listener overrides: listener.name.<listener>.<property>, listener.name.<listener>.<mechanism>.<property>.
LISTENER_PREFIX = "listener.name."


def _p(name: str, type_: str, default: Any, lo: float | None = None, hi: float | None = None,
       choices: tuple[str, ...] | None = None, doc: str = "", mode: str = READ_ONLY) -> Prop:
    """One broker property; `mode` is Kafka's update mode (READ_ONLY, PER_BROKER or CLUSTER_WIDE)."""
    return Prop(name, type_, default, lo, hi, choices, doc, mode)


# Broker properties we implement: Kafka's names, defaults and update modes (what dynamic broker
# configs may alter: gregor.config.dynamic applies those of them it lists, AlterConfigs refuses the rest).
BROKER_PROPS: dict[str, Prop] = {p.name: p for p in [
    _p("broker.id", "int", 0, lo=0, doc="This broker's id (Kafka defaults to -1 and generates one; a lone broker is 0)"),
    _p("listeners", "list", ["PLAINTEXT://127.0.0.1:9092"], mode=PER_BROKER,
       doc="Where the broker listens, NAME://host:port,...; NAME is a security protocol (PLAINTEXT, SSL, "
           "SASL_PLAINTEXT, SASL_SSL) or a name listener.security.protocol.map maps to one"),
    _p("advertised.listeners", "list", None, mode=PER_BROKER,
       doc="The addresses clients of each listener are told to use, NAME://host:port,...; unset: listeners"),
    _p("log.dirs", "list", None, doc="The data directories; unset: log.dir"),
    _p("log.dir", "string", "./gregor-data", doc="The data directory when log.dirs is unset"),
    _p("num.partitions", "int", 1, lo=1, doc="Partitions of a topic created without a count"),
    _p("default.replication.factor", "int", 1, lo=1, doc="Replicas of a topic created without a factor"),
    _p("auto.create.topics.enable", "bool", True, doc="Create a topic when a client asks for its metadata"),
    _p("delete.topic.enable", "bool", True, doc="Allow DeleteTopics"),
    _p("socket.request.max.bytes", "int", 104857600, lo=1, doc="The largest request the broker reads"),
    _p("socket.send.buffer.bytes", "int", 102400, lo=-1, doc="SO_SNDBUF of connections; -1: the OS default"),
    _p("socket.receive.buffer.bytes", "int", -1, lo=-1,
       doc="SO_RCVBUF of connections; -1: the OS default. Kafka's default is 102400; setting any size turns off "
           "Linux's receive-buffer autotuning, and at 100 KB the broker spent ~25% more CPU per MB on large "
           "produce requests (window updates every ~100 KB), so Gregor leaves it to the OS"),
    _p("queued.max.requests", "int", 500, lo=1, doc="requests in flight per connection before reads pause"),
    _p("max.request.partition.size.limit", "int", 2000, lo=1,
       doc="The most partitions one DescribeTopicPartitions response holds (KIP-966 paging)"),
    # The topic configs' broker-level synonyms (log.segment.bytes, log.retention.hours, message.max.bytes, ...)
    # and the log cleaner's properties: defined in gregor.storage.config, with the topic configs they default.
    *broker_synonym_props(),
    *CLEANER_PROPS,
    *SECURITY_PROPS,
    # Kafka's configs Gregor accepts and stores with no effect (gregor.known_configs says which and why).
    *KNOWN_PROPS,
    _p("log.retention.check.interval.ms", "long", 300000, lo=1, doc="How often retention deletes old segments"),
    _p("log.flush.offset.checkpoint.interval.ms", "int", 60000, lo=0,
       doc="How often the recovery points are checkpointed"),
    _p("log.flush.start.offset.checkpoint.interval.ms", "int", 60000, lo=0,
       doc="How often the log start offsets are checkpointed"),
    _p("replica.high.watermark.checkpoint.interval.ms", "long", 5000, lo=1,
       doc="How often the high watermarks are checkpointed"),
    # Group coordinator.
    _p("group.min.session.timeout.ms", "int", 6000, lo=0, doc="The shortest session timeout a classic group member may ask for"),
    _p("group.max.session.timeout.ms", "int", 1800000, lo=0, doc="The longest session timeout a classic group member may ask for"),
    _p("group.initial.rebalance.delay.ms", "int", 3000, lo=0, doc="How long a new classic group waits for more members before its first rebalance"),
    _p("group.max.size", "int", 2**31 - 1, lo=1, doc="Members a classic group may have"),
    # KIP-848 consumer groups (group.protocol=consumer): the broker owns the session and heartbeat timing.
    _p("group.consumer.session.timeout.ms", "int", 45000, lo=1, doc="A consumer group member's session timeout"),
    _p("group.consumer.min.session.timeout.ms", "int", 45000, lo=1, doc="The least group.consumer.session.timeout.ms"),
    _p("group.consumer.max.session.timeout.ms", "int", 60000, lo=1, doc="The most group.consumer.session.timeout.ms"),
    _p("group.consumer.heartbeat.interval.ms", "int", 5000, lo=1, doc="How often a consumer group member heartbeats"),
    _p("group.consumer.min.heartbeat.interval.ms", "int", 5000, lo=1, doc="The least heartbeat interval"),
    _p("group.consumer.max.heartbeat.interval.ms", "int", 15000, lo=1, doc="The most heartbeat interval"),
    _p("group.consumer.max.size", "int", 2**31 - 1, lo=1, doc="Members a consumer group may have"),
    _p("group.consumer.assignors", "list", ["uniform", "range"], choices=("uniform", "range"),
       doc="server-side assignors; the first is the default (Kafka also accepts class names)"),
    _p("offsets.topic.num.partitions", "int", 50, lo=1, doc="Partitions of __consumer_offsets"),
    _p("offsets.topic.replication.factor", "int", 3, lo=1,
       doc="Replicas of __consumer_offsets; capped (with a warning) by the live brokers when it is created, "
           "so a lone broker creates it with 1"),
    _p("offsets.commit.required.acks", "int", -1, lo=-1, hi=1,
       doc="The acks an offset commit waits for before it is answered and visible: -1 (the default) the "
           "ISR of its __consumer_offsets partition, as acks=all; 0 or 1 the coordinator's own log"),
    _p("offsets.commit.timeout.ms", "int", 5000, lo=1,
       doc="How long an offset commit waits for offsets.commit.required.acks before it fails with "
           "COORDINATOR_NOT_AVAILABLE (the client retries it)"),
    # --- clusters: ZooKeeper, the controller, replication ---
    _p("zookeeper.connect", "string", None,
       doc="HOST:PORT[,HOST:PORT...][/chroot] of the ZooKeeper ensemble holding the cluster's metadata; unset: "
           "a lone broker on the embedded metadata store"),
    _p("zookeeper.session.timeout.ms", "int", 18000, lo=1,
       doc="The ZooKeeper session timeout: how long a vanished broker (kill -9, frozen, cut off) keeps its "
           "registration, so the least time before its leaderships fail over"),
    _p("zookeeper.connection.timeout.ms", "int", None, lo=1,
       doc="How long to wait for a ZooKeeper connection at start; unset: zookeeper.session.timeout.ms"),
    _p("zookeeper.max.in.flight.requests", "int", 10, lo=1,
       doc="ZooKeeper requests one broker pipelines before waiting for answers"),
    _p("broker.rack", "string", None, doc="This broker's rack: replicas of a partition are spread across racks"),
    _p("replica.selector.class", "string", None, choices=(RACK_AWARE_REPLICA_SELECTOR,),
       doc="KIP-392 fetch from follower: with Kafka's RackAwareReplicaSelector a leader sends a consumer that "
           "names its client.rack (Fetch v11+) to an in-sync replica in that rack; unset, consumers read from "
           "leaders only"),
    _p("controller.socket.timeout.ms", "int", 30000, lo=1, doc="Timeout of requests to and from the controller"),
    _p("controlled.shutdown.enable", "bool", True,
       doc="On SIGTERM, ask the controller to move this broker's leaderships away before stopping"),
    _p("controlled.shutdown.max.retries", "int", 3, lo=0, doc="Attempts of a controlled shutdown before stopping anyway"),
    _p("controlled.shutdown.retry.backoff.ms", "long", 5000, lo=0, doc="Wait between controlled shutdown attempts"),
    _p("auto.leader.rebalance.enable", "bool", True,
       doc="The controller moves leaderships back to preferred replicas when a broker's imbalance is too high"),
    _p("leader.imbalance.per.broker.percentage", "int", 10, lo=0, hi=100,
       doc="Share of a broker's preferred partitions led elsewhere above which the controller rebalances"),
    _p("leader.imbalance.check.interval.seconds", "long", 300, lo=1, doc="How often the leader imbalance is checked"),
    _p("replica.lag.time.max.ms", "long", 30000, lo=1,
       doc="A follower that has not caught up with the leader's log end for this long leaves the ISR"),
    _p("replica.fetch.max.bytes", "int", 1048576, lo=0, doc="Bytes a follower fetches per partition per request"),
    _p("replica.fetch.min.bytes", "int", 1, lo=0, doc="Bytes a follower's fetch waits for"),
    _p("replica.fetch.wait.max.ms", "int", 500, lo=0,
       doc="How long a follower's fetch waits for replica.fetch.min.bytes; must stay below replica.lag.time.max.ms"),
    _p("replica.fetch.response.max.bytes", "int", 10485760, lo=0, doc="Bytes a follower fetches per request"),
    _p("replica.fetch.backoff.ms", "int", 1000, lo=0, doc="Wait after a failed follower fetch"),
    _p("replica.socket.timeout.ms", "int", 30000, lo=1, doc="Timeout of a follower's fetch requests"),
    _p("num.replica.fetchers", "int", 1, lo=1, mode=CLUSTER_WIDE,
       doc="Fetcher tasks per source broker: partitions are spread over them by hash. Dynamic: a new value "
           "re-spreads the followed partitions at once (at least half, at most double the current value)"),
    _p("leader.replication.throttled.rate", "long", LONG_MAX, lo=0, mode=PER_BROKER,
       doc="Bytes/s a leader sends to followers of throttled replicas (a reassignment's copying)"),
    _p("follower.replication.throttled.rate", "long", LONG_MAX, lo=0, mode=PER_BROKER,
       doc="Bytes/s a follower fetches for throttled replicas (a reassignment's copying)"),
    _p("replica.alter.log.dirs.io.max.bytes.per.second", "long", LONG_MAX, lo=1, mode=CLUSTER_WIDE,
       doc="Bytes/s the copy of a replica moving to another log dir (AlterReplicaLogDirs) reads and writes"),
    _p("replication.quota.window.num", "int", 11, lo=1,
       doc="Samples the replication throttles measure their rate over"),
    _p("replication.quota.window.size.seconds", "int", 1, lo=1,
       doc="The length of one replication throttle sample"),
    _p("offsets.topic.segment.bytes", "int", 104857600, lo=TOPIC_CONFIGS["segment.bytes"].prop.lo,
       doc="segment.bytes of __consumer_offsets (Kafka's minimum is 1; here segment.bytes' own, so the topic can be created)"),
    _p("offsets.retention.minutes", "int", 10080, lo=1, doc="How long the committed offsets of an empty group are kept"),
    _p("offsets.retention.check.interval.ms", "long", 600000, lo=1, doc="How often expired offsets are removed"),
    _p("offset.metadata.max.bytes", "int", 4096, lo=0),
    # hardening: storage
    _p("log.segment.open.files.max", "int", 0, lo=0,
       doc="Gregor only: segment files held open at once (an LRU; the others are opened when used). "
           "0 means half the soft RLIMIT_NOFILE. Kafka keeps every segment open; this lets a broker "
           "load more partitions than it has file descriptors"),
    # hardening: admin (internal topics, partition limits, bulk admin work)
    _p("max.broker.partitions", "int", 10000, lo=1,
       doc="Partitions this broker may host; creation beyond it is refused with POLICY_VIOLATION (KIP-578's name; "
           "the KIP proposed no limit by default, Gregor keeps 10000 so partitions fit the open-file budget: about one "
           "file each, a common hard RLIMIT_NOFILE of 20000, a quarter kept for connections). Creation is also "
           "refused past what the open-file limit allows, whatever this says"),
    # hardening: network
    _p("max.connections", "int", 500, lo=0, mode=CLUSTER_WIDE,
       doc="connections to this broker; more are closed at once. Kafka's default is unlimited; ours is finite "
           "so the broker's memory is bounded with default settings (see gregor/network/socket_server.py)"),
    _p("max.connections.per.ip", "int", 2**31 - 1, lo=0, mode=CLUSTER_WIDE, doc="connections from one IP address; more are closed"),
    _p("max.connections.per.ip.overrides", "list", [], mode=CLUSTER_WIDE,
       doc="per-host exceptions to max.connections.per.ip, as host:count,host:count"),
    _p("metrics.port", "int", -1, lo=-1, hi=65535,
       doc="port of the Prometheus endpoint (http://metrics.host:PORT/metrics); -1: no endpoint, 0: any free "
           "port (logged). Off by default, and then nothing is counted"),
    _p("metrics.host", "string", "127.0.0.1", doc="address the Prometheus endpoint binds (metrics.port)"),
    _p("connections.max.idle.ms", "long", 600000, lo=-1,
       doc="close connections that neither sent nor were sent anything for this long (-1: never)"),
    _p("queued.max.request.bytes", "long", 134217728, lo=1048576,
       doc="bytes of partially received and queued requests, all connections (a request other than Produce "
           "counts 16 times its size, what it costs decoded); reads pause beyond it. Kafka's default is -1 "
           "(unbounded); ours is finite so no set of clients can exhaust memory. Must be at least "
           "socket.request.max.bytes"),
    _p("queued.max.response.bytes", "long", 67108864, lo=1048576,
       doc="gregor: bytes of responses built and not yet written, all connections; fetches read less beyond "
           "it (one batch still goes to a connection with nothing queued, KIP-74). Kafka sends fetched data "
           "from files and needs no such bound"),
    _p("queued.max.response.bytes.per.connection", "int", 8388608, lo=65536,
       doc="gregor: a connection whose unwritten responses exceed this has no further request processed "
           "until they drain"),
    _p("fetch.max.bytes", "int", 57671680, lo=1024,
       doc="the most a Fetch response carries, whatever the request asks (one batch may exceed it, KIP-74)"),
    # hardening: validator
    _p("gregor.batch.decompressed.max.ratio", "int", 64, lo=1,
       doc="a compressed batch may expand to at most its topic's max.message.bytes times this (else MESSAGE_TOO_LARGE); "
           "decompression stops at the limit, so a bomb is never allocated. Kafka has no such bound"),
    _p("gregor.batch.decompressed.max.bytes", "int", 134217728, lo=1024,
       doc="broker-wide cap on how far one compressed batch may expand, whatever max.message.bytes says "
           "(else MESSAGE_TOO_LARGE); each thread that decompresses (event loop, gregor.validation.threads, "
           "cleaner threads) uses at most this much scratch memory while it works and keeps at most 64 MiB of it resident"),
    _p("gregor.validation.threads", "int", 2, lo=1,
       doc="threads that decompress and validate large produced batches off the event loop"),
    _p("gregor.validation.offload.bytes", "int", 262144, lo=0,
       doc="compressed record sets at least this large (uncompressed: 8x this), and compressed batches expanding "
           "past 8x this, are validated on the gregor.validation.threads pool, so other clients keep being answered"),
    # the data path: the purgatory
    _p("gregor.purgatory.max.operations", "int", 100000, lo=1,
       doc="requests parked at once in the purgatory (a Fetch waiting for fetch.min.bytes, a Produce waiting for "
           "acks=all on the high watermark); past it a Fetch is answered with what it has and an acks=all Produce "
           "not yet replicated gets REQUEST_TIMED_OUT. Kafka has no such bound"),
    # the embedded metadata store
    _p("metadata.log.max.record.bytes.between.snapshots", "long", 20971520, lo=1,
       doc="the embedded metadata store's journal of changes is folded into its snapshot file (on a background "
           "thread, and at clean shutdown) once it holds this many bytes since the last snapshot"),
    # the KRaft metadata quorum (gregor.raft)
    _p("node.id", "int", -1, lo=-1,
       doc="This node's id in the metadata quorum: a voter's id in controller.quorum.voters, or the id an "
           "observer fetches the metadata log under; -1: none"),
    _p("controller.quorum.voters", "list", [],
       doc="The metadata quorum's voters as id@host:port,... (the controllers' listeners); empty: none"),
    _p("controller.quorum.bootstrap.servers", "list", [],
       doc="host:port,... of controllers an observer asks for the quorum's leader when it knows no voters"),
    _p("controller.quorum.election.timeout.ms", "int", 1000, lo=1,
       doc="How long a voter without a leader waits (this plus a random share of it) before it asks to be one"),
    _p("controller.quorum.fetch.timeout.ms", "int", 2000, lo=1,
       doc="A follower that has not fetched from its leader for this long looks for a new one; a leader that "
           "a majority has not fetched from for 1.5 times this long resigns"),
    _p("controller.quorum.election.backoff.max.ms", "int", 1000, lo=1,
       doc="The longest (random, exponentially growing) wait before a lost election is tried again"),
    _p("controller.quorum.request.timeout.ms", "int", 2000, lo=1,
       doc="How long a quorum request (Vote, BeginQuorumEpoch, Fetch, ...) waits for its answer"),
    _p("controller.quorum.retry.backoff.ms", "int", 20, lo=0,
       doc="Wait after a failed quorum request before it is sent again"),
    _p("controller.quorum.append.linger.ms", "int", 25, lo=0,
       doc="How long the quorum leader gathers appended records into one batch before writing it"),
    _p("metadata.log.dir", "string", None,
       doc="The directory holding the metadata log (__cluster_metadata-0) and quorum-state; unset: the first "
           "of log.dirs"),
    _p("metadata.log.segment.bytes", "int", 1073741824, lo=14,
       doc="segment.bytes of the metadata log (Kafka's minimum is 8 MiB; here segment.bytes' own, for tests)"),
    _p("metadata.log.segment.ms", "long", 604800000, lo=1, doc="segment.ms of the metadata log"),
    _p("metadata.log.max.snapshot.interval.ms", "long", 3600000, lo=0,
       doc="The longest time between snapshots of the metadata log while it grows; 0: by size only "
           "(metadata.log.max.record.bytes.between.snapshots)"),
    *kraft.KRAFT_PROPS,
    # fetch sessions (KIP-227)
    _p("max.incremental.fetch.session.cache.slots", "int", 1000, lo=0,
       doc="fetch sessions (KIP-227) the broker keeps; when full, a new one evicts an idle or less valuable one, "
           "else the fetch is answered without a session"),
    _p("gregor.fetch.session.cache.max.partitions", "int", 200000, lo=0,
       doc="partitions held in all fetch sessions together (~300 bytes each, so ~60 MB at the default); a session that would pass it is "
           "not created, or closed with FETCH_SESSION_ID_NOT_FOUND. Kafka has no such bound"),
    # idempotent producers
    _p("producer.id.expiration.ms", "int", 86400000, lo=1,
       doc="how long a partition keeps an idle idempotent producer's state (measured from the timestamp of its "
           "last batch); a producer expired and seen again may start at any sequence"),
    _p("producer.id.expiration.check.interval.ms", "int", 600000, lo=1,
       doc="how often producer state older than producer.id.expiration.ms is removed"),
    # transactions
    _p("transaction.state.log.num.partitions", "int", 50, lo=1, doc="Partitions of __transaction_state"),
    _p("transaction.state.log.replication.factor", "int", 3, lo=1,
       doc="Replication factor of __transaction_state, capped by the live brokers when it is created (with a warning)"),
    _p("transaction.state.log.min.isr", "int", 2, lo=1,
       doc="min.insync.replicas of __transaction_state (capped by its replication factor)"),
    _p("transaction.state.log.segment.bytes", "int", 104857600, lo=TOPIC_CONFIGS["segment.bytes"].prop.lo,
       doc="segment.bytes of __transaction_state"),
    _p("request.timeout.ms", "int", 30000, lo=1,
       doc="how long an inter-broker request (transaction markers) and the acks=all wait of a marker may take"),
    _p("transaction.max.timeout.ms", "int", 900000, lo=1,
       doc="the largest transaction.timeout.ms a producer may ask for (else INVALID_TRANSACTION_TIMEOUT)"),
    _p("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000, lo=1,
       doc="how often transactions open longer than their timeout are aborted (and their producers fenced)"),
    _p("transactional.id.expiration.ms", "int", 604800000, lo=1,
       doc="a transactional id with no transaction for this long is forgotten"),
    _p("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000, lo=1,
       doc="how often expired transactional ids are removed"),
    # The schema registry run by the broker (schema.registry.listeners; its table is gregor.config.schema_registry)
    *REGISTRY_PROPS.values(),
    # Schema-checked topics (topic configs confluent.key/value.schema.validation): where the ids are looked up.
    _p("confluent.schema.registry.url", "list", [],
       doc="Schema registry URLs (http:// or https://, comma-separated: tried in turn) that schema-checked topics "
           "look schema ids up in (Confluent Server's name). Empty: the registry this broker runs "
           "(schema.registry.listeners), read directly, without HTTP"),
    _p("confluent.basic.auth.user.info", "string", None,
       doc="user:password sent with HTTP basic authentication to confluent.schema.registry.url"),
    _p("confluent.ssl.truststore.location", "string", None,
       doc="PEM file of the CAs trusted for an https confluent.schema.registry.url (unset: the system's)"),
    _p("confluent.schema.registry.cache.size", "int", 10000, lo=1,
       doc="Schema ids whose subjects (and record names) the broker remembers for schema-checked topics, least "
           "recently used first out; an id not remembered costs one lookup in the registry"),
    _p("confluent.schema.registry.cache.refresh.ms", "long", 1000, lo=0,
       doc="A schema id found unknown, or not registered under the subject a record needs, is asked of the "
           "registry again only after this long: a producer sending bad ids costs the registry at most one "
           "lookup per id per interval"),
    _p("confluent.schema.registry.request.timeout.ms", "int", 10000, lo=1,
       doc="How long the lookups a produced batch needs may take; past it the batch is refused with the "
           "retriable REQUEST_TIMED_OUT (\"schema registry unavailable\") and the producer retries"),
    _p("confluent.schema.registry.max.inflight.lookups", "int", 64, lo=1,
       doc="Lookups of schema ids in the registry under way at once; more wait (within "
           "confluent.schema.registry.request.timeout.ms)"),
    _p("gregor.loop.stall.warn.ms", "int", 100, lo=1,
       doc="A WARNING names the stack of the event loop's thread whenever the loop is held this long without "
           "running its heartbeat (every 50 ms); shorter delays are only counted (gregor_eventloop_lag_ms)"),
    _p("gregor.test.fault.drop.produce.response.after.append", "int", 0, lo=0,
       doc="TEST ONLY, never set in production: N > 0 makes every Nth Produce close its connection after the "
           "append and before the response (so clients retry batches already in the log); 0 (default) is off"),
]}


def validate_topic_configs(configs: dict[str, str | None], base: LogConfig | None = None) -> dict[str, str]:
    """Topic configs as a client gave them, checked by the topic-config table over `base` (the broker's
    defaults), in canonical text as they are stored. Raises ConfigError naming the first bad one."""
    try:
        LogConfig.from_properties(configs, base)
    except InvalidConfigError as e:
        raise ConfigError(str(e)) from None
    return {k: format_value(TOPIC_CONFIGS[k].prop.parse(v)) for k, v in configs.items()}


class BrokerConfig:
    """Parsed broker properties. Unknown names and bad values raise ConfigError at construction."""

    def __init__(self, props: dict[str, str] | None = None) -> None:
        self._values: dict[str, Any] = {}
        self.explicit: set[str] = set()
        # listener.name.<listener>[.<mechanism>].<property>: (listener, mechanism or "", property) -> value
        self.listener_overrides: dict[tuple[str, str, str], Any] = {}
        for name, raw in (props or {}).items():
            if name.startswith(LISTENER_PREFIX):
                self._set_listener_override(name, raw)
                continue
            prop = BROKER_PROPS.get(name)
            if prop is None:
                raise ConfigError(f"Unknown broker property: {name}")
            self._values[name] = prop.parse(raw)
            self.explicit.add(name)
        for name, prop in BROKER_PROPS.items():
            self._values.setdefault(name, prop.default)
        kraft.prepare(self._values, self.explicit)  # KRaft mode: broker.id is node.id, controller listeners mapped
        self.listener_specs: list[ListenerSpec] = parse_listeners(self)
        self.advertised_specs: list[ListenerSpec] = parse_advertised(self, self.listener_specs)
        controllers = (set(kraft.controller_listener_names(self))
                       if self.process_roles and not self.get("inter.broker.listener.name") else set())
        self.inter_broker_listener: str = inter_broker_listener_name(
            self, [s for s in self.listener_specs if s.name not in controllers] or self.listener_specs)
        kraft.check(self, [s.name for s in self.listener_specs], {s.name: s.port for s in self.listener_specs},
                    self.inter_broker_listener)
        names = {s.name.lower() for s in self.listener_specs}
        if self.process_roles:  # a broker-only node connects to the controller listener with these
            names |= {n.lower() for n in self.controller_listener_names}
        for listener, _, key in self.listener_overrides:
            if listener not in names:
                raise ConfigError(f"{LISTENER_PREFIX}{listener}.{key}: there is no listener {listener.upper()}")
        if self.get("socket.request.max.bytes") > self.get("queued.max.request.bytes"):
            raise ConfigError(f"socket.request.max.bytes ({self.get('socket.request.max.bytes')}) must not exceed "
                              f"queued.max.request.bytes ({self.get('queued.max.request.bytes')})")
        ip_override_entries(self.get("max.connections.per.ip.overrides"))  # host names resolve at start
        encoders_from_config(self.get)  # password.encoder.*: an unusable cipher or key length is a startup error
        RegistryConfig.from_config(self)  # schema.registry.*: the registry's own checks (listener URLs, timeouts)
        # Every topic's defaults, checked now: a broker default no log could load is a startup error.
        self.log_config: LogConfig = self._topic_defaults()

    def _topic_defaults(self) -> LogConfig:
        try:
            return LogConfig.from_broker(self.get)
        except InvalidConfigError as e:  # e.g. log.cleaner.min.compaction.lag.ms above its max
            named = [f"{t.name} is set by {' / '.join(s.name for s in t.synonyms)}"
                     for t in TOPIC_CONFIGS.values() if f"configuration {t.name}:" in str(e) or f"{t.name}=" in str(e)]
            raise ConfigError(f"the broker's topic config defaults do not validate: {e} ({'; '.join(named)})") from None

    def get(self, name: str) -> Any:
        return self._values[name]

    @property
    def broker_id(self) -> int:
        return self._values["broker.id"]

    @property
    def process_roles(self) -> frozenset[str]:
        """KRaft mode's roles ("broker", "controller"); empty when not in KRaft mode."""
        return kraft.roles_of(self)

    @property
    def controller_listener_names(self) -> list[str]:
        return kraft.controller_listener_names(self)

    @property
    def log_dirs(self) -> list[str]:
        dirs = self._values["log.dirs"]
        return [os.path.abspath(d) for d in (dirs or [self._values["log.dir"]])]

    @property
    def listeners(self) -> list[str]:
        return self._values["listeners"]

    @property
    def advertised_listeners(self) -> list[str]:
        return self._values["advertised.listeners"] or self.listeners

    def _set_listener_override(self, name: str, raw: Any) -> None:
        rest = name[len(LISTENER_PREFIX):]
        listener, _, key = rest.partition(".")
        mechanism = ""
        if key not in BROKER_PROPS:
            mech, _, inner = key.partition(".")
            if mech in SASL_MECHANISM_PREFIXES and inner in BROKER_PROPS:
                mechanism, key = mech, inner
        if not listener or key not in BROKER_PROPS or not listener_overridable(key):
            raise ConfigError(f"Unknown broker property: {name} (listener.name.<listener>.<property> takes the "
                              f"ssl.*, sasl.* and connection properties a listener may override)")
        self.listener_overrides[(listener.lower(), mechanism, key)] = BROKER_PROPS[key].parse(raw)

    def listener_get(self, listener: str, key: str, mechanism: str | None = None) -> Any:
        """A property as a listener sees it: listener.name.<listener>.<mechanism>.<key>, else
        listener.name.<listener>.<key>, else the broker-wide key (Kafka's lookup order)."""
        lo = listener.lower()
        if mechanism:
            v = self.listener_overrides.get((lo, mechanism.lower(), key))
            if v is not None:
                return v
        v = self.listener_overrides.get((lo, "", key))
        if v is not None:
            return v
        if key == "ssl.client.auth" and any(s.name.lower() == lo and s.protocol == "SASL_SSL"
                                            for s in getattr(self, "listener_specs", ())):
            return "none"  # KIP-684: SASL_SSL listeners take only their own listener-prefixed ssl.client.auth
        return self._values[key]

    def listener_explicit(self, listener: str, key: str) -> bool:
        """Whether a listener's `key` was set at all (prefixed or broker-wide)."""
        lo = listener.lower()
        return key in self.explicit or any(k[0] == lo and k[2] == key for k in self.listener_overrides)

    def listener(self, name: str) -> ListenerSpec:
        """The listener `name`. A KRaft broker-only node does not listen on the controller listener but
        connects to the controllers on it: its spec then has the mapped protocol and no address."""
        for s in self.listener_specs:
            if s.name == name:
                return s
        if self.process_roles and name in self.controller_listener_names:
            protocol = protocol_map(self).get(name, name)
            return ListenerSpec(name, protocol, "", 0)
        raise KeyError(name)

    def topic_default(self, name: str) -> Any:
        """A topic config's broker default, from its first synonym that is set."""
        return self.log_config.values()[name]

    def topic_defaults(self) -> dict[str, Any]:
        return self.log_config.values()

    def items(self) -> list[tuple[str, Any]]:
        return sorted(self._values.items())


def ip_override_entries(entries: list[str]) -> list[tuple[str, int]]:
    """max.connections.per.ip.overrides, Kafka's `host:count,host:count`, as (host, count) pairs.
    Raises ConfigError naming the first entry that is not host:count with count >= 0."""
    out = []
    for entry in entries:
        host, sep, count = entry.rpartition(":")
        host = host.strip().strip("[]")
        try:
            n = int(count)
        except ValueError:
            n = -1
        if not sep or not host or n < 0:
            raise ConfigError(f"max.connections.per.ip.overrides: {entry!r} is not host:count (count >= 0)")
        out.append((host, n))
    return out


def parse_ip_overrides(entries: list[str]) -> dict[str, int]:
    """max.connections.per.ip.overrides as {ip: count}: host names are resolved once, at start, as Kafka
    does. Raises ConfigError naming the entry."""
    out: dict[str, int] = {}
    for host, n in ip_override_entries(entries):
        try:
            infos = socket.getaddrinfo(host, None)
        except OSError as e:
            raise ConfigError(f"max.connections.per.ip.overrides: cannot resolve {host!r}: {e}") from None
        for info in infos:
            out[str(info[4][0])] = n
    return out


def read_properties(path: str) -> dict[str, str]:
    """A Java-style .properties file: key=value or key: value, '#' and '!' comments."""
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        pending = ""
        for line in fh:
            line = line.rstrip("\n")
            if pending:
                line = pending + line.lstrip()
                pending = ""
            if line.endswith("\\") and not line.endswith("\\\\"):
                pending = line[:-1]
                continue
            s = line.strip()
            if not s or s[0] in "#!":
                continue
            seps = [i for i in (s.find("="), s.find(":")) if i >= 0]
            if not seps:
                raise ConfigError(f"{path}: line {s!r} is not key=value")
            i = min(seps)
            out[s[:i].strip()] = s[i + 1 :].strip()
    return out
