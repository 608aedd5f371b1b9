"""Parse and validate the connector's options, with the names and rules of Spark's Kafka source.

Everything here is pure (no Spark, no broker) so a bad option fails as soon as Spark asks the
data source for its schema, that is at `load()`, with a message that names the option, and so the
rules can be unit-tested on their own. Checks that need the broker (unknown topics, missing
partitions) live in `gregor.spark.metadata` and run when the query is planned.

Option names are those of the structured-streaming-kafka-integration guide; Spark hands them to
us lower-cased, so every lookup here uses the lower-cased name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

# Offsets with a special meaning inside JSON offset specs, as in Kafka's ListOffsets.
LATEST = -1
EARLIEST = -2

TopicPartitionKey = tuple[str, int]


class GregorOptionError(ValueError):
    """An option is missing, malformed or contradicts another one."""


@dataclass(frozen=True)
class Subscription:
    """What to read: exactly one of a topic list, a topic pattern, or fixed topic-partitions."""

    kind: Literal["subscribe", "subscribepattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartitionKey, ...] = ()

    def matches(self, topic: str) -> bool:
        """Whether `topic` belongs to this subscription (internal `__` topics never match a pattern,
        as Kafka's consumer excludes internal topics from pattern subscriptions)."""
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribepattern":
            assert self.pattern is not None
            return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assigned)

    def describe(self) -> str:
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "subscribepattern":
            return f"subscribePattern={self.pattern}"
        return "assign=" + json.dumps(assign_json(self.assigned))


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends.

    kind is `earliest`, `latest`, `specific` (per-partition offsets, -2/-1 meaning earliest/latest),
    `timestamp` (one timestamp in ms for every partition) or `timestamps` (per-partition timestamps).
    """

    kind: Literal["earliest", "latest", "specific", "timestamp", "timestamps"]
    offsets: Mapping[TopicPartitionKey, int] = field(default_factory=dict)
    timestamp_ms: int | None = None

    def describe(self) -> str:
        if self.kind in ("earliest", "latest"):
            return self.kind
        if self.kind == "timestamp":
            return f"timestamp {self.timestamp_ms}"
        return json.dumps(partition_offsets_json(self.offsets))


@dataclass(frozen=True)
class SourceOptions:
    """The validated options of a read (batch or streaming)."""

    kafka_params: Mapping[str, str]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp_strategy: Literal["error", "latest"]
    fail_on_data_loss: bool
    include_headers: bool
    min_partitions: int | None
    max_records_per_partition: int | None
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    poll_timeout_ms: int
    fetch_offset_num_retries: int
    fetch_offset_retry_interval_ms: int
    streaming: bool


@dataclass(frozen=True)
class SinkOptions:
    """The validated options of a write."""

    kafka_params: Mapping[str, str]
    topic: str | None
    transactional: bool = False  # exactly once: each task's share of a micro-batch in one transaction
    transactional_id_prefix: str = "gregor-sink-"


# Consumer settings the connector owns: Spark refuses them with these explanations.
_UNSUPPORTED_SOURCE_PARAMS = {
    "auto.offset.reset": "Set the source option 'startingOffsets' to 'earliest' or 'latest' to specify where "
                         "to start. The connector tracks offsets itself instead of relying on the consumer.",
    "key.deserializer": "Keys are always read as byte arrays; use DataFrame operations to deserialize them.",
    "value.deserializer": "Values are always read as byte arrays; use DataFrame operations to deserialize them.",
    "enable.auto.commit": "The connector does not commit any offsets: Spark's checkpoint tracks them.",
    "interceptor.classes": "The connector reads bytes and interceptors could break the offset bookkeeping.",
}
_UNSUPPORTED_SINK_PARAMS = {
    "key.serializer": "Keys are written as byte arrays (or UTF-8 strings); serialize them in the DataFrame.",
    "value.serializer": "Values are written as byte arrays (or UTF-8 strings); serialize them in the DataFrame.",
}

_SOURCE_ONLY_IN_BATCH = ("endingoffsets", "endingoffsetsbytimestamp", "endingtimestamp")


def _get(options: Mapping[str, str], name: str) -> str | None:
    v = options.get(name.lower())
    return None if v is None else str(v)


def kafka_params(options: Mapping[str, str]) -> dict[str, str]:
    """The `kafka.*` options with the prefix stripped: client settings passed through unchanged."""
    out = {}
    for k, v in options.items():
        lk = k.lower()
        if lk.startswith("kafka."):
            out[lk[len("kafka."):]] = str(v)
    return out


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    v = _get(options, name)
    if v is None:
        return default
    lv = v.strip().lower()
    if lv in ("true", "false"):
        return lv == "true"
    raise GregorOptionError(f"Option '{name}' must be 'true' or 'false', got {v!r}")


def _int(options: Mapping[str, str], name: str, *, minimum: int | None = None) -> int | None:
    v = _get(options, name)
    if v is None:
        return None
    try:
        n = int(v.strip())
    except ValueError:
        raise GregorOptionError(f"Option '{name}' must be an integer, got {v!r}") from None
    if minimum is not None and n < minimum:
        raise GregorOptionError(f"Option '{name}' must be at least {minimum}, got {n}")
    return n


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_MS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(name: str, v: str) -> int:
    """`maxTriggerDelay` takes Spark's time strings ('15m', '30s', '500ms'); a bare number is ms."""
    m = _DURATION.match(v)
    if not m:
        raise GregorOptionError(f"Option '{name}' must be a duration like '15m', '30s' or '500ms', got {v!r}")
    unit = m.group(2).lower() if m.group(2) else None
    return int(m.group(1)) * _DURATION_MS[unit]


def _load_json(name: str, text: str, example: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise GregorOptionError(f"Option '{name}' is not valid JSON ({e.msg} at char {e.pos}): "
                                f"expected e.g. {example}, got {text!r}") from None


def parse_subscription(options: Mapping[str, str]) -> Subscription:
    """Exactly one of subscribe, subscribePattern, assign."""
    given = [k for k in ("subscribe", "subscribepattern", "assign") if _get(options, k) is not None]
    if not given:
        raise GregorOptionError("One of the following options must be specified for the gregor source: "
                                "subscribe, subscribePattern, assign. See docs/spark.md for details.")
    if len(given) > 1:
        names = {"subscribe": "subscribe", "subscribepattern": "subscribePattern", "assign": "assign"}
        raise GregorOptionError("Only one of the following options can be specified for the gregor source: "
                                f"subscribe, subscribePattern, assign (got {', '.join(names[g] for g in given)}).")
    kind = given[0]
    value = _get(options, kind) or ""
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise GregorOptionError(f"No topics to subscribe to as specified value for option 'subscribe' is {value!r}")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        if not value.strip():
            raise GregorOptionError(f"Pattern to subscribe is empty as specified value for option "
                                    f"'subscribePattern' is {value!r}")
        try:
            re.compile(value)
        except re.error as e:
            raise GregorOptionError(f"Option 'subscribePattern' is not a valid regular expression: {e}") from None
        return Subscription("subscribepattern", pattern=value)
    example = '{"topicA":[0,1],"topicB":[2,4]}'
    parsed = _load_json("assign", value, example)
    if not isinstance(parsed, dict) or not parsed:
        raise GregorOptionError(f"Option 'assign' must be a JSON object of topic to partition list, "
                                f"e.g. {example}, got {value!r}")
    assigned: list[TopicPartitionKey] = []
    for topic, parts in parsed.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
            raise GregorOptionError(f"Option 'assign': partitions of topic {topic!r} must be a list of integers, "
                                    f"e.g. {example}, got {json.dumps(parts)}")
        assigned.extend((topic, p) for p in parts)
    return Subscription("assign", assigned=tuple(sorted(set(assigned))))


def _partition_map(name: str, text: str, example: str) -> dict[TopicPartitionKey, int]:
    parsed = _load_json(name, text, example)
    if not isinstance(parsed, dict):
        raise GregorOptionError(f"Option '{name}' must be a JSON object like {example}, got {text!r}")
    out: dict[TopicPartitionKey, int] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise GregorOptionError(f"Option '{name}': the value for topic {topic!r} must be an object of "
                                    f"partition to number, e.g. {example}, got {json.dumps(parts)}")
        for p, off in parts.items():
            try:
                pid = int(p)
            except ValueError:
                raise GregorOptionError(f"Option '{name}': partition {p!r} of topic {topic!r} "
                                        "is not an integer") from None
            if not isinstance(off, int) or isinstance(off, bool):
                raise GregorOptionError(f"Option '{name}': the value for {topic}-{pid} must be an integer, "
                                        f"got {json.dumps(off)}")
            out[(topic, pid)] = off
    return out


def _offset_spec(options: Mapping[str, str], which: Literal["starting", "ending"], default: str,
                 streaming: bool) -> OffsetSpec:
    """Precedence as in Spark: <which>Timestamp, then <which>OffsetsByTimestamp, then <which>Offsets."""
    ts = _get(options, f"{which}Timestamp")
    if ts is not None:
        try:
            return OffsetSpec("timestamp", timestamp_ms=int(ts.strip()))
        except ValueError:
            raise GregorOptionError(f"Option '{which}Timestamp' must be a timestamp in milliseconds since the "
                                    f"epoch, got {ts!r}") from None
    by_ts = _get(options, f"{which}OffsetsByTimestamp")
    if by_ts is not None:
        m = _partition_map(f"{which}OffsetsByTimestamp", by_ts, '{"topicA":{"0":1700000000000,"1":1700000000000}}')
        return OffsetSpec("timestamps", offsets=m)
    name = f"{which}Offsets"
    v = _get(options, name)
    text = (v if v is not None else default).strip()
    if text.lower() in ("earliest", "latest"):
        kind: Literal["earliest", "latest"] = "earliest" if text.lower() == "earliest" else "latest"
        if not streaming and which == "starting" and kind == "latest":
            raise GregorOptionError("Option 'startingOffsets' can't be latest for batch queries")
        if not streaming and which == "ending" and kind == "earliest":
            raise GregorOptionError("Option 'endingOffsets' can't be earliest for batch queries")
        return OffsetSpec(kind)
    if not text.startswith("{"):
        raise GregorOptionError(f"Option '{name}' must be 'earliest', 'latest' or a JSON object like "
                                f'{{"topicA":{{"0":23,"1":-1}}}}, got {text!r}')
    m = _partition_map(name, text, '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}')
    for (t, p), off in m.items():
        if off < EARLIEST:
            raise GregorOptionError(f"Option '{name}': offset {off} for {t}-{p} is not valid "
                                    "(use a non-negative offset, -2 for earliest or -1 for latest)")
        if not streaming and which == "starting" and off == LATEST:
            raise GregorOptionError(f"Option 'startingOffsets' for {t}-{p} can't be latest (-1) for batch queries")
        if not streaming and which == "ending" and off == EARLIEST:
            raise GregorOptionError(f"Option 'endingOffsets' for {t}-{p} can't be earliest (-2) for batch queries")
    return OffsetSpec("specific", offsets=m)


def _validate_kafka_params(params: Mapping[str, str], unsupported: Mapping[str, str], what: str) -> None:
    if "bootstrap.servers" not in params or not params["bootstrap.servers"].strip():
        raise GregorOptionError(f"Option 'kafka.bootstrap.servers' must be specified for configuring the {what}")
    for name, why in unsupported.items():
        if name in params:
            raise GregorOptionError(f"Kafka option 'kafka.{name}' is not supported. {why}")


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate a read's options; raises GregorOptionError naming the offending option."""
    params = kafka_params(options)
    _validate_kafka_params(params, _UNSUPPORTED_SOURCE_PARAMS, "gregor source's Kafka consumer")
    subscription = parse_subscription(options)
    if streaming:
        for name in _SOURCE_ONLY_IN_BATCH:
            if _get(options, name) is not None:
                raise GregorOptionError(f"Option '{name}' is not valid in streaming queries "
                                        "(a stream has no end; use Trigger.AvailableNow to stop at the "
                                        "current end)")
    starting = _offset_spec(options, "starting", "latest" if streaming else "earliest", streaming)
    ending = OffsetSpec("latest") if streaming else _offset_spec(options, "ending", "latest", streaming)
    strategy = (_get(options, "startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise GregorOptionError("Option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
                                f"got {strategy!r}")
    max_opt = _int(options, "maxOffsetsPerTrigger", minimum=1)
    min_opt = _int(options, "minOffsetsPerTrigger", minimum=1)
    if max_opt is not None and min_opt is not None and min_opt > max_opt:
        raise GregorOptionError(f"Option 'minOffsetsPerTrigger' ({min_opt}) can't be larger than "
                                f"'maxOffsetsPerTrigger' ({max_opt})")
    delay_text = _get(options, "maxTriggerDelay")
    delay_ms = parse_duration_ms("maxTriggerDelay", delay_text) if delay_text is not None else 15 * 60_000
    poll_timeout = _int(options, "kafkaConsumer.pollTimeoutMs", minimum=1)
    return SourceOptions(
        kafka_params=params,
        subscription=subscription,
        starting=starting,
        ending=ending,
        starting_timestamp_strategy="latest" if strategy == "latest" else "error",
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        min_partitions=_int(options, "minPartitions", minimum=1),
        max_records_per_partition=_int(options, "maxRecordsPerPartition", minimum=1),
        max_offsets_per_trigger=max_opt,
        min_offsets_per_trigger=min_opt,
        max_trigger_delay_ms=delay_ms,
        poll_timeout_ms=poll_timeout if poll_timeout is not None else 120_000,
        fetch_offset_num_retries=_int(options, "fetchOffset.numRetries", minimum=0) or 3,
        fetch_offset_retry_interval_ms=_int(options, "fetchOffset.retryIntervalMs", minimum=0) or 10,
        streaming=streaming,
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate a write's options (the column checks need the schema: see gregor.spark.sink)."""
    params = kafka_params(options)
    _validate_kafka_params(params, _UNSUPPORTED_SINK_PARAMS, "gregor sink's Kafka producer")
    topic = _get(options, "topic")
    if topic is not None and not topic.strip():
        raise GregorOptionError("Option 'topic' is empty")
    transactional = _bool(options, "transactional", False)
    for owned in ("transactional.id", "enable.idempotence"):
        if transactional and owned in params:
            raise GregorOptionError(f"Kafka option 'kafka.{owned}' is set by the sink when 'transactional' is true; "
                                    "use 'transactionalIdPrefix' to name its transactional ids")
    prefix = _get(options, "transactionalIdPrefix") or "gregor-sink-"
    return SinkOptions(kafka_params=params, topic=topic.strip() if topic else None, transactional=transactional,
                       transactional_id_prefix=prefix)


def partition_offsets_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """{(topic, p): n} -> {"topic": {"p": n}}: Spark's Kafka offset JSON, sorted for stable checkpoints."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), off in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(off)
    return out


def partition_offsets_from_json(doc: Mapping[str, Mapping[str, int]]) -> dict[TopicPartitionKey, int]:
    """The inverse of partition_offsets_json (for offsets coming back from Spark's checkpoint)."""
    return {(t, int(p)): int(off) for t, parts in doc.items() for p, off in parts.items()}


def assign_json(assigned: tuple[TopicPartitionKey, ...]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in assigned:
        out.setdefault(t, []).append(p)
    return out
