"""DescribeTopicPartitions (KIP-966): the partitions of topics, paged.

Kafka's rules (DescribeTopicPartitionsRequestHandler and the metadata cache's describeTopicResponse):
an empty topic list asks for every topic the principal may DESCRIBE (the others are left out); named
topics the principal may not DESCRIBE answer TOPIC_AUTHORIZATION_FAILED, unknown ones
UNKNOWN_TOPIC_OR_PARTITION. Topics are answered in name order from the cursor's topic (its partitions
from the cursor's index), at most min(response_partition_limit, max.request.partition.size.limit)
partitions a response; `next_cursor` says where the next page starts: a partition cut off in the middle
of a topic, or partition 0 of the next topic when the limit was reached at a topic's end. Gregor has no
eligible leader replicas (KIP-966's ELR needs KRaft), so both ELR lists are empty.
"""

from __future__ import annotations

import uuid
from typing import Any

from gregor.api.context import RequestContext
from gregor.api.handlers.metadata import mark_local_partitions, topic_entry
from gregor.protocol.errors import ErrorCode
from gregor.protocol.schema import Struct
from gregor.security.acl import AclOperation, ResourceType

_NO_ID = uuid.UUID(int=0)


def _error_topic(name: str, code: int) -> dict[str, Any]:
    return {"error_code": code, "name": name, "topic_id": _NO_ID, "is_internal": False, "partitions": []}


def handle_describe_topic_partitions(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    services = ctx.services
    cache = services.metadata_cache
    cursor = req.cursor
    fetch_all = not req.topics
    if cursor is not None and (cursor.partition_index < 0 or (
            not fetch_all and cursor.topic_name not in {t.name for t in req.topics})):
        # Kafka's InvalidRequestException: every named topic answers INVALID_REQUEST.
        return {"throttle_time_ms": 0, "next_cursor": None,
                "topics": [_error_topic(t.name, ErrorCode.INVALID_REQUEST) for t in req.topics]}
    all_topics = cache.topics()
    names = sorted(all_topics) if fetch_all else sorted({t.name for t in req.topics})
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    allowed = ctx.authorized_topics(AclOperation.DESCRIBE, names)
    limit = max(1, min(req.response_partition_limit, services.settings.max_request_partition_size_limit))
    remaining = limit
    out: list[dict[str, Any]] = []
    next_cursor: dict[str, Any] | None = None
    for name in names:
        if name not in allowed:
            continue
        t = all_topics.get(name)
        if remaining == 0:
            # The previous topics are complete: the next page starts at this topic (known or not).
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        if t is None:
            if not fetch_all:
                out.append(_error_topic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        entry = topic_entry(t, frozenset(b.broker_id for b in cache.brokers()))
        parts = [p for p in entry["partitions"] if p["partition_index"] >= start]
        page, rest = parts[:remaining], parts[remaining:]
        for p in page:
            p["eligible_leader_replicas"] = []
            p["last_known_elr"] = []
        entry["partitions"] = page
        entry["topic_authorized_operations"] = ctx.authorized_operations(ResourceType.TOPIC, name)
        out.append(entry)
        remaining -= len(page)
        if rest:
            next_cursor = {"topic_name": name, "partition_index": rest[0]["partition_index"]}
            break
    mark_local_partitions(services, out)
    if not fetch_all:  # named but not describable: whether or not it exists (Kafka hides existence)
        out.extend(_error_topic(n, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for n in names if n not in allowed)
    return {"throttle_time_ms": 0, "topics": out, "next_cursor": next_cursor}
