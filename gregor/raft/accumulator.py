"""BatchAccumulator: the leader's appends gathered into batches (Kafka's BatchAccumulator).

`schedule_append` gives records their offsets at once (the log end offset plus what is already
pending), so the caller learns where its records will be before they are written; they are written
as one batch per `controller.quorum.append.linger.ms` (or sooner, when a batch is full), which is how
a burst of small metadata changes costs one append and one fsync. Bounded: one batch holds at most
`max_batch_bytes` (Kafka: 8 MiB), and at most `max_pending_bytes` wait (Kafka's memory pool: 5 such
batches); beyond that appends are refused with BufferFullError until the pending batches are written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gregor.raft import records as rr
from gregor.raft.errors import BufferFullError, RecordTooLargeError

MAX_BATCH_BYTES = 8 << 20
MAX_PENDING_BATCHES = 5


@dataclass(slots=True)
class _Open:
    base_offset: int
    values: list[bytes] = field(default_factory=list)
    size: int = 0


class BatchAccumulator:
    def __init__(self, epoch: int, next_offset: int, linger_ms: int, max_batch_bytes: int = MAX_BATCH_BYTES,
                 max_pending_bytes: int = MAX_BATCH_BYTES * MAX_PENDING_BATCHES) -> None:
        self.epoch = epoch
        self.next_offset = next_offset
        self.linger_ms = linger_ms
        self.max_batch_bytes = max_batch_bytes
        self.max_pending_bytes = max_pending_bytes
        self._batches: list[_Open] = []  # the last one is open for more records
        self._pending_bytes = 0
        self._first_append_ms: int | None = None

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    @property
    def empty(self) -> bool:
        return not self._batches

    def append(self, values: Sequence[bytes], now_ms: int, atomic: bool) -> int:
        """Queue records; returns the offset of the last. `atomic`: all of them in one batch."""
        if not values:
            raise ValueError("no records to append")
        costs = [rr.record_overhead(len(v)) for v in values]
        room = self.max_batch_bytes - rr.batch_overhead()
        if max(costs) > room or (atomic and sum(costs) > room):
            raise RecordTooLargeError(
                f"{'records' if atomic else 'a record'} of {sum(costs) if atomic else max(costs)} bytes do not fit a "
                f"metadata log batch of {self.max_batch_bytes} bytes")
        total = sum(costs)
        if self._pending_bytes + total > self.max_pending_bytes:
            raise BufferFullError(f"{self._pending_bytes} bytes of appends wait to be written (the bound is "
                                  f"{self.max_pending_bytes}); retry once the leader has written them")
        if atomic and self._batches and self._batches[-1].size + total > room:
            self._batches.append(_Open(self.next_offset))
        for v, c in zip(values, costs, strict=True):
            if not self._batches or self._batches[-1].size + c > room:
                self._batches.append(_Open(self.next_offset))
            b = self._batches[-1]
            b.values.append(v)
            b.size += c
            self.next_offset += 1
        self._pending_bytes += total
        if self._first_append_ms is None:
            self._first_append_ms = now_ms
        return self.next_offset - 1

    def deadline_ms(self) -> int | None:
        """When the pending records must be written (the linger of the oldest), or None."""
        if self._first_append_ms is None:
            return None
        if len(self._batches) > 1:
            return self._first_append_ms  # a full batch waits for nothing
        return self._first_append_ms + self.linger_ms

    def drain(self, now_ms: int, force: bool = False) -> list[bytes]:
        """The batches due (all of them once the linger expired or a batch filled), built at their offsets."""
        deadline = self.deadline_ms()
        if deadline is None or (not force and now_ms < deadline):
            return []
        out = [rr.data_batch(b.values, b.base_offset, self.epoch, now_ms) for b in self._batches if b.values]
        self._batches.clear()
        self._pending_bytes = 0
        self._first_append_ms = None
        return out
