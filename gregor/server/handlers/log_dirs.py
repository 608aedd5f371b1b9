"""DescribeLogDirs: per log dir of this broker, the partitions it holds and their sizes.

A partition's size is that of its segment files (LogManager.partition_sizes). Gregor has no
AlterReplicaLogDirs, so there are no future replicas: every entry is a current replica with
`offset_lag` 0 and `is_future_key` false. A log dir that cannot be read answers KAFKA_STORAGE_ERROR
with no partitions, as Kafka answers for an offline dir; a single offline log (Gregor takes logs
offline per partition, not per dir) is left out. Kafka requires DESCRIBE on the cluster; without it
the answer is CLUSTER_AUTHORIZATION_FAILED at the top level (v3+) and no dirs (every version).
"""

from __future__ import annotations

import asyncio
import os
from collections import defaultdict
from typing import Any

from gregor.protocol.errors import ErrorCode
from gregor.protocol.schema import Struct
from gregor.server.dispatcher import RequestContext
from gregor.storage.log_manager import LogManager


def refuse_describe_log_dirs(req: Struct) -> dict[str, Any]:
    """Without DESCRIBE on the cluster: the error at the top (dropped by v1-v2) and no dirs."""
    return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "results": []}


def _wanted(req: Struct) -> dict[str, set[int]] | None:
    """The partitions asked about by topic, or None for all of them."""
    if req.topics is None:
        return None
    wanted: dict[str, set[int]] = defaultdict(set)
    for t in req.topics:
        wanted[t.topic].update(t.partitions)
    return wanted


def _volume_bytes(log_dir: str) -> tuple[int, int]:
    """(total, usable) bytes of the volume holding `log_dir` (v4, KIP-827)."""
    st = os.statvfs(log_dir)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def handle_describe_log_dirs(ctx: RequestContext, req: Struct) -> asyncio.Future[dict[str, Any]]:
    """Answered off the event loop: logs not opened yet are measured on disk, and each dir is checked
    (access, statvfs), which a slow or failing disk could stall."""
    return asyncio.ensure_future(asyncio.get_running_loop().run_in_executor(
        None, describe_log_dirs, ctx.broker.log_manager, _wanted(req)))


def describe_log_dirs(log_manager: LogManager, wanted: dict[str, set[int]] | None) -> dict[str, Any]:
    """The response body: every log dir of `log_manager`, with the partitions of `wanted` (None: all)."""
    results = []
    for log_dir, sizes in log_manager.partition_sizes().items():
        try:
            if log_dir in log_manager.offline_dirs:
                raise OSError(f"log dir {log_dir} is offline: {log_manager.offline_dirs[log_dir]}")
            if not os.access(log_dir, os.R_OK | os.W_OK | os.X_OK):
                raise OSError(f"log dir {log_dir} is not accessible")
            total_bytes, usable_bytes = _volume_bytes(log_dir)
        except OSError:
            results.append({"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": log_dir, "topics": [],
                            "total_bytes": -1, "usable_bytes": -1})
            continue
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for (topic, partition), size in sorted(sizes.items()):
            if wanted is not None and partition not in wanted.get(topic, ()):
                continue
            by_topic[topic].append({"partition_index": partition, "partition_size": size, "offset_lag": 0,
                                    "is_future_key": False})
        results.append({"error_code": ErrorCode.NONE, "log_dir": log_dir,
                        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                        "total_bytes": total_bytes, "usable_bytes": usable_bytes})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": results}
