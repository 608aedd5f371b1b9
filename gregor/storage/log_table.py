"""LogTable: every partition log of one broker, each in one state, under one lock.

    logs     open
    pending  found on disk at startup and loading before it serves (its log dir was not shut down
             cleanly, so it is recovered first): its directory
    lazy     found on disk after a clean shutdown: opened on first use or in the background (its
             scan plan, log_dirs.Plan)
    offline  cannot be served (it could not be loaded, or its log dir failed), with why
    creating being created by a thread, outside the lock (directories, files, the parent dir's
             fsync): the dir it goes to, and an event set once it joined `logs` (or failed)

A partition is in at most one of them. `lock` (reentrant) guards them all and `closed` (set at
shutdown, after which no log joins): the LogManager, its loading and its log mover hold it across a
check and the change it leads to, never across file system work that grows with a batch: a topic's
logs are created outside it, so the event loop asking for another partition's log meanwhile does not
wait for them.
"""

from __future__ import annotations

import os
import threading

from gregor.storage.checkpoint import TopicPartition
from gregor.storage.clean_shutdown import Plan
from gregor.storage.log import Log
from gregor.storage.log_dirs import segment_files_size


class LogTable:
    """The partition logs of one broker by state (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.logs: dict[TopicPartition, Log] = {}
        self.pending: dict[TopicPartition, str] = {}
        self.lazy: dict[TopicPartition, Plan] = {}
        self.offline: dict[TopicPartition, str] = {}
        self.creating: dict[TopicPartition, tuple[threading.Event, str]] = {}
        self.closed = False  # the manager is shut down: nothing joins any more

    def get(self, tp: TopicPartition) -> Log | None:
        return self.logs.get(tp)

    def snapshot(self) -> dict[TopicPartition, Log]:
        with self.lock:
            return dict(self.logs)

    def knows(self, tp: TopicPartition) -> bool:
        """Whether the partition's log is in an online dir: open, loading, being created, or waiting to be
        opened."""
        return tp in self.logs or tp in self.pending or tp in self.lazy or tp in self.creating

    def wait_created(self, tps: list[TopicPartition] | None, timeout_s: float | None = None) -> None:
        """Wait until the creations under way of `tps` (None: of every log) ended. Call without the lock."""
        with self.lock:
            events = [ev for tp, (ev, _) in self.creating.items() if tps is None or tp in tps]
        for ev in events:
            ev.wait(timeout_s)

    def dir_of(self, tp: TopicPartition) -> str | None:
        """The log dir holding the partition's log, if it is known (open, loading or unopened)."""
        with self.lock:
            log = self.logs.get(tp)
            if log is not None:
                return log.log_dir
            if tp in self.lazy:
                return self.lazy[tp][0]
            if tp in self.pending:
                return os.path.dirname(self.pending[tp])
        return None

    def unopened(self) -> dict[TopicPartition, str]:
        """The log dir of each log on disk not open yet (loading, or waiting since a clean start)."""
        with self.lock:
            out = {tp: os.path.dirname(path) for tp, path in self.pending.items()}
            out.update((tp, plan[0]) for tp, plan in self.lazy.items())
            return out

    def take_dir(self, d: str, why: str) -> tuple[list[TopicPartition], list[Log]]:
        """Take every log of log dir `d` offline, open or unopened: (their partitions, the open logs to
        close). Call with the lock held."""
        doomed = [tp for tp, log in self.logs.items() if log.log_dir == d]
        logs = [self.logs.pop(tp) for tp in doomed]
        for tp in [tp for tp, plan in self.lazy.items() if plan[0] == d]:
            del self.lazy[tp]
            doomed.append(tp)
        for tp in doomed:
            self.offline[tp] = why
        return doomed, logs

    def partition_sizes(self, log_dirs: list[str]) -> dict[str, dict[TopicPartition, int]]:
        """Per log dir, the size in bytes of each partition log it holds (DescribeLogDirs): an open
        log's segment sizes, and for one on disk not opened yet (lazy, or still loading) the sizes of
        its `.log` files. Offline logs are left out: they cannot be described (their files are the
        operator's to repair)."""
        with self.lock:
            logs = dict(self.logs)
            unopened = {tp: (plan[0], plan[2]) for tp, plan in self.lazy.items()}
            unopened.update((tp, (os.path.dirname(path), path)) for tp, path in self.pending.items())
        out: dict[str, dict[TopicPartition, int]] = {d: {} for d in log_dirs}
        for tp, log in logs.items():
            out.setdefault(log.log_dir, {})[tp] = log.size_bytes
        for tp, (d, path) in unopened.items():
            if tp not in logs:
                out.setdefault(d, {})[tp] = segment_files_size(path)
        return out
