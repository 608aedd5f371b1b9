"""Producer state: what a partition knows of each idempotent producer, and its snapshots.

For every producer id that appended to the partition the leader keeps the producer's epoch and
the sequence numbers and offsets of its last 5 batches (Kafka's ProducerStateEntry; the producer
has at most 5 requests in flight, so a retry is always one of them). With it the leader
  - acknowledges a retried batch that is already in the log with its original offsets instead of
    appending it again (`check` returns the original's BatchMetadata);
  - refuses a sequence gap (OUT_OF_ORDER_SEQUENCE_NUMBER) and an older epoch
    (INVALID_PRODUCER_EPOCH).
A producer the partition does not know (new, or expired) may start at any sequence: Kafka's rule
since KIP-360, under which the broker no longer answers UNKNOWN_PRODUCER_ID to a Produce; a known
producer bumping its epoch must start the new epoch at sequence 0.

The state is rebuilt from the log, so it is a cache of the batch headers: a snapshot file
`<20-digit offset>.snapshot` in the partition directory (Kafka's naming) holds the state of every
producer for the log below that offset. Snapshots are taken at segment roll and at close; on load
the state is the latest valid snapshot at or below the recovery point plus a replay of the batch
headers after it, so a restart after a clean shutdown reads one small file and replays nothing.
The file format is Gregor's own (a magic, a version, a CRC32C of the body, then the entries), so a
torn or damaged snapshot is detected and an older one (or the log itself) used instead.

Transactions: a transactional batch from a producer with no open transaction on the partition opens
one at its base offset (`ProducerStateEntry.current_txn_first_offset`, kept in snapshots); the
producer's commit or abort marker (a control batch from the transaction coordinator) closes it. The
first offset of the oldest open transaction is the partition's first unstable offset; the last
stable offset (LSO) is the smaller of it and the HW. A transaction whose marker is still above the HW
stays unstable until the HW passes the marker (`unreplicated`), so a read_committed consumer never
reads into a transaction whose outcome a failover could still change. Each abort marker hands an
AbortedTxn to `aborted_sink` (the Log puts it in the segment's .txnindex), on appends and on replay
alike (the index skips entries it has: replay is how entries lost with a machine crash come back).

Threads: the owning Log calls every method under its lock.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from crc32c import crc32c

from gregor.protocol.primitives import DecodeError
from gregor.protocol.records import TRANSACTIONAL_BIT, BatchHeader, ControlRecord
from gregor.storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    RecordValidationError,
    TransactionCoordinatorFencedError,
)
from gregor.storage.files import unlink_if_exists
from gregor.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
BATCHES_PER_PRODUCER = 5  # Kafka's NUM_BATCHES_TO_RETAIN: the producer's max.in.flight.requests bound
NO_SEQUENCE = -1
NO_EPOCH = -1
INT32_MAX = 2**31 - 1

_new_tuple = tuple.__new__
_MAGIC = b"GPSN"
_VERSION = 1
_FILE_HEADER = struct.Struct(">4sHI")  # magic, version, crc32c of everything after the header
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhqiqB")  # producer id, epoch, last timestamp, coordinator epoch, txn first offset, batches
_BATCH = struct.Struct(">iiqqq")  # first seq, last seq, first offset, last offset, max timestamp


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_name(name: str) -> int | None:
    stem, dot, ext = name.partition(".")
    if dot and "." + ext == SNAPSHOT_SUFFIX and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """The sequence of a batch's last record: sequences wrap from INT32_MAX to 0."""
    if base_sequence > INT32_MAX - last_offset_delta:
        return base_sequence - (INT32_MAX - last_offset_delta) - 1
    return base_sequence + last_offset_delta


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class BatchMetadata(NamedTuple):  # a tuple: made on every idempotent append, so cheap to build
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int  # the batch's max timestamp


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_EPOCH
    last_timestamp: int = -1  # the max timestamp of its last batch: what producer.id.expiration.ms is measured from
    coordinator_epoch: int = -1  # of the last transaction marker
    current_txn_first_offset: int = -1  # the open transaction's first offset, -1 when none
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_PER_PRODUCER))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b[0] == first_seq and b[1] == last_seq:
                return b
        return None

    def add(self, h: BatchHeader) -> None:
        """Record an appended batch (offsets assigned). A new epoch forgets the old one's batches."""
        if h.producer_epoch != self.producer_epoch:
            self.producer_epoch = h.producer_epoch
            self.batches.clear()
        ts = self.last_timestamp = h.max_timestamp
        seq = h.base_sequence
        if seq >= 0:  # control batches (transaction markers) carry no sequence
            delta = h.last_offset_delta
            last = seq + delta if seq <= INT32_MAX - delta else seq - (INT32_MAX - delta) - 1
            base = h.base_offset  # tuple.__new__: a third of the NamedTuple constructor's cost
            self.batches.append(_new_tuple(BatchMetadata, (seq, last, base, base + delta, ts)))


ControlReader = Callable[[BatchHeader], ControlRecord]


class ProducerStateManager:
    """The producer state of one partition and its snapshot files in `dir`."""

    def __init__(self, dir: str, name: str) -> None:
        self.dir = dir
        self.name = name  # "<topic>-<partition>", for messages
        self.producers: dict[int, ProducerStateEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.unreplicated: deque[tuple[int, int]] = deque()  # (marker offset, first offset) above the HW
        self._first_unstable: int | None = None
        self._first_unstable_known = True
        self.aborted_sink: Callable[[AbortedTxn], None] = lambda e: None  # the Log's .txnindex
        self.map_end_offset = 0  # where the last load or truncation left the state (the LEO then)
        # What the last load did, for tests and logs: (snapshot offset or None, batches replayed).
        self.loaded_from: tuple[int | None, int] = (None, 0)
        self._snapshots: list[int] | None = None  # offsets of the snapshot files, once listed

    def __len__(self) -> int:
        return len(self.producers)

    # --- the leader's checks and the updates --------------------------------------------

    def check(self, headers: list[BatchHeader], client: bool = True) -> BatchMetadata | None:
        """Check client batches against the state before they are appended. Returns the metadata
        of the original if a batch duplicates one of its producer's last 5 batches (the whole
        append is then answered with it and nothing is appended, as Kafka does); raises
        OutOfOrderSequenceError or InvalidProducerEpochError. Changes nothing."""
        if len(headers) == 1:  # a client's Produce: one batch per partition
            h = headers[0]
            if h.producer_id < 0:  # a plain producer
                return None
            entry = self.producers.get(h.producer_id)
            if (entry is not None and h.producer_epoch == entry.producer_epoch and entry.batches
                    and (entry.current_txn_first_offset < 0 or h.attributes & TRANSACTIONAL_BIT)):
                last = entry.batches[-1][1]
                if h.base_sequence == last + 1 and last < INT32_MAX:  # the next batch, as nearly always
                    return None
        staged: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq) of earlier batches of this append
        for h in headers:
            pid = h.producer_id
            if pid < 0:
                continue
            if not client:  # a coordinator writing for a producer (TxnOffsetCommit): its epoch only
                entry = self.producers.get(pid)
                if entry is not None and h.producer_epoch < entry.producer_epoch:
                    raise InvalidProducerEpochError(
                        f"{self.name}: producer {pid} epoch {h.producer_epoch} is older than {entry.producer_epoch}")
                continue
            epoch, first_seq = h.producer_epoch, h.base_sequence
            if first_seq < 0:
                raise RecordValidationError(f"{self.name}: batch of producer {pid} has no sequence number")
            last_seq = last_sequence(first_seq, h.last_offset_delta)
            entry = self.producers.get(pid)
            if pid in staged:
                cur_epoch, cur_last = staged[pid]
            elif entry is not None:
                dup = entry.find_duplicate(epoch, first_seq, last_seq)
                if dup is not None:
                    return dup
                cur_epoch, cur_last = entry.producer_epoch, entry.last_seq
            else:
                cur_epoch, cur_last = NO_EPOCH, NO_SEQUENCE
            if entry is not None and entry.current_txn_first_offset >= 0 and not h.is_transactional:
                raise InvalidTxnStateError(
                    f"{self.name}: producer {pid} sent a non-transactional batch while its transaction "
                    f"(from offset {entry.current_txn_first_offset}) is open")
            if epoch < cur_epoch:
                raise InvalidProducerEpochError(
                    f"{self.name}: producer {pid} epoch {epoch} is older than the current epoch {cur_epoch}")
            if epoch != cur_epoch:
                if first_seq != 0 and cur_epoch != NO_EPOCH:
                    raise OutOfOrderSequenceError(
                        f"{self.name}: producer {pid} starts epoch {epoch} at sequence {first_seq}, not 0 "
                        f"(current epoch {cur_epoch})")
            elif cur_last != NO_SEQUENCE and not in_sequence(cur_last, first_seq):
                raise OutOfOrderSequenceError(
                    f"{self.name}: out of order sequence number for producer {pid} epoch {epoch}: "
                    f"{first_seq} (incoming), {cur_last} (last appended)")
            staged[pid] = (epoch, last_seq)
        return None

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """A transaction marker the coordinator asks the leader to append: refused from an epoch older
        than the producer's (INVALID_PRODUCER_EPOCH) or from a deposed coordinator."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"{self.name}: marker of producer {producer_id} has epoch {producer_epoch}, older than "
                f"{entry.producer_epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"{self.name}: marker of producer {producer_id} comes from coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}")

    def update(self, headers: Iterable[BatchHeader], read_control: ControlReader | None = None) -> None:
        """Apply appended batches (leader after `check`, follower and replay without checks).
        `read_control` decodes a control batch's record (markers need their type)."""
        producers = self.producers
        for h in headers:
            pid = h.producer_id
            if pid >= 0:
                entry = producers.get(pid)
                if entry is None:
                    entry = producers[pid] = ProducerStateEntry(pid)
                if h.attributes & TRANSACTIONAL_BIT:
                    if h.is_control:
                        self._end_txn(entry, h, read_control)
                    elif entry.current_txn_first_offset < 0:
                        entry.current_txn_first_offset = h.base_offset
                        self.ongoing[pid] = h.base_offset
                        self._first_unstable_known = False
                entry.add(h)

    def _end_txn(self, entry: ProducerStateEntry, h: BatchHeader, read_control: ControlReader | None) -> None:
        if read_control is None:
            raise ValueError(f"{self.name}: a control batch needs its record read")
        try:
            cr = read_control(h)
        except DecodeError as e:
            logger.warning("%s: unreadable control batch at offset %d (%s); ignoring it", self.name, h.base_offset, e)
            return
        if not cr.is_txn_marker:
            return
        entry.coordinator_epoch = cr.coordinator_epoch
        first = entry.current_txn_first_offset
        if first < 0:  # a marker for a transaction that wrote nothing here
            return
        entry.current_txn_first_offset = -1
        del self.ongoing[entry.producer_id]
        self.unreplicated.append((h.base_offset, first))
        self._first_unstable_known = False
        if cr.type == 0:  # abort: its LSO is where the first still undecided transaction begins
            lso = min(self.ongoing.values(), default=h.base_offset + 1)
            self.aborted_sink(AbortedTxn(entry.producer_id, first, h.base_offset, lso))

    def on_high_watermark(self, hw: int) -> None:
        """Completed transactions whose markers the HW passed are stable."""
        u = self.unreplicated
        if u and u[0][0] < hw:
            while u and u[0][0] < hw:
                u.popleft()
            self._first_unstable_known = False

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction not yet decided and replicated; None when none."""
        if not self._first_unstable_known:
            firsts = list(self.ongoing.values())
            firsts.extend(first for _, first in self.unreplicated)
            self._first_unstable = min(firsts) if firsts else None
            self._first_unstable_known = True
        return self._first_unstable

    def _reset(self, producers: dict[int, ProducerStateEntry]) -> None:
        self.producers = producers
        self.ongoing = {pid: e.current_txn_first_offset for pid, e in producers.items()
                        if e.current_txn_first_offset >= 0}
        self.unreplicated.clear()
        self._first_unstable_known = False

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms (measured from their last batch's
        timestamp, as Kafka does). Returns how many were removed."""
        doomed = [pid for pid, e in self.producers.items()
                  if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration_ms]
        for pid in doomed:
            del self.producers[pid]
        return len(doomed)

    # --- snapshots ----------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        """The offsets of the snapshot files, ascending. The directory is listed once (at load);
        after that this manager is the only writer of its snapshots and keeps the list itself, so
        a roll, a close or a retention pass costs no directory listing (10,000 logs: no 10,000 listings)."""
        if self._snapshots is None:
            try:
                names = os.listdir(self.dir)
            except FileNotFoundError:
                names = []
            self._snapshots = sorted(off for off in map(parse_snapshot_name, names) if off is not None)
        return list(self._snapshots)

    def take_snapshot(self, offset: int) -> str:
        """Write the state as `<offset>.snapshot` (tmp file, then rename). Not fsynced: a snapshot
        is a cache of the log, and a torn one fails its CRC and is passed over on load."""
        body = bytearray(_COUNT.pack(len(self.producers)))
        for e in self.producers.values():
            body += _ENTRY.pack(e.producer_id, e.producer_epoch, e.last_timestamp, e.coordinator_epoch,
                                e.current_txn_first_offset, len(e.batches))
            for b in e.batches:
                body += _BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
        path = os.path.join(self.dir, snapshot_name(offset))
        tmp = path + ".tmp"
        with open(tmp, "wb") as fh:
            fh.write(_FILE_HEADER.pack(_MAGIC, _VERSION, crc32c(body)))
            fh.write(body)
        os.replace(tmp, path)
        known = self._snapshots
        if known is not None and offset not in known:
            bisect.insort(known, offset)
        return path

    def snapshot_at_roll(self, offset: int) -> None:
        """A snapshot at a segment roll (or close). A failure is logged, not raised: the append that
        rolled must not fail for a cache, and the next load replays the log instead."""
        try:
            self.take_snapshot(offset)
        except OSError as e:
            logger.error("%s: cannot write the producer state snapshot at offset %d: %s", self.name, offset, e)

    def read_snapshot(self, offset: int) -> dict[int, ProducerStateEntry]:
        """Parse one snapshot file. Raises ValueError if it is damaged."""
        return read_snapshot_file(os.path.join(self.dir, snapshot_name(offset)))

    def delete_snapshots(self, keep: Callable[[int], bool]) -> None:
        for off in self.snapshot_offsets():
            if not keep(off):
                self._delete_snapshot(off)

    def _delete_snapshot(self, offset: int) -> None:
        unlink_if_exists(os.path.join(self.dir, snapshot_name(offset)))
        if self._snapshots is not None and offset in self._snapshots:
            self._snapshots.remove(offset)

    def latest_snapshot_offset(self) -> int | None:
        offs = self.snapshot_offsets()
        return offs[-1] if offs else None

    # --- loading and truncation -----------------------------------------------------------

    def load(self, log_start_offset: int, log_end_offset: int, recovery_point: int, clean_shutdown: bool,
             batches_from: Callable[[int], Iterable[BatchHeader]], snapshot_offsets: list[int] | None = None,
             read_control: ControlReader | None = None) -> None:
        """Rebuild the state: the latest valid snapshot at or below min(recovery point, LEO), then
        the batch headers from there to the LEO (`batches_from(offset)` yields them). Snapshots
        above the LEO (a truncated log) are deleted first, damaged ones when met. A log that has no
        snapshot after a clean shutdown never held producer state (close writes one whenever it
        did), so nothing is replayed. `snapshot_offsets`: the snapshot files the caller found in
        its own listing of the directory (None: list it here)."""
        self._reset({})
        if snapshot_offsets is not None:
            self._snapshots = sorted(snapshot_offsets)
        self.delete_snapshots(lambda off: off <= log_end_offset)
        offsets = self.snapshot_offsets()
        start: int | None = None
        for off in reversed(offsets):
            if off > min(recovery_point, log_end_offset):
                continue
            try:
                self._reset(self.read_snapshot(off))
            except (OSError, ValueError) as e:
                logger.warning("%s: producer state snapshot %s is unusable (%s); deleting it",
                               self.name, snapshot_name(off), e)
                self._delete_snapshot(off)
                continue
            start = off
            break
        self.map_end_offset = start if start is not None else log_start_offset
        replayed = 0
        if not (start is None and clean_shutdown and not offsets) and self.map_end_offset < log_end_offset:
            for h in batches_from(self.map_end_offset):
                if h.base_offset >= log_end_offset:
                    break
                self.update((h,), read_control)
                replayed += 1
        self.map_end_offset = log_end_offset
        self.loaded_from = (start, replayed)
        if replayed:
            logger.info("%s: producer state rebuilt from %s and %d batches replayed up to offset %d (%d producers)",
                        self.name, "snapshot " + snapshot_name(start) if start is not None else "the log start",
                        replayed, log_end_offset, len(self.producers))

    def truncate_fully(self, offset: int) -> None:
        """The log restarts empty at `offset`: no producer state, no snapshots."""
        self._reset({})
        self.delete_snapshots(lambda off: False)
        self.map_end_offset = offset
        self.loaded_from = (None, 0)

    def close(self, log_end_offset: int) -> None:
        """Snapshot at the LEO for a fast next start, unless the log never had producer state. Not
        fsynced (an fsync per log would cost a 10,000-partition shutdown seconds): if the machine
        loses it, its CRC fails on load and the state is rebuilt from the log instead."""
        latest = self.latest_snapshot_offset()
        if self.producers or (latest is not None and latest != log_end_offset):
            self.snapshot_at_roll(log_end_offset)  # a failure is logged: closing the log goes on


def read_snapshot_file(path: str) -> dict[int, ProducerStateEntry]:
    """The producer entries of the snapshot file at `path` (also for `gregor dump-log`). Raises
    ValueError if it is damaged, OSError if it cannot be read."""
    with open(path, "rb") as fh:
        data = fh.read()
    if len(data) < _FILE_HEADER.size + _COUNT.size:
        raise ValueError(f"{len(data)} bytes is too short for a snapshot")
    magic, version, crc = _FILE_HEADER.unpack_from(data, 0)
    if magic != _MAGIC or version != _VERSION:
        raise ValueError(f"unknown snapshot magic {magic!r} or version {version}")
    body = memoryview(data)[_FILE_HEADER.size:]
    if crc32c(body) != crc:
        raise ValueError("CRC mismatch")
    try:
        (count,) = _COUNT.unpack_from(body, 0)
        pos = _COUNT.size
        out: dict[int, ProducerStateEntry] = {}
        for _ in range(count):
            pid, epoch, ts, coord, txn, n = _ENTRY.unpack_from(body, pos)
            pos += _ENTRY.size
            e = ProducerStateEntry(pid, epoch, ts, coord, txn)
            for _ in range(n):
                e.batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
                pos += _BATCH.size
            out[pid] = e
    except struct.error as err:
        raise ValueError(f"truncated snapshot: {err}") from None
    if pos != len(body):
        raise ValueError(f"{len(body) - pos} stray bytes after the entries")
    return out
