"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords.

Layout decisions are TopicAdmin's; these handlers only translate requests and
collect per-topic errors so one bad topic never fails the others. The checks run at once, on the
loop; the request's changes are then written to the metadata store in one write, off the loop,
and the response waits until the metadata cache has applied them.

Creating and deleting logs happens off the event loop (ReplicaManager): once the metadata has
changed, with a positive `timeout_ms` the response is a future answered when the topic's logs are
created or deleted, or with REQUEST_TIMED_OUT for the topics still under way when the timeout ends
(the work goes on, as in Kafka). A request with timeout_ms <= 0 is answered at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from gregor.api import throttling
from gregor.api.context import RequestContext
from gregor.config import TOPIC_CONFIGS, format_value
from gregor.metadata.store import Change, CreateTopic, TopicMetadata
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.schema import Struct
from gregor.security.acl import AclOperation, ResourceType
from gregor.security.quotas import UNLIMITED_MUTATIONS, ControllerMutationQuota
from gregor.storage.errors import StorageError

# controller_mutation_rate (KIP-599): from these versions a topic over the quota is refused with
# THROTTLING_QUOTA_EXCEEDED; older clients have everything done and are throttled after.
STRICT_MUTATION_VERSIONS = {"CreateTopics": 6, "DeleteTopics": 5, "CreatePartitions": 3}
DYNAMIC_TOPIC_CONFIG = 1
DEFAULT_CONFIG = 5
_WAITING: set[asyncio.Task[None]] = set()  # admin responses waiting for log work


def handle_create_topics(ctx: RequestContext, req: Struct) -> dict[str, Any] | asyncio.Future[dict[str, Any]]:
    admin = ctx.services.topic_admin
    results = []
    seen: dict[str, int] = {}
    for t in req.topics:
        seen[t.name] = seen.get(t.name, 0) + 1
    writes: list[tuple[dict[str, Any], TopicMetadata]] = []
    may_create_all = ctx.authorize(AclOperation.CREATE, ResourceType.CLUSTER)
    quota = _mutation_quota(ctx, "CreateTopics", req.validate_only)
    for t in req.topics:
        entry: dict[str, Any] = {"name": t.name, "error_code": ErrorCode.NONE, "error_message": None,
                                 "num_partitions": -1, "replication_factor": -1, "configs": None}
        try:
            if not may_create_all and not ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, t.name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            if seen[t.name] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Create topics request from client contains duplicate topic {t.name}")
            _check_mutations(quota)
            assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments}
            configs = {c.name: c.value for c in t.configs}
            meta = admin.prepare_topic(t.name, t.num_partitions, t.replication_factor, assignment, configs,
                                       reserve=not req.validate_only)
            _describe_created(ctx, entry, meta)
            if not ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, t.name):
                # Kafka: created, but its configs are not shown to a principal who may not describe them
                entry["configs"] = []
                entry["topic_config_error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            if not req.validate_only:
                quota.record(len(meta.partitions))
                writes.append((entry, meta))
        except KafkaError as e:
            _fail(entry, e)
        results.append(entry)
    body = throttling.finish_mutations(ctx, quota, {"throttle_time_ms": 0, "topics": results})
    if req.validate_only:
        return body

    async def write() -> dict[str, Any]:
        errors = await admin.write([CreateTopic(meta) for _, meta in writes])
        for (entry, _), err in zip(writes, errors, strict=True):
            if err is not None:
                _fail(entry, err)
        return await _when_logs_done(ctx, body, results, req.timeout_ms, "created")

    return _later(write())


def _mutation_quota(ctx: RequestContext, api: str, validate_only: bool) -> ControllerMutationQuota:
    """The request's controller_mutation_rate; a validate-only request mutates nothing."""
    if validate_only:
        return UNLIMITED_MUTATIONS
    return throttling.mutation_quota(ctx, ctx.version >= STRICT_MUTATION_VERSIONS[api])


def _check_mutations(quota: ControllerMutationQuota) -> None:
    if quota.exceeded():
        raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, throttling.THROTTLING_QUOTA_EXCEEDED_MESSAGE)


def _describe_created(ctx: RequestContext, entry: dict[str, Any], meta: TopicMetadata) -> None:
    entry["topic_id"] = meta.topic_id
    entry["num_partitions"] = len(meta.partitions)
    entry["replication_factor"] = len(meta.partitions[0].replicas)
    values = ctx.services.topic_configs.effective(meta.configs)
    entry["configs"] = [
        {"name": k, "value": format_value(values[k]), "read_only": False,
         "config_source": DYNAMIC_TOPIC_CONFIG if k in meta.configs else DEFAULT_CONFIG, "is_sensitive": False}
        for k in sorted(TOPIC_CONFIGS)
    ]


def _fail(entry: dict[str, Any], e: KafkaError) -> None:
    entry["error_code"] = e.code
    entry["error_message"] = e.message
    if "num_partitions" in entry:  # CreateTopics: a failed topic reports no layout
        entry.update({"num_partitions": -1, "replication_factor": -1, "configs": None})
        entry.pop("topic_id", None)
        entry.pop("topic_config_error_code", None)


def handle_delete_topics(ctx: RequestContext, req: Struct) -> asyncio.Future[dict[str, Any]]:
    names: list[str | None] = list(req.topic_names) if ctx.version < 6 else [t.name for t in req.topics]
    admin = ctx.services.topic_admin
    results = []
    writes: list[tuple[dict[str, Any], Change]] = []
    quota = _mutation_quota(ctx, "DeleteTopics", False)
    for name in names:
        entry: dict[str, Any] = {"name": name, "error_code": ErrorCode.NONE, "error_message": None}
        try:
            if name is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, "Deleting topics by id is not supported yet")
            if not ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            meta = ctx.services.metadata_cache.topic(name)
            if meta is not None:
                entry["topic_id"] = meta.topic_id
            _check_mutations(quota)
            writes.append((entry, admin.prepare_delete(name)))
            quota.record(len(meta.partitions) if meta is not None else 0)
        except KafkaError as e:
            _fail(entry, e)
        results.append(entry)
    body = throttling.finish_mutations(ctx, quota, {"throttle_time_ms": 0, "responses": results})
    return _later(_write_then_wait(ctx, body, results, writes, req.timeout_ms, "deleted"))


def handle_create_partitions(ctx: RequestContext, req: Struct) -> dict[str, Any] | asyncio.Future[dict[str, Any]]:
    admin = ctx.services.topic_admin
    results = []
    writes: list[tuple[dict[str, Any], Change]] = []
    quota = _mutation_quota(ctx, "CreatePartitions", req.validate_only)
    for t in req.topics:
        entry: dict[str, Any] = {"name": t.name, "error_code": ErrorCode.NONE, "error_message": None}
        try:
            if not ctx.authorize(AclOperation.ALTER, ResourceType.TOPIC, t.name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            _check_mutations(quota)
            assignment = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
            meta = ctx.services.metadata_cache.topic(t.name)
            change = admin.prepare_partitions(t.name, t.count, assignment, reserve=not req.validate_only)
            if not req.validate_only:
                quota.record(t.count - (len(meta.partitions) if meta is not None else 0))
                writes.append((entry, change))
        except KafkaError as e:
            _fail(entry, e)
        results.append(entry)
    body = throttling.finish_mutations(ctx, quota, {"throttle_time_ms": 0, "results": results})
    if req.validate_only:
        return body
    return _later(_write_then_wait(ctx, body, results, writes, req.timeout_ms, "created"))


async def _write_then_wait(ctx: RequestContext, body: dict[str, Any], entries: list[dict[str, Any]],
                           writes: list[tuple[dict[str, Any], Change]], timeout_ms: int, verb: str) -> dict[str, Any]:
    errors = await ctx.services.topic_admin.write([change for _, change in writes])
    for (entry, _), err in zip(writes, errors, strict=True):
        if err is not None:
            _fail(entry, err)
    return await _when_logs_done(ctx, body, entries, timeout_ms, verb)


def _later(coro: Coroutine[Any, Any, dict[str, Any]]) -> asyncio.Future[dict[str, Any]]:
    """A response answered when `coro` is done (the dispatcher keeps the connection's answers in order)."""
    task = asyncio.ensure_future(coro)
    _WAITING.add(task)  # the loop holds tasks weakly
    task.add_done_callback(_WAITING.discard)
    return task


async def _when_logs_done(ctx: RequestContext, body: dict[str, Any], entries: list[dict[str, Any]], timeout_ms: int,
                          verb: str) -> dict[str, Any]:
    """`body` once the log work of its successful topics is done (at most `timeout_ms`; at once when
    timeout_ms <= 0); topics whose logs are still being worked on then get REQUEST_TIMED_OUT."""
    rm = ctx.services.replica_manager
    waits: dict[int, asyncio.Future[None]] = {}
    for i, e in enumerate(entries):
        if e["error_code"] == ErrorCode.NONE and e["name"] is not None:
            fut = rm.log_work_done(e["name"])
            if fut is not None:
                waits[i] = fut
    if not waits or timeout_ms <= 0:
        return body
    await asyncio.wait(list(waits.values()), timeout=timeout_ms / 1000)
    for i, fut in waits.items():
        if not fut.done():
            fut.cancel()  # a shield: the log work itself goes on
            entries[i]["error_code"] = ErrorCode.REQUEST_TIMED_OUT
            entries[i]["error_message"] = (
                f"The topic's partitions are still being {verb} after {timeout_ms} ms; that goes on.")
    return body


def handle_delete_records(ctx: RequestContext, req: Struct) -> dict[str, Any] | asyncio.Future[dict[str, Any]]:
    """Moves each partition's log start (OFFSET_OUT_OF_RANGE beyond the HW; -1 means the HW). The new log
    starts are checkpointed (log-start-offset-checkpoint, off the loop) before the answer, so a crash
    right after cannot bring the deleted records back (Kafka checkpoints them only every
    log.flush.start.offset.checkpoint.interval.ms)."""
    rm = ctx.services.replica_manager
    moved = False
    topics = []
    for t in req.topics:
        parts = []
        allowed = ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, t.name)
        for p in t.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition_index, "low_watermark": -1,
                                     "error_code": ErrorCode.NONE}
            try:
                if not allowed:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
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
                moved = True
            except KafkaError as e:
                entry["error_code"] = e.code
            except StorageError as e:  # e.g. the log closed under a deletion: that partition's error only
                entry["error_code"] = ErrorCode[e.error]
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    body = {"throttle_time_ms": 0, "topics": topics}
    if not moved:
        return body

    async def checkpointed() -> dict[str, Any]:
        await asyncio.get_running_loop().run_in_executor(None, rm.log_manager.checkpoint_log_start_offsets)
        return body

    return asyncio.ensure_future(checkpointed())
