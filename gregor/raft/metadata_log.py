"""MetadataLog: the replicated log kept with Gregor's own log layer (Kafka's KafkaMetadataLog).

`<metadata.log.dir>/__cluster_metadata-0/` is a partition directory like any other: segments of record
batches exactly as on the wire, their indexes, the leader epoch checkpoint; it is opened with
`gregor.storage.Log`, so after a kill -9 it is recovered the same way (every batch re-validated from
the log start, a torn tail truncated, the epoch cache rebuilt from the batches). Beside them lie the
snapshots (snapshot_files.py); the log starts at the latest one, and the segments wholly below it are
deleted once it is written.

Appends do not fsync: the node asks for `flush()` (which its driver runs on a worker thread) and
counts only what is flushed. The quorum-state file lives in the same directory, as Kafka keeps it.
"""

from __future__ import annotations

import os

from gregor.configdef import LONG_MAX
from gregor.protocol.records import iter_headers
from gregor.raft.log import OffsetAndEpoch
from gregor.raft.snapshot_files import FileSnapshot, FileSnapshotStore, FileSnapshotWriter
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from gregor.storage.log_state import now_ms

METADATA_LOG_DIR_NAME = "__cluster_metadata-0"
MAX_BATCH_BYTES = 8 << 20


class MetadataLog:
    """A RaftLog in files (see gregor.raft.log for the contract)."""

    def __init__(self, log: Log, snapshots: FileSnapshotStore) -> None:
        self._log = log
        self._snapshots = snapshots

    @classmethod
    def open(cls, parent_dir: str, segment_bytes: int = 1 << 30, segment_ms: int = 604800000) -> MetadataLog:
        """Open (or create) `<parent_dir>/__cluster_metadata-0`, recovering it, and start it at its latest snapshot."""
        path = os.path.join(parent_dir, METADATA_LOG_DIR_NAME)
        os.makedirs(path, exist_ok=True)
        snapshots = FileSnapshotStore(path)
        latest = snapshots.latest
        config = LogConfig(segment_bytes=segment_bytes, segment_ms=segment_ms, flush_messages=LONG_MAX,
                           flush_ms=LONG_MAX, retention_ms=-1, retention_bytes=-1, file_delete_delay_ms=0,
                           max_message_bytes=MAX_BATCH_BYTES + 1024, cleanup_policy="delete")
        start = latest.offset if latest is not None else 0
        log = Log.open(path, config, recovery_point=0, log_start_offset=start)
        out = cls(log, snapshots)
        if latest is not None:
            log.update_high_watermark(latest.offset)  # a snapshot is committed by definition
            out._delete_below(latest.offset)  # segments a crash kept below the snapshot
        return out

    # --- offsets and epochs ---------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def flushed_offset(self) -> int:
        return min(self._log.recovery_point, self._log.log_end_offset)

    @property
    def last_fetched_epoch(self) -> int:
        e = self._log.leader_epoch_cache.latest_entry
        if e is not None and e.start_offset < self._log.log_end_offset:
            return e.epoch
        snap = self._snapshots.latest
        return snap.epoch if snap is not None else -1

    def epoch_entries(self) -> list[tuple[int, int]]:
        leo = self._log.log_end_offset
        return [(e.epoch, e.start_offset) for e in self._log.leader_epoch_cache.entries() if e.start_offset < leo]

    @property
    def high_watermark(self) -> int:
        return self._log.high_watermark

    @property
    def directory(self) -> str:
        return self._log.dir

    @property
    def max_batch_bytes(self) -> int:
        """The largest batch it takes: one must fit a segment."""
        return min(MAX_BATCH_BYTES, self._log.config.segment_bytes)

    # --- appends, truncation, reads --------------------------------------------------------------

    def append_as_leader(self, batch: bytes, epoch: int) -> None:
        headers = list(iter_headers(batch))
        assert len(headers) == 1 and headers[0].partition_leader_epoch == epoch
        self._log.append_as_follower(batch, headers)  # the offsets are set: the follower path writes as is

    def append_as_follower(self, records: bytes | memoryview) -> int:
        """Validated (framing, CRC, the record walk), in runs of whole batches no larger than a segment."""
        view = memoryview(records)
        limit = self._log.config.segment_bytes
        start = end = 0
        for h in iter_headers(view):
            if end > start and h.position + h.size - start > limit:
                self._log.append_as_follower(view[start:end])
                start = end
            end = h.position + h.size
        if end > start:
            self._log.append_as_follower(view[start:end])
        return self._log.log_end_offset

    def truncate_to(self, offset: int) -> None:
        self._log.truncate_to(offset)

    def read(self, offset: int, max_bytes: int) -> bytes | memoryview:
        return self._log.read(offset, max_bytes).records

    def flush(self) -> None:
        self._log.flush()

    def set_high_watermark(self, offset: int) -> None:
        self._log.update_high_watermark(offset)

    # --- snapshots ---------------------------------------------------------------------------

    @property
    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return self._snapshots.latest

    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        return sorted(self._snapshots.ids)

    def open_snapshot(self, snapshot_id: OffsetAndEpoch) -> FileSnapshot | None:
        return self._snapshots.open(snapshot_id)

    def new_snapshot(self, snapshot_id: OffsetAndEpoch) -> FileSnapshotWriter:
        return self._snapshots.writer(snapshot_id)

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        self._snapshots.delete_older_than(snapshot_id)
        if snapshot_id.offset > self._log.log_start_offset:
            self._delete_below(snapshot_id.offset)

    def _delete_below(self, offset: int) -> None:
        target = min(offset, self._log.high_watermark)
        if target > self._log.log_start_offset:
            self._log.delete_records(target)
        self._log.delete_old_segments(now_ms())  # those wholly below the start; unlinked at once (no delay here)

    def reset_to_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        self._log.truncate_fully_and_start_at(snapshot_id.offset)
        self._snapshots.delete_older_than(snapshot_id)

    def close(self) -> None:
        if not self._log.closed:
            self._log.flush()
            self._log.close()

    def abandon(self) -> None:
        """Close without a flush (what a crash leaves; for tests)."""
        self._log.close()
