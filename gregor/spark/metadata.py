"""Driver-side look-ups: which topic-partitions a subscription covers, and where offsets are.

The driver plans every read from these answers (Spark's KafkaOffsetReader plays this part for the
Kafka source). They are Metadata and ListOffsets requests of gregor.client, with the very settings
the executors read with, so both sides agree on the brokers, on security, and on where a partition
ends: under kafka.isolation.level=read_committed "latest" is the last stable offset, which is where
the executors' reads of the planned ranges stop too. Metadata requests never create topics.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from gregor.spark.errors import GregorOptionError, GregorSourceError, report_data_loss
from gregor.spark.options import EARLIEST, LATEST, OffsetSpec, Subscription, TopicPartitionKey

T = TypeVar("T")


class KafkaMetadata:
    """Metadata and offsets of a cluster. Retriable failures (a leader moving, a broker restarting) are
    retried by the client as the executors' reads are; whatever still fails is tried again
    `fetchOffset.numRetries` times, `fetchOffset.retryIntervalMs` apart, as Spark does."""

    def __init__(self, settings: Mapping[str, Any], *, retries: int = 3, retry_interval_ms: int = 10) -> None:
        from gregor.client.cluster import Cluster
        from gregor.client.reader_config import ReaderConfig

        self._cfg = ReaderConfig.parse(settings)
        self._cluster = Cluster(self._cfg)
        self._retries = retries
        self._retry_interval_s = retry_interval_ms / 1000.0
        self.bootstrap = self._cfg.bootstrap_servers

    def close(self) -> None:
        self._cluster.close()

    def _retry(self, what: str, fn: Callable[[], T]) -> T:
        from gregor.client.errors import AuthenticationError, ReaderError

        for attempt in range(self._retries + 1):
            try:
                return fn()
            except AuthenticationError as e:
                raise GregorSourceError(f"{what} against {self.bootstrap} failed: {e}") from e
            except ReaderError as e:
                if attempt == self._retries:
                    raise GregorSourceError(f"{what} failed against {self.bootstrap} after "
                                            f"{self._retries + 1} attempts: {e}") from e
                time.sleep(self._retry_interval_s)
        raise AssertionError("unreachable")

    def topics(self) -> dict[str, int]:
        """Every topic the cluster reports, with its partition count (topics in error are left out)."""
        return self._retry("Metadata request", self._cluster.topics)

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
        by_topic: dict[str, dict[int, int]] = {}
        for (t, p), ts in sorted(requests.items()):
            by_topic.setdefault(t, {})[p] = ts
        out: dict[TopicPartitionKey, int] = {}
        committed = self._cfg.read_committed
        for t, stamps in by_topic.items():
            found = self._retry(f"{what} of topic {t}", functools.partial(self._cluster.list_offsets, t, stamps,
                                                                          committed))
            out.update({(t, p): off for p, off in found.items()})
        return out

    def earliest(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        return self._list(dict.fromkeys(tps, EARLIEST), "Looking up earliest offsets")

    def latest(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        return self._list(dict.fromkeys(tps, LATEST), "Looking up latest offsets")

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
