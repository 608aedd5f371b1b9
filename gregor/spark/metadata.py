"""Driver-side look-ups: which topic-partitions a subscription covers, and where offsets are.

The driver plans every read from these answers (Spark's KafkaOffsetReader plays this part for the
Kafka source). It uses one confluent-kafka Consumer that never subscribes, joins or commits: it only
sends Metadata and ListOffsets requests. A Consumer rather than an AdminClient because it accepts the
same `kafka.*` consumer settings the executors use, and because its Metadata requests never
auto-create topics (`allow.auto.create.topics` is false for consumers).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from gregor.spark.errors import GregorOptionError, GregorSourceError, report_data_loss
from gregor.spark.options import EARLIEST, LATEST, OffsetSpec, Subscription, TopicPartitionKey

T = TypeVar("T")

# confluent-kafka's offsets_for_times takes these two values as "timestamps" meaning earliest/latest.
_LIST_EARLIEST = -2
_LIST_LATEST = -1


def consumer_config(params: Mapping[str, str], group_id: str, **defaults: Any) -> dict[str, Any]:
    """librdkafka settings: our defaults, then the user's `kafka.*` settings, then what we must own.

    `isolation.level` defaults to read_uncommitted as in Kafka's Java client (and so Spark's Kafka
    source); librdkafka's own default is read_committed.
    """
    conf: dict[str, Any] = {"isolation.level": "read_uncommitted", "group.id": group_id}
    conf.update(defaults)
    conf.update(params)
    conf.update({"enable.auto.commit": False, "enable.auto.offset.store": False})
    return conf


def make_consumer(conf: dict[str, Any]) -> Any:
    """A Consumer, with librdkafka's complaint about a bad `kafka.*` setting turned into an option error."""
    from confluent_kafka import Consumer, KafkaException

    try:
        return Consumer(conf)
    except (KafkaException, ValueError, TypeError) as e:
        detail = e.args[0].str() if e.args and hasattr(e.args[0], "str") else str(e)
        raise GregorOptionError(f"Invalid kafka.* consumer setting: {detail}") from e


# Between two lookups while a partition has no leader (librdkafka refreshes its metadata meanwhile).
_LEADER_WAIT_S = 0.2
# Per-partition answers of a leadership on the move (librdkafka does not flag them retriable here):
# LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
# and librdkafka's own transport failure, timeout and a broker handle dropped while a request was on it.
_LEADER_MOVING = frozenset({5, 6, 7, 74, 75, -195, -185, -137})


def leader_moving(err: Any) -> bool:
    """Whether a confluent-kafka KafkaError is one a new leader will clear (wait and ask again)."""
    return bool(err.retriable()) or err.code() in _LEADER_MOVING


class KafkaMetadata:
    """Metadata and offsets of a broker, looked up with retries (`fetchOffset.numRetries`)."""

    def __init__(self, params: Mapping[str, str], group_id: str, *, retries: int = 3,
                 retry_interval_ms: int = 10, timeout_s: float = 30.0) -> None:
        self._consumer = make_consumer(consumer_config(params, group_id + "-driver"))
        self._retries = retries
        self._retry_interval_s = retry_interval_ms / 1000.0
        self._timeout_s = timeout_s
        self.bootstrap = params.get("bootstrap.servers", "")

    def close(self) -> None:
        self._consumer.close()

    def _retry(self, what: str, fn: Callable[[], T]) -> T:
        from confluent_kafka import KafkaException

        for attempt in range(self._retries + 1):
            try:
                return fn()
            except KafkaException as e:
                if attempt == self._retries:
                    raise GregorSourceError(f"{what} failed against {self.bootstrap} after "
                                            f"{self._retries + 1} attempts: {e.args[0] if e.args else e}") from e
                time.sleep(self._retry_interval_s)
        raise AssertionError("unreachable")

    def topics(self) -> dict[str, int]:
        """Every topic the broker reports, with its partition count (topics in error are left out)."""
        md = self._retry("Metadata request", lambda: self._consumer.list_topics(timeout=self._timeout_s))
        return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}

    def partitions(self, sub: Subscription) -> tuple[set[TopicPartitionKey], list[str]]:
        """The topic-partitions `sub` covers now, and what it names that does not exist."""
        topics = self.topics()
        found: set[TopicPartitionKey] = set()
        missing: list[str] = []
        if sub.kind == "subscribe":
            for t in sub.topics:
                if t in topics:
                    found.update((t, p) for p in range(topics[t]))
                else:
                    missing.append(t)
        elif sub.kind == "subscribepattern":
            for t, n in topics.items():
                if sub.matches(t):
                    found.update((t, p) for p in range(n))
        else:
            for t, p in sub.assigned:
                if t in topics and p < topics[t]:
                    found.add((t, p))
                else:
                    missing.append(f"{t}-{p}")
        return found, missing

    def _list(self, requests: Mapping[TopicPartitionKey, int], what: str) -> dict[TopicPartitionKey, int]:
        """One ListOffsets round: timestamp (or -2/-1) per partition -> offset (-1 when none matches)."""
        from confluent_kafka import TopicPartition

        if not requests:
            return {}
        tps = [TopicPartition(t, p, ts) for (t, p), ts in sorted(requests.items())]
        # A partition between leaders (a broker died, its leaderships are moving) answers a retriable error
        # such as LEADER_NOT_AVAILABLE: wait for the new leader, as Kafka's consumer in Spark's source blocks
        # until it knows one, within the lookup's timeout; any other per-partition error fails at once.
        deadline = time.monotonic() + self._timeout_s
        while True:
            res = self._retry(what, lambda: self._consumer.offsets_for_times(tps, timeout=self._timeout_s))
            moving = [tp for tp in res if tp.error is not None and leader_moving(tp.error)]
            if not moving or time.monotonic() >= deadline:
                break
            time.sleep(max(self._retry_interval_s, _LEADER_WAIT_S))
        out: dict[TopicPartitionKey, int] = {}
        for tp in res:
            if tp.error is not None:
                raise GregorSourceError(f"{what} for {tp.topic}-{tp.partition} failed: {tp.error}")
            out[(tp.topic, tp.partition)] = tp.offset
        return out

    def earliest(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        return self._list(dict.fromkeys(tps, _LIST_EARLIEST), "Looking up earliest offsets")

    def latest(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        return self._list(dict.fromkeys(tps, _LIST_LATEST), "Looking up latest offsets")

    def for_timestamps(self, timestamps: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int | None]:
        """The earliest offset whose timestamp is >= the given one, or None when no record is that late."""
        res = self._list(timestamps, "Looking up offsets by timestamp")
        return {tp: (off if off >= 0 else None) for tp, off in res.items()}

    def resolve(self, spec: OffsetSpec, tps: set[TopicPartitionKey], *, which: str,
                timestamp_strategy: str = "error", fail_on_data_loss: bool = True) -> dict[TopicPartitionKey, int]:
        """Turn a starting/ending spec into concrete offsets for exactly the partitions `tps`."""
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        option = f"{which}Offsets" if spec.kind == "specific" else f"{which}OffsetsByTimestamp"
        if spec.kind in ("specific", "timestamps") and set(spec.offsets) != tps:
            given = sorted(spec.offsets)
            raise GregorOptionError(
                f"If '{option}' contains specific offsets, you must specify all topic-partitions "
                f"(use -1 for latest, -2 for earliest). Specified: {_names(given)}, assigned: {_names(sorted(tps))}")
        if spec.kind == "specific":
            earliest, latest = self.earliest(tps), self.latest(tps)
            out: dict[TopicPartitionKey, int] = {}
            for tp, off in spec.offsets.items():
                if off == EARLIEST:
                    out[tp] = earliest[tp]
                elif off == LATEST:
                    out[tp] = latest[tp]
                elif off < earliest[tp]:
                    report_data_loss(fail_on_data_loss, f"{option} for {tp[0]}-{tp[1]} was {off} but the earliest "
                                                        f"available offset is {earliest[tp]}")
                    out[tp] = earliest[tp]
                elif off > latest[tp]:
                    report_data_loss(fail_on_data_loss, f"{option} for {tp[0]}-{tp[1]} was {off} but the latest "
                                                        f"offset is {latest[tp]}")
                    out[tp] = latest[tp]
                else:
                    out[tp] = off
            return out
        stamps = ({tp: spec.timestamp_ms for tp in tps} if spec.kind == "timestamp"
                  else dict(spec.offsets))
        found = self.for_timestamps({tp: ts for tp, ts in stamps.items() if ts is not None})
        unmatched = [tp for tp in tps if found.get(tp) is None]
        if unmatched and which == "starting" and timestamp_strategy == "error":
            tp = sorted(unmatched)[0]
            raise GregorSourceError(
                f"No offset matched the starting timestamp {stamps[tp]} in {tp[0]}-{tp[1]} (no record is that "
                "recent). Set 'startingOffsetsByTimestampStrategy' to 'latest' to start such partitions at "
                "their latest offset instead.")
        latest = self.latest(unmatched)
        return {tp: (found[tp] if found.get(tp) is not None else latest[tp]) for tp in tps}  # type: ignore[misc]


def _names(tps: list[TopicPartitionKey]) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in tps) + "]"
