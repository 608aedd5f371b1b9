"""Snapshots of the replicated state (KIP-630), as record batches.

A snapshot with id (end offset S, epoch E) holds the state of everything below offset S, whose last
record was written in epoch E. Its bytes are record batches v2 of epoch E: a control batch with a
SnapshotHeaderRecord first (the append time of the last record it covers), then the layer above's
records in data batches, then a control batch with a SnapshotFooterRecord. The offsets inside a
snapshot number its records from 0 and mean nothing else.

`SnapshotWriter` is what the listener writes its state with (RaftNode.create_snapshot hands it out);
`SnapshotReader` is what it loads it back from (handle_load_snapshot). `SnapshotValidator` checks a
snapshot's bytes as they arrive (FetchSnapshot) or as they are read: every batch whole with a valid
CRC, header first, footer last, nothing after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from gregor.protocol.primitives import DecodeError
from gregor.protocol.records import InvalidRecordError, batch_size_at, read_header, validate_record_set
from gregor.raft import records as rr
from gregor.raft.log import OffsetAndEpoch, RawSnapshot, RawSnapshotWriter

READ_CHUNK_BYTES = 1 << 20  # how much of a snapshot file is read at once when loading it


class SnapshotError(Exception):
    """A snapshot is malformed (or a writer is used wrongly); the message says which and why."""


def snapshot_file_name(snapshot_id: OffsetAndEpoch) -> str:
    """Kafka's name: `<end offset, 20 digits>-<epoch, 10 digits>.checkpoint`."""
    return f"{snapshot_id.offset:020d}-{snapshot_id.epoch:010d}.checkpoint"


def parse_snapshot_file_name(name: str) -> OffsetAndEpoch | None:
    if not name.endswith(".checkpoint"):
        return None
    stem = name[: -len(".checkpoint")]
    offset, sep, epoch = stem.partition("-")
    if not sep or len(offset) != 20 or len(epoch) != 10 or not offset.isdigit() or not epoch.isdigit():
        return None
    return OffsetAndEpoch(int(offset), int(epoch))


class SnapshotWriter:
    """Writes the listener's records into a snapshot, in batches of at most `max_batch_bytes`.

    `freeze()` writes the footer and makes the snapshot durable and visible (the node then starts its
    log at the snapshot); `close()` without it abandons the snapshot."""

    def __init__(self, raw: RawSnapshotWriter, last_contained_log_time_ms: int, now_ms: int,
                 max_batch_bytes: int, on_frozen: Callable[[OffsetAndEpoch], None] | None = None) -> None:
        self._raw = raw
        self.snapshot_id = raw.snapshot_id
        self._now_ms = now_ms
        self._max_batch_bytes = max_batch_bytes
        self._on_frozen = on_frozen
        self._next_offset = 1
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._state = "open"
        raw.append(rr.snapshot_header_batch(self.snapshot_id.epoch, last_contained_log_time_ms, now_ms))

    @property
    def frozen(self) -> bool:
        return self._state == "frozen"

    def append(self, values: Sequence[bytes]) -> None:
        if self._state != "open":
            raise SnapshotError(f"snapshot {self.snapshot_id} is {self._state}")
        for v in values:
            cost = rr.record_overhead(len(v))
            if cost + rr.batch_overhead() > self._max_batch_bytes:
                raise SnapshotError(f"a record of {len(v)} bytes does not fit a batch of {self._max_batch_bytes}")
            if self._pending_bytes + cost + rr.batch_overhead() > self._max_batch_bytes:
                self._write_pending()
            self._pending.append(v)
            self._pending_bytes += cost

    def _write_pending(self) -> None:
        if not self._pending:
            return
        self._raw.append(rr.data_batch(self._pending, self._next_offset, self.snapshot_id.epoch, self._now_ms))
        self._next_offset += len(self._pending)
        self._pending, self._pending_bytes = [], 0

    def freeze(self) -> OffsetAndEpoch:
        if self._state != "open":
            raise SnapshotError(f"snapshot {self.snapshot_id} is {self._state}")
        self._write_pending()
        self._raw.append(rr.snapshot_footer_batch(self._next_offset, self.snapshot_id.epoch, self._now_ms))
        self._raw.freeze()
        self._state = "frozen"
        if self._on_frozen is not None:
            self._on_frozen(self.snapshot_id)
        return self.snapshot_id

    def close(self) -> None:
        if self._state == "open":
            self._raw.abort()
            self._state = "aborted"


class SnapshotValidator:
    """Checks a snapshot's bytes fed in order, in chunks of any size."""

    def __init__(self, snapshot_id: OffsetAndEpoch, max_batch_bytes: int) -> None:
        self.snapshot_id = snapshot_id
        self._max_batch_bytes = max_batch_bytes
        self._buf = bytearray()
        self._seen_header = False
        self._seen_footer = False
        self.batches = 0

    def _fail(self, why: str) -> SnapshotError:
        return SnapshotError(f"snapshot {self.snapshot_id}: {why}")

    def feed(self, data: bytes | memoryview) -> list[rr.Batch]:
        """Add bytes; returns the batches they completed (decoded)."""
        self._buf += data
        out: list[rr.Batch] = []
        pos = 0
        view = memoryview(bytes(self._buf))  # a copy: the buffer is cut below while views of it would live on
        if True:
            while True:
                size = batch_size_at(view, pos)
                if size is None or len(view) - pos < size:
                    break
                if size > self._max_batch_bytes + rr.batch_overhead():
                    raise self._fail(f"a batch of {size} bytes")
                one = view[pos:pos + size]
                try:
                    validate_record_set(one, self._max_batch_bytes + rr.batch_overhead())
                    batch = rr.decode_batch(one, read_header(one, 0))
                except (InvalidRecordError, DecodeError) as e:
                    raise self._fail(f"batch at byte {pos}: {e}") from None
                self._check(batch)
                out.append(batch)
                pos += size
        del self._buf[:pos]
        return out

    def _check(self, batch: rr.Batch) -> None:
        if self._seen_footer:
            raise self._fail("a batch after the footer")
        kinds = [c.type for c in batch.control]
        if not self._seen_header:
            if kinds != [rr.SNAPSHOT_HEADER]:
                raise self._fail("it does not start with a SnapshotHeaderRecord")
            self._seen_header = True
        elif kinds == [rr.SNAPSHOT_FOOTER]:
            self._seen_footer = True
        elif batch.is_control:
            raise self._fail(f"unexpected control records {kinds}")
        if batch.epoch != self.snapshot_id.epoch:
            raise self._fail(f"a batch of epoch {batch.epoch}")
        self.batches += 1

    def finish(self) -> None:
        if self._buf:
            raise self._fail(f"{len(self._buf)} bytes of a partial batch at its end")
        if not self._seen_footer:
            raise self._fail("no SnapshotFooterRecord: it is incomplete")


class SnapshotReader:
    """A frozen snapshot's batches, read in chunks: the data batches (`batches()`) and the header's time."""

    def __init__(self, raw: RawSnapshot, max_batch_bytes: int) -> None:
        self.snapshot_id = raw.snapshot_id
        self._raw = raw
        self._max_batch_bytes = max_batch_bytes
        self.last_contained_log_time_ms = -1

    def all_batches(self) -> Iterator[rr.Batch]:
        """Every batch, header and footer included, checked as it is read."""
        v = SnapshotValidator(self.snapshot_id, self._max_batch_bytes)
        pos = 0
        while pos < self._raw.size:
            chunk = self._raw.read(pos, READ_CHUNK_BYTES)
            if not chunk:
                break
            pos += len(chunk)
            for b in v.feed(chunk):
                if b.control and b.control[0].type == rr.SNAPSHOT_HEADER and b.control[0].message is not None:
                    self.last_contained_log_time_ms = b.control[0].message.last_contained_log_timestamp
                yield b
        v.finish()

    def batches(self) -> Iterator[rr.Batch]:
        """The layer above's batches (no header or footer)."""
        for b in self.all_batches():
            if not b.is_control:
                yield b

    def records(self) -> Iterator[bytes]:
        for b in self.batches():
            yield from b.records

    def close(self) -> None:
        self._raw.close()
