"""OffsetCheckpoints: the recovery-point-offset-checkpoint, log-start-offset-checkpoint and
replication-offset-checkpoint (high watermarks) files of each log dir, written from the open logs'
offsets (Kafka's LogManager and ReplicaManager checkpoints).

A log found on disk and not open yet (loading at startup, or waiting since a clean shutdown) keeps
the entries the last run wrote for it until it opens (`forget`), so a checkpoint written meanwhile
loses nothing a crash would need. One write at a time: two writers of one file (the periodic
checkpoint, DeleteRecords) would share its `.tmp`, and one rename would fail, which reads as an I/O
error of the dir. A dir that fails its write is the caller's to fail (returned, not raised).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from gregor.storage.checkpoint import TopicPartition
from gregor.storage.dir_failure import LogDirFailureChannel
from gregor.storage.log import Log
from gregor.storage.log_dirs import CHECKPOINTS, write_offsets

logger = logging.getLogger("gregor.storage.log_manager")

# What a checkpoint file holds of an open log.
OffsetOf = Callable[[TopicPartition, Log], int]


class OffsetCheckpoints:
    """The offset checkpoint files of every online log dir, keeping the entries of logs not open yet."""

    def __init__(self, dirs: LogDirFailureChannel, kept: dict[str, dict[TopicPartition, int]]) -> None:
        """`kept`: checkpoint name -> the offsets the scan found of the logs not open yet."""
        self._dirs = dirs
        self._kept = {name: dict(kept.get(name, {})) for name in CHECKPOINTS}
        self._write_lock = threading.Lock()

    def forget(self, tp: TopicPartition) -> None:
        """The log is open (its own offsets count from now on), deleted, or offline."""
        for offsets in self._kept.values():
            offsets.pop(tp, None)

    def write(self, values: Mapping[str, OffsetOf], logs: Mapping[TopicPartition, Log],
              unopened: Mapping[TopicPartition, str]) -> list[tuple[str, OSError]]:
        """Write each checkpoint file named in `values` in every online dir: `values[name](tp, log)`
        for each open log, the kept entry for each log of `unopened` (partition -> its log dir).
        Returns the dirs whose write failed, with the error (logged here)."""
        online = self._dirs.online_dirs()
        by_name: dict[str, dict[str, dict[TopicPartition, int]]] = {name: {d: {} for d in online} for name in values}
        for name in values:
            kept, by_dir = self._kept[name], by_name[name]
            for tp, d in unopened.items():  # not loaded yet: keep what the last run wrote
                offset = kept.get(tp)
                if offset is not None:
                    by_dir.setdefault(d, {})[tp] = offset
        for tp, log in logs.items():
            d = log.log_dir
            for name, value in values.items():
                by_name[name].setdefault(d, {})[tp] = value(tp, log)
        failed: list[tuple[str, OSError]] = []
        disk_failed: set[str] = set()
        with self._write_lock:
            for name, by_dir in by_name.items():
                for d, offsets in by_dir.items():
                    if d in self._dirs.offline_dirs or d in disk_failed:
                        continue
                    try:
                        write_offsets(name, {d: offsets})
                    except OSError as e:
                        logger.error("cannot write %s in %s: %s", name, d, e)
                        failed.append((d, e))
                        if self._dirs.is_disk_error(e):  # the dir fails: its other files wait for a restart
                            disk_failed.add(d)
        return failed
