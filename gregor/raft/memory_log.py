"""MemoryLog: the replicated log in memory, for the simulation, with a crash model.

It holds the same record batches MetadataLog writes to files and answers the same questions; what a
crash keeps is `durable()`: the flushed prefix of the log (a crash loses every batch not flushed, and
may keep a part of them: `durable(keep_unflushed=n)` keeps the first n unflushed batches, as a page
cache written back before the crash would) and every frozen snapshot, never one being written.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from gregor.protocol.records import iter_headers, validate_record_set
from gregor.raft.log import OffsetAndEpoch


@dataclass(slots=True)
class _Batch:
    base_offset: int
    next_offset: int
    epoch: int
    data: bytes


@dataclass
class MemorySnapshot:
    snapshot_id: OffsetAndEpoch
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)

    def read(self, position: int, max_bytes: int) -> bytes:
        return self.data[position:position + max_bytes]

    def close(self) -> None:
        pass


@dataclass
class MemorySnapshotWriter:
    snapshot_id: OffsetAndEpoch
    _store: dict[OffsetAndEpoch, bytes]
    _buf: bytearray = field(default_factory=bytearray)
    _done: bool = False

    @property
    def size(self) -> int:
        return len(self._buf)

    def append(self, data: bytes | memoryview) -> None:
        assert not self._done, "snapshot already frozen or aborted"
        self._buf += data

    def freeze(self) -> None:
        assert not self._done
        self._done = True
        self._store[self.snapshot_id] = bytes(self._buf)

    def abort(self) -> None:
        self._done = True


class MemoryLog:
    """A RaftLog in memory (see gregor.raft.log for the contract)."""

    def __init__(self) -> None:
        self._batches: list[_Batch] = []
        self._bases: list[int] = []
        self._start = 0
        self._flushed = 0  # batches below this offset are durable
        self._snapshots: dict[OffsetAndEpoch, bytes] = {}
        self.high_watermark = 0
        self.max_batch_bytes = 8 << 20

    # --- offsets and epochs ---------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self._batches[-1].next_offset if self._batches else self._start

    @property
    def flushed_offset(self) -> int:
        return min(self._flushed, self.end_offset)

    @property
    def last_fetched_epoch(self) -> int:
        if self._batches:
            return self._batches[-1].epoch
        snap = self.latest_snapshot_id
        return snap.epoch if snap is not None else -1

    def epoch_entries(self) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for b in self._batches:
            if not out or b.epoch > out[-1][0]:
                out.append((b.epoch, b.base_offset))
        return out

    # --- appends, truncation, reads ----------------------------------------------------------

    def _add(self, data: bytes) -> None:
        for h in iter_headers(data):
            assert h.base_offset >= self.end_offset, (h.base_offset, self.end_offset)
            assert not self._batches or h.partition_leader_epoch >= self._batches[-1].epoch
            b = bytes(memoryview(data)[h.position:h.position + h.size])
            self._batches.append(_Batch(h.base_offset, h.next_offset, h.partition_leader_epoch, b))
            self._bases.append(h.base_offset)

    def append_as_leader(self, batch: bytes, epoch: int) -> None:
        headers = list(iter_headers(batch))
        assert len(headers) == 1 and headers[0].partition_leader_epoch == epoch
        assert headers[0].base_offset == self.end_offset, (headers[0].base_offset, self.end_offset)
        self._add(batch)

    def append_as_follower(self, records: bytes | memoryview) -> int:
        validate_record_set(memoryview(records), self.max_batch_bytes)  # CRC and framing
        self._add(bytes(records))
        return self.end_offset

    def truncate_to(self, offset: int) -> None:
        assert offset >= self.high_watermark, f"truncation to {offset} below the high watermark {self.high_watermark}"
        i = bisect.bisect_left(self._bases, offset)
        if i > 0 and self._batches[i - 1].next_offset > offset:
            i -= 1  # the batch holding `offset` goes whole
        del self._batches[i:]
        del self._bases[i:]
        self._flushed = min(self._flushed, self.end_offset)

    def read(self, offset: int, max_bytes: int) -> bytes:
        if offset < self._start or offset > self.end_offset:
            raise ValueError(f"read at {offset} outside [{self._start}, {self.end_offset}]")
        i = bisect.bisect_right(self._bases, offset) - 1
        i = max(i, 0)
        out = bytearray()
        while i < len(self._batches):
            b = self._batches[i]
            if b.next_offset <= offset:
                i += 1
                continue
            if out and len(out) + len(b.data) > max_bytes:
                break
            out += b.data
            i += 1
        return bytes(out)

    def flush(self) -> None:
        self._flushed = self.end_offset

    def set_high_watermark(self, offset: int) -> None:
        assert offset <= self.end_offset or offset <= self._start
        self.high_watermark = offset

    # --- snapshots ---------------------------------------------------------------------

    @property
    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return max(self._snapshots) if self._snapshots else None

    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        return sorted(self._snapshots)

    def open_snapshot(self, snapshot_id: OffsetAndEpoch) -> MemorySnapshot | None:
        data = self._snapshots.get(snapshot_id)
        return MemorySnapshot(snapshot_id, data) if data is not None else None

    def new_snapshot(self, snapshot_id: OffsetAndEpoch) -> MemorySnapshotWriter:
        return MemorySnapshotWriter(snapshot_id, self._snapshots)

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        assert snapshot_id in self._snapshots
        for old in [s for s in self._snapshots if s < snapshot_id]:
            del self._snapshots[old]
        if snapshot_id.offset > self._start:
            # whole batches only leave, as whole segments do from a file log
            keep = [b for b in self._batches if b.next_offset > snapshot_id.offset]
            self._batches = keep
            self._bases = [b.base_offset for b in keep]
            self._start = snapshot_id.offset

    def reset_to_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        assert snapshot_id in self._snapshots
        self._batches.clear()
        self._bases.clear()
        self._start = snapshot_id.offset
        self._flushed = self._start
        self.high_watermark = max(self.high_watermark, self._start)
        for old in [s for s in self._snapshots if s < snapshot_id]:
            del self._snapshots[old]

    def close(self) -> None:
        pass

    # --- the crash model ------------------------------------------------------------------

    def durable(self, keep_unflushed: int = 0) -> MemoryLog:
        """What survives a crash: a new log with the flushed batches (and the first `keep_unflushed`
        of the others) and the frozen snapshots. Its high watermark is unknown (the snapshot's end)."""
        out = MemoryLog()
        out._start = self._start
        out._snapshots = dict(self._snapshots)
        kept = [b for b in self._batches if b.next_offset <= self._flushed]
        rest = [b for b in self._batches if b.next_offset > self._flushed]
        kept += rest[:keep_unflushed]
        out._batches = kept
        out._bases = [b.base_offset for b in kept]
        out._flushed = out.end_offset
        out.high_watermark = out._start
        out.max_batch_bytes = self.max_batch_bytes
        return out

    def records_in(self, start: int, end: int) -> list[tuple[int, int, bytes]]:
        """(base offset, epoch, batch bytes) of the batches in [start, end): the simulation's view."""
        return [(b.base_offset, b.epoch, b.data) for b in self._batches if b.base_offset >= start
                and b.next_offset <= end]
