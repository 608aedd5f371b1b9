"""When a listener should snapshot its state: Kafka's metadata.log.max.record.bytes.between.snapshots
and metadata.log.max.snapshot.interval.ms, as its SnapshotGenerator applies them.

A snapshot is due once the committed batches handed over since the last one hold that many bytes, or
(when the interval is not 0) once that much time has passed with anything new at all. The listener
asks after each handle_commit and, when it is due, writes one at its next offset.
"""

from __future__ import annotations


class SnapshotPolicy:
    def __init__(self, max_bytes_between: int, max_interval_ms: int, now_ms: int) -> None:
        self.max_bytes_between = max_bytes_between
        self.max_interval_ms = max_interval_ms
        self.bytes_since = 0
        self.last_ms = now_ms

    def committed(self, size_bytes: int) -> None:
        self.bytes_since += size_bytes

    def due(self, now_ms: int) -> bool:
        if self.bytes_since >= self.max_bytes_between:
            return True
        return self.max_interval_ms > 0 and self.bytes_since > 0 and now_ms - self.last_ms >= self.max_interval_ms

    def taken(self, now_ms: int) -> None:
        self.bytes_since = 0
        self.last_ms = now_ms
