"""LogManager: every partition log in the broker's log.dirs, loaded at startup, checkpointed,
flushed and retained by periodic calls from the server, and shut down cleanly.

Each log dir holds `<topic>-<partition>/` directories and the checkpoint files
(recovery-point-offset-checkpoint, log-start-offset-checkpoint, replication-offset-checkpoint),
a `.lock` file held with flock while the broker runs, and `.kafka_cleanshutdown` written after
a clean shutdown (so the next start skips recovery) and removed once the logs are loaded.

The log cleaner (cleaner.py, log compaction) is started once the logs are loaded, on its own
threads, unless `cleaner_config.enable` (log.cleaner.enable) is false; `cleaner` is it, or None.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Mapping

from gregor.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
    TopicPartition,
    fsync_dir,
)
from gregor.storage.cleaner import LogCleaner
from gregor.storage.config import CleanerConfig, LogConfig
from gregor.storage.errors import CorruptCheckpointError, LogDirInUseError, StorageError
from gregor.storage.log import Log, now_ms, parse_topic_partition

logger = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class LogManager:
    """All partition logs of one broker. Thread-safe: the map of logs has its own lock."""

    def __init__(
        self,
        log_dirs: list[str],
        default_config: LogConfig,
        topic_configs: Mapping[str, LogConfig] | None = None,
        now_ms: int | None = None,
        cleaner_config: CleanerConfig | None = None,
    ) -> None:
        if not log_dirs:
            raise ValueError("log.dirs is empty")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        if len(set(self.log_dirs)) != len(self.log_dirs):
            raise ValueError(f"duplicate log dirs in {log_dirs}")
        self.default_config = default_config
        self._topic_configs: dict[str, LogConfig] = dict(topic_configs or {})
        self._logs: dict[TopicPartition, Log] = {}
        self._lock = threading.RLock()
        self._lock_fds: list[int] = []
        self._closed = False
        self.cleaner: LogCleaner | None = None
        try:
            for d in self.log_dirs:
                os.makedirs(d, exist_ok=True)
                self._lock_fds.append(_lock_dir(d))
            self._load_logs(_now() if now_ms is None else now_ms)
            cleaner_config = cleaner_config or CleanerConfig()
            if cleaner_config.enable:
                self.cleaner = LogCleaner(self.log_dirs, self.logs, cleaner_config)
                self.cleaner.start()
        except BaseException:
            for log in self._logs.values():
                log.close()
            self._release_locks()
            raise

    # --- startup ------------------------------------------------------------------------------

    def _load_logs(self, now: int) -> None:
        for d in self.log_dirs:
            marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
            clean = os.path.exists(marker)
            recovery_points = _read_offsets(d, RECOVERY_POINT_CHECKPOINT)
            log_start_offsets = _read_offsets(d, LOG_START_OFFSET_CHECKPOINT)
            high_watermarks = _read_offsets(d, REPLICATION_OFFSET_CHECKPOINT)
            loaded = 0
            for name in sorted(os.listdir(d)):
                path = os.path.join(d, name)
                if not os.path.isdir(path):
                    continue
                if name.endswith(DELETE_DIR_SUFFIX):
                    logger.info("finishing the deletion of %s", path)
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                if name.endswith((FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)):
                    logger.warning("ignoring %s", path)
                    continue
                try:
                    tp = parse_topic_partition(name)
                except ValueError:
                    logger.warning("ignoring %s: not a <topic>-<partition> directory", path)
                    continue
                if tp in self._logs:
                    raise StorageError(f"duplicate log directories for {tp[0]}-{tp[1]}: {path}, {self._logs[tp].dir}")
                log = Log.open(
                    path,
                    self.topic_config(tp[0]),
                    recovery_point=recovery_points.get(tp, 0),
                    log_start_offset=log_start_offsets.get(tp, 0),
                    now_ms=now,
                    clean_shutdown=clean,
                )
                if tp in high_watermarks:
                    log.update_high_watermark(high_watermarks[tp])
                self._logs[tp] = log
                loaded += 1
            if clean:
                os.unlink(marker)
                fsync_dir(d)
            logger.info("loaded %d logs from %s (%s shutdown)", loaded, d, "clean" if clean else "unclean")

    # --- logs -----------------------------------------------------------------------------------

    def topic_config(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.default_config)

    def update_topic_config(self, topic: str, config: LogConfig) -> None:
        """Topic-level overrides changed (AlterConfigs): apply to the topic's existing logs too."""
        with self._lock:
            self._topic_configs[topic] = config
            logs = [log for (t, _), log in self._logs.items() if t == topic]
        for log in logs:
            log.update_config(config)

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def get_or_create_log(
        self, topic: str, partition: int, config: LogConfig | None = None, now_ms: int | None = None
    ) -> Log:
        """The partition's log, created empty in the log dir with the fewest logs if missing.
        `config` (if given) becomes the topic's config."""
        with self._lock:
            self._check_open()
            tp = (topic, partition)
            log = self._logs.get(tp)
            if log is not None:
                return log
            if not _LEGAL_TOPIC.match(topic) or topic in (".", "..") or partition < 0:
                raise ValueError(f"illegal topic partition {topic!r} {partition}")
            if config is not None:
                self._topic_configs[topic] = config
            d = self.log_dirs[0]
            if len(self.log_dirs) > 1:  # counting every log per creation made bulk creation quadratic
                counts = {d: 0 for d in self.log_dirs}
                for existing in self._logs.values():
                    counts[os.path.dirname(existing.dir)] = counts.get(os.path.dirname(existing.dir), 0) + 1
                d = min(self.log_dirs, key=lambda x: counts[x])
            log = Log.open(os.path.join(d, f"{topic}-{partition}"), self.topic_config(topic), now_ms=now_ms)
            fsync_dir(d)
            self._logs[tp] = log
            logger.debug("created log %s", log.dir)  # callers summarize: one line per topic, not per partition
            return log

    def delete_log(self, topic: str, partition: int) -> bool:
        """Close the log, rename its directory to `<topic>-<partition>.<uuid>-delete`, remove it.
        A crash in between is finished at the next startup. Returns False if there was no log."""
        with self._lock:
            log = self._logs.pop((topic, partition), None)
        if log is None:
            return False
        log.close()
        parent = os.path.dirname(log.dir)
        doomed = os.path.join(parent, f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        os.rename(log.dir, doomed)
        fsync_dir(parent)
        shutil.rmtree(doomed, ignore_errors=True)
        logger.debug("deleted log %s", log.dir)  # callers summarize per topic
        return True

    def all_logs(self) -> list[Log]:
        with self._lock:
            return list(self._logs.values())

    def logs(self) -> dict[TopicPartition, Log]:
        with self._lock:
            return dict(self._logs)

    # --- periodic work (from a timer, off the event loop) -------------------------------------------

    def cleanup_logs(self, now_ms: int) -> int:
        """Retention for every log (log.retention.check.interval.ms). Returns segments deleted."""
        deleted = 0
        for log in self.all_logs():
            try:
                deleted += log.delete_old_segments(now_ms)
            except StorageError as e:
                logger.error("retention of %s failed: %s", log.dir, e)
        return deleted

    def flush_dirty_logs(self, now_ms: int) -> int:
        """Flush the logs that flush.messages / flush.ms / a recent roll call for. Returns how many."""
        flushed = 0
        for log in self.all_logs():
            try:
                flushed += log.maybe_flush(now_ms)
            except StorageError as e:
                logger.error("flush of %s failed: %s", log.dir, e)
        return flushed

    def checkpoint(self, high_watermarks: Mapping[TopicPartition, int] | None = None) -> None:
        """Write the recovery points, log start offsets and high watermarks of every log dir.
        `high_watermarks` overrides the logs' own `high_watermark` fields."""
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks(high_watermarks)

    def checkpoint_recovery_points(self) -> None:
        self._write_checkpoint(RECOVERY_POINT_CHECKPOINT, lambda tp, log: log.recovery_point)

    def checkpoint_log_start_offsets(self) -> None:
        self._write_checkpoint(LOG_START_OFFSET_CHECKPOINT, lambda tp, log: log.log_start_offset)

    def checkpoint_high_watermarks(self, high_watermarks: Mapping[TopicPartition, int] | None = None) -> None:
        overrides = high_watermarks or {}
        self._write_checkpoint(REPLICATION_OFFSET_CHECKPOINT, lambda tp, log: overrides.get(tp, log.high_watermark))

    def _write_checkpoint(self, name: str, value: Callable[[TopicPartition, Log], int]) -> None:
        by_dir: dict[str, dict[TopicPartition, int]] = {d: {} for d in self.log_dirs}
        for tp, log in self.logs().items():
            by_dir.setdefault(os.path.dirname(log.dir), {})[tp] = value(tp, log)
        for d, offsets in by_dir.items():
            OffsetCheckpointFile(os.path.join(d, name)).write(offsets)

    # --- shutdown -------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Flush and close every log, write the checkpoints, then the clean-shutdown marker of each
        log dir whose logs all flushed."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            logs = dict(self._logs)
        if self.cleaner is not None:
            self.cleaner.shutdown()  # first: a clean in progress is abandoned, its .cleaned files removed
        failed_dirs: set[str] = set()
        for log in logs.values():
            try:
                log.flush()
            except StorageError as e:
                logger.error("flush of %s at shutdown failed: %s", log.dir, e)
                failed_dirs.add(os.path.dirname(log.dir))
        self.checkpoint()
        for log in logs.values():
            try:
                log.close()
            except StorageError as e:
                logger.error("close of %s failed: %s", log.dir, e)
                failed_dirs.add(os.path.dirname(log.dir))
        for d in self.log_dirs:
            if d in failed_dirs:
                continue
            fd = os.open(os.path.join(d, CLEAN_SHUTDOWN_FILE), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(d)
        self._release_locks()
        logger.info("log manager shut down (%d logs)", len(logs))

    def _release_locks(self) -> None:
        for fd in self._lock_fds:
            os.close(fd)  # releases the flock
        self._lock_fds = []

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("the log manager is shut down")


def _lock_dir(d: str) -> int:
    fd = os.open(os.path.join(d, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LogDirInUseError(f"log dir {d} is in use by another process (its {LOCK_FILE} is locked)") from None
    return fd


def _read_offsets(d: str, name: str) -> dict[TopicPartition, int]:
    try:
        return OffsetCheckpointFile(os.path.join(d, name)).read()
    except CorruptCheckpointError as e:
        logger.error("%s; ignoring it (logs in %s are recovered from offset 0)", e, d)
        return {}


def _now() -> int:
    return now_ms()
