"""LogManager: every partition log in the broker's log.dirs, loaded at startup, checkpointed,
flushed and retained by periodic calls from the server, and shut down cleanly.

Each log dir holds `<topic>-<partition>/` directories and the checkpoint files
(recovery-point-offset-checkpoint, log-start-offset-checkpoint, replication-offset-checkpoint),
a `.lock` file held with flock while the broker runs, and `.kafka_cleanshutdown` written after
a clean shutdown (so the next start skips recovery). Unlike Kafka's empty marker, ours lists
every segment's size (`topic partition base_offset size`), so the next start can check the
segments against it cheaply. It is read and removed before any log is opened: a crash while
loading makes the next start a full recovery.

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

Segment files are opened lazily through a bounded cache (segment.OPEN_FILES, capacity
`open_files_max`), so the number of partitions is not bounded by RLIMIT_NOFILE.

The log cleaner (cleaner.py, log compaction) is started once the logs are loaded, on its own
threads, unless `cleaner_config.enable` (log.cleaner.enable) is false; `cleaner` is it, or None.

JBOD (several log.dirs): a new log goes to the online dir with the fewest logs (Kafka's rule); at
start each log is found in whatever dir holds it. A log dir fails as a whole, as in Kafka's
LogDirFailureChannel: one that cannot be created, locked or listed at start, or one where a write,
flush, roll, creation or checkpoint fails with an I/O error at runtime (`fail_dir`, or
`maybe_fail_dir` given the error), goes into `offline_dirs`; its logs are closed and become offline
partitions (KAFKA_STORAGE_ERROR), `on_dir_failure(dir, partitions)` tells the server, and the other
dirs keep serving. Nothing is written to an offline dir again until a restart finds it healthy. With
every dir offline, the broker cannot serve: LogManager refuses to start (Kafka halts).
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping

from gregor.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    TopicPartition,
    fsync_dir,
    write_lines,
)
from gregor.storage.cleaner import LogCleaner
from gregor.storage.config import CleanerConfig, LogConfig
from gregor.storage.errors import LogDirInUseError, LogDirNotFoundError, ReplicaNotAvailableError, StorageError
from gregor.storage.log import Log, now_ms
from gregor.storage.log_dirs import (  # noqa: F401 - CLEAN_SHUTDOWN_FILE, SEGMENT_SIZES_VERSION: imported from here
    CHECKPOINTS,
    CLEAN_SHUTDOWN_FILE,
    DELETE_DIR_SUFFIX,
    SEGMENT_SIZES_VERSION,
    Plan,
    create_log,
    logs_per_dir,
    marker_lines,
    open_found_log,
    remove_log_dir,
    scan_log_dirs,
    segment_files_size,
    write_offsets,
)
from gregor.storage.log_mover import LogMover
from gregor.storage.segment import OPEN_FILES, default_open_files_capacity

logger = logging.getLogger(__name__)

LOCK_FILE = ".lock"
# I/O errors that say nothing about a log dir's disk: they never fail a dir (maybe_fail_dir).
_NOT_THE_DISK = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EINTR, errno.EAGAIN})
# Replicas not on this broker yet that AlterReplicaLogDirs placed on a dir: at most this many are remembered.
PREFERRED_DIRS_MAX = 10_000
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class LogNotLoadedError(StorageError):
    """The partition's log is still being loaded at startup: the client should retry."""

    error = "NOT_LEADER_OR_FOLLOWER"


class LogOfflineError(StorageError):
    """The partition's log could not be loaded; it is offline until an operator repairs it."""

    error = "KAFKA_STORAGE_ERROR"


class LogManager:
    """All partition logs of one broker. Thread-safe: the map of logs has its own lock."""

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
        if not log_dirs:
            raise ValueError("log.dirs is empty")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        if len(set(self.log_dirs)) != len(self.log_dirs):
            raise ValueError(f"duplicate log dirs in {log_dirs}")
        self.default_config = default_config
        self._topic_configs: dict[str, LogConfig] = dict(topic_configs or {})
        self._logs: dict[TopicPartition, Log] = {}
        # Moves to another log dir (AlterReplicaLogDirs): future replicas and the thread filling them.
        self.mover = LogMover(self)
        self._stale_futures: list[tuple[str, TopicPartition, str]] = []  # moves the last run cut short
        # AlterReplicaLogDirs for a replica not here yet (a reassignment's new replica): where to create it
        # (Kafka's preferred log dir), forgotten once used. Bounded: one entry per partition asked about.
        self._preferred_dirs: dict[TopicPartition, str] = {}
        self._lock = threading.RLock()
        self._cleaner_reconfig_lock = threading.Lock()  # one cleaner restart at a time, none after shutdown
        # One checkpoint write at a time: two writers (the periodic checkpoint, DeleteRecords) of one file would
        # share its `.tmp` and one rename would fail, which reads as an I/O error of the dir.
        self._checkpoint_lock = threading.Lock()
        self._lock_fds: list[int] = []
        self._closed = False
        self.cleaner: LogCleaner | None = None
        # Told each periodic flush's time in ms (the broker's LogFlushRateAndTimeMs when metrics are on).
        self.on_flush: Callable[[float], None] | None = None
        self._cleaner_config = cleaner_config or CleanerConfig()
        self._now_ms = now_ms
        self.offline: dict[TopicPartition, str] = {}  # logs that could not be loaded, with why
        self._pending: dict[TopicPartition, str] = {}  # found on disk, not loaded yet
        # Found in a log dir shut down cleanly: opened on first use (get_or_create_log[s]), not at start.
        self._lazy: dict[TopicPartition, Plan] = {}
        self._pending_offsets: dict[str, dict[TopicPartition, int]] = {name: {} for name in CHECKPOINTS}
        self._unclean_dirs: set[str] = set()  # dirs whose last shutdown was not clean
        self.offline_dirs: dict[str, str] = {}  # failed log dirs, with why (at start or at runtime)
        # Told (dir, partitions taken offline) when a log dir fails; may be called on any thread.
        self.on_dir_failure: Callable[[str, list[TopicPartition]], None] | None = None
        self._load_done = threading.Event()
        self._load_started = False
        self.loading = True
        OPEN_FILES.set_capacity(open_files_max if open_files_max > 0 else default_open_files_capacity())
        try:
            for d in self.log_dirs:
                try:
                    os.makedirs(d, exist_ok=True)
                    self._lock_fds.append(_lock_dir(d))
                    os.listdir(d)
                except LogDirInUseError:
                    raise
                except OSError as e:  # only this dir's partitions are lost: the others serve
                    self.offline_dirs[d] = f"{type(e).__name__}: {e}"
                    logger.error("log dir %s is offline (%s): its partitions are offline until a restart finds "
                                 "it readable", d, e)
            if len(self.offline_dirs) == len(self.log_dirs):
                raise StorageError(f"every log dir is offline: {self.offline_dirs}")
            self._scan()
            if load:
                self.load_logs()
        except BaseException:
            for log in self._logs.values():
                log.close()
            self._release_locks()
            raise

    # --- startup ------------------------------------------------------------------------------

    def _scan(self) -> None:
        """What the log dirs hold (log_dirs.scan_log_dirs): cheap, before the broker listens."""
        found = scan_log_dirs(self.online_dirs())
        for d, why in found.failed_dirs.items():
            self.offline_dirs[d] = why
        self._plan, self._lazy, self._pending = found.plan, found.lazy, found.pending
        self._pending_offsets, self._offsets = found.pending_offsets, found.offsets
        self.offline.update(found.offline)
        self._unclean_dirs = found.unclean_dirs
        self._stale_futures = found.futures

    def load_logs(self, open_lazy: bool = True) -> None:
        """Load every log found by the scan that needs recovery (its log dir was not shut down
        cleanly), which ends `loading`; then, with `open_lazy`, open the others too and start the
        cleaner (`open_lazy_logs`). Blocking (it may recover logs): the broker runs it on a worker
        thread, and `open_lazy_logs` after it has brought the partitions online. Never raises for one
        bad log. Stops early if the manager is shut down meanwhile."""
        with self._lock:
            if self._load_started:
                raise RuntimeError("load_logs() called twice")
            self._load_started = True
        now = _now() if self._now_ms is None else self._now_ms
        try:
            loaded = 0
            for d, tp, path, clean, sizes in self._plan:
                if self._closed:
                    logger.info("shutdown requested: stopping the log load after %d logs", loaded)
                    return
                log = self._load_one(d, tp, path, clean, sizes, now)
                with self._lock:
                    self._pending.pop(tp, None)
                    if log is None:
                        continue
                    if self._closed:
                        log.close()
                        return
                    self._logs[tp] = log
                    for cname in CHECKPOINTS:
                        self._pending_offsets[cname].pop(tp, None)
                loaded += 1
            logger.info("loaded %d logs (%d offline), %d more to open as they are used", loaded, len(self.offline),
                        len(self._lazy))
            with self._lock:
                if self._closed:
                    return
                self.loading = False
        finally:
            self._load_done.set()
        self._restart_moves()
        if open_lazy:
            self.open_lazy_logs()

    def open_lazy_logs(self, slice_size: int = 16, pause_s: float = 0.001) -> int:
        """Open every log still waiting since a clean start (the ones no request opened first), in
        slices under the lock so a first use on another thread waits for one slice at most, pausing
        `pause_s` between slices so the event loop gets the GIL; then start the cleaner (which works
        on open logs). Returns how many it opened. Stops if shut down."""
        opened = 0
        while True:
            if opened:
                time.sleep(pause_s)
            with self._lock:
                if self._closed:
                    return opened
                todo = list(itertools.islice(self._lazy.values(), slice_size))
                if not todo:
                    break
                now = _now() if self._now_ms is None else self._now_ms
                for plan in todo:
                    tp = plan[1]
                    del self._lazy[tp]
                    log = self._load_one(*plan, now)
                    self._forget_pending_offsets(tp)
                    if log is not None:
                        self._logs[tp] = log
                        opened += 1
        with self._lock:
            if self._closed or self.cleaner is not None:
                return opened
            if self._cleaner_config.enable:
                self.cleaner = LogCleaner(self.online_dirs(), self.logs, self._cleaner_config)
                self.cleaner.start()
        return opened

    def _load_one(
        self, d: str, tp: TopicPartition, path: str, clean: bool, sizes: dict[int, int] | None, now: int
    ) -> Log | None:
        """One log found by the scan, or None: offline, with the reason (log_dirs.open_found_log)."""
        log, reason = open_found_log((d, tp, path, clean, sizes), self._offsets[d], self.topic_config(tp[0]), now)
        if log is None:
            self.offline[tp] = reason
        return log

    # --- moves between log dirs (AlterReplicaLogDirs; log_mover.py) --------------------------------

    def alter_log_dir(self, topic: str, partition: int, dest: str) -> None:
        """Move the partition's log to log dir `dest` in the background (a future replica, then a swap).
        Raises LogDirNotFoundError for a path not in log.dirs, LogOfflineError for an offline dir or log,
        ReplicaNotAvailableError for a partition with no log here, LogNotLoadedError while it loads."""
        dest = os.path.abspath(dest)
        if dest not in self.log_dirs:
            raise LogDirNotFoundError(f"{dest} is not a log dir of this broker")
        if dest in self.offline_dirs:
            raise LogOfflineError(f"log dir {dest} is offline")
        tp = (topic, partition)
        with self._lock:
            self._check_open()
            if tp in self._pending:
                raise LogNotLoadedError(f"the log of {topic}-{partition} is still loading")
            if tp in self.offline:
                raise LogOfflineError(f"the log of {topic}-{partition} is offline: {self.offline[tp]}")
            if tp not in self._logs and tp not in self._lazy:
                # Created there when it comes (Kafka's preferred log dir); the tool asks again until it is here.
                self._preferred_dirs.pop(tp, None)
                self._preferred_dirs[tp] = dest
                while len(self._preferred_dirs) > PREFERRED_DIRS_MAX:  # the oldest wishes go first
                    del self._preferred_dirs[next(iter(self._preferred_dirs))]
                raise ReplicaNotAvailableError(f"{topic}-{partition} has no replica on this broker")
            current = self.get_or_create_log(topic, partition)  # opens a log left unopened since a clean start
            self.mover.start_move(tp, current, dest)

    def future_replicas(self) -> dict[str, dict[TopicPartition, tuple[int, int]]]:
        """Per log dir, the future replicas being filled there: (size in bytes, offset lag)."""
        return self.mover.future_replicas()

    def swap_future(self, topic: str, partition: int) -> Log | None:
        """Swap the caught-up future replica in (LogMover.swap); call where no append can interleave."""
        return self.mover.swap((topic, partition))

    def _restart_moves(self) -> None:
        """Moves a crash or shutdown cut short during the copy begin again from scratch: the stale
        future replica is removed (the current log is intact) and a new one is made."""
        stale, self._stale_futures = self._stale_futures, []
        for d, (topic, p), path in stale:
            try:
                remove_log_dir(path, topic, p)
                if d in self.offline_dirs or not self.knows(topic, p):
                    continue
                logger.info("%s-%d: restarting its move to %s, cut short by the last shutdown", topic, p, d)
                self.alter_log_dir(topic, p, d)
            except (StorageError, OSError) as e:
                logger.error("%s-%d: cannot restart its move to %s: %s", topic, p, d, e)

    def online_dirs(self) -> list[str]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def knows(self, topic: str, partition: int) -> bool:
        """Whether the partition's log is in an online dir: open, loading, or waiting to be opened."""
        tp = (topic, partition)
        return tp in self._logs or tp in self._pending or tp in self._lazy

    def dir_of(self, topic: str, partition: int) -> str | None:
        """The log dir holding the partition's log, if it is known (open, loading or unopened)."""
        tp = (topic, partition)
        with self._lock:
            log = self._logs.get(tp)
            if log is not None:
                return os.path.dirname(log.dir)
            if tp in self._lazy:
                return self._lazy[tp][0]
            if tp in self._pending:
                return os.path.dirname(self._pending[tp])
        return None

    def maybe_fail_dir(self, log_or_dir: Log | str, error: BaseException) -> bool:
        """An error met on a log: if it is an I/O error (an OSError, or a KafkaStorageError caused by
        one; not a log closed under a deletion), its log dir fails (`fail_dir`). Errors of the process rather
        than the disk (too many open files, out of memory, interrupted) do not: Kafka takes a dir offline
        for those too, a well-known way to lose every partition of a broker to a file descriptor leak.
        Returns whether."""
        os_error = error if isinstance(error, OSError) else error.__cause__
        if not isinstance(os_error, OSError) or os_error.errno in _NOT_THE_DISK:
            return False
        d = log_or_dir if isinstance(log_or_dir, str) else os.path.dirname(log_or_dir.dir)
        return bool(self.fail_dir(d, f"{type(error).__name__}: {error}")) or d in self.offline_dirs

    def fail_dir(self, d: str, reason: str) -> list[TopicPartition]:
        """Take log dir `d` offline (Kafka's LogDirFailureChannel): close its logs, make each an offline
        partition, tell `on_dir_failure`. Idempotent; returns the partitions it took offline."""
        with self._lock:
            if d in self.offline_dirs or d not in self.log_dirs:
                return []
            self.offline_dirs[d] = reason
            why = f"log dir {d} is offline: {reason}"
            doomed = [tp for tp, log in self._logs.items() if os.path.dirname(log.dir) == d]
            logs = [self._logs.pop(tp) for tp in doomed]
            for tp in [tp for tp, plan in self._lazy.items() if plan[0] == d]:
                del self._lazy[tp]
                self._forget_pending_offsets(tp)
                doomed.append(tp)
            for tp in doomed:
                self.offline[tp] = why
            self.mover.abort_in_dir(d)
        logger.error("log dir %s failed (%s): %d partitions offline, the other log dirs keep serving", d, reason,
                     len(doomed))
        if len(self.offline_dirs) == len(self.log_dirs):
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

    @property
    def closed(self) -> bool:
        return self._closed

    def wait_loaded(self, timeout_s: float | None = None) -> bool:
        return self._load_done.wait(timeout_s)

    def is_loading(self, topic: str, partition: int) -> bool:
        """Whether the partition's log exists on disk but is not loaded yet."""
        return (topic, partition) in self._pending

    def is_unopened(self, topic: str, partition: int) -> bool:
        """Whether the partition's log is on disk from a clean shutdown and not opened yet (its first
        user opens it with get_or_create_log)."""
        return (topic, partition) in self._lazy

    def is_offline(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self.offline

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

    def reconfigure_cleaner(self, config: CleanerConfig) -> None:
        """New log.cleaner.* settings (dynamic broker configs); blocks while the cleaner threads restart."""
        with self._cleaner_reconfig_lock:
            with self._lock:
                self._cleaner_config = config
                cleaner = None if self._closed else self.cleaner
            if cleaner is not None:
                cleaner.reconfigure(config)

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

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
        yet (lazy, after a clean shutdown) opened now, each missing one created empty. Creation is
        batched: the directories and segment files of the whole batch are created, then each parent log
        dir is fsynced once (as Kafka flushes the parent on log creation) before any of them is handed
        out: a directory fsync costs ~3 ms here, more than everything else a new log needs.

        Raises LogNotLoadedError if one of them is still being loaded (recovered) at startup, and
        StorageError once shut down; a partition that fails alone (offline, illegal, a disk error) gets
        its exception in the result, so one bad log never stops the others."""
        with self._lock:
            self._check_open()
            if config is not None:
                self._topic_configs[topic] = config
            cfg = self.topic_config(topic)
            out: list[tuple[int, Log | Exception]] = []
            created: list[tuple[TopicPartition, Log]] = []
            failed_dirs: list[tuple[str, BaseException]] = []
            counts: dict[str, int] | None = None
            now = _now() if now_ms is None else now_ms
            try:
                for p in partitions:
                    tp = (topic, p)
                    log = self._logs.get(tp)
                    if log is not None:
                        out.append((p, log))
                        continue
                    if tp in self._pending:
                        raise LogNotLoadedError(f"the log of {topic}-{p} is still loading")
                    if tp in self.offline:
                        out.append((p, LogOfflineError(f"the log of {topic}-{p} is offline: {self.offline[tp]}")))
                        continue
                    lazy = self._lazy.pop(tp, None)
                    if lazy is not None:
                        opened = self._load_one(*lazy, now)
                        self._forget_pending_offsets(tp)
                        if opened is None:
                            out.append((p, LogOfflineError(f"the log of {topic}-{p} is offline: {self.offline[tp]}")))
                        else:
                            self._logs[tp] = opened
                            out.append((p, opened))
                        continue
                    if not _LEGAL_TOPIC.fullmatch(topic) or topic in (".", "..") or p < 0:
                        out.append((p, ValueError(f"illegal topic partition {topic!r} {p}")))
                        continue
                    online = self.online_dirs()
                    if not online:
                        out.append((p, LogOfflineError(f"cannot create {topic}-{p}: every log dir is offline")))
                        continue
                    d = online[0]
                    preferred = self._preferred_dirs.pop(tp, None)
                    if preferred in online:
                        d = preferred
                        if counts is not None:
                            counts[d] += 1
                    elif len(online) > 1:  # counted once per batch: per creation made bulk creation quadratic
                        if counts is None:
                            counts = logs_per_dir(self.log_dirs, [*self._logs.values(),
                                                                  *(m.future for m in self.mover.moves.values())])
                            for plan in self._lazy.values():
                                counts[plan[0]] = counts.get(plan[0], 0) + 1
                        d = min(online, key=lambda x: counts[x])  # type: ignore[index]
                        counts[d] += 1
                    path = os.path.join(d, f"{topic}-{p}")
                    try:
                        log = create_log(path, cfg, now)
                    except (StorageError, OSError) as e:
                        failed_dirs.append((d, e))
                        out.append((p, e))
                        continue
                    created.append((tp, log))
                    out.append((p, log))
            finally:
                # Whatever was created so far becomes durable and known, even if a later partition raised.
                fsync_failure = self._commit_created(created, out)
                if fsync_failure is not None:
                    failed_dirs.append(fsync_failure)
            for _, log in created:
                logger.debug("created log %s", log.dir)  # callers summarize: one line per topic, not per partition
        for d, e in failed_dirs:
            self.maybe_fail_dir(d, e)
        return out

    def _commit_created(self, created: list[tuple[TopicPartition, Log]], out: list[tuple[int, Log | Exception]]
                        ) -> tuple[str, OSError] | None:
        """fsync the parent dirs of the logs just created, then make them known. If the fsync fails,
        they are closed and each gets the error instead (the next start finds their directories); the
        failed dir and the error are returned (the caller fails the dir, outside the lock)."""
        if not created:
            return None
        d = ""
        try:
            for d in sorted({os.path.dirname(log.dir) for _, log in created}):
                fsync_dir(d)
        except OSError as e:
            failure = (d, e)
            failed = {id(log) for _, log in created}
            for _, log in created:
                log.close()
            err = StorageError(f"cannot make new logs durable: {e}")
            out[:] = [(p, err if id(r) in failed else r) for p, r in out]
            return failure
        for tp, log in created:
            self._logs[tp] = log
        return None

    def _forget_pending_offsets(self, tp: TopicPartition) -> None:
        for cname in CHECKPOINTS:
            self._pending_offsets[cname].pop(tp, None)

    def delete_log(self, topic: str, partition: int) -> bool:
        """Close the log, rename its directory to `<topic>-<partition>.<uuid>-delete`, remove it.
        A crash in between is finished at the next startup. Returns False if there was no log."""
        with self._lock:
            if (topic, partition) in self._pending:
                raise LogNotLoadedError(f"the log of {topic}-{partition} is still loading")
            self.mover.abort((topic, partition), "the log is deleted")
            log = self._logs.pop((topic, partition), None)
            lazy = self._lazy.pop((topic, partition), None) if log is None else None
            if lazy is not None:
                self._forget_pending_offsets((topic, partition))
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

    def all_logs(self) -> list[Log]:
        with self._lock:
            return list(self._logs.values())

    def logs(self) -> dict[TopicPartition, Log]:
        with self._lock:
            return dict(self._logs)

    def partition_sizes(self) -> dict[str, dict[TopicPartition, int]]:
        """Per log dir, the size in bytes of each partition log it holds (DescribeLogDirs): an open
        log's segment sizes, and for one on disk not opened yet (lazy, or still loading) the sizes of
        its `.log` files. Offline logs are left out: they cannot be described (their files are the
        operator's to repair)."""
        with self._lock:
            logs = dict(self._logs)
            lazy = {tp: (plan[0], plan[2]) for tp, plan in self._lazy.items()}
            lazy.update((tp, (os.path.dirname(path), path)) for tp, path in self._pending.items())
        out: dict[str, dict[TopicPartition, int]] = {d: {} for d in self.log_dirs}
        for tp, log in logs.items():
            out.setdefault(os.path.dirname(log.dir), {})[tp] = log.size_bytes
        for tp, (d, path) in lazy.items():
            if tp not in logs:
                out.setdefault(d, {})[tp] = segment_files_size(path)
        return out

    # --- periodic work (from a timer, off the event loop) -------------------------------------------

    def cleanup_logs(self, now_ms: int) -> int:
        """Retention for every log (log.retention.check.interval.ms). Returns segments deleted."""
        deleted = 0
        for log in self.all_logs():
            try:
                deleted += log.delete_old_segments(now_ms)
            except StorageError as e:
                logger.error("retention of %s failed: %s", log.dir, e)
                self.maybe_fail_dir(log, e)
        return deleted

    def flush_dirty_logs(self, now_ms: int) -> int:
        """Flush the logs that flush.messages / flush.ms / a recent roll call for. Returns how many."""
        flushed = 0
        for log in self.all_logs():
            # Nothing past the recovery point: nothing due (read without the log's lock: a log appended to
            # meanwhile is seen next time). Skips the lock and checks of most of 100,000 logs every second.
            if log.log_end_offset <= log.recovery_point:
                continue
            try:
                on_flush = self.on_flush
                if on_flush is None:
                    flushed += log.maybe_flush(now_ms)
                else:
                    t0 = time.perf_counter()
                    if log.maybe_flush(now_ms):
                        flushed += 1
                        on_flush((time.perf_counter() - t0) * 1000.0)
            except StorageError as e:
                logger.error("flush of %s failed: %s", log.dir, e)
                self.maybe_fail_dir(log, e)
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
        by_dir: dict[str, dict[TopicPartition, int]] = {d: {} for d in self.online_dirs()}
        with self._lock:
            logs = dict(self._logs)
            pending = {tp: (os.path.dirname(self._pending[tp]), o)
                       for tp, o in self._pending_offsets[name].items() if tp in self._pending}
            pending.update((tp, (lazy[0], o)) for tp, o in self._pending_offsets[name].items()
                           if (lazy := self._lazy.get(tp)) is not None)
        for tp, (d, offset) in pending.items():  # not loaded yet: keep what the last run wrote
            by_dir.setdefault(d, {})[tp] = offset
        for tp, log in logs.items():
            by_dir.setdefault(os.path.dirname(log.dir), {})[tp] = value(tp, log)
        failed: list[tuple[str, OSError]] = []
        with self._checkpoint_lock:
            for d, offsets in by_dir.items():
                if d in self.offline_dirs:
                    continue
                try:
                    write_offsets(name, {d: offsets})
                except OSError as e:
                    logger.error("cannot write %s in %s: %s", name, d, e)
                    failed.append((d, e))
        for d, e in failed:
            self.maybe_fail_dir(d, e)

    # --- shutdown -------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Flush and close every log, write the checkpoints, then the clean-shutdown marker of each
        log dir whose logs all flushed."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._load_started:
            self._load_done.wait()  # the loader stops after the log it is opening
        with self._lock:
            logs = dict(self._logs)
            lazy = dict(self._lazy)
            unloaded = {os.path.dirname(path) for path in self._pending.values()}
        self.mover.shutdown()  # a copy under way is begun again at the next start
        with self._lock:
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
                failed_dirs.add(os.path.dirname(log.dir))
        self.checkpoint()
        for log in logs.values():
            try:
                log.close()
            except StorageError as e:
                logger.error("close of %s failed: %s", log.dir, e)
                failed_dirs.add(os.path.dirname(log.dir))
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
            write_lines(os.path.join(d, CLEAN_SHUTDOWN_FILE), sizes.get(d, []), version=SEGMENT_SIZES_VERSION)
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


def _now() -> int:
    return now_ms()
