"""Snapshots as files beside the metadata log's segments, named as Kafka names them (KIP-630):

    <dir>/00000000000000001234-0000000007.checkpoint        (end offset, epoch)

A snapshot is written to `<name>.checkpoint.part`, fsynced, renamed into place and the directory
fsynced: a crash leaves either no snapshot or a whole one, and a `.part` (or a `.deleted` one being
removed) found at start is deleted. A reader keeps its file open, so a snapshot deleted while a
follower downloads it stays readable to the end of that read.
"""

from __future__ import annotations

import logging
import os

from gregor.raft.log import OffsetAndEpoch
from gregor.raft.snapshots import parse_snapshot_file_name, snapshot_file_name

log = logging.getLogger("gregor.raft")

PART_SUFFIX = ".part"
DELETED_SUFFIX = ".deleted"


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileSnapshot:
    def __init__(self, snapshot_id: OffsetAndEpoch, path: str) -> None:
        self.snapshot_id = snapshot_id
        self._fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self._fd).st_size

    def read(self, position: int, max_bytes: int) -> bytes:
        return os.pread(self._fd, max(0, min(max_bytes, self.size - position)), position)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class FileSnapshotWriter:
    def __init__(self, store: FileSnapshotStore, snapshot_id: OffsetAndEpoch) -> None:
        self.snapshot_id = snapshot_id
        self._store = store
        self._final = os.path.join(store.dir, snapshot_file_name(snapshot_id))
        self._part = self._final + PART_SUFFIX
        self._fh = open(self._part, "wb")  # noqa: SIM115 (closed by freeze or abort)
        self.size = 0

    def append(self, data: bytes | memoryview) -> None:
        self._fh.write(data)
        self.size += len(data)

    def freeze(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        os.replace(self._part, self._final)
        _fsync_dir(self._store.dir)
        self._store.ids.add(self.snapshot_id)

    def abort(self) -> None:
        if not self._fh.closed:
            self._fh.close()
        try:
            os.unlink(self._part)
        except FileNotFoundError:
            pass


class FileSnapshotStore:
    def __init__(self, directory: str) -> None:
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.ids: set[OffsetAndEpoch] = set()
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            if name.endswith((".checkpoint" + PART_SUFFIX, ".checkpoint" + DELETED_SUFFIX)):
                log.info("removing unfinished snapshot file %s", path)
                os.unlink(path)
            elif (sid := parse_snapshot_file_name(name)) is not None:
                self.ids.add(sid)

    @property
    def latest(self) -> OffsetAndEpoch | None:
        return max(self.ids) if self.ids else None

    def open(self, snapshot_id: OffsetAndEpoch) -> FileSnapshot | None:
        if snapshot_id not in self.ids:
            return None
        try:
            return FileSnapshot(snapshot_id, os.path.join(self.dir, snapshot_file_name(snapshot_id)))
        except FileNotFoundError:
            return None

    def writer(self, snapshot_id: OffsetAndEpoch) -> FileSnapshotWriter:
        return FileSnapshotWriter(self, snapshot_id)

    def delete_older_than(self, snapshot_id: OffsetAndEpoch) -> None:
        old = sorted(s for s in self.ids if s < snapshot_id)
        for sid in old:
            path = os.path.join(self.dir, snapshot_file_name(sid))
            try:
                os.replace(path, path + DELETED_SUFFIX)
                os.unlink(path + DELETED_SUFFIX)
            except FileNotFoundError:
                pass
            self.ids.discard(sid)
        if old:
            _fsync_dir(self.dir)
