"""LogLoading: opening the logs a LogManager's scan found in its log dirs at startup (Kafka's
LogManager.loadLogs, with lazy opening).

The logs of a log dir that was not shut down cleanly are loaded first (`load`: recovered from
their recovery points); until that is done `loading` is true and their partitions wait (the
LogTable's `pending`). The logs of a dir shut down cleanly need no recovery, so they are not opened
before the broker serves (opening 10,000 took seconds): each is opened by its first user
(`open_unopened`, from LogManager.get_or_create_logs) or by `open_lazy` on one background thread.
A log that cannot be loaded even after a recovery from offset 0 is offline (log_dirs.open_found_log).
Both loops stop once the LogTable is closed (a shutdown), after the log being opened.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable

from gregor.storage.checkpoint import TopicPartition
from gregor.storage.clean_shutdown import Plan
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from gregor.storage.log_dirs import DirScan, open_found_log
from gregor.storage.log_table import LogTable
from gregor.storage.offset_checkpoints import OffsetCheckpoints
from gregor.storage.segment_files import SegmentFileCache

logger = logging.getLogger("gregor.storage.log_manager")


class LogLoading:
    """The opening of the logs found at startup, into the LogTable (see the module docstring)."""

    def __init__(self, table: LogTable, found: DirScan, checkpoints: OffsetCheckpoints,
                 topic_config: Callable[[str], LogConfig], files: SegmentFileCache) -> None:
        self._table = table
        self._plan = found.plan  # logs to load (recover) before they serve
        self._offsets = found.offsets  # per dir, the checkpoints as the last run left them
        self._checkpoints = checkpoints
        self._topic_config = topic_config
        self._files = files
        self.started = False
        self.loading = True
        self.done = threading.Event()  # set when `load` returns, whether it finished or stopped

    def load(self, now: int) -> bool:
        """Load every log found that needs recovery; whether it finished (False: the table was closed
        meanwhile). Never raises for one bad log. Call once."""
        table = self._table
        with table.lock:
            if self.started:
                raise RuntimeError("load_logs() called twice")
            self.started = True
        try:
            loaded = 0
            for d, tp, path, clean, sizes in self._plan:
                if table.closed:
                    logger.info("shutdown requested: stopping the log load after %d logs", loaded)
                    return False
                log = self._open_found(d, tp, path, clean, sizes, now)
                with table.lock:
                    table.pending.pop(tp, None)
                    if log is None:
                        continue
                    if table.closed:
                        log.close()
                        return False
                    table.logs[tp] = log
                    self._checkpoints.forget(tp)
                loaded += 1
            logger.info("loaded %d logs (%d offline), %d more to open as they are used", loaded,
                        len(table.offline), len(table.lazy))
            with table.lock:
                if table.closed:
                    return False
                self.loading = False
            return True
        finally:
            self.done.set()

    def open_lazy(self, now: Callable[[], int], slice_size: int, pause_s: float) -> int:
        """Open every log still waiting since a clean start, in slices under the lock so a first use on
        another thread waits for one slice at most, pausing `pause_s` between slices so the event loop
        gets the GIL. Returns how many it opened. Stops if the table is closed."""
        table = self._table
        opened = 0
        while True:
            if opened:
                time.sleep(pause_s)
            with table.lock:
                if table.closed:
                    return opened
                todo = list(itertools.islice(table.lazy.values(), slice_size))
                if not todo:
                    return opened
                t = now()
                for plan in todo:
                    del table.lazy[plan[1]]
                    if self.open_unopened(plan, t) is not None:
                        opened += 1

    def open_unopened(self, plan: Plan, now: int) -> Log | None:
        """Open a log found on disk, taken out of the table's `pending` or `lazy` (its lock held): it
        joins the open logs, or it is offline."""
        tp = plan[1]
        log = self._open_found(*plan, now)
        self._checkpoints.forget(tp)
        if log is not None:
            self._table.logs[tp] = log
        return log

    def _open_found(
        self, d: str, tp: TopicPartition, path: str, clean: bool, sizes: dict[int, int] | None, now: int
    ) -> Log | None:
        """One log found by the scan, or None: offline, with the reason (log_dirs.open_found_log)."""
        log, reason = open_found_log((d, tp, path, clean, sizes), self._offsets[d], self._topic_config(tp[0]), now,
                                     self._files)
        if log is None:
            self._table.offline[tp] = reason
        return log
