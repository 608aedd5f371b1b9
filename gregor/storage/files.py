"""The file operations every part of the log shares: making a file or a directory durable, and removing a
file that may already be gone (a crash, a retried deletion, a file never written)."""

from __future__ import annotations

import os


def fsync_dir(path: str) -> None:
    """Make renames and file creations in directory `path` durable."""
    _fsync(path, os.O_RDONLY | os.O_DIRECTORY)


def fsync_file(path: str) -> None:
    """fsync the file at `path`; a file that does not exist (never written) has nothing to make durable."""
    try:
        _fsync(path, os.O_RDONLY)
    except FileNotFoundError:
        pass


def _fsync(path: str, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def unlink_if_exists(path: str) -> None:
    """Remove the file at `path`, if it is there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
