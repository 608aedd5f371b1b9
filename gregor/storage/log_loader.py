"""LogLoader: turn a partition directory into a LocalLog, recovering it after a crash.

Kafka's LogLoader, in our code. Loading is one pass over the directory:

  1. Stray files go: `.deleted` and `.cleaned` files, `.tmp` files, index files without a log.
  2. Interrupted replacements are completed: a `<base>.log.swap` (the log cleaner's step 1 in
     `LocalLog.replace_segments`) replaces every segment in [swap base, swap next offset).
  3. Each segment is either re-validated batch by batch (`LogSegment.recover`: after an unclean
     shutdown, every segment at or after the recovery point) or given cheap sanity checks
     (`_sanity_check`: below the recovery point, or after a clean shutdown); one failing them
     is recovered as after a crash. A recovered segment that had to be truncated takes every
     later segment with it, so the log stays contiguous; what was dropped is logged.
  4. Offsets: LEO from the last segment; log start offset at least the first segment's base;
     the leader epoch cache trimmed to [log start, LEO] and rebuilt from the batches of the
     segments that were re-validated.

Nothing here holds a lock: the log is not shared until loading returns.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Mapping
from typing import NamedTuple

from gregor.protocol.primitives import DecodeError
from gregor.storage.config import LogConfig
from gregor.storage.errors import StorageError
from gregor.storage.files import unlink_if_exists
from gregor.storage.leader_epoch import LeaderEpochFileCache
from gregor.storage.local_log import LocalLog
from gregor.storage.producer_state import SNAPSHOT_SUFFIX
from gregor.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    SegmentFileCache,
    file_prefix,
    parse_base_offset,
)
from gregor.storage.txn_index import TXN_INDEX_SUFFIX

logger = logging.getLogger(__name__)


class LoadedLog(NamedTuple):
    local: LocalLog
    log_start_offset: int


class LogLoader:
    """Loads one partition directory (see the module docstring). Use once: `load()`."""

    def __init__(self, dir: str, topic: str, partition: int, config: LogConfig,
                 leader_epoch_cache: LeaderEpochFileCache, now: int, files: SegmentFileCache) -> None:
        self.dir = dir
        self.files = files  # the open-files cache of the log's segments
        self.topic = topic
        self.partition = partition
        self.config = config
        self.leader_epoch_cache = leader_epoch_cache
        self.now = now
        self._segments: list[LogSegment] = []
        self._names: list[str] = []
        self.snapshot_offsets: list[int] = []  # producer state snapshots found by the directory listing

    def load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool,
             segment_sizes: Mapping[int, int] | None) -> LoadedLog:
        """Load the directory; on any failure every segment opened so far is closed again."""
        try:
            return self._load(recovery_point, log_start_offset, clean_shutdown, segment_sizes)
        except BaseException:
            for seg in self._segments:
                seg.close()
            raise

    def _scan_dir(self) -> tuple[set[int], list[int]]:
        """(base offsets of `.log` files, base offsets of `.log.swap` files); stray files removed."""
        logs: set[int] = set()
        swaps: list[int] = []
        index_files: list[tuple[int, str]] = []
        self._names = sorted(os.listdir(self.dir))
        for name in self._names:
            path = os.path.join(self.dir, name)
            if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
                logger.info("removing stray file %s", path)
                os.unlink(path)
                continue
            base = parse_base_offset(name)
            if base is None:
                continue
            if name.endswith(SWAP_SUFFIX):
                if name == file_prefix(base) + LOG_SUFFIX + SWAP_SUFFIX:
                    swaps.append(base)
                elif not name.endswith(TXN_INDEX_SUFFIX + SWAP_SUFFIX):  # the .txnindex goes with its segment;
                    os.unlink(path)  # other index swap files are rebuilt from the log
            elif name == file_prefix(base) + LOG_SUFFIX:
                logs.add(base)
            elif name in (file_prefix(base) + INDEX_SUFFIX, file_prefix(base) + TIME_INDEX_SUFFIX,
                          file_prefix(base) + TXN_INDEX_SUFFIX):
                index_files.append((base, path))
            elif name == file_prefix(base) + SNAPSHOT_SUFFIX:
                self.snapshot_offsets.append(base)
        for base, path in index_files:
            if base not in logs and base not in swaps:
                logger.info("removing orphan index %s", path)
                os.unlink(path)
        return logs, swaps

    def _complete_swaps(self, logs: set[int], swaps: list[int]) -> dict[int, LogSegment]:
        """Finish interrupted replacements (the log cleaner's): each swap segment, recovered,
        replaces the segments whose base offsets it covers. Returns them by base offset."""
        opened: dict[int, LogSegment] = {}
        for base in sorted(swaps):
            seg = LogSegment.open(self.dir, base, self.config, self.now, suffix=SWAP_SUFFIX, files=self.files)
            self._segments.append(seg)
            seg.recover()
            end = seg.next_offset
            for old in sorted(logs):
                if base <= old < max(end, base + 1):
                    logger.info("swap %s replaces segment %d", seg.log_path, old)
                    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                        unlink_if_exists(os.path.join(self.dir, file_prefix(old) + suffix))
                    logs.discard(old)
                    if old in opened:
                        opened.pop(old).close()
            seg.change_suffix("")
            opened[base] = seg
            logs.add(base)
        return opened

    def _load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool,
              segment_sizes: Mapping[int, int] | None) -> LoadedLog:
        config, now, cache = self.config, self.now, self.leader_epoch_cache
        logs, swaps = self._scan_dir()
        opened = self._complete_swaps(logs, swaps)
        segments = [opened.get(base) or LogSegment.open(self.dir, base, config, now, files=self.files)
                    for base in sorted(logs)]
        self._segments = segments
        any_recovered = bool(opened)
        if clean_shutdown and segment_sizes is not None:
            missing = sorted(set(segment_sizes) - {seg.base_offset for seg in segments})
            if missing:
                logger.error("%s-%d: segments %s present at the last clean shutdown are missing from %s",
                             self.topic, self.partition, missing, self.dir)
        i = 0
        first_unflushed = True
        while i < len(segments):
            seg = segments[i]
            if seg.base_offset in opened:
                i += 1
                continue
            last = i == len(segments) - 1
            next_base = None if last else segments[i + 1].base_offset
            unflushed = not clean_shutdown and (last or segments[i + 1].base_offset > recovery_point)
            reason = ""
            if unflushed:
                if first_unflushed:  # epochs from here on are rebuilt from the batches
                    cache.truncate_from_end(seg.base_offset)
                    first_unflushed = False
            else:
                reason = self._sanity_check(seg, next_base, last, clean_shutdown, recovery_point, segment_sizes)
            if unflushed or reason:
                if reason:
                    logger.error("%s-%d: segment %s fails its sanity check after a %s shutdown (%s); recovering it",
                                 self.topic, self.partition, seg.log_path, "clean" if clean_shutdown else "unclean",
                                 reason)
                any_recovered = True
                self._recover_segment(segments, i, recovery_point, flushed=bool(reason))
            i += 1
        for seg in segments[:-1]:  # recovered segments that are not the active one: final index entries
            if seg.time_index.loaded:
                seg.on_become_inactive()

        if not segments:
            segments.append(LogSegment.create(self.dir, log_start_offset, config, now, files=self.files))
        leo = segments[-1].next_offset
        if leo < log_start_offset:
            logger.warning("%s: log end offset %d is below the log start offset %d; starting over there",
                           self.dir, leo, log_start_offset)
            for seg in segments:
                seg.close()
                seg.delete_files()
            segments[:] = [LogSegment.create(self.dir, log_start_offset, config, now, files=self.files)]
            leo = log_start_offset
            any_recovered = True
        start = max(log_start_offset, segments[0].base_offset)
        rp = leo if clean_shutdown and not any_recovered else min(recovery_point, leo)
        cache.truncate_from_end(leo)
        cache.truncate_from_start(start)
        segments[-1].load_indexes()
        local = LocalLog(self.dir, self.topic, self.partition, config, segments, leo, rp, now, self.files)
        if (clean_shutdown and not any_recovered and (len(segments) > 1 or segments[0].size > 0)
                and sorted(os.listdir(self.dir)) == self._names):
            # A clean shutdown fsynced the directory of every log holding data; a load that changed no
            # file leaves it clean, so the next flush or shutdown needs no directory fsync for it (10,000
            # of them cost seconds at shutdown). A log of one empty segment stays dirty: its directory may
            # never have been fsynced, and its first data will need that.
            local.dir_dirty = False
        return LoadedLog(local, start)

    def _sanity_check(
        self, seg: LogSegment, next_base: int | None, last: bool, clean_shutdown: bool, recovery_point: int,
        segment_sizes: Mapping[int, int] | None,
    ) -> str:
        """Why a segment that is not re-validated (below the recovery point, or after a clean
        shutdown) cannot be trusted as it is, or "" if it passes the cheap checks."""
        try:
            if clean_shutdown and segment_sizes is not None:
                expected = segment_sizes.get(seg.base_offset)
                if expected is None:
                    return "it did not exist at the last clean shutdown"
                if expected != seg.size:
                    return f"its size is {seg.size} bytes, {expected} at the last clean shutdown"
            seg.sanity_check(next_base)
            if clean_shutdown:
                nxt = seg.check_tail(next_base)
                if last and nxt != recovery_point and recovery_point > 0:
                    return f"it ends at offset {nxt}, the log ended at {recovery_point} at the last clean shutdown"
            return ""
        except (StorageError, OSError, ValueError, DecodeError, struct.error) as e:
            return str(e) or type(e).__name__

    def _recover_segment(self, segments: list[LogSegment], i: int, recovery_point: int, flushed: bool) -> None:
        """Re-validate segment `i` batch by batch; if it had to be truncated, delete every later
        segment too (the log must stay contiguous), logging what was dropped."""
        seg = segments[i]
        try:
            old_size = seg.file_size()
        except StorageError:
            old_size = seg.size
        truncated = seg.recover(self.leader_epoch_cache)
        later = segments[i + 1 :] if truncated else []
        if not truncated and (not flushed or i < len(segments) - 1 or seg.next_offset >= recovery_point):
            return
        later_bytes = sum(s.size for s in later)
        dropped_to = max([recovery_point] + [s.base_offset for s in later])
        level = logging.ERROR if flushed or seg.next_offset < recovery_point else logging.WARNING
        logger.log(
            level,
            "%s-%d: recovered segment %s: %d of its %d bytes dropped at position %d, and %d later segments "
            "(%d bytes) deleted: the log now ends at offset %d%s",
            self.topic, self.partition, seg.log_path, truncated, old_size, seg.size, len(later), later_bytes,
            seg.next_offset,
            f"; offsets {seg.next_offset} to at least {dropped_to - 1} were lost" if dropped_to > seg.next_offset else "",
        )
        for s in later:
            s.close()
            s.delete_files()
        if later:
            del segments[i + 1 :]
