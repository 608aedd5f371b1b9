"""The replicated log as the quorum sees it (Kafka's ReplicatedLog): what the core asks of its storage,
and the pure rules that compare two logs by their leader epochs.

Two implementations: `MetadataLog` (metadata_log.py) keeps the log with Gregor's own log layer in
`<dir>/__cluster_metadata-0/` and its snapshots beside it; `MemoryLog` (memory_log.py) keeps it in
memory for the simulation, where a crash loses what was not flushed.

Offsets, from low to high, with a snapshot at (S, E_s) (its end offset and the epoch of its last record):

    log_start_offset (== S once there is a snapshot) <= high watermark <= flushed_offset? <= end_offset

(the high watermark may pass the local flushed offset: it is the quorum's, a majority has it durable).
A follower fetches at its end offset naming the epoch of its last record (`last_fetched_epoch`, E_s
when the log is empty after a snapshot); `validate_fetch` is the leader's answer: go on, truncate
(the diverging epoch and where it ends on the leader), or fetch the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

VALID = "valid"
DIVERGING = "diverging"
SNAPSHOT = "snapshot"


class OffsetAndEpoch(NamedTuple):
    """A position in the log: an offset and the epoch of the record before it (a snapshot's id)."""

    offset: int
    epoch: int


NO_SNAPSHOT = OffsetAndEpoch(-1, -1)


@dataclass(frozen=True, slots=True)
class FetchValidation:
    kind: str  # VALID, DIVERGING or SNAPSHOT
    position: OffsetAndEpoch = NO_SNAPSHOT  # DIVERGING: (end offset, epoch); SNAPSHOT: the snapshot id


class RawSnapshot(Protocol):
    """A frozen snapshot's bytes, read in chunks (FetchSnapshot, loading)."""

    snapshot_id: OffsetAndEpoch
    size: int

    def read(self, position: int, max_bytes: int) -> bytes: ...

    def close(self) -> None: ...


class RawSnapshotWriter(Protocol):
    """A snapshot being written: bytes appended in order, then frozen (made durable and visible) or aborted."""

    snapshot_id: OffsetAndEpoch
    size: int

    def append(self, data: bytes | memoryview) -> None: ...

    def freeze(self) -> None: ...

    def abort(self) -> None: ...


class RaftLog(Protocol):
    """What the core needs of its log. All calls come from the node's thread, except `flush`, which a
    driver may run on a worker thread while appends go on."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def end_offset(self) -> int: ...

    @property
    def flushed_offset(self) -> int:
        """Everything below it is durable (a crash keeps it)."""
        ...

    @property
    def last_fetched_epoch(self) -> int:
        """The epoch of the last record, else of the latest snapshot, else -1."""
        ...

    def epoch_entries(self) -> list[tuple[int, int]]:
        """(epoch, start offset) of every epoch the log holds records of, in order."""
        ...

    def append_as_leader(self, batch: bytes, epoch: int) -> None:
        """Append one batch the leader built at `end_offset` (its offsets and epoch already set)."""
        ...

    def append_as_follower(self, records: bytes | memoryview) -> int:
        """Validate (CRC, framing) and append the leader's batches; returns the new end offset."""
        ...

    def truncate_to(self, offset: int) -> None: ...

    def read(self, offset: int, max_bytes: int) -> bytes | memoryview:
        """Whole batches from `offset` (at least one, whatever `max_bytes`), empty at the end offset."""
        ...

    def flush(self) -> None: ...

    def set_high_watermark(self, offset: int) -> None: ...

    @property
    def latest_snapshot_id(self) -> OffsetAndEpoch | None: ...

    def open_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshot | None: ...

    def new_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter:
        """A writer whose `freeze` adds the snapshot to the log (not yet moving its start)."""
        ...

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """The log now starts at the snapshot: older snapshots and the segments wholly below it go."""
        ...

    def reset_to_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """Drop every record and start empty at the snapshot's end (a follower installed a fetched snapshot)."""
        ...

    def close(self) -> None: ...


def epoch_end(entries: list[tuple[int, int]], snapshot: OffsetAndEpoch | None, end_offset: int,
              epoch: int) -> OffsetAndEpoch:
    """The largest epoch at or below `epoch` that the log knows (its records' epochs and the latest
    snapshot's) and the offset it ends at: where the next epoch starts, or the end offset.

    An epoch older than everything: (first start offset, `epoch`) when there is no snapshot (Kafka's
    answer, the follower truncates there), else NO_SNAPSHOT (the caller sends the snapshot)."""
    known = list(entries)
    if snapshot is not None and (not known or known[0][0] > snapshot.epoch):
        known.insert(0, (snapshot.epoch, snapshot.offset))
    found = -1
    for i, (e, _start) in enumerate(known):
        if e > epoch:
            break
        found = i
    if found < 0:
        if snapshot is not None:
            return NO_SNAPSHOT
        return OffsetAndEpoch(known[0][1] if known else end_offset, epoch)
    end = known[found + 1][1] if found + 1 < len(known) else end_offset
    return OffsetAndEpoch(end, known[found][0])


def validate_fetch(log: RaftLog, fetch_offset: int, last_fetched_epoch: int) -> FetchValidation:
    """The leader's check of a follower's position (KIP-595, KIP-630): VALID if the follower's log agrees
    with ours up to `fetch_offset`, DIVERGING with where our copy of its last epoch ends, or SNAPSHOT when
    the records it needs are only in our latest snapshot."""
    start = log.log_start_offset
    snapshot = log.latest_snapshot_id
    if fetch_offset < start or (fetch_offset == 0 and last_fetched_epoch < 0 and start > 0):
        assert snapshot is not None, f"log starts at {start} without a snapshot"
        return FetchValidation(SNAPSHOT, snapshot)
    if last_fetched_epoch < 0:
        if fetch_offset == 0:
            return FetchValidation(VALID)
        return FetchValidation(DIVERGING, OffsetAndEpoch(0, -1))
    end = epoch_end(log.epoch_entries(), snapshot, log.end_offset, last_fetched_epoch)
    if end == NO_SNAPSHOT:
        assert snapshot is not None
        return FetchValidation(SNAPSHOT, snapshot)
    if end.epoch != last_fetched_epoch or end.offset < fetch_offset:
        return FetchValidation(DIVERGING, end)
    return FetchValidation(VALID)


def truncation_offset(log: RaftLog, diverging: OffsetAndEpoch) -> int:
    """Where a follower truncates when the leader says its epoch `diverging.epoch` ends at `diverging.offset`
    (Kafka's truncateToEndOffset): the end of that epoch in both logs if we have it, else the end of our
    latest epoch below it (the next fetch then compares from there)."""
    if diverging.epoch < 0:
        return min(diverging.offset, log.end_offset)
    local = epoch_end(log.epoch_entries(), log.latest_snapshot_id, log.end_offset, diverging.epoch)
    if local == NO_SNAPSHOT:
        return log.log_start_offset
    if local.epoch == diverging.epoch:
        return min(local.offset, diverging.offset)
    return min(local.offset, log.end_offset)


def last_epoch_at(entries: list[tuple[int, int]], snapshot: OffsetAndEpoch | None, offset: int) -> int:
    """The epoch of the record at `offset - 1` (what a snapshot ending at `offset` is named with)."""
    epoch = snapshot.epoch if snapshot is not None and snapshot.offset <= offset else -1
    for e, start in entries:
        if start < offset:
            epoch = e
        else:
            break
    return epoch
