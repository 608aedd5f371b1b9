"""What the reader raises. Every error names the topic, partition and offset it concerns where there is one."""

from __future__ import annotations

from gregor.protocol.errors import ErrorCode


class ReaderError(Exception):
    """A read failed. `code` is the Kafka error behind it, if a broker answered with one."""

    def __init__(self, message: str, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.code = code


class BrokerUnavailableError(ReaderError):
    """No broker could be reached (or a connection broke) within the retries allowed."""


class AuthenticationError(ReaderError):
    """TLS or SASL refused us: retrying would not help."""


class OffsetOutOfRangeError(ReaderError):
    """The offset asked for is not in the partition's log (deleted by retention, or not written yet)."""

    def __init__(self, topic: str, partition: int, offset: int, log_start_offset: int, log_end_offset: int,
                 what: str = "offset") -> None:
        super().__init__(f"{what} {offset} of {topic}-{partition} is out of range: the log holds offsets "
                         f"{log_start_offset} to {log_end_offset - 1} (log start offset {log_start_offset}, "
                         f"end {log_end_offset})", ErrorCode.OFFSET_OUT_OF_RANGE)
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class CorruptBatchError(ReaderError):
    """A fetched record batch does not decode, fails its CRC, or does not decompress."""
