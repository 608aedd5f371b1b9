"""Storage errors. Each carries `error`, the Kafka error name the broker answers with."""

from __future__ import annotations


class StorageError(Exception):
    error = "UNKNOWN_SERVER_ERROR"


class OffsetOutOfRangeError(StorageError):
    """A fetch or seek outside [log_start_offset, log_end_offset]."""

    error = "OFFSET_OUT_OF_RANGE"

    def __init__(self, message: str, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(f"{message} (log start offset {log_start_offset}, log end offset {log_end_offset})")
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class RecordTooLargeError(StorageError):
    """One batch is larger than max.message.bytes."""

    error = "MESSAGE_TOO_LARGE"


class RecordListTooLargeError(StorageError):
    """A produced record set is larger than segment.bytes: no segment could hold it."""

    error = "RECORD_LIST_TOO_LARGE"


class UnexpectedAppendOffsetError(StorageError):
    """A follower append whose offsets do not continue the log."""

    error = "UNKNOWN_SERVER_ERROR"

    def __init__(self, message: str, first_offset: int, log_end_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.log_end_offset = log_end_offset


class KafkaStorageError(StorageError):
    """An I/O error on the log directory; the partition cannot be served from it."""

    error = "KAFKA_STORAGE_ERROR"


class InvalidConfigError(StorageError, ValueError):
    error = "INVALID_CONFIG"


class CorruptIndexError(StorageError):
    """An index file fails its sanity check; the log rebuilds it from the segment."""

    error = "CORRUPT_MESSAGE"


class CorruptCheckpointError(StorageError):
    error = "KAFKA_STORAGE_ERROR"


class LogDirInUseError(StorageError):
    """Another process holds the log directory's lock file."""

    error = "KAFKA_STORAGE_ERROR"


class CorruptRecordError(StorageError):
    """A batch read back from a segment does not frame correctly (the file was damaged)."""

    error = "CORRUPT_MESSAGE"


class RecordValidationError(StorageError):
    """A produced record the log must refuse, e.g. one without a key for a compacted topic.
    `batch_index` and `record_index` say which (Produce's record_errors carry the record's
    index within its batch)."""

    error = "INVALID_RECORD"

    def __init__(self, message: str, batch_index: int = 0, record_index: int = 0,
                 record_indexes: list[int] | None = None) -> None:
        super().__init__(message)
        self.batch_index = batch_index
        self.record_index = record_index
        # Every offending record of the batch, for KIP-467 record_errors (the rest may be retried).
        self.record_indexes = record_indexes if record_indexes is not None else [record_index]


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer's batch does not continue its sequence (a batch was lost in between),
    or a new epoch does not start at sequence 0."""

    error = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class InvalidProducerEpochError(StorageError):
    """A batch from an older epoch of a producer than the partition has seen (a zombie producer)."""

    error = "INVALID_PRODUCER_EPOCH"


class InvalidTxnStateError(StorageError):
    """A plain batch from a producer whose transaction on this partition is still open."""

    error = "INVALID_TXN_STATE"


class TransactionCoordinatorFencedError(StorageError):
    """A transaction marker from a coordinator older than the one whose marker the partition saw last."""

    error = "TRANSACTION_COORDINATOR_FENCED"


class LogDirNotFoundError(StorageError):
    """AlterReplicaLogDirs named a path that is not one of this broker's log.dirs."""

    error = "LOG_DIR_NOT_FOUND"


class ReplicaNotAvailableError(StorageError):
    """AlterReplicaLogDirs named a partition that has no replica on this broker."""

    error = "REPLICA_NOT_AVAILABLE"


class LogNotLoadedError(StorageError):
    """The partition's log is still being loaded at startup: the client should retry."""

    error = "NOT_LEADER_OR_FOLLOWER"


class LogOfflineError(StorageError):
    """The partition's log could not be loaded; it is offline until an operator repairs it."""

    error = "KAFKA_STORAGE_ERROR"
