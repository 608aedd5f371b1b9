"""Replica fetchers: a follower's partitions fetched from their leaders (Kafka's ReplicaFetcherManager).

One fetcher task per (source broker, fetcher id), `num.replica.fetchers` of them per source broker, a
partition going to fetcher `hash(partition) % num.replica.fetchers`. Each keeps one BrokerClient to its
leader and loops: one Fetch v12 (replica_id = our broker id) for all its active partitions at their LEO,
carrying the leader epoch we know and the latest epoch in our leader-epoch cache, so the leader can
answer a divergence (KIP-320/KIP-595) instead of records; then per partition: records are appended as
they arrived (the log validates them with the follower rules in one walk: no per-record Python work),
the leader's HW is taken; a diverging epoch truncates exactly the divergent tail; errors pause or delay
the partition. At most one fetch is in flight per fetcher and its response is bounded by
`replica.fetch.response.max.bytes`, so a slow follower never buffers more than that per leader.

Everything runs on the event loop; the ReplicaManager adds and removes partitions as the metadata says.
`num.replica.fetchers` is dynamic (a cluster-wide broker config, as in Kafka): `resize` spreads the
partitions over the new number of fetchers without a restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gregor.client.broker_client import BrokerClient, BrokerConnectionError
from gregor.configdef import Settings, setting
from gregor.metadata.cache import MetadataCache
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.messages.fetch import FETCH
from gregor.replication.quota import ReplicationQuota
from gregor.security.inter_broker import ClientSecurity
from gregor.storage.errors import StorageError
from gregor.storage.leader_epoch import LeaderEpochFileCache

if TYPE_CHECKING:
    from gregor.replication.partition import Partition

log = logging.getLogger("gregor.replica.fetcher")

TopicPartition = tuple[str, int]
FETCH_VERSION = 12

# How soon a partition held back by the follower throttle is looked at again.
_THROTTLE_RECHECK_S = 0.1
# Errors after which the partition waits for our metadata to change (we are behind the leader's epoch).
_PAUSE = {ErrorCode.FENCED_LEADER_EPOCH}
# Errors after which the partition is retried after replica.fetch.backoff.ms: the leader is behind us
# (it has not applied the new state yet) or cannot serve it now.
_RETRY = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
          ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.REPLICA_NOT_AVAILABLE,
          ErrorCode.LEADER_NOT_AVAILABLE}


def truncation_offset(cache: LeaderEpochFileCache, log_end_offset: int, high_watermark: int,
                      diverging_epoch: int, diverging_end_offset: int) -> int:
    """Where a follower truncates to on a diverging epoch (epoch E, end offset O) from its leader: the
    leader's history ends epoch E at O; ours ends our largest epoch <= E at some offset; the logs agree
    below the smaller of the two (Kafka's rule). A leader that knows no such epoch (-1) leaves us only the
    HW as a point both are known to share."""
    if diverging_epoch < 0 or diverging_end_offset < 0:
        return min(high_watermark, log_end_offset)
    ours_epoch, ours_end = cache.end_offset_for(diverging_epoch, log_end_offset)
    if ours_epoch < 0 or ours_end < 0:
        return min(diverging_end_offset, log_end_offset)
    return min(diverging_end_offset, ours_end, log_end_offset)


def follow_log_start(part: Partition, leader_log_start_offset: int, now_ms: int) -> None:
    """A follower's log start follows the leader's (retention and DeleteRecords happened there), never
    past its own HW: the segments wholly below it go, as on the leader."""
    lg = part.log
    if leader_log_start_offset > lg.log_start_offset:
        target = min(leader_log_start_offset, lg.high_watermark)
        if target > lg.log_start_offset:
            lg.delete_records(target, now_ms)


@dataclass(frozen=True, slots=True)
class ReplicaFetcherSettings(Settings):
    """What the fetchers read of the broker's config. `num.replica.fetchers` is dynamic: this is its value
    at start; a change reaches the manager through `resize`."""

    broker_id: int = setting("broker.id")
    num_fetchers: int = setting("num.replica.fetchers")
    max_wait_ms: int = setting("replica.fetch.wait.max.ms")
    min_bytes: int = setting("replica.fetch.min.bytes")
    response_max_bytes: int = setting("replica.fetch.response.max.bytes")
    partition_max_bytes: int = setting("replica.fetch.max.bytes")
    backoff_ms: int = setting("replica.fetch.backoff.ms")
    socket_timeout_ms: int = setting("replica.socket.timeout.ms")
    message_max_bytes: int = setting("message.max.bytes")


@dataclass(slots=True)
class FetchState:
    """One partition in a fetcher: the leader epoch it fetches at, and whether it waits."""

    leader_epoch: int
    paused: bool = False  # until our metadata changes (a new epoch re-adds it)
    delayed_until: float = 0.0  # monotonic seconds: retried after the backoff


class ReplicaFetcher:
    """One task fetching a set of partitions from one leader broker."""

    def __init__(self, manager: ReplicaFetcherManager, source: int, fetcher_id: int) -> None:
        self.manager = manager
        self.source = source
        self.fetcher_id = fetcher_id
        self.partitions: dict[TopicPartition, FetchState] = {}
        self._wake = asyncio.Event()
        self._client: BrokerClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _active(self) -> list[TopicPartition]:
        now = time.monotonic()
        return [k for k, s in self.partitions.items() if not s.paused and s.delayed_until <= now]

    def _next_delay(self) -> float | None:
        delayed = [s.delayed_until for s in self.partitions.values() if not s.paused and s.delayed_until > 0]
        return max(0.0, min(delayed) - time.monotonic()) if delayed else None

    async def _run(self) -> None:
        m = self.manager
        backoff_s = m.backoff_ms / 1000.0
        while not self._stopping:
            active = self._active()
            if not active:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), self._next_delay())
                except TimeoutError:
                    pass
                continue
            try:
                await self._fetch_once(active)
            except (BrokerConnectionError, TimeoutError, OSError) as e:
                if self._stopping:
                    return
                log.warning("broker %d: fetching from broker %d failed: %s; retrying in %.0f ms",
                            m.broker_id, self.source, e, backoff_s * 1000)
                if self._client is not None:
                    self._client.close()
                    self._client = None
                await asyncio.sleep(backoff_s)
            except Exception:  # a bug must not end replication from this leader silently: logged, retried
                log.exception("broker %d: fetcher %d from broker %d failed", m.broker_id, self.fetcher_id,
                              self.source)
                if self._client is not None:
                    self._client.close()
                    self._client = None
                await asyncio.sleep(backoff_s)

    def _connect(self) -> BrokerClient:
        if self._client is None or self._client.closed:
            m = self.manager
            info = m.metadata_cache.broker(self.source)
            if info is None:
                raise BrokerConnectionError(f"broker {self.source} is not live")
            self._client = BrokerClient(info.host, info.port, f"broker-{m.broker_id}-fetcher-{self.fetcher_id}",
                                        max_in_flight=1, max_response_bytes=m.max_response_bytes,
                                        security=m.security)
        return self._client

    def _throttled(self, key: TopicPartition, part: Partition) -> bool:
        """A replica this broker copies under follower.replication.throttled.* (outside the ISR, named by
        its topic's follower.replication.throttled.replicas) while a rate is set."""
        m = self.manager
        return (m.follower_quota.active and m.broker_id not in part.isr and part.log_config is not None
                and part.log_config.throttles(key[1], m.broker_id, leader_side=False))

    async def _fetch_once(self, active: list[TopicPartition]) -> None:
        m = self.manager
        requested: list[tuple[TopicPartition, Partition, int, int]] = []
        topics: dict[str, list[dict[str, Any]]] = {}
        held_back = m.follower_quota.active and m.follower_quota.exceeded()
        for key in active:
            part = m.partition(key)
            if part is None:
                self.partitions.pop(key, None)
                continue
            state = self.partitions[key]
            if held_back and self._throttled(key, part):  # past the follower throttle: not fetched this round
                state.delayed_until = time.monotonic() + _THROTTLE_RECHECK_S
                continue
            try:
                lg = part.log
            except (KafkaError, StorageError, OSError) as e:
                log.warning("%s-%d: no log to fetch into: %s", key[0], key[1], e)
                state.delayed_until = time.monotonic() + m.backoff_ms / 1000.0
                continue
            leo = lg.log_end_offset
            latest = lg.leader_epoch_cache.latest_epoch
            topics.setdefault(key[0], []).append({
                "partition": key[1], "current_leader_epoch": state.leader_epoch, "fetch_offset": leo,
                "last_fetched_epoch": -1 if latest is None else latest, "log_start_offset": lg.log_start_offset,
                "partition_max_bytes": m.partition_max_bytes,
            })
            requested.append((key, part, state.leader_epoch, leo))
        if not requested:
            return
        body = {"replica_id": m.broker_id, "max_wait_ms": m.max_wait_ms, "min_bytes": m.min_bytes,
                "max_bytes": m.response_max_bytes, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                "forgotten_topics_data": [], "rack_id": ""}
        client = self._connect()
        resp = await client.request(FETCH, FETCH_VERSION, body, timeout_s=m.socket_timeout_s)
        if resp.error_code != ErrorCode.NONE:
            raise BrokerConnectionError(f"fetch refused by broker {self.source}: {ErrorCode(resp.error_code).name}")
        answers = {(t.topic, p.partition_index): p for t in resp.responses for p in t.partitions}
        now_ms = int(time.time() * 1000)
        for key, part, epoch, leo in requested:
            a = answers.get(key)
            state = self.partitions.get(key)
            # Moved on meanwhile (removed, re-targeted, a new epoch, truncated): this answer is stale.
            if a is None or state is None or state.leader_epoch != epoch or m.partition(key) is not part \
                    or part.log_end_offset != leo:
                continue
            self._process(key, part, state, a, leo, now_ms)
            if a.records is not None and self._throttled(key, part):
                m.follower_quota.record(len(a.records))
            if a.records is not None and len(a.records) > 0:
                # Kafka's order: a partition that got data goes to the back, so the response budget and
                # the one-whole-batch allowance of the first partition (KIP-74) come round to every one.
                self.partitions[key] = self.partitions.pop(key)

    def _process(self, key: TopicPartition, part: Partition, state: FetchState, a: Any, leo: int,
                 now_ms: int) -> None:
        m = self.manager
        err = a.error_code
        try:
            if err == ErrorCode.NONE:
                div = a.diverging_epoch
                if div is not None and (div.epoch >= 0 or div.end_offset >= 0):
                    lg = part.log
                    to = truncation_offset(lg.leader_epoch_cache, lg.log_end_offset, lg.high_watermark,
                                           div.epoch, div.end_offset)
                    log.info("%s-%d: diverged from leader %d (its epoch %d ends at %d): truncating to %d",
                             key[0], key[1], self.source, div.epoch, div.end_offset, to)
                    part.truncate_to(to, now_ms)
                    return
                records = a.records
                if records is not None and len(records) > 0:
                    part.append_records_as_follower(memoryview(records), None, a.high_watermark, now_ms)
                    m.on_follower_progress(key)
                else:
                    before = part.high_watermark
                    if part.update_follower_high_watermark(a.high_watermark) > before:
                        m.on_follower_progress(key)  # consumers reading from this follower (KIP-392) see more
                follow_log_start(part, a.log_start_offset, now_ms)
                return
            if err == ErrorCode.OFFSET_OUT_OF_RANGE:
                lg = part.log
                if leo < a.log_start_offset:  # the leader deleted what we lack: start over at its log start
                    log.warning("%s-%d: offset %d is below leader %d's log start %d: truncating fully",
                                key[0], key[1], leo, self.source, a.log_start_offset)
                    lg.truncate_fully_and_start_at(a.log_start_offset, now_ms)
                else:  # above the leader's end (an unclean election): keep what both surely share
                    to = min(a.high_watermark, leo) if a.high_watermark >= 0 else lg.high_watermark
                    log.warning("%s-%d: offset %d is out of leader %d's range: truncating to %d",
                                key[0], key[1], leo, self.source, to)
                    part.truncate_to(to, now_ms)
                return
        except (KafkaError, StorageError, OSError, ValueError) as e:
            log.error("%s-%d: appending what leader %d sent failed: %s; retrying in %d ms",
                      key[0], key[1], self.source, e, m.backoff_ms)
            state.delayed_until = time.monotonic() + m.backoff_ms / 1000.0
            if isinstance(e, (StorageError, OSError)) and m.on_storage_error is not None:
                m.on_storage_error(key, e)  # an I/O error fails the log's whole dir (JBOD)
            return
        name = ErrorCode(err).name
        if err in _PAUSE:
            log.info("%s-%d: leader %d answered %s: waiting for newer metadata", key[0], key[1], self.source, name)
            state.paused = True
        else:
            if err not in _RETRY:
                log.warning("%s-%d: leader %d answered %s", key[0], key[1], self.source, name)
            state.delayed_until = time.monotonic() + m.backoff_ms / 1000.0


class ReplicaFetcherManager:
    """The fetchers of this broker, by (source broker, fetcher id); created on first use, stopped when
    they have nothing left to fetch."""

    def __init__(self, settings: ReplicaFetcherSettings, security: ClientSecurity, metadata_cache: MetadataCache,
                 partition: Callable[[TopicPartition], Partition | None],
                 on_follower_progress: Callable[[TopicPartition], None],
                 follower_quota: ReplicationQuota | None = None) -> None:
        """`security`: how this broker connects to its peers (the broker's one inter-broker ClientSecurity)."""
        self.security = security
        self.follower_quota = follower_quota or ReplicationQuota()
        self.broker_id = settings.broker_id
        self.metadata_cache = metadata_cache
        self.partition = partition
        self.on_follower_progress = on_follower_progress
        # Told of a storage error appending to a follower's log (the replica manager fails its log dir on I/O errors).
        self.on_storage_error: Callable[[TopicPartition, BaseException], None] | None = None
        self.num_fetchers = settings.num_fetchers
        self.max_wait_ms = settings.max_wait_ms
        self.min_bytes = settings.min_bytes
        self.response_max_bytes = settings.response_max_bytes
        self.partition_max_bytes = settings.partition_max_bytes
        self.backoff_ms = settings.backoff_ms
        self.socket_timeout_s = max(settings.socket_timeout_ms, self.max_wait_ms + 1000) / 1000.0
        # The leader may exceed the byte bounds by one whole batch (KIP-74), at most message.max.bytes.
        self.max_response_bytes = (self.response_max_bytes + max(self.partition_max_bytes,
                                                                 settings.message_max_bytes) + (1 << 16))
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._where: dict[TopicPartition, tuple[int, int]] = {}
        self._stopped = False

    def wake_all(self) -> None:
        for f in self.fetchers.values():
            f.wake()

    def fetcher_id(self, key: TopicPartition) -> int:
        return zlib.crc32(f"{key[0]}-{key[1]}".encode()) % self.num_fetchers

    def leader_of(self, key: TopicPartition) -> int | None:
        """The broker `key` is fetched from, or None."""
        where = self._where.get(key)
        return None if where is None else where[0]

    def add_partition(self, key: TopicPartition, leader: int, leader_epoch: int) -> None:
        """Fetch `key` from `leader` at `leader_epoch` (from our LEO); a new leader re-targets it, a new epoch
        un-pauses it."""
        if self._stopped:
            return
        where = (leader, self.fetcher_id(key))
        old = self._where.get(key)
        if old is not None and old != where:
            self.remove_partition(key)
        fetcher = self.fetchers.get(where)
        if fetcher is None:
            fetcher = self.fetchers[where] = ReplicaFetcher(self, leader, where[1])
            fetcher.start()
        state = fetcher.partitions.get(key)
        if state is None or state.leader_epoch != leader_epoch:
            fetcher.partitions[key] = FetchState(leader_epoch)
            log.info("broker %d: fetching %s-%d from broker %d at leader epoch %d",
                     self.broker_id, key[0], key[1], leader, leader_epoch)
        self._where[key] = where
        fetcher.wake()

    def remove_partition(self, key: TopicPartition) -> None:
        where = self._where.pop(key, None)
        if where is None:
            return
        fetcher = self.fetchers.get(where)
        if fetcher is None:
            return
        fetcher.partitions.pop(key, None)
        if not fetcher.partitions:
            del self.fetchers[where]
            asyncio.ensure_future(fetcher.stop())

    def resize(self, num_fetchers: int) -> None:
        """A new `num.replica.fetchers` at runtime (Kafka's AbstractFetcherManager.resizeThreadPool): every
        partition goes to fetcher hash % num_fetchers of its leader, keeping its fetch state (epoch, pause,
        backoff); a fetcher left without partitions stops, a new one starts. A fetch in flight for a moved
        partition is answered to the old fetcher, which no longer holds it and drops the answer (the
        partition's new fetcher fetches again from the log end, so nothing is appended twice)."""
        assert num_fetchers >= 1, num_fetchers
        if num_fetchers == self.num_fetchers or self._stopped:
            return
        self.num_fetchers = num_fetchers
        moved = 0
        for key, where in list(self._where.items()):
            new = (where[0], self.fetcher_id(key))
            if new == where:
                continue
            old = self.fetchers.get(where)
            state = old.partitions.pop(key, None) if old is not None else None
            if state is None:  # dropped by its fetcher meanwhile (its partition is gone)
                del self._where[key]
                continue
            fetcher = self.fetchers.get(new)
            if fetcher is None:
                fetcher = self.fetchers[new] = ReplicaFetcher(self, new[0], new[1])
                fetcher.start()
            fetcher.partitions[key] = state
            self._where[key] = new
            fetcher.wake()
            moved += 1
        for where, fetcher in list(self.fetchers.items()):
            if not fetcher.partitions:
                del self.fetchers[where]
                asyncio.ensure_future(fetcher.stop())
        log.info("broker %d: num.replica.fetchers=%d: %d partitions moved, %d fetchers now",
                 self.broker_id, num_fetchers, moved, len(self.fetchers))

    def remove_all(self) -> None:
        for key in list(self._where):
            self.remove_partition(key)

    def fetching(self) -> dict[TopicPartition, int]:
        """Every partition fetched and its source broker (for tests and tools)."""
        return {k: w[0] for k, w in self._where.items()}

    async def shutdown(self) -> None:
        self._stopped = True
        fetchers = list(self.fetchers.values())
        self.fetchers.clear()
        self._where.clear()
        await asyncio.gather(*(f.stop() for f in fetchers), return_exceptions=True)
