"""Helpers of the JBOD tests: log dirs as DescribeLogDirs reports them and as the disk holds them, and a
partition's values read back over the wire."""

from __future__ import annotations

import os

from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import iter_headers, iter_records
from tests.server.admin_wire import fetch
from tests.wire import WireClient

DESCRIBE_LOG_DIRS = 35


def describe_dirs(c: WireClient) -> dict[str, tuple[int, dict[tuple[str, int], tuple[int, int, bool]]]]:
    """log dir -> (error, {(topic, p): (size, offset lag, is future)})."""
    r = c.request(DESCRIBE_LOG_DIRS, 4, {"topics": None})
    return {d.log_dir: (d.error_code, {(t.name, p.partition_index): (p.partition_size, p.offset_lag, p.is_future_key)
                                       for t in d.topics for p in t.partitions}) for d in r.results}


def where(dirs: list[str], topic: str) -> dict[int, str]:
    """partition -> the log dir holding `<topic>-<p>`."""
    out = {}
    for d in dirs:
        for name in os.listdir(d):
            t, _, p = name.rpartition("-")
            if t == topic and p.isdigit():
                out[int(p)] = d
    return out


def values(c: WireClient, topic: str, p: int) -> list[bytes]:
    """Every record value of the partition, fetched from its log start."""
    got: list[bytes] = []
    offset = 0
    while True:
        part = fetch(c, topic, p, offset)
        if part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and offset < part.log_start_offset:
            offset = part.log_start_offset  # below the log start (DeleteRecords): start there
            continue
        assert part.error_code == ErrorCode.NONE, part.error_code
        headers = list(iter_headers(part.records or b""))
        if not headers:
            return got
        got.extend(r.value for r in iter_records(part.records) if r.offset >= offset)
        offset = headers[-1].last_offset + 1
