"""Partition: one hosted replica of a partition, as its leader (or follower) sees it.

It holds what the metadata says (leader, leader epoch, assigned replicas, ISR), what the leader
learns from its followers' fetches (each follower's LEO and last caught-up time), and the rules
that tie them to the log: the high watermark is the smallest LEO in the ISR and never moves back;
acks=all is satisfied once the HW passes a batch and the ISR still has min.insync.replicas;
requests carrying a leader epoch are fenced against ours. With one replica the ISR is the leader
alone and the HW follows the LEO at each append, through the same code.

Every method runs on the event loop; the Log's own lock covers its worker threads.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from dataclasses import dataclass

from gregor.metadata.store import PartitionState
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.messages.list_offsets import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from gregor.protocol.records import BatchHeader
from gregor.replication.flushes import PendingFlushes
from gregor.storage.config import LogConfig
from gregor.storage.errors import OffsetOutOfRangeError
from gregor.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from gregor.storage.log import FetchDataInfo, Log
from gregor.storage.txn_index import AbortedTxn

log = logging.getLogger("gregor.partition")

TopicPartition = tuple[str, int]

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
FETCH_LOG_END = -1  # isolation of a follower's read (and a replica's ListOffsets): up to the LEO

# How many appends above the HW the partition remembers the byte positions of (for fetch.min.bytes);
# beyond it the oldest are forgotten and a delayed fetch counts fewer bytes until the HW passes them.
MAX_TRACKED_APPENDS = 10_000


class AppendedBytes:
    """Bytes appended through one Partition, up to its LEO (`total`) and up to its HW: what a delayed
    fetch's fetch.min.bytes counts, where the log counts offsets. Appends above the HW are remembered as
    (end offset, bytes appended up to it) until the HW passes them. Loop thread only."""

    __slots__ = ("total", "at_high_watermark", "_above_hw")

    def __init__(self) -> None:
        self.total = 0
        self.at_high_watermark = 0
        # Created on first use: an empty deque costs 760 bytes, 100,000 partitions 76 MB.
        self._above_hw: collections.deque[tuple[int, int]] | None = None

    def above_high_watermark(self, end_offset: int) -> None:
        """The append up to `end_offset` (already counted in `total`) is above the HW: remembered until the
        HW passes it (the oldest forgotten past MAX_TRACKED_APPENDS)."""
        if self._above_hw is None:
            self._above_hw = collections.deque()
        self._above_hw.append((end_offset, self.total))
        if len(self._above_hw) > MAX_TRACKED_APPENDS:
            self._above_hw.popleft()

    def high_watermark_moved(self, hw: int, log_end_offset: int) -> None:
        """The HW is now `hw`: the bytes at it are those of the last remembered append it passed."""
        if hw >= log_end_offset:
            self._above_hw = None
            self.at_high_watermark = self.total
        elif self._above_hw is not None:
            while self._above_hw and self._above_hw[0][0] <= hw:
                self.at_high_watermark = self._above_hw.popleft()[1]

    def truncated(self) -> None:
        """The log was truncated (a follower diverged): nothing above the HW is remembered any more."""
        self._above_hw = None
        self.at_high_watermark = self.total


@dataclass(slots=True)
class ReplicaState:
    """The leader's view of one follower, from its fetches (Kafka's Replica state)."""

    broker_id: int
    log_end_offset: int = -1  # unknown until it fetches
    last_caught_up_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = -1
    last_fetch_time_ms: int = 0
    last_sent_high_watermark: int = -1  # the HW its last fetch response carried (KIP-392: see read_path)

    def reset(self, now_ms: int, in_isr: bool) -> None:
        """A new leader epoch: nothing is known of the follower until it fetches again. An ISR member is
        taken as caught up now (so it is not dropped before it had a chance to fetch)."""
        self.log_end_offset = -1
        self.last_fetch_leader_log_end_offset = -1
        self.last_fetch_time_ms = 0
        self.last_sent_high_watermark = -1
        self.last_caught_up_time_ms = now_ms if in_isr else 0

    def update_fetch_state(self, fetch_offset: int, leader_log_end_offset: int, now_ms: int) -> None:
        """Kafka's rule: a fetch at the leader's LEO means caught up now; a fetch at or past the LEO the
        leader had at the previous fetch means caught up as of that previous fetch."""
        if fetch_offset >= leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = leader_log_end_offset
        self.last_fetch_time_ms = now_ms

    def is_caught_up(self, leader_log_end_offset: int, now_ms: int, lag_time_max_ms: int) -> bool:
        return self.log_end_offset >= leader_log_end_offset or \
            now_ms - self.last_caught_up_time_ms <= lag_time_max_ms


@dataclass(slots=True)
class AppendResult:
    """One partition's append: its offsets, or an error (and the offset acks=all waits for)."""

    error: ErrorCode
    base_offset: int = -1
    last_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    message: str | None = None
    flush_due: bool = False  # a flush.messages fsync of this append is left to the caller


@dataclass(slots=True)
class ReadResult:
    """One partition's read for a Fetch."""

    error: ErrorCode
    records: memoryview | bytes = b""
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset): the fetcher must truncate
    preferred_read_replica: int = -1  # KIP-392: the consumer should fetch from this replica instead
    aborted: list[AbortedTxn] | None = None  # read_committed: aborted transactions overlapping the records


class Partition:
    """One hosted partition: its log, and the leader/ISR state this broker last learnt.

    The log may not exist yet: partitions are registered as soon as the metadata names them, and
    their logs are created in the background (ReplicaManager); `log` creates a missing one at once
    through `open_log` when a request needs it first."""

    def __init__(self, topic: str, index: int, log_: Log | None, state: PartitionState, broker_id: int,
                 min_insync_replicas: int, compression_type: str = "producer",
                 open_log: Callable[[Partition], Log] | None = None, log_config: LogConfig | None = None,
                 now_ms: int = 0) -> None:
        self.topic = topic
        self.index = index
        self._log = log_
        self._open_log = open_log
        self.log_config = log_config  # what a log created later opens with
        self.broker_id = broker_id
        self.min_insync_replicas = min_insync_replicas
        self.compression_type = compression_type  # a topic config; "producer" keeps what clients send
        self.followers: dict[int, ReplicaState] = {}
        self.leader_id = -1
        self.leader_epoch = -1
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.bytes = AppendedBytes()  # up to the LEO and the HW, for fetch.min.bytes
        # flush.messages: the appends whose fsync runs off the loop and has not finished, and the Produce
        # answers waiting for it (`flush_after_append`); the HW stays below the first. None while idle.
        self.flushes: PendingFlushes | None = None
        # The LEO when this broker last became leader: a follower joins the ISR only once it fetched past it
        # (it then holds everything of the current epoch).
        self.leader_epoch_start_offset = 0
        # An ISR change this leader has written and not yet seen committed (one at a time). Until then the
        # HW counts the union of both ISRs (Kafka's maximal ISR: an expansion is counted at once, a shrink
        # only once committed), so it is never less safe than either.
        self.pending_isr: list[int] | None = None
        # The store's session is lost (SESSION "lost"): this broker must not act as leader until restored,
        # or a broker frozen past its session would acknowledge writes a new leader never sees.
        self.fenced = False
        self.apply_state(state, now_ms)

    # --- the log ---------------------------------------------------------------------
    @property
    def log(self) -> Log:
        lg = self._log
        if lg is None:
            if self._open_log is None:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "the partition has no log")
            lg = self._open_log(self)
        return lg

    @property
    def has_log(self) -> bool:
        return self._log is not None

    def attach_log(self, log_: Log) -> None:
        """The log created for this partition (in the background or on first use)."""
        if self._log is None:
            self._log = log_
            if self.log_config is not None and log_.config != self.log_config:
                log_.update_config(self.log_config)
            if self.leader_id == self.broker_id:
                self._make_leader_log(log_)
            self.maybe_increment_high_watermark()

    def update_log_config(self, cfg: LogConfig) -> None:
        """The topic's configs changed (its overrides or the broker's defaults): applied to the partition
        and to its log at once."""
        self.min_insync_replicas = cfg.min_insync_replicas
        self.compression_type = cfg.compression_type
        self.log_config = cfg
        if self._log is not None and self._log.config != cfg:
            self._log.update_config(cfg)

    def replace_log(self, log_: Log) -> None:
        """The log moved to another log dir (AlterReplicaLogDirs): the same records, offsets, epochs and
        producer state, now read and written in the new place."""
        self._log = log_

    @property
    def high_watermark(self) -> int:
        return self._log.high_watermark if self._log is not None else 0

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset if self._log is not None else 0

    # --- metadata --------------------------------------------------------------------
    def apply_state(self, state: PartitionState, now_ms: int) -> bool:
        """The metadata's leader, epoch, replicas and ISR. Returns whether leadership changed (a new
        leader or a new epoch), which completes the requests parked on this partition. A state with an
        older leader epoch than ours is stale and ignored (epochs never move back)."""
        if state.leader_epoch < self.leader_epoch:
            log.warning("%s-%d: ignored a stale partition state (leader epoch %d, ours %d)",
                        self.topic, self.index, state.leader_epoch, self.leader_epoch)
            return False
        changed = state.leader != self.leader_id or state.leader_epoch != self.leader_epoch
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.replicas = list(state.replicas)
        self.isr = list(state.isr)
        remote = [r for r in self.replicas if r != self.broker_id]
        for r in list(self.followers):
            if r not in remote:
                del self.followers[r]
        for r in remote:
            f = self.followers.get(r)
            if f is None:
                f = self.followers[r] = ReplicaState(r)
                f.reset(now_ms, r in self.isr)
            elif changed:
                f.reset(now_ms, r in self.isr)
        if changed and self.leader_id == self.broker_id and self._log is not None:
            self._make_leader_log(self._log)
        if changed:
            self.pending_isr = None  # a new epoch's ISR is the controller's, not our write in flight
        self.maybe_increment_high_watermark()
        return changed

    def _make_leader_log(self, lg: Log) -> None:
        """Kafka's makeLeader: the new epoch starts at our LEO in the leader-epoch cache now, not at our
        first append in it, so a follower's diverging-epoch answer is exact even before we append."""
        lg.assign_leader_epoch(self.leader_epoch)
        self.leader_epoch_start_offset = lg.log_end_offset

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id and not self.fenced

    @property
    def maximal_isr(self) -> list[int]:
        """The ISR the HW is computed over: the committed one, plus the members of an expansion in flight."""
        pending = self.pending_isr
        if pending is None:
            return self.isr
        return self.isr + [r for r in pending if r not in self.isr]

    def isr_expansion_candidate(self, replica_id: int) -> bool:
        """Kafka's rule: a follower outside the ISR joins once its LEO reached the HW and the start of the
        current leader epoch (it then holds every record the ISR acknowledged and everything of this epoch)."""
        if not self.is_leader or replica_id in self.isr or replica_id not in self.replicas:
            return False
        f = self.followers.get(replica_id)
        return (f is not None and f.log_end_offset >= self.high_watermark
                and f.log_end_offset >= self.leader_epoch_start_offset)

    def check_leader_epoch(self, requested: int) -> None:
        """Fetch v9+, ListOffsets v4+ and OffsetForLeaderEpoch v2+ carry the sender's idea of the epoch;
        -1 means unknown. Older: FENCED_LEADER_EPOCH; newer: UNKNOWN_LEADER_EPOCH (we are behind)."""
        if requested < 0 or requested == self.leader_epoch:
            return
        if requested < self.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH,
                             f"leader epoch {requested} is older than the current {self.leader_epoch}")
        raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                         f"leader epoch {requested} is newer than the current {self.leader_epoch}")

    def _leader_log(self) -> Log:
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {self.broker_id} is not the leader of {self.topic}-{self.index}")
        return self.log

    # --- appends and the high watermark ----------------------------------------------
    def append_records_to_leader(self, records: memoryview, headers: list[BatchHeader], required_acks: int,
                                 now_ms: int, defer_flush: bool = False, client: bool = True) -> AppendResult:
        """Append validated batches as leader. acks=all is refused before the append when the ISR is
        smaller than min.insync.replicas (NOT_ENOUGH_REPLICAS); its wait for the HW is the caller's
        (DelayedProduce). With `defer_flush`, a flush.messages fsync the append makes due is left to the
        caller (`result.flush_due`: `flush_after_append`), and the HW stays below this append until it ran."""
        lg = self._leader_log()
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"The size of the current ISR {len(self.isr)} is insufficient to satisfy the min.isr "
                f"requirement of {self.min_insync_replicas} for partition {self.topic}-{self.index}",
            )
        info = lg.append_as_leader(records, headers, self.leader_epoch, now_ms, defer_flush=defer_flush, client=client)
        flush_due = defer_flush and lg.unflushed_messages >= lg.config.flush_messages
        if flush_due:
            self._pending_flushes().add_append(info.first_offset, info.last_offset + 1)
        self.bytes.total += info.size_bytes
        self.maybe_increment_high_watermark()
        if self.high_watermark < info.last_offset + 1:
            self.bytes.above_high_watermark(info.last_offset + 1)
        return AppendResult(ErrorCode.NONE, info.first_offset, info.last_offset, info.log_append_time_ms,
                            info.log_start_offset, flush_due=flush_due)

    def flush_after_append(self, end_offset: int, on_progress: Callable[[TopicPartition], None],
                           on_flush_ms: Callable[[float], None] | None = None) -> asyncio.Future[None]:
        """flush.messages: a future done once the log is fsynced up to `end_offset` (its exception if the
        fsync failed), run off the loop (flushes.PendingFlushes). `on_progress(key)` is told when the HW
        moves once a flush is done; `on_flush_ms(ms)` (the metrics' flush time histogram) how long it took."""
        return self._pending_flushes().wait(end_offset, lambda: self._flushed(on_progress), on_flush_ms)

    def _pending_flushes(self) -> PendingFlushes:
        if self.flushes is None:
            self.flushes = PendingFlushes(f"{self.topic}-{self.index}", lambda: self.log)
        return self.flushes

    def _flushed(self, on_progress: Callable[[TopicPartition], None]) -> None:
        """An fsync finished: the HW may pass what it covered."""
        if self.flushes is not None and self.flushes.idle:
            self.flushes = None
        if self.maybe_increment_high_watermark():
            on_progress((self.topic, self.index))

    def maybe_increment_high_watermark(self) -> bool:
        """HW = the smallest LEO in the ISR (a follower that has not fetched since this epoch began holds
        it where it is); it never moves back, and followers outside the ISR do not hold it. Returns
        whether it moved: the caller then lets the purgatory re-check this partition."""
        if not self.is_leader or self._log is None:
            return False
        lg = self._log
        new_hw = lg.log_end_offset
        for r in self.maximal_isr:
            if r != self.broker_id:
                f = self.followers.get(r)
                leo = f.log_end_offset if f is not None else -1
                if leo < new_hw:
                    new_hw = leo
        if self.flushes is not None and (unflushed := self.flushes.first_unflushed()) is not None \
                and unflushed < new_hw:
            new_hw = unflushed
        if new_hw <= lg.high_watermark:
            return False
        moved = lg.maybe_increment_high_watermark(new_hw)
        if moved:
            self.bytes.high_watermark_moved(new_hw, lg.log_end_offset)
        assert lg.log_start_offset <= lg.high_watermark <= lg.log_end_offset, lg
        return moved

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """A follower fetched from `fetch_offset`: that is its LEO. Returns whether the HW moved."""
        f = self.followers.get(replica_id)
        assert f is not None, replica_id
        f.update_fetch_state(fetch_offset, self.log_end_offset, now_ms)
        return self.maybe_increment_high_watermark()

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, ErrorCode]:
        """acks=all: done once the HW reaches `required_offset` (a batch's last offset + 1); then
        NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below min.insync.replicas meanwhile.
        NOT_LEADER_OR_FOLLOWER (done) if leadership moved away."""
        if not self.is_leader or self._log is None:
            return False, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self._log.high_watermark >= required_offset:
            if len(self.isr) >= self.min_insync_replicas:
                return True, ErrorCode.NONE
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return False, ErrorCode.NONE

    def out_of_sync_replicas(self, now_ms: int, lag_time_max_ms: int) -> list[int]:
        """ISR members that have not caught up within replica.lag.time.max.ms (candidates to drop from
        the ISR; the change itself goes through the controller)."""
        leo = self.log_end_offset
        return [r for r in self.isr if r != self.broker_id and (
                r not in self.replicas  # reassigned away meanwhile
                or (f := self.followers.get(r)) is not None and not f.is_caught_up(leo, now_ms, lag_time_max_ms))]

    # --- as follower (the replica fetcher drives these) -------------------------------------
    def append_records_as_follower(self, records: memoryview, headers: list[BatchHeader] | None,
                                   leader_high_watermark: int, now_ms: int) -> int:
        """Append batches fetched from the leader (offsets and epochs as the leader assigned them) and take
        the leader's HW, capped at our LEO. Returns the new LEO. Refused while this broker leads. Without
        `headers` the batches are validated with the follower rules (the log's walk, no per-record work)."""
        if self.leader_id == self.broker_id:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {self.broker_id} leads {self.topic}-{self.index}: it appends as leader")
        lg = self.log
        info = lg.append_as_follower(records, headers, now_ms)
        self.bytes.total += info.size_bytes
        self.bytes.above_high_watermark(lg.log_end_offset)  # consumers reading from this follower (KIP-392)
        self.update_follower_high_watermark(leader_high_watermark)
        return lg.log_end_offset

    def update_follower_high_watermark(self, leader_high_watermark: int) -> int:
        """A follower's HW is the leader's, never above its own LEO (Kafka's rule). Returns it."""
        lg = self.log
        hw = lg.update_high_watermark(min(leader_high_watermark, lg.log_end_offset))
        self.bytes.high_watermark_moved(hw, lg.log_end_offset)
        return hw

    def truncate_to(self, offset: int, now_ms: int) -> bool:
        """Drop everything from `offset` on (the follower diverged: OffsetForLeaderEpoch or a fetch's
        diverging epoch said where the leader's history and ours part). Returns whether anything went."""
        if self.leader_id == self.broker_id:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "a leader's log is never truncated to follow")
        truncated = self.log.truncate_to(offset, now_ms)
        if truncated:
            self.bytes.truncated()
        return truncated

    # --- reads ---------------------------------------------------------------------------
    def end_offset_for(self, isolation: int) -> tuple[int, int]:
        """(offset, bytes appended up to it) of where a read of this isolation stops: the LEO for a
        follower, the HW for read_uncommitted, the last stable offset for read_committed (bytes -1 when
        it is below the HW: no byte position is kept for it)."""
        if isolation == FETCH_LOG_END:
            return self.log_end_offset, self.bytes.total
        if isolation == READ_COMMITTED:
            lso = self.log.last_stable_offset
            if lso < self.high_watermark:
                return lso, -1
        return self.high_watermark, self.bytes.at_high_watermark

    def fetch_records(self, replica_id: int, fetch_offset: int, max_bytes: int, isolation: int,
                      min_one_batch: bool, now_ms: int, current_leader_epoch: int = -1,
                      last_fetched_epoch: int = -1, fetch_only_from_leader: bool = True) -> tuple[ReadResult, bool]:
        """A consumer's (`replica_id` < 0) or follower's read, as leader; or, when not
        `fetch_only_from_leader` (a consumer sent here by KIP-392's preferred read replica), a consumer's
        read from this follower, below the HW it learnt from the leader. Returns the result and whether
        the HW moved (a follower's fetch offset is its LEO). Raises KafkaError for fencing, leadership
        and a replica not assigned here; an offset out of range is the result's error. A fetcher whose
        last fetched epoch diverges from our history gets the epoch and end offset to truncate to, and
        no records (KIP-595/KIP-320)."""
        self.check_leader_epoch(current_leader_epoch)
        lg = self.log if not fetch_only_from_leader and replica_id < 0 and not self.fenced else self._leader_log()
        follower = None
        if replica_id >= 0:
            follower = self.followers.get(replica_id)
            if follower is None:
                # Kafka: a sender that named the current epoch is retried (it may be a replica being
                # added); one that did not uses an older protocol and is told to refresh its metadata.
                raise KafkaError(
                    ErrorCode.UNKNOWN_LEADER_EPOCH if current_leader_epoch >= 0 else ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    f"broker {replica_id} is not a follower of {self.topic}-{self.index} (replicas {self.replicas})")
        if last_fetched_epoch >= 0:
            epoch, end = lg.leader_epoch_cache.end_offset_for(last_fetched_epoch, lg.log_end_offset)
            if epoch < last_fetched_epoch or end < fetch_offset:
                hw = lg.high_watermark
                return ReadResult(ErrorCode.NONE, b"", hw, hw, lg.log_start_offset, (epoch, end)), False
        moved = False
        if follower is not None and lg.log_start_offset <= fetch_offset <= lg.log_end_offset:
            moved = self.update_follower_fetch_state(replica_id, fetch_offset, now_ms)
        hw = lg.high_watermark
        lso = lg.last_stable_offset
        max_offset = None if isolation == FETCH_LOG_END else lso if isolation == READ_COMMITTED else hw
        try:
            data: FetchDataInfo = lg.read(fetch_offset, max_bytes, max_offset, min_one_batch=min_one_batch)
        except OffsetOutOfRangeError:
            return ReadResult(ErrorCode.OFFSET_OUT_OF_RANGE, b"", hw, lso, lg.log_start_offset), moved
        aborted = None
        if isolation == READ_COMMITTED and data.next_offset > fetch_offset:
            aborted = lg.aborted_transactions(fetch_offset, data.next_offset)
        return ReadResult(ErrorCode.NONE, data.records, hw, lso, data.log_start_offset, aborted=aborted), moved

    def last_offset_for_leader_epoch(self, current_leader_epoch: int, leader_epoch: int,
                                     fetch_only_from_leader: bool) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset) of the largest epoch <= `leader_epoch` in our leader
        epoch cache; (-1, -1) when unknown. Raises KafkaError for fencing and leadership."""
        self.check_leader_epoch(current_leader_epoch)
        lg = self._leader_log() if fetch_only_from_leader else self.log
        epoch, end = lg.leader_epoch_cache.end_offset_for(leader_epoch, lg.log_end_offset)
        if end == UNDEFINED_EPOCH_OFFSET:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        return epoch, end

    def fetch_offset_for_timestamp(self, timestamp: int, isolation: int, current_leader_epoch: int,
                                   fetch_only_from_leader: bool) -> tuple[int, int, int]:
        """ListOffsets: (timestamp, offset, leader epoch) for a special timestamp (latest, earliest, max
        timestamp) or the first record at or after `timestamp`; (-1, -1, -1) when none is visible. A
        consumer sees below the HW (read_committed: the last stable offset), a replica up to the LEO."""
        self.check_leader_epoch(current_leader_epoch)
        lg = self._leader_log() if fetch_only_from_leader else self.log
        epoch = self.leader_epoch
        last = (lg.log_end_offset if isolation == FETCH_LOG_END
                else lg.last_stable_offset if isolation == READ_COMMITTED else lg.high_watermark)
        if timestamp == LATEST_TIMESTAMP:
            return -1, last, epoch
        # With no remote tier (KIP-405), the earliest local offset is the earliest, and nothing is tiered (KIP-1005).
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP):
            return -1, lg.log_start_offset, epoch
        if timestamp == MAX_TIMESTAMP:
            found = lg.max_timestamp_offset()
        elif timestamp < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {timestamp}")
        else:
            found = lg.offset_for_timestamp(timestamp)
        if found is None or found.offset >= last:
            return -1, -1, -1
        return found.timestamp, found.offset, -1 if found.leader_epoch is None else found.leader_epoch
