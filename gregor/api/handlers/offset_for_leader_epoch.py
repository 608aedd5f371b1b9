"""OffsetForLeaderEpoch: the end offset of a leader epoch, from the partition's leader epoch cache.

Answered by the leader (any replica for the debugging replica id -2, v2's default), fenced by
the sender's current leader epoch. An epoch unknown to the cache answers NONE with epoch and end
offset -1, as Kafka does; errors are per partition.
"""

from __future__ import annotations

import logging
from typing import Any

from gregor.api.context import RequestContext
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.messages.offset_for_leader_epoch import DEBUGGING_REPLICA_ID
from gregor.protocol.schema import Struct
from gregor.security.acl import AclOperation, ResourceType
from gregor.storage.errors import StorageError

log = logging.getLogger("gregor.offset_for_leader_epoch")


def handle_offset_for_leader_epoch(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    rm = ctx.services.replica_manager
    fetch_only_from_leader = req.replica_id != DEBUGGING_REPLICA_ID
    topics = []
    # A follower needs CLUSTER_ACTION, a consumer DESCRIBE on each topic (Kafka's KafkaApis).
    follower_denied = req.replica_id >= 0 and not ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
    for t in req.topics:
        parts = []
        denied = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED if follower_denied else
                  ErrorCode.TOPIC_AUTHORIZATION_FAILED if req.replica_id < 0 and
                  not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic) else None)
        if denied is not None:
            topics.append({"topic": t.topic, "partitions": [
                {"partition": p.partition, "error_code": denied, "leader_epoch": -1, "end_offset": -1}
                for p in t.partitions]})
            continue
        for p in t.partitions:
            entry: dict[str, Any] = {"partition": p.partition, "error_code": ErrorCode.NONE,
                                     "leader_epoch": -1, "end_offset": -1}
            try:
                epoch, end = rm.last_offset_for_leader_epoch(t.topic, p.partition, p.current_leader_epoch,
                                                             p.leader_epoch, fetch_only_from_leader)
                entry["leader_epoch"], entry["end_offset"] = epoch, end
            except KafkaError as e:
                entry["error_code"] = e.code
            except (StorageError, OSError) as e:
                log.warning("OffsetForLeaderEpoch of %s-%d failed: %s", t.topic, p.partition, e)
                entry["error_code"] = ErrorCode[e.error] if isinstance(e, StorageError) else ErrorCode.KAFKA_STORAGE_ERROR
            parts.append(entry)
        topics.append({"topic": t.topic, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
