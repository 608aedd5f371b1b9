"""The periodic work a broker's timers run over every open log, off the event loop (Kafka's
kafka-log-retention and kafka-log-flusher tasks of its LogManager): retention
(log.retention.check.interval.ms) and flushing what flush.messages, flush.ms or a rolled segment
call for (log.flush.scheduler.interval.ms). A storage error of one log is logged and handed to
`maybe_fail_dir` (an I/O error fails the log's dir); the other logs go on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gregor.storage.errors import StorageError
from gregor.storage.log import Log

logger = logging.getLogger("gregor.storage.log_manager")

# The LogManager's maybe_fail_dir: fails the log's dir if the error is an I/O error of its disk.
FailDir = Callable[[Log, BaseException], bool]


def cleanup_logs(logs: list[Log], now_ms: int, maybe_fail_dir: FailDir, unlink_expired: bool = True) -> int:
    """Retention for every log (log.retention.check.interval.ms). Returns segments deleted. With
    `unlink_expired` false the files of segments deleted file.delete.delay.ms ago stay for
    `delete_expired_files` (the broker runs that off its event loop)."""
    deleted = 0
    for log in logs:
        try:
            deleted += log.delete_old_segments(now_ms, unlink_expired)
        except StorageError as e:
            logger.error("retention of %s failed: %s", log.dir, e)
            maybe_fail_dir(log, e)
    return deleted


def delete_expired_files(logs: list[Log], now_ms: int, maybe_fail_dir: FailDir) -> int:
    """Unlink the files of segments deleted file.delete.delay.ms ago, each log's lock held only to take
    them from the log. Returns the segments whose files went."""
    unlinked = 0
    for log in logs:
        for seg in log.take_expired_segments(now_ms):
            try:
                seg.delete_files()
                unlinked += 1
            except OSError as e:
                logger.error("removing the files of a deleted segment of %s failed: %s", log.dir, e)
                maybe_fail_dir(log, e)
    return unlinked


def flush_dirty_logs(logs: list[Log], now_ms: int, on_flush: Callable[[float], None] | None,
                     maybe_fail_dir: FailDir) -> int:
    """Flush the logs that flush.messages / flush.ms / a recent roll call for; `on_flush` is told each
    flush's time in ms. Returns how many."""
    flushed = 0
    for log in logs:
        # Nothing past the recovery point: nothing due (read without the log's lock: a log appended to
        # meanwhile is seen next time). Skips the lock and checks of most of 100,000 logs every second.
        if log.log_end_offset <= log.recovery_point:
            continue
        try:
            if on_flush is None:
                flushed += log.maybe_flush(now_ms)
            else:
                t0 = time.perf_counter()
                if log.maybe_flush(now_ms):
                    flushed += 1
                    on_flush((time.perf_counter() - t0) * 1000.0)
        except StorageError as e:
            logger.error("flush of %s failed: %s", log.dir, e)
            maybe_fail_dir(log, e)
    return flushed
