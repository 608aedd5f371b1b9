"""The clean-shutdown marker of a log dir, `.kafka_cleanshutdown` (Kafka's CleanShutdownFileHandler).

Written after a clean shutdown of every log in the dir (flushed, checkpoints written), so the next
start skips recovery. Unlike Kafka's empty marker, ours lists every segment's size (`topic
partition base_offset size`), so the next start can check the segments against it cheaply. It is
read and removed before any log is opened (log_dirs.scan_log_dirs): a crash while loading makes the
next start a full recovery. `marker_lines` writes what `read_segment_sizes` reads.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gregor.storage.checkpoint import TopicPartition, read_lines, write_lines
from gregor.storage.errors import CorruptCheckpointError

if TYPE_CHECKING:
    from gregor.storage.log import Log

logger = logging.getLogger("gregor.storage.log_manager")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
SEGMENT_SIZES_VERSION = 0
# A log found on disk: (log dir, topic-partition, its directory, clean shutdown, segment sizes from the marker).
Plan = tuple[str, TopicPartition, str, bool, dict[int, int] | None]


def write_marker(log_dir: str, lines: list[str]) -> None:
    """The marker of `log_dir` with its segment size lines (fsynced: the next start trusts it)."""
    write_lines(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE), lines, version=SEGMENT_SIZES_VERSION)


def marker_lines(log_dirs: list[str], logs: Mapping[TopicPartition, Log],
                 lazy: Mapping[TopicPartition, Plan]) -> dict[str, list[str]]:
    """Each log dir's clean-shutdown marker lines (`topic partition base_offset size`): the open logs'
    segments, and for logs never opened since a clean start, what the last marker said of them."""
    sizes: dict[str, list[str]] = {d: [] for d in log_dirs}
    for (topic, p), log in logs.items():
        lines = sizes.setdefault(log.log_dir, [])
        lines.extend(f"{topic} {p} {base} {size}" for base, size in log.segment_sizes())
    for (topic, p), (d, _, _, _, seg_sizes) in lazy.items():
        lines = sizes.setdefault(d, [])
        lines.extend(f"{topic} {p} {base} {size}" for base, size in sorted((seg_sizes or {}).items()))
    return sizes


def read_segment_sizes(marker: str) -> dict[TopicPartition, dict[int, int]] | None:
    """The segment sizes a clean shutdown recorded in its marker, or None if it has none (an
    empty marker, as Kafka writes) or they cannot be read."""
    try:
        if os.path.getsize(marker) == 0:
            return None
        entries = read_lines(marker, 4, version=SEGMENT_SIZES_VERSION)
        out: dict[TopicPartition, dict[int, int]] = {}
        for topic, p, base, size in entries or ():
            out.setdefault((topic, int(p)), {})[int(base)] = int(size)
        return out
    except (OSError, ValueError, CorruptCheckpointError) as e:
        logger.warning("cannot read the segment sizes in %s (%s): checking segments without them", marker, e)
        return None
