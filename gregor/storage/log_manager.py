"""LogManager: every partition log in the broker's log.dirs, loaded at startup, checkpointed,
flushed and retained by periodic calls from the server, and shut down cleanly.

Each log dir holds `<topic>-<partition>/` directories and the checkpoint files
(recovery-point-offset-checkpoint, log-start-offset-checkpoint, replication-offset-checkpoint:
offset_checkpoints.py), a `.lock` file held with flock while the broker runs, and
`.kafka_cleanshutdown` written after a clean shutdown (so the next start skips recovery; with every
segment's size: clean_shutdown.py). It is read and removed before any log is opened: a crash while
loading makes the next start a full recovery.

Its parts: LogTable (log_table.py) holds every partition's log by state (open, loading, unopened,
offline) under the one lock; LogDirFailureChannel (dir_failure.py) the log dirs, their locks and the
failed ones; OffsetCheckpoints (offset_checkpoints.py) the checkpoint files; LogMover (log_mover.py)
the moves between log dirs; LogCleaner (cleaner.py) compaction; log_dirs.py what a dir holds at
startup. This class composes them: creation, deletion, loading, periodic work, failures, shutdown.

Loading never fails the broker because of one log: a log that fails to load (or its cheap
checks after a clean shutdown) is recovered from offset 0 as after a crash, truncated after
its last valid batch; a log that cannot be loaded even so is left offline (`offline`, with the
reason, logged as an error) and its files are left on disk untouched for the operator. Kafka
marks a whole log dir offline; we do it per partition, so the rest keep serving.

Loading may run in the background (`LogManager(..., load=False)` then `load_logs()` on a worker
thread): until it is done `loading` is true, `is_loading(topic, p)` says which partitions are
still pending, and `get_or_create_log` refuses them with LogNotLoadedError so a caller never
creates an empty log over one not loaded yet. Checkpoints written meanwhile keep the pending
logs' entries.

Logs of a log dir shut down cleanly need no recovery, so they are not opened before the broker
serves (opening 10,000 took seconds): each is opened by its first user (`get_or_create_log[s]`),
or by `open_lazy_logs` on one background thread (`load_logs(open_lazy=True)`, the default, does it
before returning). `is_unopened(topic, p)` tells them apart; checkpoints and the next clean-shutdown
marker keep their entries. A crash before they are opened recovers them as any other log.

New logs are created in batches (`get_or_create_logs`): one fsync of each parent dir per batch
rather than per log. A clean shutdown flushes only the logs with something to make durable.

Segment files are opened lazily through a bounded cache (`segment_files`, a SegmentFileCache of
capacity `open_files_max`, handed to every log this manager opens), so the number of partitions is
not bounded by RLIMIT_NOFILE.

The log cleaner (cleaner.py, log compaction) is started once the logs are loaded, on its own
threads, unless `cleaner_config.enable` (log.cleaner.enable) is false; `cleaner` is it, or None.

JBOD (several log.dirs): a new log goes to the online dir with the fewest logs (Kafka's rule); at
start each log is found in whatever dir holds it. A log dir fails as a whole (dir_failure.py): at
start, or when a write, flush, roll, creation or checkpoint fails with an I/O error at runtime
(`fail_dir`, or `maybe_fail_dir` given the error); its logs are closed and become offline
partitions (KAFKA_STORAGE_ERROR), `on_dir_failure(dir, partitions)` tells the server, and the other
dirs keep serving. With every dir offline, the broker cannot serve: LogManager refuses to start.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Mapping

from gregor.storage import log_tasks
from gregor.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    TopicPartition,
)
from gregor.storage.clean_shutdown import (  # noqa: F401 - CLEAN_SHUTDOWN_FILE, SEGMENT_SIZES_VERSION: imported from here
    CLEAN_SHUTDOWN_FILE,
    SEGMENT_SIZES_VERSION,
    Plan,
    marker_lines,
    write_marker,
)
from gregor.storage.cleaner import LogCleaner
from gregor.storage.config import CleanerConfig, LogConfig
from gregor.storage.dir_failure import LogDirFailureChannel
from gregor.storage.errors import (  # noqa: F401 - LogNotLoadedError, LogOfflineError are imported from here
    LogNotLoadedError,
    LogOfflineError,
    StorageError,
)
from gregor.storage.log import Log, now_ms
from gregor.storage.log_creation import LogCreation
from gregor.storage.log_dirs import remove_log_dir, scan_log_dirs
from gregor.storage.log_loading import LogLoading
from gregor.storage.log_mover import LogMover
from gregor.storage.log_table import LogTable
from gregor.storage.offset_checkpoints import OffsetCheckpoints, OffsetOf
from gregor.storage.segment_files import SegmentFileCache

logger = logging.getLogger(__name__)

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class LogManager:
    """All partition logs of one broker. Thread-safe: the LogTable's lock guards the map of logs."""

    def __init__(
        self,
        log_dirs: list[str],
        default_config: LogConfig,
        topic_configs: Mapping[str, LogConfig] | None = None,
        now_ms: int | None = None,
        cleaner_config: CleanerConfig | None = None,
        *,
        load: bool = True,
        open_files_max: int = 0,
    ) -> None:
        """`load=False` leaves the loading to a later `load_logs()` call (on a worker thread);
        `open_files_max` bounds the segment files held open (0: half the soft RLIMIT_NOFILE)."""
        self.dirs = LogDirFailureChannel(log_dirs)  # locks each dir; raises if every one is offline
        self.log_dirs = self.dirs.log_dirs
        self.offline_dirs = self.dirs.offline_dirs  # failed log dirs, with why (at start or at runtime)
        self.default_config = default_config
        self._topic_configs: dict[str, LogConfig] = dict(topic_configs or {})
        self.segment_files = SegmentFileCache(open_files_max)  # every log's segment descriptors go through it
        self._table = LogTable()
        self.offline = self._table.offline  # logs that could not be loaded, with why
        # Moves to another log dir (AlterReplicaLogDirs): future replicas and the thread filling them.
        self.mover = LogMover(self._table, self.dirs, self, self.segment_files)
        self._creation = LogCreation(self._table, self.dirs, self.mover, self.segment_files)
        self._cleaner_reconfig_lock = threading.Lock()  # one cleaner restart at a time, none after shutdown
        self.cleaner: LogCleaner | None = None
        # Told each periodic flush's time in ms (the broker's LogFlushRateAndTimeMs when metrics are on).
        self.on_flush: Callable[[float], None] | None = None
        self._cleaner_config = cleaner_config or CleanerConfig()
        self._now_ms = now_ms
        # Told (dir, partitions taken offline) when a log dir fails; may be called on any thread.
        self.on_dir_failure: Callable[[str, list[TopicPartition]], None] | None = None
        try:
            # What the log dirs hold (log_dirs.scan_log_dirs): cheap, before the broker listens.
            found = scan_log_dirs(self.dirs.online_dirs())
            self.offline_dirs.update(found.failed_dirs)
            self._table.lazy, self._table.pending = found.lazy, found.pending
            self.offline.update(found.offline)
            self.offset_checkpoints = OffsetCheckpoints(self.dirs, found.pending_offsets)
            self._loading = LogLoading(self._table, found, self.offset_checkpoints, self.topic_config,
                                       self.segment_files)
            self._unclean_dirs = found.unclean_dirs  # dirs whose last shutdown was not clean
            self._stale_futures = found.futures  # moves the last run cut short
            if load:
                self.load_logs()
        except BaseException:
            for log in self._table.logs.values():
                log.close()
            self.dirs.release_locks()
            raise

    def _now(self) -> int:
        return now_ms() if self._now_ms is None else self._now_ms

    # --- startup (log_loading.py) -----------------------------------------------------------------

    def load_logs(self, open_lazy: bool = True) -> None:
        """Load every log found by the scan that needs recovery (its log dir was not shut down
        cleanly), which ends `loading`; then, with `open_lazy`, open the others too and start the
        cleaner (`open_lazy_logs`). Blocking (it may recover logs): the broker runs it on a worker
        thread, and `open_lazy_logs` after it has brought the partitions online. Never raises for one
        bad log. Stops early if the manager is shut down meanwhile."""
        if not self._loading.load(self._now()):
            return
        stale, self._stale_futures = self._stale_futures, []
        self.mover.restart_moves(stale)
        if open_lazy:
            self.open_lazy_logs()

    def open_lazy_logs(self, slice_size: int = 16, pause_s: float = 0.001) -> int:
        """Open every log still waiting since a clean start (the ones no request opened first; see
        LogLoading.open_lazy), then start the cleaner (which works on open logs). Returns how many it
        opened. Stops if shut down."""
        opened = self._loading.open_lazy(self._now, slice_size, pause_s)
        with self._table.lock:
            if self._table.closed or self.cleaner is not None:
                return opened
            if self._cleaner_config.enable:
                self.cleaner = LogCleaner(self.online_dirs(), self.logs, self._cleaner_config)
                self.cleaner.start()
        return opened

    @property
    def loading(self) -> bool:
        """Whether the logs that need recovery are still loading (their partitions wait)."""
        return self._loading.loading

    # --- moves between log dirs (AlterReplicaLogDirs; log_mover.py) --------------------------------

    def alter_log_dir(self, topic: str, partition: int, dest: str) -> None:
        """Move the partition's log to log dir `dest` in the background (a future replica, then a swap;
        LogMover.alter_log_dir). Raises LogDirNotFoundError for a path not in log.dirs, LogOfflineError
        for an offline dir or log, ReplicaNotAvailableError for a partition with no log here (it is
        created in `dest` when it comes), LogNotLoadedError while it loads."""
        self.mover.alter_log_dir((topic, partition), dest)

    def future_replicas(self) -> dict[str, dict[TopicPartition, tuple[int, int]]]:
        """Per log dir, the future replicas being filled there: (size in bytes, offset lag)."""
        return self.mover.future_replicas()

    def swap_future(self, topic: str, partition: int) -> Log | None:
        """Swap the caught-up future replica in (LogMover.swap); call where no append can interleave."""
        return self.mover.swap((topic, partition))

    # --- state ------------------------------------------------------------------------------------

    def online_dirs(self) -> list[str]:
        return self.dirs.online_dirs()

    def knows(self, topic: str, partition: int) -> bool:
        """Whether the partition's log is in an online dir: open, loading, being created, or waiting to be
        opened."""
        return self._table.knows((topic, partition))

    def dir_of(self, topic: str, partition: int) -> str | None:
        """The log dir holding the partition's log, if it is known (open, loading or unopened)."""
        return self._table.dir_of((topic, partition))

    @property
    def closed(self) -> bool:
        return self._table.closed

    def wait_loaded(self, timeout_s: float | None = None) -> bool:
        return self._loading.done.wait(timeout_s)

    def is_loading(self, topic: str, partition: int) -> bool:
        """Whether the partition's log exists on disk but is not loaded yet."""
        return (topic, partition) in self._table.pending

    def is_unopened(self, topic: str, partition: int) -> bool:
        """Whether the partition's log is on disk from a clean shutdown and not opened yet (its first
        user opens it with get_or_create_log)."""
        return (topic, partition) in self._table.lazy

    def is_offline(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self.offline

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._table.get((topic, partition))

    def all_logs(self) -> list[Log]:
        with self._table.lock:
            return list(self._table.logs.values())

    def logs(self) -> dict[TopicPartition, Log]:
        return self._table.snapshot()

    def partition_sizes(self) -> dict[str, dict[TopicPartition, int]]:
        """Per log dir, the size in bytes of each partition log it holds (LogTable.partition_sizes)."""
        return self._table.partition_sizes(self.log_dirs)

    # --- log dir failures (dir_failure.py) --------------------------------------------------------------

    def maybe_fail_dir(self, log_or_dir: Log | str, error: BaseException) -> bool:
        """An error met on a log: if it is an I/O error of the disk (LogDirFailureChannel.is_disk_error),
        its log dir fails (`fail_dir`). Returns whether."""
        if not self.dirs.is_disk_error(error):
            return False
        d = log_or_dir if isinstance(log_or_dir, str) else log_or_dir.log_dir
        return bool(self.fail_dir(d, f"{type(error).__name__}: {error}")) or d in self.offline_dirs

    def fail_dir(self, d: str, reason: str) -> list[TopicPartition]:
        """Take log dir `d` offline (Kafka's LogDirFailureChannel): close its logs, make each an offline
        partition, tell `on_dir_failure`. Idempotent; returns the partitions it took offline."""
        with self._table.lock:
            if not self.dirs.take_offline(d, reason):
                return []
            doomed, logs = self._table.take_dir(d, f"log dir {d} is offline: {reason}")
            for tp in doomed:
                self.offset_checkpoints.forget(tp)
            self.mover.abort_in_dir(d)
        logger.error("log dir %s failed (%s): %d partitions offline, the other log dirs keep serving", d, reason,
                     len(doomed))
        if self.dirs.all_offline:
            logger.critical("every log dir is offline: this broker cannot serve any partition")
        for log in logs:
            try:
                log.close()
            except Exception as e:  # noqa: BLE001 - the dir is failing: closing is best effort
                logger.debug("closing %s after its dir failed: %s", log.dir, e)
        cb = self.on_dir_failure
        if cb is not None:
            cb(d, doomed)
        return doomed

    # --- configs ------------------------------------------------------------------------------------

    def topic_config(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.default_config)

    def update_topic_config(self, topic: str, config: LogConfig) -> None:
        """Topic-level overrides changed (AlterConfigs): apply to the topic's existing logs too."""
        with self._table.lock:
            self._topic_configs[topic] = config
            logs = [log for (t, _), log in self._table.logs.items() if t == topic]
        for log in logs:
            log.update_config(config)

    def reconfigure_cleaner(self, config: CleanerConfig) -> None:
        """New log.cleaner.* settings (dynamic broker configs); blocks while the cleaner threads restart."""
        with self._cleaner_reconfig_lock:
            with self._table.lock:
                self._cleaner_config = config
                cleaner = None if self._table.closed else self.cleaner
            if cleaner is not None:
                cleaner.reconfigure(config)

    # --- creating and deleting logs ---------------------------------------------------------------------

    def get_or_create_log(
        self, topic: str, partition: int, config: LogConfig | None = None, now_ms: int | None = None
    ) -> Log:
        """The partition's log, created empty in the log dir with the fewest logs if missing (or
        opened, if it is on disk waiting to be opened lazily). `config` (if given) becomes the topic's
        config. Raises what `get_or_create_logs` reports for it."""
        (_, result), = self.get_or_create_logs(topic, [partition], config, now_ms)
        if isinstance(result, Exception):
            raise result
        return result

    def get_or_create_logs(
        self, topic: str, partitions: list[int], config: LogConfig | None = None, now_ms: int | None = None
    ) -> list[tuple[int, Log | Exception]]:
        """The logs of `partitions` of `topic`, each existing one as it is, each one on disk not opened
        yet (lazy, after a clean shutdown) opened now, each missing one created empty (in a batch with
        one fsync per parent dir: log_creation.py).

        Raises LogNotLoadedError if one of them is still being loaded (recovered) at startup, and
        StorageError once shut down; a partition that fails alone (offline, illegal, a disk error) gets
        its exception in the result, so one bad log never stops the others."""
        table = self._table
        while True:
            busy: list[TopicPartition] = []  # partitions another thread is creating: waited for, then seen again
            with table.lock:
                self._check_open()
                if config is not None:
                    self._topic_configs[topic] = config
                out: dict[int, Log | Exception] = {}
                missing: dict[TopicPartition, None] = {}
                loading: LogNotLoadedError | None = None
                now = self._now() if now_ms is None else now_ms
                for p in partitions:
                    tp = (topic, p)
                    log = table.logs.get(tp)
                    if log is not None:
                        out[p] = log
                    elif tp in table.pending:
                        loading = loading or LogNotLoadedError(f"the log of {topic}-{p} is still loading")
                    elif tp in table.creating:
                        busy.append(tp)
                    elif tp in self.offline:
                        out[p] = LogOfflineError(f"the log of {topic}-{p} is offline: {self.offline[tp]}")
                    elif (lazy := table.lazy.pop(tp, None)) is not None:
                        opened = self._loading.open_unopened(lazy, now)
                        out[p] = opened or LogOfflineError(f"the log of {topic}-{p} is offline: {self.offline[tp]}")
                    elif not _LEGAL_TOPIC.fullmatch(topic) or topic in (".", "..") or p < 0:
                        out[p] = ValueError(f"illegal topic partition {topic!r} {p}")
                    elif tp not in missing:  # a partition named twice is created once
                        missing[tp] = None
                if not busy or loading is not None:
                    topic_config = self.topic_config(topic)
                    placed = self._creation.reserve(list(missing))  # ended by create(), whatever happens
                    break
            table.wait_created(busy)
        created, failed_dirs = self._creation.create(placed, topic_config, now)  # files, fsync: without the lock
        out.update((tp[1], r) for tp, r in created.items())
        for d, e in failed_dirs:
            self.maybe_fail_dir(d, e)
        if loading is not None:  # the others were created all the same
            raise loading
        return [(p, out[p]) for p in partitions]

    def delete_log(self, topic: str, partition: int) -> bool:
        """Close the log, rename its directory to `<topic>-<partition>.<uuid>-delete`, remove it.
        A crash in between is finished at the next startup. Returns False if there was no log."""
        tp = (topic, partition)
        table = self._table
        table.wait_created([tp])  # a creation under way ends first: what it made is deleted
        with table.lock:
            if tp in table.pending:
                raise LogNotLoadedError(f"the log of {topic}-{partition} is still loading")
            self.mover.abort(tp, "the log is deleted")
            log = table.logs.pop(tp, None)
            lazy = table.lazy.pop(tp, None) if log is None else None
            if lazy is not None:
                self.offset_checkpoints.forget(tp)
        if log is not None:
            log.close()
            path = log.dir
        elif lazy is not None:  # on disk, never opened since the clean start: nothing to close
            path = lazy[2]
        else:
            return False
        remove_log_dir(path, topic, partition)
        logger.debug("deleted log %s", path)  # callers summarize per topic
        return True

    # --- periodic work (from a timer, off the event loop) -------------------------------------------

    def cleanup_logs(self, now_ms: int, unlink_expired: bool = True) -> int:
        """Retention for every log (log.retention.check.interval.ms). Returns segments deleted. With
        `unlink_expired` false, expired segment files are left to `delete_expired_files`."""
        return log_tasks.cleanup_logs(self.all_logs(), now_ms, self.maybe_fail_dir, unlink_expired)

    def delete_expired_files(self, now_ms: int) -> int:
        """Unlink the files of segments deleted file.delete.delay.ms ago (off the event loop: an unlink of a
        large file takes long). Returns how many segments' files went."""
        return log_tasks.delete_expired_files(self.all_logs(), now_ms, self.maybe_fail_dir)

    def flush_dirty_logs(self, now_ms: int) -> int:
        """Flush the logs that flush.messages / flush.ms / a recent roll call for. Returns how many."""
        return log_tasks.flush_dirty_logs(self.all_logs(), now_ms, self.on_flush, self.maybe_fail_dir)

    def checkpoint(self, high_watermarks: Mapping[TopicPartition, int] | None = None) -> None:
        """Write the recovery points, log start offsets and high watermarks of every log dir (one pass
        over the logs). `high_watermarks` overrides the logs' own `high_watermark` fields."""
        overrides = high_watermarks or {}
        self._write_checkpoints({RECOVERY_POINT_CHECKPOINT: _recovery_point, LOG_START_OFFSET_CHECKPOINT: _log_start,
                                 REPLICATION_OFFSET_CHECKPOINT: lambda tp, log: overrides.get(tp, log.high_watermark)})

    def checkpoint_log_start_offsets(self) -> None:
        self._write_checkpoints({LOG_START_OFFSET_CHECKPOINT: _log_start})

    def checkpoint_high_watermarks(self, high_watermarks: Mapping[TopicPartition, int] | None = None) -> None:
        overrides = high_watermarks or {}
        self._write_checkpoints({REPLICATION_OFFSET_CHECKPOINT: lambda tp, log: overrides.get(tp, log.high_watermark)})

    def _write_checkpoints(self, values: Mapping[str, OffsetOf]) -> None:
        table = self._table
        with table.lock:
            logs, unopened = dict(table.logs), table.unopened()
        for d, e in self.offset_checkpoints.write(values, logs, unopened):
            self.maybe_fail_dir(d, e)

    # --- shutdown -------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Flush and close every log, write the checkpoints, then the clean-shutdown marker of each
        log dir whose logs all flushed."""
        table = self._table
        with table.lock:
            if table.closed:
                return
            table.closed = True
        table.wait_created(None, 60)  # a batch being created ends now: its logs are closed, not joined
        if self._loading.started:
            self._loading.done.wait()  # the loader stops after the log it is opening
        with table.lock:
            logs = dict(table.logs)
            lazy = dict(table.lazy)
            unloaded = {os.path.dirname(path) for path in table.pending.values()}
        self.mover.shutdown()  # a copy under way is begun again at the next start
        with table.lock:
            for move in list(self.mover.moves.values()):
                try:
                    move.future.close()
                except StorageError as e:
                    logger.debug("closing the future replica %s: %s", move.future.dir, e)
        if self.cleaner is not None:
            with self._cleaner_reconfig_lock:
                self.cleaner.shutdown()  # first: a clean in progress is abandoned, its .cleaned files removed
        failed_dirs: set[str] = set()
        for log in logs.values():
            if not log.needs_flush_at_shutdown():  # most of 10,000 partitions: ~1 ms of fsyncs each saved
                continue
            try:
                log.flush()
            except StorageError as e:
                logger.error("flush of %s at shutdown failed: %s", log.dir, e)
                failed_dirs.add(log.log_dir)
        self.checkpoint()
        for log in logs.values():
            try:
                log.close()
            except StorageError as e:
                logger.error("close of %s failed: %s", log.dir, e)
                failed_dirs.add(log.log_dir)
        sizes = marker_lines(self.log_dirs, logs, lazy)
        for d in self.log_dirs:
            if d in failed_dirs or d in self.offline_dirs:
                continue
            if d in unloaded and d in self._unclean_dirs:
                logger.warning("no clean-shutdown marker for %s: some of its logs were never loaded and still "
                               "need recovery", d)
                continue
            # Logs never loaded after an unclean start have no size lines: the next start checks them
            # without sizes (framing and CRC of their last batches). Unopened ones keep the last marker's.
            write_marker(d, sizes.get(d, []))
        self.dirs.release_locks()
        logger.info("log manager shut down (%d logs)", len(logs))

    def _release_locks(self) -> None:
        self.dirs.release_locks()

    def _check_open(self) -> None:
        if self._table.closed:
            raise StorageError("the log manager is shut down")


def _recovery_point(tp: TopicPartition, log: Log) -> int:
    return log.recovery_point


def _log_start(tp: TopicPartition, log: Log) -> int:
    return log.log_start_offset
