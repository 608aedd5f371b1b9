"""LogCreation: the new logs of one broker, made in batches.

Each new log goes to the online log dir with the fewest logs (Kafka's rule), unless
AlterReplicaLogDirs named a dir for that replica before it was here (Kafka's preferred log dir,
LogMover.take_preferred). A batch's directories and segment files are created first, then each parent log dir is
fsynced once (as Kafka flushes the parent on log creation) before any of the new logs joins the
LogTable: a directory fsync costs ~3 ms here, more than everything else a new log needs. A log whose
creation or fsync fails gets the error instead; the dir is the caller's to fail.
"""

from __future__ import annotations

import logging
import os
from typing import Protocol

from gregor.storage.checkpoint import TopicPartition
from gregor.storage.config import LogConfig
from gregor.storage.dir_failure import LogDirFailureChannel
from gregor.storage.errors import LogOfflineError, StorageError
from gregor.storage.files import fsync_dir
from gregor.storage.log import Log
from gregor.storage.log_dirs import create_log, logs_per_dir
from gregor.storage.log_table import LogTable
from gregor.storage.segment_files import SegmentFileCache

logger = logging.getLogger("gregor.storage.log_manager")

class Placement(Protocol):
    """What placing a new log asks of the moves between log dirs (LogMover)."""

    def take_preferred(self, tp: TopicPartition) -> str | None: ...

    def futures(self) -> list[Log]: ...


class LogCreation:
    """Where new logs go, and their creation in batches (see the module docstring)."""

    def __init__(self, table: LogTable, dirs: LogDirFailureChannel, moves: Placement, files: SegmentFileCache) -> None:
        """`moves`: the preferred dirs AlterReplicaLogDirs named, and the future replicas being filled
        (which count towards their dirs)."""
        self._table = table
        self._dirs = dirs
        self._moves = moves
        self._files = files

    def create(self, tps: list[TopicPartition], config: LogConfig, now: int
               ) -> tuple[dict[TopicPartition, Log | Exception], list[tuple[str, BaseException]]]:
        """New empty logs for `tps` (none of them known to the table; its lock held): each one's log, or
        its error; and the dirs where something failed, with the error (the caller fails them, outside
        the lock). The logs made durable join the table."""
        out: dict[TopicPartition, Log | Exception] = {}
        created: list[tuple[TopicPartition, Log]] = []
        failed_dirs: list[tuple[str, BaseException]] = []
        counts: dict[str, int] | None = None
        try:
            for tp in tps:
                online = self._dirs.online_dirs()
                if not online:
                    out[tp] = LogOfflineError(f"cannot create {tp[0]}-{tp[1]}: every log dir is offline")
                    continue
                d = online[0]
                preferred = self._moves.take_preferred(tp)
                if preferred in online:
                    d = preferred
                    if counts is not None:
                        counts[d] += 1
                elif len(online) > 1:  # counted once per batch: per creation made bulk creation quadratic
                    if counts is None:
                        counts = self._logs_per_dir()
                    d = min(online, key=lambda x: counts[x])  # type: ignore[index]
                    counts[d] += 1
                try:
                    log = create_log(os.path.join(d, f"{tp[0]}-{tp[1]}"), config, now, self._files)
                except (StorageError, OSError) as e:
                    failed_dirs.append((d, e))
                    out[tp] = e
                    continue
                created.append((tp, log))
                out[tp] = log
        finally:
            # Whatever was created so far becomes durable and known, even if a later one raised.
            fsync_failure = self._commit(created, out)
            if fsync_failure is not None:
                failed_dirs.append(fsync_failure)
        for _, log in created:
            logger.debug("created log %s", log.dir)  # callers summarize: one line per topic, not per partition
        return out, failed_dirs

    def _logs_per_dir(self) -> dict[str, int]:
        table = self._table
        counts = logs_per_dir(self._dirs.log_dirs, [*table.logs.values(), *self._moves.futures()])
        for plan in table.lazy.values():
            counts[plan[0]] = counts.get(plan[0], 0) + 1
        return counts

    def _commit(self, created: list[tuple[TopicPartition, Log]], out: dict[TopicPartition, Log | Exception]
                ) -> tuple[str, OSError] | None:
        """fsync the parent dirs of the logs just created, then make them known. If the fsync fails,
        they are closed and each gets the error instead (the next start finds their directories); the
        failed dir and the error are returned."""
        if not created:
            return None
        d = ""
        try:
            for d in sorted({log.log_dir for _, log in created}):
                fsync_dir(d)
        except OSError as e:
            err = StorageError(f"cannot make new logs durable: {e}")
            for tp, log in created:
                log.close()
                out[tp] = err
            return d, e
        for tp, log in created:
            self._table.logs[tp] = log
        return None
