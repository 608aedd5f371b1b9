"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords.

Layout decisions are the controller's; these handlers only translate requests and
collect per-topic errors so one bad topic never fails the others.

Creating and deleting logs happens off the event loop (ReplicaManager): the metadata changes at
once, and with a positive `timeout_ms` the response is a future answered when the topic's logs are
created or deleted, or with REQUEST_TIMED_OUT for the topics still under way when the timeout ends
(the work goes on, as in Kafka). A request with timeout_ms <= 0 is answered at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gregor.config import TOPIC_CONFIGS, format_value
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.schema import Struct
from gregor.server.dispatcher import RequestContext
from gregor.server.replica_manager import effective_topic_configs
from gregor.storage.errors import StorageError

DYNAMIC_TOPIC_CONFIG = 1
DEFAULT_CONFIG = 5
_WAITING: set[asyncio.Task[None]] = set()  # admin responses waiting for log work


def handle_create_topics(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    broker = ctx.broker
    results = []
    seen: dict[str, int] = {}
    for t in req.topics:
        seen[t.name] = seen.get(t.name, 0) + 1
    for t in req.topics:
        entry: dict[str, Any] = {"name": t.name, "error_code": ErrorCode.NONE, "error_message": None,
                                 "num_partitions": -1, "replication_factor": -1, "configs": None}
        try:
            if seen[t.name] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Create topics request from client contains duplicate topic {t.name}")
            assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments}
            configs = {c.name: c.value for c in t.configs}
            meta = broker.controller.create_topic(
                t.name, t.num_partitions, t.replication_factor, assignment, configs, req.validate_only
            )
            entry["topic_id"] = meta.topic_id
            entry["num_partitions"] = len(meta.partitions)
            entry["replication_factor"] = len(meta.partitions[0].replicas)
            values = effective_topic_configs(broker.config, meta.configs)
            entry["configs"] = [
                {"name": k, "value": format_value(values[k]), "read_only": False,
                 "config_source": DYNAMIC_TOPIC_CONFIG if k in meta.configs else DEFAULT_CONFIG, "is_sensitive": False}
                for k in sorted(TOPIC_CONFIGS)
            ]
        except KafkaError as e:
            entry["error_code"] = e.code
            entry["error_message"] = e.message
        results.append(entry)
    body = {"throttle_time_ms": 0, "topics": results}
    return body if req.validate_only else _when_logs_done(ctx, body, results, req.timeout_ms, "created")


def handle_delete_topics(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    names: list[str | None] = list(req.topic_names) if ctx.version < 6 else [t.name for t in req.topics]
    results = []
    for name in names:
        entry: dict[str, Any] = {"name": name, "error_code": ErrorCode.NONE, "error_message": None}
        try:
            if name is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, "Deleting topics by id is not supported yet")
            meta = ctx.broker.store.topic(name)
            if meta is not None:
                entry["topic_id"] = meta.topic_id
            ctx.broker.controller.delete_topic(name)
        except KafkaError as e:
            entry["error_code"] = e.code
            entry["error_message"] = e.message
        results.append(entry)
    body = {"throttle_time_ms": 0, "responses": results}
    return _when_logs_done(ctx, body, results, req.timeout_ms, "deleted")


def handle_create_partitions(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    results = []
    for t in req.topics:
        entry: dict[str, Any] = {"name": t.name, "error_code": ErrorCode.NONE, "error_message": None}
        try:
            assignment = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
            ctx.broker.controller.create_partitions(t.name, t.count, assignment, req.validate_only)
        except KafkaError as e:
            entry["error_code"] = e.code
            entry["error_message"] = e.message
        results.append(entry)
    body = {"throttle_time_ms": 0, "results": results}
    return body if req.validate_only else _when_logs_done(ctx, body, results, req.timeout_ms, "created")


def _when_logs_done(ctx: RequestContext, body: dict[str, Any], entries: list[dict[str, Any]], timeout_ms: int,
                    verb: str) -> dict[str, Any] | asyncio.Future[dict[str, Any]]:
    """`body` now, or a future of it answered when the log work of its successful topics is done (at most
    `timeout_ms`); topics whose logs are still being worked on then get REQUEST_TIMED_OUT."""
    rm = ctx.broker.replica_manager
    waits: dict[int, asyncio.Future[None]] = {}
    for i, e in enumerate(entries):
        if e["error_code"] == ErrorCode.NONE and e["name"] is not None:
            fut = rm.log_work_done(e["name"])
            if fut is not None:
                waits[i] = fut
    if not waits or timeout_ms <= 0:
        return body
    answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    async def wait() -> None:
        try:
            await asyncio.wait(list(waits.values()), timeout=timeout_ms / 1000)
            for i, fut in waits.items():
                if not fut.done():
                    fut.cancel()  # a shield: the log work itself goes on
                    entries[i]["error_code"] = ErrorCode.REQUEST_TIMED_OUT
                    entries[i]["error_message"] = (
                        f"The topic's partitions are still being {verb} after {timeout_ms} ms; that goes on.")
            if not answer.done():
                answer.set_result(body)
        except BaseException:  # cancelled at shutdown: the connection closes unanswered, as any in flight
            if not answer.done():
                answer.cancel()
            raise

    task = asyncio.ensure_future(wait())
    _WAITING.add(task)  # the loop holds tasks weakly
    task.add_done_callback(_WAITING.discard)
    return answer


def handle_delete_records(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    rm = ctx.broker.replica_manager
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition_index, "low_watermark": -1,
                                     "error_code": ErrorCode.NONE}
            try:
                part = rm.get_leader_partition(t.name, p.partition_index)
                lg = part.log
                target = lg.high_watermark if p.offset == -1 else p.offset
                if target < 0 or target > lg.high_watermark:
                    raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
                if "delete" not in lg.config.cleanup_policy.split(","):
                    raise KafkaError(ErrorCode.POLICY_VIOLATION,
                                     "Records of partitions of a compacted-only topic cannot be deleted")
                lg.delete_records(target)
                entry["low_watermark"] = lg.log_start_offset
            except KafkaError as e:
                entry["error_code"] = e.code
            except StorageError as e:  # e.g. the log closed under a deletion: that partition's error only
                entry["error_code"] = ErrorCode[e.error]
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
