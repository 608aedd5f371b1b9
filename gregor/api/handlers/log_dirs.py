"""DescribeLogDirs: per log dir of this broker, the partitions it holds and their sizes;
AlterReplicaLogDirs: move partitions' logs between this broker's log dirs (JBOD).

A partition's size is that of its segment files (LogManager.partition_sizes). A current replica has
`offset_lag` 0 and `is_future_key` false; a future replica (a move under way, storage/log_mover.py) is
listed under its destination dir with `is_future_key` true, its size, and its lag behind the current
log's end. An offline log dir (failed at start or at runtime) or one that cannot be read answers
KAFKA_STORAGE_ERROR with no partitions, as Kafka does. Kafka requires DESCRIBE on the cluster; without
it the answer is CLUSTER_AUTHORIZATION_FAILED at the top level (v3+) and no dirs (every version).

AlterReplicaLogDirs needs ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED per partition). Each
partition answers at once; the copy goes on in the background: LOG_DIR_NOT_FOUND for a path that is
not one of log.dirs, REPLICA_NOT_AVAILABLE for a partition with no replica here, KAFKA_STORAGE_ERROR
for an offline dir or log. Asking again for the dir already being moved to is a no-op; for another
dir, the move under way is abandoned for the new one.
"""

from __future__ import annotations

import asyncio
import os
from collections import defaultdict
from typing import Any

from gregor.api.context import LogDirs, RequestContext
from gregor.protocol.errors import ErrorCode
from gregor.protocol.schema import Struct
from gregor.storage.errors import StorageError


def _alter_results(req: Struct, code: Any) -> dict[str, list[dict[str, Any]]]:
    results: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for d in req.dirs:
        for t in d.topics:
            results[t.name].extend({"partition_index": p, "error_code": code(d.path, t.name, p)} for p in t.partitions)
    return results


def _alter_body(results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {"throttle_time_ms": 0,
            "results": [{"topic_name": t, "partitions": ps} for t, ps in results.items()]}


def refuse_alter_replica_log_dirs(req: Struct) -> dict[str, Any]:
    """Without ALTER on the cluster: every partition CLUSTER_AUTHORIZATION_FAILED, as Kafka."""
    return _alter_body(_alter_results(req, lambda *_: ErrorCode.CLUSTER_AUTHORIZATION_FAILED))


def handle_alter_replica_log_dirs(ctx: RequestContext, req: Struct) -> asyncio.Future[dict[str, Any]]:
    """Off the event loop: starting a move creates the future replica's directory and fsyncs its parent."""
    log_dirs = ctx.services.log_dirs

    def start(path: str, topic: str, p: int) -> int:
        try:
            log_dirs.alter_log_dir(topic, p, path)
        except StorageError as e:
            return ErrorCode[e.error]
        return ErrorCode.NONE

    return asyncio.ensure_future(asyncio.get_running_loop().run_in_executor(
        None, lambda: _alter_body(_alter_results(req, start))))


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
        None, describe_log_dirs, ctx.services.log_dirs, _wanted(req)))


def describe_log_dirs(log_manager: LogDirs, wanted: dict[str, set[int]] | None) -> dict[str, Any]:
    """The response body: every log dir of `log_manager`, with the partitions of `wanted` (None: all)."""
    results = []
    futures = log_manager.future_replicas()
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
        for (topic, partition), (size, lag) in sorted(futures.get(log_dir, {}).items()):
            if wanted is not None and partition not in wanted.get(topic, ()):
                continue
            by_topic[topic].append({"partition_index": partition, "partition_size": size, "offset_lag": lag,
                                    "is_future_key": True})
        results.append({"error_code": ErrorCode.NONE, "log_dir": log_dir,
                        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                        "total_bytes": total_bytes, "usable_bytes": usable_bytes})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": results}
