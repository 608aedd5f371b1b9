"""A segment's `.log` file (SegmentFile, the base of LogSegment) and the cache of open segment
descriptors it goes through, SegmentFileCache (see segment.py's docstring).

A segment does not hold its `.log` file open: every use takes the descriptor from its cache
(opening the file if needed) and pins it for the length of the call; the cache closes the least
recently used unpinned descriptors beyond its capacity. Pinned descriptors are never closed, so a
descriptor number can never be reused under a running call. One cache serves every segment of a
broker: the LogManager owns it (capacity `log.segment.open.files.max`) and hands it to each log it
opens; a log opened on its own (a tool, a test) gets a cache of its own.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

from gregor.storage.errors import CorruptRecordError, KafkaStorageError

LOG_SUFFIX = ".log"


def file_prefix(base_offset: int) -> str:
    """Kafka's file name stem: the base offset as 20 digits."""
    return f"{base_offset:020d}"

DEFAULT_OPEN_FILES = 1024


def default_open_files_capacity() -> int:
    """Half the soft RLIMIT_NOFILE (the rest is for sockets, indexes and checkpoints), at least 16."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return DEFAULT_OPEN_FILES
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return DEFAULT_OPEN_FILES * 64
    return max(16, soft // 2)


class SegmentFileCache:
    """A bounded LRU of open segment `.log` descriptors, shared by every segment of a broker.

    `acquire` returns a descriptor pinned until `release`; pinned descriptors are never closed
    (eviction skips them and `close_segment` defers to the last release). Evicting costs the
    segment nothing but one `open` at its next use. `capacity` 0: `default_open_files_capacity()`.
    """

    def __init__(self, capacity: int = 0) -> None:
        self._lock = threading.Lock()
        self._open: OrderedDict[SegmentFile, None] = OrderedDict()
        self.capacity = max(1, capacity if capacity > 0 else default_open_files_capacity())
        self.opened = 0  # files opened since start (a measure of churn)

    def __len__(self) -> int:
        return len(self._open)

    def set_capacity(self, capacity: int) -> None:
        with self._lock:
            self.capacity = max(1, capacity)
            self._evict()

    def register(self, seg: SegmentFile, fd: int) -> None:
        """A descriptor the segment opened itself (creating its file) joins the cache."""
        with self._lock:
            seg._fd = fd
            self._open[seg] = None
            self.opened += 1
            self._evict()

    def acquire(self, seg: SegmentFile) -> int:
        with self._lock:
            fd = seg._fd
            if fd < 0:
                if seg.closed:
                    raise KafkaStorageError(f"segment {seg.log_path} is closed")
                try:
                    fd = os.open(seg.log_path, os.O_RDWR)
                except OSError as e:
                    raise KafkaStorageError(f"cannot open {seg.log_path}: {e}") from e
                seg._fd = fd
                self._open[seg] = None
                self.opened += 1
                seg._pins += 1
                self._evict()
                return fd
            self._open.move_to_end(seg)
            seg._pins += 1
            return fd

    def release(self, seg: SegmentFile) -> None:
        with self._lock:
            seg._pins -= 1
            if seg._pins == 0 and (seg.closed or len(self._open) > self.capacity):
                self._close(seg)

    def close_segment(self, seg: SegmentFile) -> None:
        """Mark the segment closed; its descriptor closes now, or at its last release if pinned."""
        with self._lock:
            seg.closed = True
            if seg._pins == 0:
                self._close(seg)

    def _close(self, seg: SegmentFile) -> None:
        fd, seg._fd = seg._fd, -1
        self._open.pop(seg, None)
        if fd >= 0:
            os.close(fd)

    def _evict(self) -> None:
        """Close the least recently used unpinned descriptors down to the capacity. Takes them from the
        front of the LRU one at a time: copying the whole LRU per eviction cost 0.4 ms at 10,000 open
        files, doubling the cost of creating a partition past that many. A pinned one (in use right now)
        is moved to the back, as if just used."""
        for _ in range(len(self._open)):
            if len(self._open) <= self.capacity:
                return
            seg = next(iter(self._open))
            if seg._pins == 0:
                self._close(seg)
            else:
                self._open.move_to_end(seg)



def pread_exact(fd: int, size: int, position: int) -> bytes:
    data = os.pread(fd, size, position)
    if len(data) < size:  # only at end of file: a concurrent truncation or a damaged file
        raise CorruptRecordError(f"short read: {len(data)} of {size} bytes at position {position}")
    return data


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, position)
        view = view[n:]
        position += n


class SegmentFile:
    """The `.log` file of one segment, named `<base offset><.log><suffix>` in `dir`. It holds no
    descriptor of its own: each call pins one from `files` for its length (opening the file if the
    cache closed it). `closed` is set by the cache's `close_segment`."""

    def __init__(self, dir: str, base_offset: int, suffix: str, files: SegmentFileCache) -> None:
        self.dir = dir
        self.base_offset = base_offset
        self.suffix = suffix
        self.files = files
        self._fd = -1  # owned by `files`: use files.acquire/release
        self._pins = 0
        self.closed = False

    @property
    def log_path(self) -> str:
        return os.path.join(self.dir, file_prefix(self.base_offset) + LOG_SUFFIX + self.suffix)

    def pread(self, size: int, position: int) -> bytes:
        """Exactly `size` bytes at `position` (CorruptRecordError if the file is shorter)."""
        fd = self.files.acquire(self)
        try:
            return pread_exact(fd, size, position)
        finally:
            self.files.release(self)

    def pread_some(self, size: int, position: int) -> bytes:
        """Up to `size` bytes at `position` (fewer at the end of the file)."""
        fd = self.files.acquire(self)
        try:
            return os.pread(fd, size, position)
        finally:
            self.files.release(self)

    def _ftruncate(self, size: int) -> None:
        fd = self.files.acquire(self)
        try:
            os.ftruncate(fd, size)
        finally:
            self.files.release(self)

    def file_size(self) -> int:
        """The `.log` file's size on disk (may exceed the segment's size when preallocated or torn)."""
        fd = self.files.acquire(self)
        try:
            return os.fstat(fd).st_size
        finally:
            self.files.release(self)

    def file_mtime_ms(self) -> int:
        fd = self.files.acquire(self)
        try:
            return int(os.fstat(fd).st_mtime * 1000)
        finally:
            self.files.release(self)

    def dup_fd(self) -> int:
        """A new descriptor for the .log file, owned by the caller (see Log.open_segment_readers)."""
        assert not self.closed
        fd = self.files.acquire(self)
        try:
            return os.dup(fd)
        finally:
            self.files.release(self)
