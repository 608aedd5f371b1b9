"""LeaderEpochFileCache: which leader epoch began at which offset (Kafka's leader-epoch-checkpoint).

Followers ask the leader "where did my last epoch end?" (OffsetsForLeaderEpoch) and truncate
to that offset after a failover. The cache is changed under the owning Log's lock; it is
written to disk (atomically, fsynced) when the log flushes, and what a crash loses is rebuilt
from the batches' partition leader epochs when the log's unflushed tail is recovered.

The file holds the entries that begin below the log end offset. An entry beginning at or after
it (a new leader's epoch, assigned at the LEO before any append) holds no record: loading a log
drops such entries anyway (LogLoader trims the cache to the LEO), and the next leader assigns its
epoch at the LEO again. So a flush leaves them out, and a cache holding nothing else costs no
write: 10,000 new partitions, each led in epoch 0, shut down without 10,000 fsynced files.
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
        # What the file holds ([] if there is none; None if it cannot be read): a flush writes only
        # when the entries to keep differ (each clean start used to rewrite every log's file).
        self._written: list[EpochEntry] | None
        try:
            self._written = [EpochEntry(e, o) for e, o in self._file.read()]
        except CorruptCheckpointError as e:
            log.warning("%s; starting with an empty leader epoch cache", e)
            self._written = None
        for entry in self._written or ():  # keep only a strictly increasing prefix-consistent sequence
            self._assign(entry)

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

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: drop earlier entries, keeping the epoch in force there."""
        removed: EpochEntry | None = None
        while self._entries and self._entries[0].start_offset <= start_offset:
            removed = self._entries.pop(0)
        if removed is not None:
            self._entries.insert(0, EpochEntry(removed.epoch, start_offset))
            self._check()

    def clear(self) -> None:
        self._entries.clear()

    def _to_write(self, log_end_offset: int | None) -> list[EpochEntry]:
        entries = list(self._entries)  # one copy: another thread may assign meanwhile
        if log_end_offset is None:
            return entries
        return [e for e in entries if e.start_offset < log_end_offset]

    @property
    def dirty(self) -> bool:
        """Whether the file does not hold every entry."""
        return self.needs_flush()

    def needs_flush(self, log_end_offset: int | None = None) -> bool:
        """Whether `flush(log_end_offset)` would write the file."""
        return self._to_write(log_end_offset) != self._written

    def flush(self, log_end_offset: int | None = None) -> None:
        """Write the checkpoint file if it does not hold the entries yet; with `log_end_offset`,
        the entries beginning below it (see the module's docstring)."""
        entries = self._to_write(log_end_offset)
        if entries == self._written:
            return
        self._file.write(entries)
        self._written = entries

    def _check(self) -> None:
        for a, b in zip(self._entries, self._entries[1:], strict=False):
            assert a.epoch < b.epoch and a.start_offset < b.start_offset, self._entries
