"""Broker and topic configuration with Kafka's property names, types and defaults.

A broker is configured from a server.properties-style file plus `--override key=value`;
every property is declared here once with its type, default and validator, so an unknown
or ill-typed property is a startup error that names it. Topic-level configs (the names a
user passes to CreateTopics / AlterConfigs) map onto broker defaults the way Kafka's do.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A property is unknown, ill-typed or out of range."""


# --- parsing --------------------------------------------------------------------------

def _int(name: str, raw: Any, lo: int = -(2**31), hi: int = 2**31 - 1) -> int:
    try:
        v = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"{name}: expected an integer, got {raw!r}") from None
    if not lo <= v <= hi:
        raise ConfigError(f"{name}: {v} is out of range [{lo}, {hi}]")
    return v


def _bool(name: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    s = str(raw).strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise ConfigError(f"{name}: expected true or false, got {raw!r}")


def _float(name: str, raw: Any) -> float:
    try:
        return float(str(raw).strip())
    except ValueError:
        raise ConfigError(f"{name}: expected a number, got {raw!r}") from None


@dataclass(frozen=True)
class Prop:
    """One property: its type ('int', 'long', 'bool', 'double', 'string', 'list'), default, bounds."""

    name: str
    type: str
    default: Any
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] | None = None
    doc: str = ""

    def parse(self, raw: Any) -> Any:
        if raw is None:
            return None
        t = self.type
        if t == "int":
            v: Any = _int(self.name, raw)
        elif t == "long":
            v = _int(self.name, raw, -(2**63), LONG_MAX)
        elif t == "bool":
            v = _bool(self.name, raw)
        elif t == "double":
            v = _float(self.name, raw)
        elif t == "list":
            v = [x.strip() for x in str(raw).split(",") if x.strip()]
        else:
            v = str(raw).strip()
        if self.lo is not None and v < self.lo:
            raise ConfigError(f"{self.name}: {v} is below the minimum {self.lo}")
        if self.hi is not None and v > self.hi:
            raise ConfigError(f"{self.name}: {v} is above the maximum {self.hi}")
        if self.choices is not None:
            values = v if isinstance(v, list) else [v]
            for x in values:
                if x not in self.choices:
                    raise ConfigError(f"{self.name}: {x!r} is not one of {', '.join(self.choices)}")
        return v


def _p(name: str, type_: str, default: Any, lo: float | None = None, hi: float | None = None,
       choices: tuple[str, ...] | None = None, doc: str = "") -> Prop:
    return Prop(name, type_, default, lo, hi, choices, doc)


TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("delete", "compact")
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")

# Broker properties we implement. Kafka's names and defaults.
BROKER_PROPS: dict[str, Prop] = {p.name: p for p in [
    _p("broker.id", "int", 0, lo=0, doc="This broker's id (Kafka defaults to -1 and generates one; a lone broker is 0)"),
    _p("listeners", "list", ["PLAINTEXT://127.0.0.1:9092"]),
    _p("advertised.listeners", "list", None),
    _p("log.dirs", "list", None),
    _p("log.dir", "string", "./gregor-data"),
    _p("num.partitions", "int", 1, lo=1),
    _p("default.replication.factor", "int", 1, lo=1),
    _p("auto.create.topics.enable", "bool", True),
    _p("delete.topic.enable", "bool", True),
    _p("message.max.bytes", "int", 1048588, lo=0),
    _p("socket.request.max.bytes", "int", 104857600, lo=1),
    _p("socket.send.buffer.bytes", "int", 102400, lo=-1),
    _p("socket.receive.buffer.bytes", "int", 102400, lo=-1),
    _p("max.connections", "int", 2**31 - 1, lo=0),
    _p("queued.max.requests", "int", 500, lo=1, doc="requests in flight per connection before reads pause"),
    _p("log.segment.bytes", "int", 1073741824, lo=14),
    _p("log.roll.ms", "long", None, lo=1),
    _p("log.roll.hours", "int", 168, lo=1),
    _p("log.roll.jitter.ms", "long", None, lo=0),
    _p("log.roll.jitter.hours", "int", 0, lo=0),
    _p("log.index.interval.bytes", "int", 4096, lo=0),
    _p("log.index.size.max.bytes", "int", 10485760, lo=4),
    _p("log.retention.hours", "int", 168),
    _p("log.retention.minutes", "int", None),
    _p("log.retention.ms", "long", None),
    _p("log.retention.bytes", "long", -1),
    _p("log.retention.check.interval.ms", "long", 300000, lo=1),
    _p("log.segment.delete.delay.ms", "long", 60000, lo=0),
    _p("log.flush.interval.messages", "long", LONG_MAX, lo=1),
    _p("log.flush.interval.ms", "long", None, lo=0),
    _p("log.flush.scheduler.interval.ms", "long", LONG_MAX, lo=0),
    _p("log.flush.offset.checkpoint.interval.ms", "int", 60000, lo=0),
    _p("log.flush.start.offset.checkpoint.interval.ms", "int", 60000, lo=0),
    _p("replica.high.watermark.checkpoint.interval.ms", "long", 5000, lo=1),
    _p("log.message.timestamp.type", "string", "CreateTime", choices=TIMESTAMP_TYPES),
    _p("log.cleanup.policy", "list", ["delete"], choices=CLEANUP_POLICIES),
    _p("log.preallocate", "bool", False),
    _p("compression.type", "string", "producer", choices=COMPRESSION_TYPES),
    _p("log.cleaner.enable", "bool", True),
    _p("log.cleaner.threads", "int", 1, lo=1),
    _p("log.cleaner.backoff.ms", "long", 15000, lo=0),
    _p("log.cleaner.dedupe.buffer.size", "long", 134217728, lo=1),
    _p("log.cleaner.io.buffer.size", "int", 524288, lo=1),
    _p("log.cleaner.io.max.bytes.per.second", "double", float("inf"), lo=0),
    _p("log.cleaner.delete.retention.ms", "long", 86400000, lo=0),
    _p("log.cleaner.min.cleanable.ratio", "double", 0.5, lo=0, hi=1),
    _p("log.cleaner.min.compaction.lag.ms", "long", 0, lo=0),
    _p("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, lo=1),
    _p("min.insync.replicas", "int", 1, lo=1),
    _p("unclean.leader.election.enable", "bool", False),
    # Group coordinator.
    _p("group.min.session.timeout.ms", "int", 6000, lo=0),
    _p("group.max.session.timeout.ms", "int", 1800000, lo=0),
    _p("group.initial.rebalance.delay.ms", "int", 3000, lo=0),
    _p("group.max.size", "int", 2**31 - 1, lo=1),
    # KIP-848 consumer groups (group.protocol=consumer): the broker owns the session and heartbeat timing.
    _p("group.consumer.session.timeout.ms", "int", 45000, lo=1),
    _p("group.consumer.min.session.timeout.ms", "int", 45000, lo=1),
    _p("group.consumer.max.session.timeout.ms", "int", 60000, lo=1),
    _p("group.consumer.heartbeat.interval.ms", "int", 5000, lo=1),
    _p("group.consumer.min.heartbeat.interval.ms", "int", 5000, lo=1),
    _p("group.consumer.max.heartbeat.interval.ms", "int", 15000, lo=1),
    _p("group.consumer.max.size", "int", 2**31 - 1, lo=1),
    _p("group.consumer.assignors", "list", ["uniform", "range"], choices=("uniform", "range"),
       doc="server-side assignors; the first is the default (Kafka also accepts class names)"),
    _p("offsets.topic.num.partitions", "int", 50, lo=1),
    _p("offsets.topic.replication.factor", "int", 1, lo=1,
       doc="Kafka defaults to 3; a lone broker can only hold 1 (Kafka's sample server.properties says 1)"),
    _p("offsets.topic.segment.bytes", "int", 104857600, lo=1),
    _p("offsets.retention.minutes", "int", 10080, lo=1),
    _p("offsets.retention.check.interval.ms", "long", 600000, lo=1),
    _p("offset.metadata.max.bytes", "int", 4096, lo=0),
    # hardening: validator
    _p("log.message.timestamp.before.max.ms", "long", LONG_MAX, lo=0,
       doc="KIP-937: a CreateTime record more than this before the broker's clock gets INVALID_TIMESTAMP"),
    _p("log.message.timestamp.after.max.ms", "long", 3600000, lo=0,
       doc="KIP-937: a CreateTime record more than this after the broker's clock gets INVALID_TIMESTAMP (Kafka 4.0's default, 1 hour)"),
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
]}


@dataclass(frozen=True)
class TopicProp:
    """A topic-level config: its own parser, the broker property it defaults to, and how that
    default is derived when coarser broker properties stand in (log.retention.hours for .ms)."""

    prop: Prop
    broker_name: str
    derive: Callable[[BrokerConfig], Any] | None = None

    def broker_default(self, c: BrokerConfig) -> Any:
        return self.derive(c) if self.derive is not None else c.get(self.broker_name)


def _retention_ms(c: BrokerConfig) -> int:
    if c.get("log.retention.ms") is not None:
        return c.get("log.retention.ms")
    if c.get("log.retention.minutes") is not None:
        return c.get("log.retention.minutes") * 60_000
    return c.get("log.retention.hours") * 3_600_000


def _roll_ms(c: BrokerConfig) -> int:
    if c.get("log.roll.ms") is not None:
        return c.get("log.roll.ms")
    return c.get("log.roll.hours") * 3_600_000


def _roll_jitter_ms(c: BrokerConfig) -> int:
    if c.get("log.roll.jitter.ms") is not None:
        return c.get("log.roll.jitter.ms")
    return c.get("log.roll.jitter.hours") * 3_600_000


def _flush_ms(c: BrokerConfig) -> int:
    v = c.get("log.flush.interval.ms")
    return c.get("log.flush.scheduler.interval.ms") if v is None else v


TOPIC_PROPS: dict[str, TopicProp] = {t.prop.name: t for t in [
    TopicProp(_p("cleanup.policy", "list", ["delete"], choices=CLEANUP_POLICIES), "log.cleanup.policy"),
    TopicProp(_p("compression.type", "string", "producer", choices=COMPRESSION_TYPES), "compression.type"),
    TopicProp(_p("delete.retention.ms", "long", 86400000, lo=0), "log.cleaner.delete.retention.ms"),
    TopicProp(_p("file.delete.delay.ms", "long", 60000, lo=0), "log.segment.delete.delay.ms"),
    TopicProp(_p("flush.messages", "long", LONG_MAX, lo=1), "log.flush.interval.messages"),
    TopicProp(_p("flush.ms", "long", LONG_MAX, lo=0), "log.flush.interval.ms", _flush_ms),
    TopicProp(_p("index.interval.bytes", "int", 4096, lo=0), "log.index.interval.bytes"),
    TopicProp(_p("max.message.bytes", "int", 1048588, lo=0), "message.max.bytes"),
    TopicProp(_p("message.timestamp.type", "string", "CreateTime", choices=TIMESTAMP_TYPES),
              "log.message.timestamp.type"),
    TopicProp(_p("message.timestamp.before.max.ms", "long", LONG_MAX, lo=0), "log.message.timestamp.before.max.ms"),
    TopicProp(_p("message.timestamp.after.max.ms", "long", 3600000, lo=0), "log.message.timestamp.after.max.ms"),
    TopicProp(_p("min.cleanable.dirty.ratio", "double", 0.5, lo=0, hi=1), "log.cleaner.min.cleanable.ratio"),
    TopicProp(_p("min.compaction.lag.ms", "long", 0, lo=0), "log.cleaner.min.compaction.lag.ms"),
    TopicProp(_p("max.compaction.lag.ms", "long", LONG_MAX, lo=1), "log.cleaner.max.compaction.lag.ms"),
    TopicProp(_p("min.insync.replicas", "int", 1, lo=1), "min.insync.replicas"),
    TopicProp(_p("preallocate", "bool", False), "log.preallocate"),
    TopicProp(_p("retention.bytes", "long", -1), "log.retention.bytes"),
    TopicProp(_p("retention.ms", "long", 604800000, lo=-1), "log.retention.ms", _retention_ms),
    TopicProp(_p("segment.bytes", "int", 1073741824, lo=14), "log.segment.bytes"),
    TopicProp(_p("segment.index.bytes", "int", 10485760, lo=4), "log.index.size.max.bytes"),
    TopicProp(_p("segment.jitter.ms", "long", 0, lo=0), "log.roll.jitter.ms", _roll_jitter_ms),
    TopicProp(_p("segment.ms", "long", 604800000, lo=1), "log.roll.ms", _roll_ms),
    TopicProp(_p("unclean.leader.election.enable", "bool", False), "unclean.leader.election.enable"),
]}


def format_value(v: Any) -> str:
    """A config value as Kafka's admin APIs show it."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return ",".join(v)
    return str(v)


def validate_topic_configs(configs: dict[str, str | None]) -> dict[str, Any]:
    """Parse user-given topic configs; raises ConfigError naming the first bad one."""
    out: dict[str, Any] = {}
    for k, raw in configs.items():
        tp = TOPIC_PROPS.get(k)
        if tp is None:
            raise ConfigError(f"Unknown topic config name: {k}")
        if raw is None:
            raise ConfigError(f"{k}: a null value is not allowed")
        out[k] = tp.prop.parse(raw)
    return out


class BrokerConfig:
    """Parsed broker properties. Unknown names and bad values raise ConfigError at construction."""

    def __init__(self, props: dict[str, str] | None = None) -> None:
        self._values: dict[str, Any] = {}
        self.explicit: set[str] = set()
        for name, raw in (props or {}).items():
            prop = BROKER_PROPS.get(name)
            if prop is None:
                raise ConfigError(f"Unknown broker property: {name}")
            self._values[name] = prop.parse(raw)
            self.explicit.add(name)
        for name, prop in BROKER_PROPS.items():
            self._values.setdefault(name, prop.default)
        self._check()

    def _check(self) -> None:
        for spec in self.listeners + self.advertised_listeners:
            parse_listener(spec)

    def get(self, name: str) -> Any:
        return self._values[name]

    @property
    def broker_id(self) -> int:
        return self._values["broker.id"]

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

    def topic_default(self, name: str) -> Any:
        return TOPIC_PROPS[name].broker_default(self)

    def topic_defaults(self) -> dict[str, Any]:
        return {name: tp.broker_default(self) for name, tp in TOPIC_PROPS.items()}

    def items(self) -> list[tuple[str, Any]]:
        return sorted(self._values.items())


def parse_listener(spec: str) -> tuple[str, str, int]:
    """'PLAINTEXT://host:port' -> (name, host, port). Only PLAINTEXT is implemented."""
    if "://" not in spec:
        raise ConfigError(f"listeners: {spec!r} is not of the form NAME://host:port")
    name = spec.split("://", 1)[0].upper()
    parts = urlsplit("x://" + spec.split("://", 1)[1])
    if name != "PLAINTEXT":
        raise ConfigError(f"listeners: security protocol {name} is not supported (only PLAINTEXT)")
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        raise ConfigError(f"listeners: {spec!r} has no valid port")
    return name, parts.hostname or "", port


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
