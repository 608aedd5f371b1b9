"""LeaderEpochFileCache: which leader epoch began at which offset (Kafka's leader-epoch-checkpoint).

Followers ask the leader "where did my last epoch end?" (OffsetsForLeaderEpoch) and truncate
to that offset after a failover. The cache is changed under the owning Log's lock; it is
written to disk (atomically, fsynced) when the log flushes, and what a crash loses is rebuilt
from the batches' partition leader epochs when the log's unflushed tail is recovered.
"""

from __future__ import annotations

import bisect
import logging
from typing import NamedTuple

from gregor.storage.checkpoint import LeaderEpochCheckpointFile
from gregor.storage.errors import CorruptCheckpointError

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochFileCache:
    def __init__(self, path: str) -> None:
        self._file = LeaderEpochCheckpointFile(path)
        self._entries: list[EpochEntry] = []
        corrupt = False
        try:
            loaded = [EpochEntry(e, o) for e, o in self._file.read()]
        except CorruptCheckpointError as e:
            log.warning("%s; starting with an empty leader epoch cache", e)
            loaded = []
            corrupt = True
        for entry in loaded:  # keep only a strictly increasing prefix-consistent sequence
            self._assign(entry)
        # Dirty only if the file must be rewritten (each clean start used to rewrite every log's).
        self._dirty = corrupt or loaded != self._entries

    @property
    def path(self) -> str:
        return self._file.path

    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` begins at `start_offset`. Returns whether the cache changed.

        Entries with an epoch >= `epoch` or a start offset >= `start_offset` are dropped first,
        so epochs and start offsets both stay strictly increasing (Kafka's semantics).
        """
        if epoch < 0:
            return False
        return self._assign(EpochEntry(epoch, start_offset))

    def _assign(self, entry: EpochEntry) -> bool:
        last = self.latest_entry
        if last is not None and last.epoch == entry.epoch and entry.start_offset >= last.start_offset:
            return False
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch or self._entries[-1].start_offset >= entry.start_offset
        ):
            self._entries.pop()
        self._entries.append(entry)
        self._dirty = True
        self._check()
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch: the end of the largest epoch <= requested.

        The end offset is the start offset of the first epoch above the requested one, or the log
        end offset if the requested epoch is the latest. (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        when the requested epoch is undefined or above every known epoch.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        epochs = [e.epoch for e in self._entries]
        i = bisect.bisect_right(epochs, requested_epoch)  # first entry with epoch > requested
        if i == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        higher = self._entries[i]
        if i == 0:  # requested epoch is older than anything we know
            return requested_epoch, higher.start_offset
        return self._entries[i - 1].epoch, higher.start_offset

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range holds `offset`, or None if it is before the first entry."""
        starts = [e.start_offset for e in self._entries]
        i = bisect.bisect_right(starts, offset) - 1
        return self._entries[i].epoch if i >= 0 else None

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after `end_offset` (the log was truncated to it)."""
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()
        self._dirty = True

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: drop earlier entries, keeping the epoch in force there."""
        removed: EpochEntry | None = None
        dropped = 0
        while self._entries and self._entries[0].start_offset <= start_offset:
            removed = self._entries.pop(0)
            dropped += 1
        if removed is not None:
            self._entries.insert(0, EpochEntry(removed.epoch, start_offset))
            # Unchanged (the one entry already started there, as at every load of a log starting at its
            # first epoch): not dirty, or each clean start rewrote and fsynced every log's checkpoint.
            if dropped > 1 or removed.start_offset != start_offset:
                self._dirty = True
            self._check()

    def clear(self) -> None:
        if self._entries:
            self._entries.clear()
            self._dirty = True

    @property
    def dirty(self) -> bool:
        return self._dirty

    def flush(self) -> None:
        """Write the checkpoint file if anything changed since the last write."""
        if not self._dirty:
            return
        self._dirty = False
        snapshot = list(self._entries)
        try:
            self._file.write(snapshot)
        except BaseException:
            self._dirty = True
            raise

    def _check(self) -> None:
        for a, b in zip(self._entries, self._entries[1:], strict=False):
            assert a.epoch < b.epoch and a.start_offset < b.start_offset, self._entries
