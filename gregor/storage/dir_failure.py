"""LogDirFailureChannel: the log dirs of one broker (log.dirs), the lock held on each while the broker
runs, and which of them failed.

A log dir fails as a whole, as in Kafka's LogDirFailureChannel: one that cannot be created, locked or
listed at start, or one where a write, flush, roll, creation or checkpoint fails with an I/O error at
runtime, goes into `offline_dirs` with why. Nothing is written to an offline dir again until a restart
finds it healthy. Which errors say something about the disk is `is_disk_error`'s to decide. The
LogManager takes the logs of a failed dir offline (LogManager.fail_dir).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os

from gregor.storage.errors import LogDirInUseError, StorageError

logger = logging.getLogger("gregor.storage.log_manager")

LOCK_FILE = ".lock"
# I/O errors that say nothing about a log dir's disk: they never fail a dir.
_NOT_THE_DISK = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EINTR, errno.EAGAIN})


class LogDirFailureChannel:
    """The log dirs, their `.lock` files (flock) and the offline ones. Changed under the owner's lock."""

    def __init__(self, log_dirs: list[str]) -> None:
        """Create and lock each dir; one that cannot be is offline. Raises LogDirInUseError if another
        process holds a dir's lock, StorageError if every dir is offline (Kafka halts then)."""
        if not log_dirs:
            raise ValueError("log.dirs is empty")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        if len(set(self.log_dirs)) != len(self.log_dirs):
            raise ValueError(f"duplicate log dirs in {log_dirs}")
        self.offline_dirs: dict[str, str] = {}  # failed log dirs, with why (at start or at runtime)
        self._lock_fds: list[int] = []
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
        except BaseException:
            self.release_locks()
            raise

    def online_dirs(self) -> list[str]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def take_offline(self, d: str, reason: str) -> bool:
        """Mark `d` offline; False if it already is, or is not a log dir of this broker."""
        if d in self.offline_dirs or d not in self.log_dirs:
            return False
        self.offline_dirs[d] = reason
        return True

    @property
    def all_offline(self) -> bool:
        return len(self.offline_dirs) == len(self.log_dirs)

    @staticmethod
    def is_disk_error(error: BaseException) -> bool:
        """Whether an error met on a log fails its dir: an OSError, or a KafkaStorageError caused by
        one (not a log closed under a deletion). Errors of the process rather than the disk (too many
        open files, out of memory, interrupted) do not: Kafka takes a dir offline for those too, a
        well-known way to lose every partition of a broker to a file descriptor leak."""
        os_error = error if isinstance(error, OSError) else error.__cause__
        return isinstance(os_error, OSError) and os_error.errno not in _NOT_THE_DISK

    def release_locks(self) -> None:
        for fd in self._lock_fds:
            os.close(fd)  # releases the flock
        self._lock_fds = []


def _lock_dir(d: str) -> int:
    fd = os.open(os.path.join(d, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LogDirInUseError(f"log dir {d} is in use by another process (its {LOCK_FILE} is locked)") from None
    return fd
