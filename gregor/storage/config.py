"""LogConfig: a partition log's settings, with Kafka's topic-config names, defaults and bounds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from gregor.storage.errors import InvalidConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"

# Topic-level property name -> LogConfig field.
TOPIC_PROPERTIES: dict[str, str] = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.jitter.ms": "segment_jitter_ms",
    "segment.index.bytes": "segment_index_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "max.message.bytes": "max_message_bytes",
    "message.timestamp.type": "message_timestamp_type",
    "cleanup.policy": "cleanup_policy",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "preallocate": "preallocate",
    "delete.retention.ms": "delete_retention_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
}

# Broker-level (server.properties) name -> LogConfig field: the defaults for every topic.
BROKER_PROPERTIES: dict[str, str] = {
    "log.segment.bytes": "segment_bytes",
    "log.roll.ms": "segment_ms",
    "log.roll.jitter.ms": "segment_jitter_ms",
    "log.index.size.max.bytes": "segment_index_bytes",
    "log.index.interval.bytes": "index_interval_bytes",
    "log.retention.ms": "retention_ms",
    "log.retention.bytes": "retention_bytes",
    "log.flush.interval.messages": "flush_messages",
    "log.flush.interval.ms": "flush_ms",
    "message.max.bytes": "max_message_bytes",
    "log.message.timestamp.type": "message_timestamp_type",
    "log.cleanup.policy": "cleanup_policy",
    "log.segment.delete.delay.ms": "file_delete_delay_ms",
    "log.preallocate": "preallocate",
    "log.cleaner.delete.retention.ms": "delete_retention_ms",
    "log.cleaner.min.cleanable.ratio": "min_cleanable_dirty_ratio",
    "log.cleaner.min.compaction.lag.ms": "min_compaction_lag_ms",
    "log.cleaner.max.compaction.lag.ms": "max_compaction_lag_ms",
}
# Coarser broker names, used only when the finer one is absent (Kafka's precedence: ms > minutes > hours).
_BROKER_UNITS: list[tuple[str, str, int]] = [
    ("log.roll.hours", "segment_ms", 3_600_000),
    ("log.roll.jitter.hours", "segment_jitter_ms", 3_600_000),
    ("log.retention.minutes", "retention_ms", 60_000),
    ("log.retention.hours", "retention_ms", 3_600_000),
]


@dataclass(frozen=True, slots=True)
class LogConfig:
    """One partition log's configuration. Field names are Kafka's topic configs with '_' for '.'."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    message_timestamp_type: str = CREATE_TIME
    cleanup_policy: str = "delete"
    file_delete_delay_ms: int = 60000
    preallocate: bool = False
    # Compaction (used by the log cleaner).
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX

    def __post_init__(self) -> None:
        def at_least(name: str, low: int | float, high: int | float = LONG_MAX) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not low <= v <= high:
                raise InvalidConfigError(f"{_topic_name(name)}={v!r} must be in [{low}, {high}]")

        at_least("segment_bytes", 14, INT_MAX)
        at_least("segment_ms", 1)
        at_least("segment_jitter_ms", 0)
        at_least("segment_index_bytes", 12, INT_MAX)  # Kafka says 4; one time-index entry needs 12
        at_least("index_interval_bytes", 0, INT_MAX)
        at_least("retention_ms", -1)
        at_least("retention_bytes", -1)
        at_least("flush_messages", 1)
        at_least("flush_ms", 0)
        at_least("max_message_bytes", 0, INT_MAX)
        at_least("file_delete_delay_ms", 0)
        at_least("delete_retention_ms", 0)
        at_least("min_cleanable_dirty_ratio", 0.0, 1.0)
        at_least("min_compaction_lag_ms", 0)
        at_least("max_compaction_lag_ms", 1)
        if self.message_timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
            raise InvalidConfigError(
                f"message.timestamp.type={self.message_timestamp_type!r} must be CreateTime or LogAppendTime"
            )
        policies = self.cleanup_policies
        if not policies or not policies <= {"delete", "compact"}:
            raise InvalidConfigError(f"cleanup.policy={self.cleanup_policy!r} must list delete and/or compact")
        if not isinstance(self.preallocate, bool):
            raise InvalidConfigError(f"preallocate={self.preallocate!r} must be a boolean")

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
    def from_properties(cls, props: Mapping[str, Any], base: LogConfig | None = None) -> LogConfig:
        """Apply topic-level properties ("retention.ms": "1000", ...) over `base` (or the defaults).

        Unknown names raise InvalidConfigError: topic configs outside storage are not ours to accept.
        """
        changes: dict[str, Any] = {}
        for key, raw in props.items():
            name = TOPIC_PROPERTIES.get(key)
            if name is None:
                raise InvalidConfigError(f"unknown topic config {key!r}")
            changes[name] = _coerce(name, raw)
        return replace(base or cls(), **changes)

    @classmethod
    def from_broker_properties(cls, props: Mapping[str, Any]) -> LogConfig:
        """The broker-wide default log config from server.properties names (log.retention.hours, ...).

        Names this class does not know are ignored: server.properties holds much more than log settings.
        """
        changes: dict[str, Any] = {}
        for key, name, unit in reversed(_BROKER_UNITS):  # hours first, so minutes and ms override
            if key in props:
                v = _coerce(name, props[key])
                changes[name] = v * unit if v >= 0 else v
        for key, name in BROKER_PROPERTIES.items():
            if key in props:
                changes[name] = _coerce(name, props[key])
        return replace(cls(), **changes)

    def to_properties(self) -> dict[str, str]:
        """Topic-level property names to string values, as DescribeConfigs shows them."""
        values = asdict(self)
        return {key: _format(values[name]) for key, name in TOPIC_PROPERTIES.items()}


_FIELD_TYPES = {f.name: f.type for f in fields(LogConfig)}


def _topic_name(field_name: str) -> str:
    for key, name in TOPIC_PROPERTIES.items():
        if name == field_name:
            return key
    return field_name


def _coerce(name: str, raw: Any) -> Any:
    kind = _FIELD_TYPES[name]
    try:
        if kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text not in ("true", "false"):
                raise ValueError(text)
            return text == "true"
        if kind == "int":
            if isinstance(raw, bool):
                raise ValueError(raw)
            return int(str(raw).strip()) if not isinstance(raw, int) else raw
        if kind == "float":
            return float(raw)
        return str(raw).strip()
    except ValueError:
        raise InvalidConfigError(f"{_topic_name(name)}={raw!r} is not a valid {kind}") from None


def _format(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


# --- the log cleaner's broker-wide settings ---------------------------------------------------

# server.properties name -> CleanerConfig field.
CLEANER_BROKER_PROPERTIES: dict[str, str] = {
    "log.cleaner.enable": "enable",
    "log.cleaner.threads": "threads",
    "log.cleaner.backoff.ms": "backoff_ms",
    "log.cleaner.dedupe.buffer.size": "dedupe_buffer_size",
    "log.cleaner.io.buffer.size": "io_buffer_size",
    "log.cleaner.io.max.bytes.per.second": "io_max_bytes_per_second",
}


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The log cleaner's settings (broker-wide), Kafka's names with '_' for '.' and its defaults.

    `dedupe_buffer_size` bounds the memory of the offset maps of all cleaner threads together;
    `io_buffer_size` is the read chunk and write buffer size of each thread;
    `io_max_bytes_per_second` throttles each thread's reads plus writes (default: no limit).
    """

    enable: bool = True
    threads: int = 1
    backoff_ms: int = 15000
    dedupe_buffer_size: int = 134217728
    io_buffer_size: int = 524288
    io_max_bytes_per_second: float = float("inf")

    def __post_init__(self) -> None:
        if not isinstance(self.enable, bool):
            raise InvalidConfigError(f"log.cleaner.enable={self.enable!r} must be a boolean")
        for name, low in (("threads", 1), ("backoff_ms", 0), ("dedupe_buffer_size", 1), ("io_buffer_size", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise InvalidConfigError(f"log.cleaner.{name.replace('_', '.')}={v!r} must be an integer >= {low}")
        rate = self.io_max_bytes_per_second
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0:
            raise InvalidConfigError(f"log.cleaner.io.max.bytes.per.second={rate!r} must be positive")

    @classmethod
    def from_broker_properties(cls, props: Mapping[str, Any]) -> CleanerConfig:
        """The cleaner settings from server.properties names; other names are ignored."""
        changes: dict[str, Any] = {}
        for key, name in CLEANER_BROKER_PROPERTIES.items():
            if key not in props:
                continue
            raw = props[key]
            try:
                if name == "enable":
                    text = str(raw).strip().lower() if not isinstance(raw, bool) else str(raw).lower()
                    if text not in ("true", "false"):
                        raise ValueError(text)
                    changes[name] = text == "true"
                elif name == "io_max_bytes_per_second":
                    changes[name] = float(raw)
                else:
                    if isinstance(raw, bool):
                        raise ValueError(raw)
                    changes[name] = raw if isinstance(raw, int) else int(str(raw).strip())
            except ValueError:
                raise InvalidConfigError(f"{key}={raw!r} is not valid") from None
        return replace(cls(), **changes)
