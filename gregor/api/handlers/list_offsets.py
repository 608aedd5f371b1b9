"""ListOffsets: earliest, latest, max timestamp, or the first offset at or after a timestamp.

The lookups are the ReplicaManager's (Partition.fetch_offset_for_timestamp). A lookup that reads
records (max timestamp) goes through the record validator's checks in
Log.max_timestamp_offset; anything else a damaged log raises here is that partition's error,
never a closed connection.
"""

from __future__ import annotations

import logging
from typing import Any

from gregor.api.context import RequestContext
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.primitives import DecodeError
from gregor.protocol.schema import Struct
from gregor.replication.partition import FETCH_LOG_END, READ_UNCOMMITTED
from gregor.security.acl import AclOperation, ResourceType
from gregor.storage.errors import StorageError

log = logging.getLogger("gregor.list_offsets")

DEBUGGING_REPLICA_ID = -2  # tools: any replica may answer


def handle_list_offsets(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    rm = ctx.services.replica_manager
    # A consumer sees below the HW (read_committed: the last stable offset); a follower up to the LEO.
    isolation = req.get("isolation_level", READ_UNCOMMITTED) if req.replica_id < 0 else FETCH_LOG_END
    fetch_only_from_leader = req.replica_id != DEBUGGING_REPLICA_ID
    topics = []
    for t in req.topics:
        parts = []
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name):
            topics.append({"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                  "timestamp": -1, "offset": -1, "leader_epoch": -1} for p in t.partitions]})
            continue
        for p in t.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition_index, "error_code": ErrorCode.NONE}
            try:
                ts, offset, epoch = rm.fetch_offset_for_timestamp(
                    t.name, p.partition_index, p.timestamp, isolation, p.get("current_leader_epoch", -1),
                    fetch_only_from_leader)
                entry.update({"timestamp": ts, "offset": offset, "leader_epoch": epoch})
            except KafkaError as e:
                entry.update({"error_code": e.code, "timestamp": -1, "offset": -1, "leader_epoch": -1})
            except (StorageError, DecodeError, OSError) as e:
                log.warning("ListOffsets of %s-%d failed: %s", t.name, p.partition_index, e)
                code = ErrorCode[e.error] if isinstance(e, StorageError) else (
                    ErrorCode.CORRUPT_MESSAGE if isinstance(e, DecodeError) else ErrorCode.KAFKA_STORAGE_ERROR)
                entry.update({"error_code": code, "timestamp": -1, "offset": -1, "leader_epoch": -1})
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
