"""Topic configs and the log cleaner's broker configs: the one table of each, and the objects built from it.

`TOPIC_CONFIGS` holds every topic config exactly once: name, type, default, bounds, documentation,
and its broker-level synonyms (the server.properties names that give it its default, finest
first, as Kafka's ServerTopicConfigSynonyms). CreateTopics, AlterConfigs,
IncrementalAlterConfigs, DescribeConfigs and log loading all read this table, so a value one of
them accepts is a value the log can load. The broker's own table (gregor.config) takes the
synonyms' definitions from here rather than declaring them a second time, and derives each
topic config's broker default with `LogConfig.from_broker`, the only place that does.

Bounds are Kafka 4.0's unless the entry's documentation says why not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from gregor.configdef import (
    CLUSTER_WIDE,
    INT_MAX,
    LONG_MAX,
    READ_ONLY,
    ConfigError,
    Prop,
    format_value,
)
from gregor.storage.errors import InvalidConfigError

__all__ = ["CLEANER_PROPS", "CREATE_TIME", "LOG_APPEND_TIME", "LONG_MAX", "RECORD_NAME_STRATEGY", "TOPIC_CONFIGS",
           "TOPIC_NAME_STRATEGY", "TOPIC_RECORD_NAME_STRATEGY", "CleanerConfig", "LogConfig", "Synonym", "TopicConfigDef",
           "broker_synonym_props"]

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
TIMESTAMP_TYPES = (CREATE_TIME, LOG_APPEND_TIME)
CLEANUP_POLICIES = ("delete", "compact")
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
# Confluent's subject name strategies (their serializers' class names): which subject a record's schema id must be
# registered under on a schema-checked topic.
TOPIC_NAME_STRATEGY = "io.confluent.kafka.serializers.subject.TopicNameStrategy"
RECORD_NAME_STRATEGY = "io.confluent.kafka.serializers.subject.RecordNameStrategy"
TOPIC_RECORD_NAME_STRATEGY = "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy"
SUBJECT_NAME_STRATEGIES = (TOPIC_NAME_STRATEGY, RECORD_NAME_STRATEGY, TOPIC_RECORD_NAME_STRATEGY)

# KIP-724: message.format.version / log.message.format.version are deprecated since Kafka 3.0 and
# removed in 4.0. Gregor's baseline is Kafka 4.0's request versions, and its records are always format v2,
# so the config could simply be unknown, as in 4.0. It is kept as Kafka 3.x keeps it instead: accepted,
# validated as a Kafka version, stored, described, and ignored (3.x reports the default 3.0-IV1 and writes
# v2 whatever the value once inter.broker.protocol.version >= 3.0, which is the only behaviour Gregor has).
# Clients that still set it (librdkafka's tests up to 3.x, topic configs copied from a 3.x cluster) then
# work, and nothing changes for anyone else: 4.0's clients never send it.
MESSAGE_FORMAT_VERSION = "3.0-IV1"
_KAFKA_RELEASES = frozenset({"0.8.0", "0.8.1", "0.8.2", "0.9.0", "0.10.0", "0.10.1", "0.10.2", "0.11.0", "1.0",
                             "1.1", *(f"2.{i}" for i in range(9)), *(f"3.{i}" for i in range(10))})


def valid_kafka_version(text: str) -> bool:
    """Whether `text` names a Kafka release as Kafka 3.x's MetadataVersion.fromVersionString reads it: the
    first three parts of a 0.x version (0.10.0.1 is 0.10.0), the first two of a later one (2.8.1 is 2.8),
    with an optional -IVn (3.0-IV1)."""
    parts = text.split(".")
    n = 3 if text.startswith("0.") else 2
    key = text if n >= len(parts) else ".".join(parts[:n])
    release, sep, iv = key.partition("-IV")
    return release in _KAFKA_RELEASES and (not sep or iv.isdigit())


MS_PER_MINUTE = 60_000
MS_PER_HOUR = 3_600_000


@dataclass(frozen=True)
class Synonym:
    """A broker property that gives a topic config its default.

    `prop` is its own definition when it differs from the topic config's (coarser units, or unset
    by default so a coarser synonym decides); None means the topic config's own type, default and
    bounds under the broker's name. `factor` converts its value to the topic config's unit."""

    name: str
    factor: int = 1
    prop: Prop | None = None


@dataclass(frozen=True)
class TopicConfigDef:
    """One topic config. `synonyms` are finest first: the first one set wins (Kafka's precedence,
    e.g. log.retention.ms over log.retention.minutes over log.retention.hours). Every topic config
    is dynamic, as in Kafka: AlterConfigs applies it to the running logs (index sizes and
    preallocation from the next segment on)."""

    prop: Prop
    synonyms: tuple[Synonym, ...]
    dynamic: bool = True

    @property
    def name(self) -> str:
        return self.prop.name

    @property
    def field(self) -> str:
        """The LogConfig attribute holding it."""
        return self.prop.name.replace(".", "_")

    def synonym_props(self) -> list[Prop]:
        """The broker properties of this topic config. The finest synonym is cluster-wide (Kafka's
        DynamicLogConfig can alter it), the coarser ones read-only."""
        out = []
        for i, s in enumerate(self.synonyms):
            mode = CLUSTER_WIDE if i == 0 else READ_ONLY
            if s.prop is not None:
                out.append(replace(s.prop, mode=mode))
            else:
                p = self.prop
                doc = f"The default of topic config {p.name}. {p.doc}"
                out.append(Prop(s.name, p.type, p.default, p.lo, p.hi, p.choices, doc, mode))
        return out


def _t(name: str, type_: str, default: Any, *synonyms: Synonym | str, lo: float | None = None,
       hi: float | None = None, choices: tuple[str, ...] | None = None, doc: str = "") -> TopicConfigDef:
    syns = tuple(Synonym(s) if isinstance(s, str) else s for s in synonyms)
    return TopicConfigDef(Prop(name, type_, default, lo, hi, choices, doc), syns)


def _unset(name: str, type_: str, lo: float | None = None, doc: str = "") -> Prop:
    return Prop(name, type_, None, lo, doc=doc)


TOPIC_CONFIGS: dict[str, TopicConfigDef] = {t.name: t for t in [
    _t("cleanup.policy", "list", ["delete"], "log.cleanup.policy", choices=CLEANUP_POLICIES,
       doc="delete: old segments go by retention.ms / retention.bytes; compact: the log cleaner keeps the "
           "latest record per key; both may be given. Kafka 4.0 also accepts an empty list; here at least "
           "one policy is required, since an empty one has no defined meaning in this broker."),
    _t("compression.type", "string", "producer", "compression.type", choices=COMPRESSION_TYPES,
       doc="The codec batches are stored in; producer keeps the producer's codec."),
    _t("delete.retention.ms", "long", 86400000, "log.cleaner.delete.retention.ms", lo=0,
       doc="How long a tombstone (null value) stays in a compacted log after it is cleaned."),
    _t("file.delete.delay.ms", "long", 60000, "log.segment.delete.delay.ms", lo=0,
       doc="How long a deleted segment's files stay (renamed .deleted) before they are unlinked."),
    _t("flush.messages", "long", LONG_MAX, "log.flush.interval.messages", lo=1,
       doc="Messages appended to a partition before it is fsynced."),
    _t("flush.ms", "long", LONG_MAX,
       Synonym("log.flush.interval.ms", prop=_unset("log.flush.interval.ms", "long", 0,
               "The default of topic config flush.ms; unset, log.flush.scheduler.interval.ms is used.")),
       Synonym("log.flush.scheduler.interval.ms", prop=Prop(
           "log.flush.scheduler.interval.ms", "long", LONG_MAX, 0,
           doc="How often the flusher checks whether a log needs a flush; the default of flush.ms "
               "when log.flush.interval.ms is unset.")),
       lo=0, doc="Milliseconds after which a partition with unflushed messages is fsynced."),
    _t("index.interval.bytes", "int", 4096, "log.index.interval.bytes", lo=0,
       doc="Bytes of batches between two offset-index entries."),
    _t("max.compaction.lag.ms", "long", LONG_MAX, "log.cleaner.max.compaction.lag.ms", lo=1,
       doc="The longest a record may stay uncompacted in a compacted log."),
    _t("leader.replication.throttled.replicas", "list", [],
       doc="Replicas (partition:broker, or *) whose leader throttles what it sends to followers outside the ISR "
           "to the broker's leader.replication.throttled.rate (a reassignment's copying)."),
    _t("follower.replication.throttled.replicas", "list", [],
       doc="Replicas (partition:broker, or *) that, while outside the ISR, fetch at most the broker's "
           "follower.replication.throttled.rate (a reassignment's copying)."),
    _t("max.message.bytes", "int", 1048588, "message.max.bytes", lo=0,
       doc="The largest record batch (after compression) the partition accepts."),
    _t("message.format.version", "string", MESSAGE_FORMAT_VERSION, "log.message.format.version",
       doc="Deprecated, accepted with no effect: records are always stored in format v2, as Kafka 3.x does "
           "whatever this says once inter.broker.protocol.version is 3.0 or later (KIP-724). Kafka 4.0 removed "
           "it; Gregor keeps accepting the Kafka versions 3.x accepts (0.8.0 ... 3.9, with or without -IVn) so "
           "tools and topic configs written for 3.x clusters still apply."),
    _t("message.timestamp.type", "string", CREATE_TIME, "log.message.timestamp.type", choices=TIMESTAMP_TYPES,
       doc="CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's time."),
    _t("message.timestamp.after.max.ms", "long", 3600000, "log.message.timestamp.after.max.ms", lo=0,
       doc="KIP-937: a CreateTime record whose timestamp is more than this after the broker's clock is refused "
           "with INVALID_TIMESTAMP (Kafka 4.0's default: one hour)."),
    _t("message.timestamp.before.max.ms", "long", LONG_MAX, "log.message.timestamp.before.max.ms", lo=0,
       doc="KIP-937: a CreateTime record whose timestamp is more than this before the broker's clock is "
           "refused with INVALID_TIMESTAMP."),
    _t("min.cleanable.dirty.ratio", "double", 0.5, "log.cleaner.min.cleanable.ratio", lo=0, hi=1,
       doc="The dirty share of a compacted log above which the cleaner cleans it."),
    _t("min.compaction.lag.ms", "long", 0, "log.cleaner.min.compaction.lag.ms", lo=0,
       doc="The shortest time a record stays uncompacted; at most max.compaction.lag.ms."),
    _t("min.insync.replicas", "int", 1, "min.insync.replicas", lo=1,
       doc="Replicas that must acknowledge an acks=all produce."),
    _t("preallocate", "bool", False, "log.preallocate",
       doc="Allocate a new segment's segment.bytes on disk when it is created."),
    _t("retention.bytes", "long", -1, "log.retention.bytes",
       doc="The size a partition may reach before its oldest segments are deleted; negative: no limit."),
    _t("retention.ms", "long", 604800000,
       Synonym("log.retention.ms", prop=_unset("log.retention.ms", "long", doc=(
           "The default of topic config retention.ms; unset, log.retention.minutes or .hours is used; "
           "negative: keep forever."))),
       Synonym("log.retention.minutes", MS_PER_MINUTE, _unset(
           "log.retention.minutes", "int", doc="Retention in minutes, used when log.retention.ms is unset.")),
       Synonym("log.retention.hours", MS_PER_HOUR, Prop(
           "log.retention.hours", "int", 168, doc="Retention in hours, used when log.retention.ms and .minutes "
                                                   "are unset.")),
       lo=-1, doc="How long records are kept (by their segment's largest timestamp); -1: forever."),
    _t("segment.bytes", "int", 1073741824, "log.segment.bytes", lo=14, hi=INT_MAX,
       doc="The size at which a segment rolls. Newer Kafka raises the minimum to 1 MiB (KIP-1030); "
           "this broker keeps Kafka 3's minimum of 14 (one empty batch), which small-segment setups "
           "and tests use, and which loads."),
    _t("segment.index.bytes", "int", 10485760, "log.index.size.max.bytes", lo=12, hi=INT_MAX,
       doc="The largest offset index (8-byte entries) and time index (12-byte entries) of a segment; a "
           "full index rolls the segment. Kafka's minimum is 4, which holds no index entry at all; here "
           "it is 12, one time-index entry, the least every segment can be loaded with."),
    _t("segment.jitter.ms", "long", 0,
       Synonym("log.roll.jitter.ms", prop=_unset("log.roll.jitter.ms", "long", 0,
               "The default of topic config segment.jitter.ms; unset, log.roll.jitter.hours is used.")),
       Synonym("log.roll.jitter.hours", MS_PER_HOUR, Prop(
           "log.roll.jitter.hours", "int", 0, 0, doc="Roll jitter in hours, used when log.roll.jitter.ms is unset.")),
       lo=0, doc="The most a segment's time-based roll is brought forward at random."),
    _t("segment.ms", "long", 604800000,
       Synonym("log.roll.ms", prop=_unset("log.roll.ms", "long", 1,
               "The default of topic config segment.ms; unset, log.roll.hours is used.")),
       Synonym("log.roll.hours", MS_PER_HOUR, Prop(
           "log.roll.hours", "int", 168, 1, doc="Segment age in hours before a roll, used when log.roll.ms is unset.")),
       lo=1, doc="The age at which a segment rolls, so retention and compaction can act on it."),
    # Schema-checked topics: Confluent Server's names (and Gregor's deep check), no broker-level synonyms.
    _t("confluent.key.schema.validation", "bool", False,
       doc="Every produced record's key must be in Confluent's wire format (magic byte 0, 4-byte schema id) with an "
           "id the schema registry holds under the subject confluent.key.subject.name.strategy names, else the "
           "batch is refused with INVALID_RECORD; null keys pass."),
    _t("confluent.value.schema.validation", "bool", False,
       doc="The same for values; null values (tombstones) pass."),
    _t("confluent.key.subject.name.strategy", "string", TOPIC_NAME_STRATEGY, choices=SUBJECT_NAME_STRATEGIES,
       doc="The subject a key's schema id must be registered under: TopicNameStrategy <topic>-key, "
           "RecordNameStrategy the record's full name, TopicRecordNameStrategy <topic>-<record full name>; the "
           "record name is that of the schema with the id."),
    _t("confluent.value.subject.name.strategy", "string", TOPIC_NAME_STRATEGY, choices=SUBJECT_NAME_STRATEGIES,
       doc="The same for values (TopicNameStrategy: <topic>-value)."),
    _t("gregor.key.schema.validation.deep", "bool", False,
       doc="With confluent.key.schema.validation: also decode each key with its schema (Avro, JSON Schema, "
           "Protobuf) and refuse keys that do not decode. Costs a decode per record, off the event loop."),
    _t("gregor.value.schema.validation.deep", "bool", False,
       doc="The same for values, with confluent.value.schema.validation."),
    _t("unclean.leader.election.enable", "bool", False, "unclean.leader.election.enable",
       doc="Whether a replica outside the ISR may become leader, at the cost of losing records."),
]}


def broker_synonym_props() -> list[Prop]:
    """Every broker property that is a topic config's synonym, defined by the topic table."""
    return [p for t in TOPIC_CONFIGS.values() for p in t.synonym_props()]


_THROTTLED_REPLICA = re.compile(r"\d+:\d+")


def _default(name: str) -> Any:
    v = TOPIC_CONFIGS[name].prop.default
    return ",".join(v) if isinstance(v, list) else v


@dataclass(frozen=True, slots=True)
class LogConfig:
    """One partition log's topic configs: a field per TOPIC_CONFIGS entry, named like it with '_' for
    '.', with its default; construction checks every field against the table's bounds.
    `cleanup_policy` holds the comma-separated list as text."""

    cleanup_policy: str = _default("cleanup.policy")
    compression_type: str = _default("compression.type")
    delete_retention_ms: int = _default("delete.retention.ms")
    file_delete_delay_ms: int = _default("file.delete.delay.ms")
    flush_messages: int = _default("flush.messages")
    flush_ms: int = _default("flush.ms")
    follower_replication_throttled_replicas: str = _default("follower.replication.throttled.replicas")
    index_interval_bytes: int = _default("index.interval.bytes")
    leader_replication_throttled_replicas: str = _default("leader.replication.throttled.replicas")
    max_compaction_lag_ms: int = _default("max.compaction.lag.ms")
    max_message_bytes: int = _default("max.message.bytes")
    message_format_version: str = _default("message.format.version")
    message_timestamp_after_max_ms: int = _default("message.timestamp.after.max.ms")
    message_timestamp_before_max_ms: int = _default("message.timestamp.before.max.ms")
    message_timestamp_type: str = _default("message.timestamp.type")
    min_cleanable_dirty_ratio: float = _default("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _default("min.compaction.lag.ms")
    min_insync_replicas: int = _default("min.insync.replicas")
    preallocate: bool = _default("preallocate")
    retention_bytes: int = _default("retention.bytes")
    retention_ms: int = _default("retention.ms")
    segment_bytes: int = _default("segment.bytes")
    segment_index_bytes: int = _default("segment.index.bytes")
    segment_jitter_ms: int = _default("segment.jitter.ms")
    segment_ms: int = _default("segment.ms")
    unclean_leader_election_enable: bool = _default("unclean.leader.election.enable")
    confluent_key_schema_validation: bool = _default("confluent.key.schema.validation")
    confluent_value_schema_validation: bool = _default("confluent.value.schema.validation")
    confluent_key_subject_name_strategy: str = _default("confluent.key.subject.name.strategy")
    confluent_value_subject_name_strategy: str = _default("confluent.value.subject.name.strategy")
    gregor_key_schema_validation_deep: bool = _default("gregor.key.schema.validation.deep")
    gregor_value_schema_validation_deep: bool = _default("gregor.value.schema.validation.deep")

    def __post_init__(self) -> None:
        for t in TOPIC_CONFIGS.values():
            try:
                t.prop.check(_table_value(t, getattr(self, t.field)))
            except ConfigError as e:
                raise InvalidConfigError(str(e)) from None
        for name in ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas"):
            items = _table_value(TOPIC_CONFIGS[name], getattr(self, TOPIC_CONFIGS[name].field))
            if items != ["*"] and not all(_THROTTLED_REPLICA.fullmatch(x) for x in items):
                raise InvalidConfigError(
                    f"Invalid value {','.join(items)} for configuration {name}: it must be the literal '*' or a "
                    "list of replicas in the form [partitionId]:[brokerId],[partitionId]:[brokerId],...")
        if not valid_kafka_version(self.message_format_version):  # Kafka 3.x's MetadataVersionValidator
            raise InvalidConfigError(f"Invalid value {self.message_format_version} for configuration "
                                     f"message.format.version: Version {self.message_format_version} is not a "
                                     f"valid version")
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:  # Kafka's LogConfig.validateValues
            raise InvalidConfigError(
                f"Invalid value {self.min_compaction_lag_ms} for configuration min.compaction.lag.ms: "
                f"conflicts with max.compaction.lag.ms={self.max_compaction_lag_ms} (min must not exceed max)"
            )

    def throttles(self, partition: int, broker_id: int, leader_side: bool) -> bool:
        """Whether (leader|follower).replication.throttled.replicas names this replica (or is '*')."""
        text = self.leader_replication_throttled_replicas if leader_side else self.follower_replication_throttled_replicas
        if not text:
            return False
        items = {x.strip() for x in text.split(",")}
        return "*" in items or f"{partition}:{broker_id}" in items

    @property
    def cleanup_policies(self) -> frozenset[str]:
        return frozenset(p.strip() for p in self.cleanup_policy.split(",") if p.strip())

    @property
    def delete(self) -> bool:
        """Retention (by time and size) deletes old segments."""
        return "delete" in self.cleanup_policies

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policies

    @property
    def max_segment_ms(self) -> int:
        """segment.ms, or max.compaction.lag.ms if smaller on a compacted log: the active segment is
        never cleaned, so it must roll for max.compaction.lag.ms to be met (Kafka's rule)."""
        if self.compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    @property
    def max_index_entries(self) -> int:
        return self.segment_index_bytes // 8

    @property
    def max_time_index_entries(self) -> int:
        return self.segment_index_bytes // 12

    # --- conversion from / to Kafka property maps -------------------------------------

    @classmethod
    def from_properties(cls, props: Mapping[str, Any], base: LogConfig | None = None,
                        invalid: list[tuple[str, Any, str]] | None = None) -> LogConfig:
        """Apply topic configs ("retention.ms": "1000", ...) over `base` (or the defaults).

        Without `invalid`, the first unknown name, bad value or conflict raises InvalidConfigError
        naming the config (CreateTopics, AlterConfigs). With it, each such config is left at its
        value in `base` and reported there as (name, raw value, reason): a topic's stored configs are
        loaded this way, so a value that no longer validates cannot stop the broker."""
        config = base or cls()
        changes: dict[str, Any] = {}
        for key, raw in props.items():
            try:
                name = _field(key)
                changes[name] = _field_value(key, raw)
            except InvalidConfigError as e:
                if invalid is None:
                    raise
                invalid.append((key, raw, str(e)))
        if invalid is None:
            return replace(config, **changes)
        for key in props:  # one at a time, so a conflict drops only the config that causes it
            field = TOPIC_CONFIGS[key].field if key in TOPIC_CONFIGS else None
            if field is None or field not in changes:
                continue
            try:
                config = replace(config, **{field: changes[field]})
            except InvalidConfigError as e:
                invalid.append((key, props[key], str(e)))
        return config

    @classmethod
    def from_broker(cls, get: Callable[[str], Any]) -> LogConfig:
        """Every topic config's broker default: its first synonym that is set, in the topic config's
        unit. `get(name)` returns a parsed broker property, None when unset. As in Kafka, any negative
        retention (log.retention.hours=-2, log.retention.ms=-5) means -1, keep forever."""
        changes: dict[str, Any] = {}
        for t in TOPIC_CONFIGS.values():
            for s in t.synonyms:
                v = get(s.name)
                if v is None:
                    continue
                if t.prop.lo == -1 and v < 0:
                    v = -1
                elif s.factor != 1:
                    v *= s.factor
                changes[t.field] = _table_to_field(v)
                break
        return cls(**changes)

    def to_properties(self) -> dict[str, str]:
        """Topic config names to their values as text, as DescribeConfigs shows them."""
        return {name: format_value(v) for name, v in self.values().items()}

    def values(self) -> dict[str, Any]:
        """Topic config names to typed values (lists for list configs)."""
        return {name: _table_value(t, getattr(self, t.field)) for name, t in TOPIC_CONFIGS.items()}


_FIELDS = {f.name for f in fields(LogConfig)}
assert _FIELDS == {t.field for t in TOPIC_CONFIGS.values()}, "LogConfig must have a field per topic config"


def _field(key: str) -> str:
    t = TOPIC_CONFIGS.get(key)
    if t is None:
        raise InvalidConfigError(f"Unknown topic config name: {key}")
    return t.field


def _field_value(key: str, raw: Any) -> Any:
    if raw is None:
        raise InvalidConfigError(f"Invalid value null for configuration {key}: a value is required")
    try:
        return _table_to_field(TOPIC_CONFIGS[key].prop.parse(raw))
    except ConfigError as e:
        raise InvalidConfigError(str(e)) from None


def _table_to_field(v: Any) -> Any:
    return ",".join(v) if isinstance(v, list) else v


def _table_value(t: TopicConfigDef, v: Any) -> Any:
    if t.prop.type == "list" and isinstance(v, str):
        return [x.strip() for x in v.split(",") if x.strip()]
    if t.prop.type == "double" and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    return v


# --- the log cleaner's broker-wide settings ---------------------------------------------------

CLEANER_PROPS: list[Prop] = [
    Prop("log.cleaner.enable", "bool", True, doc="Run the log cleaner (compaction) on this broker."),
    Prop("log.cleaner.threads", "int", 1, 1, mode=CLUSTER_WIDE, doc="Log cleaner threads."),
    Prop("log.cleaner.backoff.ms", "long", 15000, 0, mode=CLUSTER_WIDE,
         doc="How long a cleaner thread sleeps when no log needs cleaning."),
    Prop("log.cleaner.dedupe.buffer.size", "long", 134217728, 1, mode=CLUSTER_WIDE,
         doc="Memory for the offset maps of all cleaner threads together."),
    Prop("log.cleaner.io.buffer.size", "int", 524288, 1, mode=CLUSTER_WIDE,
         doc="Each cleaner thread's read chunk and write buffer size."),
    Prop("log.cleaner.io.max.bytes.per.second", "double", float("inf"), 1, mode=CLUSTER_WIDE,
         doc="Each cleaner thread's reads plus writes per second. Kafka accepts any double; below 1 the "
             "cleaner would never make progress, so 1 is the minimum here."),
]
_CLEANER_FIELDS = {"enable": "log.cleaner.enable", "threads": "log.cleaner.threads",
                   "backoff_ms": "log.cleaner.backoff.ms", "dedupe_buffer_size": "log.cleaner.dedupe.buffer.size",
                   "io_buffer_size": "log.cleaner.io.buffer.size",
                   "io_max_bytes_per_second": "log.cleaner.io.max.bytes.per.second"}
_CLEANER_PROP = {p.name: p for p in CLEANER_PROPS}


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The log cleaner's settings (broker-wide): CLEANER_PROPS with 'log.cleaner.' dropped and '_' for '.'.

    `dedupe_buffer_size` bounds the memory of the offset maps of all cleaner threads together;
    `io_buffer_size` is the read chunk and write buffer size of each thread;
    `io_max_bytes_per_second` throttles each thread's reads plus writes (default: no limit).
    """

    enable: bool = _CLEANER_PROP["log.cleaner.enable"].default
    threads: int = _CLEANER_PROP["log.cleaner.threads"].default
    backoff_ms: int = _CLEANER_PROP["log.cleaner.backoff.ms"].default
    dedupe_buffer_size: int = _CLEANER_PROP["log.cleaner.dedupe.buffer.size"].default
    io_buffer_size: int = _CLEANER_PROP["log.cleaner.io.buffer.size"].default
    io_max_bytes_per_second: float = _CLEANER_PROP["log.cleaner.io.max.bytes.per.second"].default

    def __post_init__(self) -> None:
        for field_name, prop_name in _CLEANER_FIELDS.items():
            v = getattr(self, field_name)
            if isinstance(v, int) and not isinstance(v, bool) and _CLEANER_PROP[prop_name].type == "double":
                v = float(v)
            try:
                _CLEANER_PROP[prop_name].check(v)
            except ConfigError as e:
                raise InvalidConfigError(str(e)) from None

    @classmethod
    def from_broker(cls, get: Callable[[str], Any]) -> CleanerConfig:
        """The cleaner settings from the broker's parsed properties (`get(name)`)."""
        return cls(**{f: get(p) for f, p in _CLEANER_FIELDS.items()})


assert set(_CLEANER_FIELDS.values()) == set(_CLEANER_PROP) and set(_CLEANER_FIELDS) == {
    f.name for f in fields(CleanerConfig)}
