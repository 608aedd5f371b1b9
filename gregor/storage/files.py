"""The file operations every part of the log shares: making a file or a directory durable, and removing a
file that may already be gone (a crash, a retried deletion, a file never written)."""

from __future__ import annotations

import os


def fsync_dir(path: str) -> None:
    """Make renames and file creations in directory `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: str) -> None:
    """fsync the file at `path`; a file that does not exist (never written) has nothing to make durable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
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
