"""Kafka's checkpoint files: a version line, a count line, then one entry per line.

Written atomically: a `.tmp` sibling is written and fsynced, renamed over the file, and the
directory is fsynced, so a crash leaves either the old or the new file, never a torn one.

    recovery-point-offset-checkpoint    topic partition offset
    log-start-offset-checkpoint         topic partition offset
    replication-offset-checkpoint       topic partition offset   (high watermarks)
    cleaner-offset-checkpoint           topic partition offset   (the log cleaner's first dirty offsets)
    <topic>-<partition>/leader-epoch-checkpoint   epoch start_offset
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from gregor.storage.errors import CorruptCheckpointError
from gregor.storage.files import fsync_dir

VERSION = 0

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"

TopicPartition = tuple[str, int]


def write_lines(path: str, lines: list[str], version: int = VERSION, sync: bool = True) -> None:
    tmp = path + ".tmp"
    text = f"{version}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(os.path.abspath(path)))


def read_lines(path: str, fields_per_line: int, version: int = VERSION) -> list[list[str]] | None:
    """The entries of a checkpoint file split into fields, or None if the file does not exist."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    try:
        if int(lines[0]) != version:
            raise CorruptCheckpointError(f"{path}: unsupported checkpoint version {lines[0]!r}")
        count = int(lines[1])
    except (IndexError, ValueError):
        raise CorruptCheckpointError(f"{path}: malformed header") from None
    entries = [line.split() for line in lines[2:]]
    if len(entries) != count:
        raise CorruptCheckpointError(f"{path}: expected {count} entries, found {len(entries)}")
    for e in entries:
        if len(e) != fields_per_line:
            raise CorruptCheckpointError(f"{path}: malformed line {' '.join(e)!r}")
    return entries


class OffsetCheckpointFile:
    """A `topic partition offset` checkpoint (recovery points, log start offsets, high watermarks)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        for (topic, _), offset in offsets.items():
            assert topic and " " not in topic and "\n" not in topic, topic
            assert offset >= 0, offset
        write_lines(self.path, [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())])

    def read(self) -> dict[TopicPartition, int]:
        """The offsets; {} if the file is missing. Raises CorruptCheckpointError if malformed."""
        entries = read_lines(self.path, 3)
        out: dict[TopicPartition, int] = {}
        for topic, partition, offset in entries or ():
            try:
                out[(topic, int(partition))] = int(offset)
            except ValueError:
                raise CorruptCheckpointError(f"{self.path}: malformed line {topic} {partition} {offset}") from None
        return out


class LeaderEpochCheckpointFile:
    """`epoch start_offset` lines, one per leader epoch, in increasing order."""

    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, entries: Iterable[tuple[int, int]], sync: bool = True) -> None:
        write_lines(self.path, [f"{e} {o}" for e, o in entries], sync=sync)

    def read(self) -> list[tuple[int, int]]:
        entries = read_lines(self.path, 2)
        try:
            return [(int(e), int(o)) for e, o in entries or ()]
        except ValueError:
            raise CorruptCheckpointError(f"{self.path}: malformed entry") from None
