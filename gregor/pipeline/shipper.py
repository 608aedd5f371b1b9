"""Ship application log lines into the `logs` topic: a small stand-in for rsyslog/Filebeat.

Reads files (optionally following them as they grow, like `tail -F`) or stdin, and produces one
record per line, keyed by the service named in the line so a service's lines stay in order. The
line itself is the value, unchanged: the Spark job parses it, so rsyslog's omkafka (which ships the
same line format) and this shipper are interchangeable.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from gregor.pipeline.generator import make_producer, produce_all
from gregor.pipeline.reference import LOG_LINE


def service_key(line: str) -> bytes | None:
    m = LOG_LINE.match(line)
    return m.group(3).encode() if m else None


def follow(path: Path, *, poll_s: float = 0.2, stop_after_idle_s: float | None = None) -> Iterator[str]:
    """Yield complete lines of `path` from its start, then as it grows; reopen it when rotated."""
    pos = 0
    inode = None
    partial = ""
    idle_since = time.monotonic()
    while True:
        try:
            st = path.stat()
        except FileNotFoundError:
            st = None
        if st is not None and (st.st_ino != inode or st.st_size < pos):
            inode, pos = st.st_ino, 0  # new or rotated/truncated file: start over
        got = False
        if st is not None and st.st_size > pos:
            with path.open("r", encoding="utf-8", errors="replace") as f:
                f.seek(pos)
                data = f.read()
                pos = f.tell()
            lines = (partial + data).split("\n")
            partial = lines.pop()
            for line in lines:
                if line:
                    got = True
                    yield line
        if got:
            idle_since = time.monotonic()
        elif stop_after_idle_s is not None and time.monotonic() - idle_since > stop_after_idle_s:
            return
        time.sleep(poll_s)


def read_lines(sources: Iterable[TextIO]) -> Iterator[str]:
    for src in sources:
        for line in src:
            line = line.rstrip("\n")
            if line:
                yield line


def ship(bootstrap: str, topic: str, lines: Iterable[str], *, producer: Any | None = None) -> int:
    """Produce each line (UTF-8) keyed by its service; returns the number shipped."""
    p = producer or make_producer(bootstrap)
    return produce_all(p, topic, ((service_key(line), line.encode()) for line in lines))


def ship_paths(bootstrap: str, topic: str, paths: list[str], *, follow_files: bool = False) -> int:
    if not paths or paths == ["-"]:
        return ship(bootstrap, topic, read_lines([sys.stdin]))
    if follow_files:
        if len(paths) != 1:
            raise SystemExit("--follow takes exactly one file")
        return ship(bootstrap, topic, follow(Path(paths[0])))
    handles = [open(p, encoding="utf-8", errors="replace") for p in paths]  # noqa: SIM115
    try:
        return ship(bootstrap, topic, read_lines(handles))
    finally:
        for h in handles:
            h.close()


def write_log_file(path: Path, lines: Iterable[str]) -> int:
    """Append lines to a log file, as an application would (used by the demo)."""
    n = 0
    with path.open("a", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
            n += 1
        f.flush()
        os.fsync(f.fileno())
    return n
