"""Storage engine: Kafka's log layout. Synchronous; imports nothing from the server.

    LogManager  all partition logs of the broker's log.dirs (creation, deletion, periodic work,
                failures, shutdown), composing:
      LogTable              every partition's log by state, under one lock (log_table.py)
      LogDirFailureChannel  the log dirs, their locks, the failed ones (dir_failure.py)
      LogLoading            opening the logs found at startup, lazily after a clean shutdown (log_loading.py)
      LogCreation           placing and creating new logs in batches (log_creation.py)
      OffsetCheckpoints     the recovery point, log start offset and HW checkpoint files (offset_checkpoints.py)
      LogMover              moves between log dirs, AlterReplicaLogDirs (log_mover.py)
      and log_dirs.py (what a dir holds at startup), clean_shutdown.py (the marker), log_tasks.py
      (retention and flushing over every log), segment_files.SegmentFileCache (its open files)
    Log         one partition (Kafka's UnifiedLog): offsets, HW, log start, leader epochs, appends
                as leader and follower, reads, timestamp lookups (log.py, with the pure walks of
                log_append.py and log_timestamps.py), on LogState (log_state.py) with its parts
                LogRetention (log_retention.py, with retention.py) and LogTruncation (log_truncation.py)
      LogLoader   loading a partition directory and recovery after a crash (log_loader.py)
      LocalLog    the segment list: appends, reads, rolls, truncation, deletion, flush (local_log.py)
    LogSegment  one .log file with its .index and .timeindex (segment.py; its file and the
                descriptor cache in segment_files.py, the walks over its file in segment_scan.py)
    LogConfig   a log's topic configs, with Kafka's names and defaults
    LogCleaner  log compaction for compacted topics, on background threads (cleaner.py; one clean
                of one log is compaction.py's Cleaner, with offset_map.py and record_filter.py)
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
