"""Storage engine: Kafka's log layout. Synchronous; imports nothing from the server.

    LogManager  all partition logs of the broker's log.dirs (startup, checkpoints, retention, shutdown)
    Log         one partition (Kafka's UnifiedLog): offsets, HW, log start, leader epochs, appends
                as leader and follower, truncation, retention, timestamp lookups (log.py, with the
                pure walks of log_append.py, log_timestamps.py and retention.py)
      LogLoader   loading a partition directory and recovery after a crash (log_loader.py)
      LocalLog    the segment list: appends, reads, rolls, truncation, deletion, flush (local_log.py)
    LogSegment  one .log file with its .index and .timeindex (segment.py; its file and the
                descriptor cache in segment_files.py, the walks over its file in segment_scan.py)
    LogConfig   a log's topic configs, with Kafka's names and defaults
    LogCleaner  log compaction for compacted topics, on background threads (cleaner.py; one clean
                of one log is compaction.py's Cleaner)
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
