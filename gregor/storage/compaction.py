"""Cleaner: one clean of one compacted log (Kafka's Cleaner; LogCleaner in cleaner.py owns the
threads, picks the log and keeps the checkpoints).

One clean of one log:
  1. Offset map: decode the dirty records (decompressing) and map key -> latest offset. The map
     holds at most `dedupe_buffer_size / threads / MAP_ENTRY_BYTES` keys; if the dirty section
     has more, this clean covers the prefix that fits (whole batches), and the checkpoint lands
     there: later cleans do the rest (Kafka does the same with its fixed-size SkimpyOffsetMap).
  2. Rewrite: the closed segments from the log start up to where the map ends, in groups whose
     total size fits segment.bytes (and whose index entries and relative offsets fit one
     segment), each group into one `.cleaned` segment, keeping a record only if its key's
     latest offset is its own (keys absent from the map, i.e. clean-head records not updated
     since, are kept). Batches keep their base and last offsets (so offsets are preserved, gaps
     appear), producer id/epoch/sequence, leader epoch, attributes and codec; a batch that
     loses records is re-encoded and recompressed with its codec; untouched batches are copied
     byte for byte. Records without a key are dropped (Kafka rejects them at produce time:
     gregor.protocol.validator). Control batches (transaction markers) are kept as they are.
     Batches of aborted transactions (found in the .txnindex files) are left out of the offset
     map and dropped, so an aborted write can never shadow a committed one; the abort marker and
     its .txnindex entry stay (Kafka also removes markers after delete.retention.ms: not yet).
     Nothing at or past the last stable offset is cleaned.
     Records are read with the validator's functions (gregor.protocol.validator.read_records:
     CRC, framing, decompression under a limit); a stored batch that fails them is left out of
     the offset map and copied as it is, with a warning naming topic, partition and offset, and
     the clean goes on.
  3. Swap each group in (`Log.replace_segments`: .cleaned -> .swap -> old segments .deleted ->
     final names), then advance the checkpoint.

Tombstones (null values) use the delete horizon of KIP-534 (Kafka 3.1+): the first clean that
keeps a tombstone sets DELETE_HORIZON_BIT on its batch and puts now + delete.retention.ms in
the batch's base timestamp (record timestamp deltas are rewritten so every record keeps its
timestamp); a later clean at or after the horizon drops the tombstone. The cleaner remembers
the earliest horizon per log and cleans a log once it passes, even if the log is not dirty.

Batches with a producer id that lose every record are dropped, except the last batch of
each producer id in the log, which is kept as an empty batch (header only, Kafka's
RETAIN_EMPTY) so producer state rebuilt from the log keeps its last sequence number.

The offset map and its memory bound: offset_map.py. The filtering of one batch: record_filter.py.

Concurrency (planning from a snapshot, reading through duplicated descriptors, swapping under the
log's lock, abandoning a clean the log moved past): see gregor.storage.cleaner.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from gregor.protocol.primitives import DecodeError
from gregor.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TRANSACTIONAL_BIT,
    BatchHeader,
    read_header,
)
from gregor.protocol.validator import (
    BatchValidationError,
    ScannedRecord,
    ValidationRules,
    read_records,
)
from gregor.storage.config import CleanerConfig, LogConfig
from gregor.storage.errors import CorruptRecordError, StorageError
from gregor.storage.files import fsync_dir, unlink_if_exists
from gregor.storage.index import INT32_MAX
from gregor.storage.log import CleanerSnapshot, Log
from gregor.storage.offset_map import OffsetMap
from gregor.storage.record_filter import Output, emit, filter_batch
from gregor.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    SEGMENT_SUFFIXES,
    LogSegment,
    SegmentInfo,
    file_prefix,
)
from gregor.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)


GIL_YIELD_INTERVAL_S = 0.0002
"""The cleaner is CPU-bound Python: left alone it keeps the GIL for the interpreter's switch
interval (5 ms) every time the event loop thread gives it up for a syscall, so each of the
loop's socket or file calls waits up to 5 ms to resume (a tight append loop ran ~20x slower
during a clean). Releasing the GIL every 0.2 ms of cleaning bounds that wait (appends ~3.5x
slower, the clean ~1.4x slower; bench_cleaner.py measures both)."""


_HEADER_CHUNK_BYTES = 64 * 1024


def _read_stored(log: Log, h: BatchHeader, raw: memoryview, rules: ValidationRules,
                 what: str) -> tuple[memoryview, list[ScannedRecord]] | None:
    """The batch's body and records, or None (with a warning) if it does not validate."""
    try:
        return read_records(raw, rules)
    except BatchValidationError as e:
        logger.warning("%s-%d: the stored batch at offset %d (offsets %d..%d) does not validate (%s); %s",
                       log.topic, log.partition, h.base_offset, h.base_offset, h.last_offset, e, what)
        return None


# --- stats -----------------------------------------------------------------------------------


@dataclass(slots=True)
class CleanerStats:
    """What one clean of one log did. Logged at INFO; returned by `clean_now`."""

    topic: str
    partition: int
    first_dirty_offset: int = 0
    end_offset: int = 0  # the new first dirty offset (the checkpoint), if not aborted
    map_bytes_read: int = 0  # dirty section decoded for the offset map
    map_records: int = 0  # keyed records put in the map
    map_keys: int = 0
    map_capacity: int = 0
    bytes_read: int = 0  # segments rewritten
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0  # superseded + tombstones + without key
    tombstones_removed: int = 0
    keyless_removed: int = 0
    batches_read: int = 0
    batches_rewritten: int = 0  # re-encoded (lost records or got a delete horizon)
    segments_before: int = 0
    segments_after: int = 0
    elapsed_s: float = 0.0
    aborted: bool = False
    reason: str = ""  # why it was cleaned (ratio, max.compaction.lag.ms, tombstones, requested)

    @property
    def mb_per_s(self) -> float:
        return (self.bytes_read + self.map_bytes_read) / 1e6 / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def summary(self) -> str:
        if self.aborted:
            return f"cleaning of {self.topic}-{self.partition} aborted after {self.elapsed_s:.3f} s ({self.reason})"
        shrink = 100.0 * (1 - self.bytes_written / self.bytes_read) if self.bytes_read else 0.0
        return (
            f"cleaned {self.topic}-{self.partition} ({self.reason}; dirty section [{self.first_dirty_offset}, "
            f"{self.end_offset})) in {self.elapsed_s:.3f} s, {self.mb_per_s:.1f} MB/s: "
            f"offset map {self.map_keys} keys from {self.map_records} records, {self.map_bytes_read / 1e6:.2f} MB "
            f"({100.0 * self.map_keys / max(self.map_capacity, 1):.1f}% of {self.map_capacity}); "
            f"{self.segments_before} segments of {self.bytes_read / 1e6:.2f} MB -> {self.segments_after} of "
            f"{self.bytes_written / 1e6:.2f} MB ({shrink:.1f}% smaller); {self.records_removed} of "
            f"{self.records_read} records removed ({self.tombstones_removed} tombstones, "
            f"{self.keyless_removed} without key), {self.batches_rewritten} of {self.batches_read} batches rewritten"
        )


# --- planning --------------------------------------------------------------------------------


@dataclass(slots=True)
class LogToClean:
    """A log's cleanable range and dirtiness, as the cleaner planned it."""

    log: Log
    snapshot: CleanerSnapshot
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool  # max.compaction.lag.ms passed for some dirty record

    @property
    def cleanable_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


class CleanAborted(Exception):
    """The clean was overtaken (truncation, deletion, close, shutdown): nothing to report as an error."""


class _Throttler:
    """log.cleaner.io.max.bytes.per.second for one thread; sleeps on the stop event."""

    def __init__(self, rate: float, stop: threading.Event) -> None:
        self.rate = rate
        self.stop = stop
        self.start = time.monotonic()
        self.bytes = 0

    def add(self, n: int) -> None:
        if self.rate == float("inf"):
            return
        self.bytes += n
        ahead = self.bytes / self.rate - (time.monotonic() - self.start)
        if ahead > 0.01:
            self.stop.wait(ahead)




# --- one clean -----------------------------------------------------------------------------------


class Cleaner:
    """Cleans one log at a time on the calling thread (a LogCleaner thread, or `clean_now`'s
    caller): builds the offset map, rewrites the cleanable segments group by group and swaps
    each group in. Holds no state between cleans but its settings; `stop` aborts a clean."""

    def __init__(self, config: CleanerConfig, map_capacity: int, stop: threading.Event) -> None:
        self.config = config
        self.map_capacity = map_capacity
        self._stop = stop

    def clean(self, ltc: LogToClean, now: int, reason: str) -> tuple[CleanerStats, int | None, bool]:
        """Clean the planned range of `ltc.log`. Returns (stats, the earliest delete horizon of the
        tombstones kept, whether any segment was rewritten); `stats.aborted` says if the log
        moved on under the clean (truncated, deleted, closed) or the cleaner is shutting down.
        Other errors propagate: the caller marks the partition uncleanable."""
        log, snap = ltc.log, ltc.snapshot
        config = log.config
        stats = CleanerStats(log.topic, log.partition, ltc.first_dirty_offset, reason=reason,
                             map_capacity=self.map_capacity)
        t0 = time.monotonic()
        throttler = _Throttler(self.config.io_max_bytes_per_second, self._stop)
        closed: list[SegmentInfo] = []
        horizon: int | None = None
        try:
            offset_map = OffsetMap(self.map_capacity)
            aborted = _AbortedRanges(log.aborted_transactions(snap.log_start_offset, ltc.first_uncleanable_offset))
            end = self._build_offset_map(log, ltc, offset_map, stats, throttler, aborted)
            stats.end_offset = end
            closed = [s for s in snap.segments[:-1] if s.base_offset < end]
            if closed:
                producers = self._producer_last_offsets(log, snap.segments)
                for group in group_segments(closed, config):
                    h = self._clean_group(log, snap, group, end, offset_map, producers, now, stats, throttler,
                                          aborted)
                    if h is not None and (horizon is None or h < horizon):
                        horizon = h
                fsync_dir(log.dir)  # the final names are durable before the checkpoint says so
        except CleanAborted as e:
            stats.aborted, stats.reason = True, str(e)
        except (StorageError, DecodeError, OSError) as e:
            if log.closed or log.generation != snap.generation:  # read a segment being truncated or deleted
                stats.aborted, stats.reason = True, f"log changed during the clean: {e}"
            else:
                raise
        stats.elapsed_s = time.monotonic() - t0
        return stats, horizon, bool(closed)

    def _batches(self, log: Log, info: SegmentInfo, throttler: _Throttler | None,
                 headers_only: bool = False) -> Iterator[tuple[BatchHeader, memoryview]]:
        """The segment's batches up to its planned size, read through a duplicated descriptor."""
        stop = self._stop
        clock = time.perf_counter
        yield_s = GIL_YIELD_INTERVAL_S
        last_yield = clock()
        with _segment_reader(log, info) as fd:
            chunk = _HEADER_CHUNK_BYTES if headers_only else self.config.io_buffer_size
            for h, raw in _iter_file_batches(fd, info.size, chunk, headers_only):
                if stop.is_set():
                    raise CleanAborted("the cleaner is shutting down")
                if throttler is not None:
                    throttler.add(h.size)
                yield h, raw
                if clock() - last_yield >= yield_s:
                    time.sleep(0)  # let the event loop have the GIL (see GIL_YIELD_INTERVAL_S)
                    last_yield = clock()

    def _build_offset_map(
        self, log: Log, ltc: LogToClean, offset_map: OffsetMap, stats: CleanerStats, throttler: _Throttler,
        aborted: _AbortedRanges,
    ) -> int:
        """Map the keys of the dirty range; returns where the map ends (the next first dirty offset):
        the first uncleanable offset, or the first batch that did not fit."""
        start, upper = ltc.first_dirty_offset, ltc.first_uncleanable_offset
        dirty = [s for s in ltc.snapshot.segments[:-1] if s.next_base > start and s.base_offset < upper]
        put = offset_map.put
        capacity = offset_map.capacity
        rules = ValidationRules.for_stored(log.config.max_message_bytes)
        try:
            for info in dirty:
                for h, raw in self._batches(log, info, throttler):
                    if h.last_offset < start:
                        continue
                    if h.last_offset >= upper:  # straddles the high watermark: not ours yet
                        return max(start, h.base_offset)
                    if not h.is_control and not aborted.holds(h):
                        if len(offset_map) and len(offset_map) + h.records_count > capacity:
                            logger.info("%s-%d: offset map full (%d keys); cleaning up to offset %d this time",
                                        log.topic, log.partition, len(offset_map), h.base_offset)
                            return h.base_offset
                        got = _read_stored(log, h, raw, rules, "leaving its keys out of the offset map")
                        if got is not None:
                            base = h.base_offset
                            for rec in got[1]:
                                key = rec.key
                                if key is not None:
                                    put(key, base + rec.offset_delta)
                                    stats.map_records += 1
                    stats.map_bytes_read += h.size
            return upper
        finally:
            stats.map_keys = len(offset_map)

    def _producer_last_offsets(self, log: Log, segments: list[SegmentInfo]) -> dict[int, int]:
        """producer id -> last offset of its last batch in the log (header scan of every segment up
        to the planned LEO): the batches that must survive, if emptied, as empty batches."""
        last: dict[int, int] = {}
        for info in segments:
            for h, _ in self._batches(log, info, None, headers_only=True):
                if h.producer_id >= 0:
                    last[h.producer_id] = h.last_offset
        return last

    def _clean_group(
        self,
        log: Log,
        snap: CleanerSnapshot,
        group: list[SegmentInfo],
        end: int,
        offset_map: OffsetMap,
        producers: dict[int, int],
        now: int,
        stats: CleanerStats,
        throttler: _Throttler,
        aborted: _AbortedRanges,
    ) -> int | None:
        """Rewrite `group` into one .cleaned segment and swap it in. Returns the earliest delete
        horizon of the tombstones kept, if any."""
        config = log.config
        new = LogSegment.create(log.dir, group[0].base_offset, replace(config, preallocate=False), now,
                                suffix=CLEANED_SUFFIX, files=log.segment_files)
        out = Output()
        flush_bytes = self.config.io_buffer_size
        delete_retention_ms = config.delete_retention_ms
        rules = ValidationRules.for_stored(config.max_message_bytes)
        earliest_horizon: int | None = None
        mtime_ns = 0
        try:
            for info in group:
                stats.bytes_read += info.size
                for h, raw in self._batches(log, info, throttler):
                    stats.batches_read += 1
                    if h.base_offset < end and aborted.holds(h):
                        continue  # an aborted transaction's batch: read_committed never saw it
                    if h.base_offset >= end or h.is_control or h.records_count == 0:
                        emit(out, h, raw)  # past the map, a transaction marker, or already empty
                    elif (got := _read_stored(log, h, raw, rules, "keeping it as it is")) is None:
                        emit(out, h, raw)
                    else:
                        horizon = filter_batch(h, raw, got[0], got[1], offset_map, producers, now,
                                               delete_retention_ms, out, stats)
                        if horizon is not None and (earliest_horizon is None or horizon < earliest_horizon):
                            earliest_horizon = horizon
                    if len(out.data) >= flush_bytes:
                        _flush_output(new, out, stats)
                mtime_ns = max(mtime_ns, _mtime_ns(log, info))
            _flush_output(new, out, stats)
            for info in group:  # the aborted transactions whose markers the group holds stay indexed
                for entry in info.segment.txn_index.entries:
                    new.txn_index.append(entry)
            new.on_become_inactive()
            if mtime_ns:
                os.utime(new.log_path, ns=(mtime_ns, mtime_ns))  # retention falls back to it without timestamps
            new.fsync()
            fsync_dir(log.dir)  # now, so the one under the log's lock in the swap has little left to do
            _unlink_deleted_namesakes(log.dir, group)
            if self._stop.is_set():
                raise CleanAborted("the cleaner is shutting down")
        except BaseException:
            new.close(write_indexes=False)
            new.delete_files()
            raise
        # If the swap itself fails half-way (an I/O error), the files stay for Log._load to sort out.
        if not log.replace_segments(new, [info.segment for info in group], snap.generation, now):
            new.close(write_indexes=False)
            new.delete_files()
            raise CleanAborted("the log changed (truncated, retention, closed) during the clean")
        stats.segments_before += len(group)
        stats.segments_after += 1
        return earliest_horizon


# --- helpers -----------------------------------------------------------------------------------


class _AbortedRanges:
    """The aborted transactions of the range being cleaned: producer id -> [(first, last offset)]."""

    def __init__(self, entries: list[AbortedTxn]) -> None:
        self._by_producer: dict[int, list[tuple[int, int]]] = {}
        for e in entries:
            self._by_producer.setdefault(e.producer_id, []).append((e.first_offset, e.last_offset))

    def holds(self, h: BatchHeader) -> bool:
        """Whether `h` is a data batch of an aborted transaction."""
        if not self._by_producer or not h.attributes & TRANSACTIONAL_BIT or h.is_control:
            return False
        ranges = self._by_producer.get(h.producer_id)
        return ranges is not None and any(first <= h.base_offset < last for first, last in ranges)


def group_segments(segments: list[SegmentInfo], config: LogConfig) -> list[list[SegmentInfo]]:
    """Consecutive segments grouped so each group's cleaned segment fits one segment: total size
    within segment.bytes, index entries within segment.index.bytes, offsets within an int32 of
    the base (Kafka's groupSegmentsBySize; sizes before cleaning bound those after)."""
    groups: list[list[SegmentInfo]] = []
    i = 0
    while i < len(segments):
        first = segments[i]
        group = [first]
        size, entries, time_entries = first.size, first.index_entries, first.time_index_entries
        i += 1
        while i < len(segments):
            s = segments[i]
            if (size + s.size > config.segment_bytes
                    or entries + s.index_entries > config.max_index_entries
                    or time_entries + s.time_index_entries > config.max_time_index_entries
                    or s.next_base - 1 - first.base_offset > INT32_MAX):
                break
            group.append(s)
            size += s.size
            entries += s.index_entries
            time_entries += s.time_index_entries
            i += 1
        groups.append(group)
    return groups


def _iter_file_batches(fd: int, size: int, chunk: int, headers_only: bool) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Batches of a segment file up to `size`, read in chunks. With `headers_only` the batch bytes
    are not read (an empty view is yielded)."""
    pos = 0
    buf = b""
    buf_pos = 0
    empty = memoryview(b"")
    while pos < size:
        off = pos - buf_pos
        if off + HEADER_SIZE > len(buf):
            buf = os.pread(fd, min(chunk, size - pos), pos)
            buf_pos, off = pos, 0
            if len(buf) < HEADER_SIZE:
                raise CorruptRecordError(f"partial batch header at position {pos}")
        h = read_header(buf, off)
        n = h.size
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + n > size or h.magic != MAGIC:
            raise CorruptRecordError(f"bad batch at position {pos} (length {h.batch_length}, magic {h.magic})")
        h.position = pos
        if headers_only:
            yield h, empty
        else:
            if off + n > len(buf):
                buf = os.pread(fd, min(max(chunk, n), size - pos), pos)
                buf_pos, off = pos, 0
                if len(buf) < n:
                    raise CorruptRecordError(f"short read of the batch at position {pos}")
            yield h, memoryview(buf)[off : off + n]
        pos += n


def _flush_output(seg: LogSegment, out: Output, stats: CleanerStats) -> None:
    if not out.headers:
        return
    if seg.size + len(out.data) > INT32_MAX:
        raise StorageError(f"cleaned segment {seg.log_path} would exceed 2 GiB")
    seg.append(out.data, out.headers)
    stats.bytes_written += len(out.data)
    out.data = bytearray()
    out.headers = []


def _unlink_deleted_namesakes(log_dir: str, group: list[SegmentInfo]) -> None:
    """Unlink `.deleted` files (of segments replaced earlier, waiting for file.delete.delay.ms)
    that the swap would rename the group's segments over: the base offset of a log's first
    segment comes back at every clean. Renaming over them would free their blocks while the swap
    holds the log's lock (~6 ms for 16 MB here); unlinking them now does it outside. Their
    pending deletion later finds them gone, which it ignores."""
    for info in group:
        prefix = os.path.join(log_dir, file_prefix(info.base_offset))
        for suffix in SEGMENT_SUFFIXES:
            unlink_if_exists(prefix + suffix + DELETED_SUFFIX)


@contextmanager
def _segment_reader(log: Log, info: SegmentInfo) -> Iterator[int]:
    """A descriptor of the segment's file of its own (the cleaner reads without the log's lock), closed after;
    CleanAborted when the segment left the log meanwhile."""
    fds = log.open_segment_readers([info.segment])
    if fds is None:
        raise CleanAborted(f"segment {info.base_offset} left the log")
    try:
        yield fds[0]
    finally:
        os.close(fds[0])


def _mtime_ns(log: Log, info: SegmentInfo) -> int:
    with _segment_reader(log, info) as fd:
        return os.fstat(fd).st_mtime_ns


