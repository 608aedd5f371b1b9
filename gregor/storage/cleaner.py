"""LogCleaner: log compaction, Kafka's way. Keeps the latest record of every key in logs whose
cleanup.policy has "compact" (and in the internal compacted topics), on background threads.

A log is split by the cleaner checkpoint (`cleaner-offset-checkpoint` in each log dir, the
first dirty offset of each log) into a clean head and a dirty tail:

    log start ........ first dirty ............ first uncleanable ...... active segment, LEO
    [ clean: one record per key ][ dirty: cleanable ][ uncleanable: min.compaction.lag.ms, HW ]

One clean of one log is compaction.py's Cleaner (the offset map, the rewrite, the swap); this
module is the LogCleaner around it: the threads (log.cleaner.threads), which log to clean next
(Kafka's grabFilthiestCompactedLog: the highest dirty ratio at or above
min.cleanable.dirty.ratio, or max.compaction.lag.ms passed, or a tombstone's delete horizon
passed), the cleanable range of a log, the per-log-dir checkpoint file and the partitions whose
clean failed (uncleanable until restarted or cleaned on request).

Concurrency: the cleaner never blocks produce or fetch for long. It plans from
`Log.cleaner_snapshot()`, reads segments through descriptors duplicated under the log's lock
(`Log.open_segment_readers`; closed, non-active segments are immutable except by truncation),
and takes the lock again only to swap: a few renames and one directory fsync. `Log.read`
copies the bytes it returns while holding the lock, so no read can be in progress on a
segment the swap closes. A clean planned before a truncation, a retention deletion, or
the log's closing notices at the swap (`replace_segments` returns False) and is abandoned;
the next one starts over.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gregor.protocol.primitives import DecodeError
from gregor.storage.checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile, TopicPartition
from gregor.storage.compaction import (  # noqa: F401 - CleanerStats is imported from here
    CleanAborted,
    Cleaner,
    CleanerStats,
    LogToClean,
)
from gregor.storage.config import LONG_MAX, CleanerConfig
from gregor.storage.errors import CorruptCheckpointError, StorageError
from gregor.storage.log import CleanerSnapshot, Log, now_ms
from gregor.storage.offset_map import MAP_ENTRY_BYTES

logger = logging.getLogger(__name__)

INTERNAL_COMPACTED_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
"""Kafka creates these with cleanup.policy=compact; they are compacted whatever their config says."""


def is_compacted(log: Log) -> bool:
    """Whether the cleaner compacts this log."""
    return log.config.compact or log.topic in INTERNAL_COMPACTED_TOPICS


@dataclass(slots=True)
class _Checkpoint:
    offset: int
    log: weakref.ref[Log] | None  # the Log it was taken for: a re-created partition starts afresh


# --- the cleaner ---------------------------------------------------------------------------------


class LogCleaner:
    """Compacts the compacted logs of a broker on `config.threads` background threads.

    `logs` returns the broker's current logs (LogManager.logs); `time_ms` the wall clock in ms
    (tests pass their own). `start()` starts the threads, `shutdown()` aborts any clean in
    progress and joins them; `clean_now(log)` cleans one log synchronously on the caller's
    thread. Checkpoints are written to `cleaner-offset-checkpoint` in each log dir after every
    clean. Thread-safe.
    """

    def __init__(
        self,
        log_dirs: list[str],
        logs: Callable[[], Mapping[TopicPartition, Log]],
        config: CleanerConfig | None = None,
        time_ms: Callable[[], int] = now_ms,
    ) -> None:
        self.config = config or CleanerConfig()
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self._logs = logs
        self._time_ms = time_ms
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._in_progress: set[TopicPartition] = set()
        self._uncleanable: dict[TopicPartition, weakref.ref[Log]] = {}
        self._checkpoints: dict[TopicPartition, _Checkpoint] = {}
        self._tombstone_horizons: dict[TopicPartition, tuple[int, weakref.ref[Log]]] = {}
        self._checkpoint_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.map_capacity = max(1, self.config.dedupe_buffer_size // self.config.threads // MAP_ENTRY_BYTES)
        self._load_checkpoints()

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the cleaner threads (log.cleaner.threads)."""
        if self._threads:
            return
        self._stop.clear()
        for i in range(self.config.threads):
            t = threading.Thread(target=self._run, name=f"gregor-log-cleaner-{i}", daemon=True)
            self._threads.append(t)
            t.start()
        logger.info("log cleaner started (%d threads, offset map of %d keys each)", self.config.threads,
                    self.map_capacity)

    def shutdown(self) -> None:
        """Abort cleans in progress (their .cleaned files are deleted, logs untouched) and stop the
        threads. `clean_now` still works afterwards."""
        self._stop.set()
        for t in self._threads:
            t.join()
        self._threads = []
        self._stop.clear()
        logger.info("log cleaner shut down")

    def reconfigure(self, config: CleanerConfig) -> None:
        """Take new settings (dynamic log.cleaner.* configs), as Kafka's LogCleaner does: the threads are
        stopped (a clean in progress is aborted, to be redone), then started again with them. Blocks
        until the old threads stopped: call it off the event loop."""
        was_running = bool(self._threads)
        self.shutdown()
        self.config = config
        self.map_capacity = max(1, config.dedupe_buffer_size // config.threads // MAP_ENTRY_BYTES)
        if was_running:
            self.start()

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def _run(self) -> None:
        backoff_s = self.config.backoff_ms / 1000.0
        while not self._stop.is_set():
            try:
                stats = self.clean_once()
            except Exception:  # a bug: keep the thread alive, try again later
                logger.exception("log cleaner iteration failed")
                stats = None
            if stats is None or stats.aborted:
                self._stop.wait(backoff_s)

    # --- public operations ------------------------------------------------------------------------

    def clean_once(self, now_ms: int | None = None) -> CleanerStats | None:
        """Clean the filthiest log, if any qualifies (dirty ratio >= min.cleanable.dirty.ratio, or
        max.compaction.lag.ms passed, or a tombstone's delete horizon passed). One cleaner thread
        iteration; returns None if there was nothing to do."""
        now = self._time_ms() if now_ms is None else now_ms
        picked = self._grab_filthiest(now)
        if picked is None:
            return None
        ltc, reason = picked
        tp = (ltc.log.topic, ltc.log.partition)
        try:
            return self._clean(ltc, now, reason)
        except Exception as e:
            logger.error("cleaning %s-%d failed; it will not be cleaned again until restarted or cleaned on "
                         "request: %s", tp[0], tp[1], e, exc_info=not isinstance(e, StorageError | DecodeError))
            with self._lock:
                self._uncleanable[tp] = weakref.ref(ltc.log)
            return None
        finally:
            self._done(tp)

    def clean_now(self, log: Log, now_ms: int | None = None) -> CleanerStats:
        """Clean `log` now, whatever its dirty ratio, on the calling thread (waiting for a clean of
        it in progress on a cleaner thread). The active segment, min.compaction.lag.ms and the
        high watermark still bound what is cleaned. Raises ValueError if the log is not compacted."""
        if not is_compacted(log):
            raise ValueError(f"{log.topic}-{log.partition} has cleanup.policy={log.config.cleanup_policy}")
        tp = (log.topic, log.partition)
        with self._lock:
            while tp in self._in_progress:
                self._idle.wait()
            self._in_progress.add(tp)
        try:
            now = self._time_ms() if now_ms is None else now_ms
            try:
                ltc = self._log_to_clean(log, now)
            except CleanAborted as e:
                return CleanerStats(log.topic, log.partition, aborted=True, reason=str(e))
            stats = self._clean(ltc, now, "requested")
            with self._lock:
                self._uncleanable.pop(tp, None)
            return stats
        finally:
            self._done(tp)

    def checkpoints(self) -> dict[TopicPartition, int]:
        """Each log's first dirty offset, as checkpointed."""
        with self._lock:
            return {tp: c.offset for tp, c in self._checkpoints.items()}

    @property
    def uncleanable_partitions(self) -> set[TopicPartition]:
        """Partitions whose last clean failed with an error (Kafka's uncleanable-partitions)."""
        with self._lock:
            return {tp for tp, ref in self._uncleanable.items() if ref() is not None}

    def _done(self, tp: TopicPartition) -> None:
        with self._lock:
            self._in_progress.discard(tp)
            self._idle.notify_all()

    # --- choosing a log -----------------------------------------------------------------------------

    def _grab_filthiest(self, now: int) -> tuple[LogToClean, str] | None:
        """The dirtiest cleanable log, marked in progress (Kafka's grabFilthiestCompactedLog)."""
        best: LogToClean | None = None
        best_reason = ""
        due: list[Log] = []
        for tp, log in self._logs().items():
            if not is_compacted(log) or log.closed:
                continue
            with self._lock:
                bad = self._uncleanable.get(tp)
                if tp in self._in_progress or (bad is not None and bad() is log):
                    continue
                horizon = self._tombstone_horizons.get(tp)
            try:
                ltc = self._log_to_clean(log, now)
            except (StorageError, CleanAborted):  # closed or changing under us: next time
                continue
            if ltc.cleanable_bytes > 0 and (
                ltc.need_compaction_now or ltc.cleanable_ratio >= log.config.min_cleanable_dirty_ratio
            ):
                if best is None or ltc.cleanable_ratio > best.cleanable_ratio:
                    best = ltc
                    best_reason = (f"dirty ratio {ltc.cleanable_ratio:.2f}"
                                   + (", max.compaction.lag.ms passed" if ltc.need_compaction_now else ""))
            elif horizon is not None and horizon[1]() is log and horizon[0] <= now:
                due.append(log)
        if best is None and due:
            try:
                best, best_reason = self._log_to_clean(due[0], now), "tombstones past delete.retention.ms"
            except (StorageError, CleanAborted):
                return None
        if best is None:
            return None
        tp = (best.log.topic, best.log.partition)
        with self._lock:
            if tp in self._in_progress:  # clean_now took it meanwhile
                return None
            self._in_progress.add(tp)
        return best, best_reason

    def _first_dirty_offset(self, log: Log, snap: CleanerSnapshot) -> int:
        """The checkpointed first dirty offset, pulled back by truncations and clamped to the log
        (Kafka's cleanableOffsets): before the log start -> the log start; past the LEO -> the
        log start (the log was replaced or damaged: clean it all again)."""
        tp = (log.topic, log.partition)
        with self._lock:
            c = self._checkpoints.get(tp)
            offset = c.offset if c is not None and (c.log is None or c.log() is log) else None
            if offset is not None and snap.truncated_to is not None and snap.truncated_to < offset:
                offset = snap.truncated_to
                self._checkpoints[tp] = _Checkpoint(offset, weakref.ref(log))
        if offset is None or offset < snap.log_start_offset:
            return snap.log_start_offset
        if offset > snap.log_end_offset:
            logger.warning("%s-%d: cleaner checkpoint %d is past the log end offset %d; cleaning from the log start",
                           tp[0], tp[1], offset, snap.log_end_offset)
            return snap.log_start_offset
        return offset

    def _log_to_clean(self, log: Log, now: int) -> LogToClean:
        """Plan: the dirty range [first dirty, first uncleanable) and its share of the log's bytes.

        The first uncleanable offset is the lowest of: the active segment's base offset, the high
        watermark (data above it may still be truncated), the last stable offset (an open
        transaction may still abort), and the base offset of the first dirty
        segment holding a record newer than min.compaction.lag.ms."""
        snap = log.cleaner_snapshot()
        config = log.config
        segs = snap.segments
        first_dirty = self._first_dirty_offset(log, snap)
        upper = min(segs[-1].base_offset, snap.high_watermark, snap.last_stable_offset)
        dirty = [s for s in segs[:-1] if s.next_base > first_dirty and s.base_offset < upper]
        need_now = False
        if dirty and (config.min_compaction_lag_ms > 0 or config.max_compaction_lag_ms < LONG_MAX):
            earliest = LONG_MAX
            for s in dirty:
                ts = log.segment_timestamps(s.segment)
                if ts is None:
                    raise CleanAborted("segment left the log")
                largest, first_batch = ts
                if config.min_compaction_lag_ms > 0 and largest > now - config.min_compaction_lag_ms:
                    upper = min(upper, s.base_offset)
                    break
                if first_batch is not None and 0 <= first_batch < earliest:
                    earliest = first_batch
            need_now = earliest != LONG_MAX and now - config.max_compaction_lag_ms > earliest
        first_uncleanable = max(first_dirty, upper)
        clean_bytes = sum(s.size for s in segs if s.base_offset < first_dirty)
        cleanable_bytes = sum(
            s.size for s in segs[:-1] if s.next_base > first_dirty and s.base_offset < first_uncleanable
        )
        return LogToClean(log, snap, first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, need_now)

    # --- cleaning ---------------------------------------------------------------------------------

    def _clean(self, ltc: LogToClean, now: int, reason: str) -> CleanerStats:
        """One clean (compaction.Cleaner), then its bookkeeping: the checkpoint and the log's
        earliest tombstone horizon."""
        log = ltc.log
        stats, horizon, rewrote = Cleaner(self.config, self.map_capacity, self._stop).clean(ltc, now, reason)
        if stats.aborted:
            logger.info("%s", stats.summary())
            return stats
        tp = (log.topic, log.partition)
        with self._lock:
            self._checkpoints[tp] = _Checkpoint(stats.end_offset, weakref.ref(log))
            if horizon is not None:
                self._tombstone_horizons[tp] = (horizon, weakref.ref(log))
            elif rewrote:
                self._tombstone_horizons.pop(tp, None)
        self._write_checkpoint(os.path.dirname(log.dir))
        logger.info("%s", stats.summary())
        return stats

    # --- checkpoint file ---------------------------------------------------------------------------

    def _load_checkpoints(self) -> None:
        logs = self._logs()
        for d in self.log_dirs:
            path = os.path.join(d, CLEANER_OFFSET_CHECKPOINT)
            try:
                offsets = OffsetCheckpointFile(path).read()
            except CorruptCheckpointError as e:
                logger.error("%s; ignoring it (compacted logs in %s are cleaned from their start)", e, d)
                continue
            for tp, offset in offsets.items():
                log = logs.get(tp)
                if log is not None and os.path.dirname(log.dir) == d:
                    self._checkpoints[tp] = _Checkpoint(offset, weakref.ref(log))

    def _write_checkpoint(self, log_dir: str) -> None:
        """Rewrite `log_dir`'s cleaner-offset-checkpoint with the current logs' entries."""
        logs = self._logs()
        with self._lock:
            offsets = {
                tp: c.offset
                for tp, c in self._checkpoints.items()
                if (log := logs.get(tp)) is not None and (c.log is None or c.log() is log)
                and os.path.dirname(log.dir) == log_dir
            }
        with self._checkpoint_lock:
            try:
                OffsetCheckpointFile(os.path.join(log_dir, CLEANER_OFFSET_CHECKPOINT)).write(offsets)
            except OSError as e:
                logger.error("cannot write the cleaner checkpoint of %s: %s", log_dir, e)

