"""Storage engine: Kafka's log layout. Synchronous; imports nothing from the server.

    LogManager  all partition logs of the broker's log.dirs (startup, checkpoints, retention, shutdown)
    Log         one partition: segments, offsets, appends, reads, retention, truncation, flush
    LogSegment  one .log file with its .index and .timeindex
    LogConfig   a log's topic configs, with Kafka's names and defaults
    LogCleaner  log compaction for compacted topics, on background threads
"""

from gregor.storage.cleaner import CleanerStats, LogCleaner
from gregor.storage.config import CleanerConfig, LogConfig
from gregor.storage.errors import (
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptRecordError,
    InvalidConfigError,
    KafkaStorageError,
    LogDirInUseError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    RecordTooLargeError,
    RecordValidationError,
    StorageError,
    UnexpectedAppendOffsetError,
)
from gregor.storage.leader_epoch import LeaderEpochFileCache
from gregor.storage.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AppendInfo,
    FetchDataInfo,
    Log,
    TimestampAndOffset,
    parse_topic_partition,
)
from gregor.storage.log_manager import LogManager
from gregor.storage.segment import LogSegment

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendInfo",
    "CleanerConfig",
    "CleanerStats",
    "CorruptCheckpointError",
    "CorruptIndexError",
    "CorruptRecordError",
    "FetchDataInfo",
    "InvalidConfigError",
    "KafkaStorageError",
    "LeaderEpochFileCache",
    "Log",
    "LogCleaner",
    "LogConfig",
    "LogDirInUseError",
    "LogManager",
    "LogSegment",
    "OffsetOutOfRangeError",
    "RecordListTooLargeError",
    "RecordTooLargeError",
    "RecordValidationError",
    "StorageError",
    "TimestampAndOffset",
    "UnexpectedAppendOffsetError",
    "parse_topic_partition",
]
