"""Produce: validate each partition's record batches, append them as leader, answer per partition.

Errors are per partition and never abort the rest of the request. acks=0 gets no response
at all. The appends go through the ReplicaManager, which checks min.insync.replicas for acks=-1
and has its response wait in the purgatory until the high watermark passes the batches
(DelayedProduce; on a lone broker the HW moves at the append, so it answers at once). A
flush.messages fsync an append makes due runs on an executor thread; the answer waits for it.

Validation is gregor.protocol.validator's (Kafka's LogValidator rules). Small record sets are
validated on the event loop. A compressed record set of gregor.validation.offload.bytes or more
(uncompressed: 8x that), or a compressed batch that expands past 8x that, is decompressed and
walked on a pool of gregor.validation.threads threads, and the response is a Future. Appends of one connection stay
in request order: while a connection has a Produce validating off the loop, its later Produce
requests (however small) wait for its appends before appending (not for its acks=all wait);
validation itself runs concurrently. What the path keeps between requests (the pool, the
chains, the rules) is the broker's ProduceState (gregor.api.produce_state).

Schema-checked topics (gregor.schema_registry.checks): the walk reports each batch's distinct schema ids;
when the cache knows them all the batch appends at once, else the response is a Future while the
registry is asked (the connection's later Produce requests wait behind it, as behind an off-loop
validation). A refused batch is answered with INVALID_RECORD and a record error per refused record,
found on the validation pool; deep checks decode the records there too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gregor.admin.topic_admin import (
    INTERNAL_TOPICS,  # only the broker appends to these (coordinators: ReplicaManager)
)
from gregor.api.context import RequestContext
from gregor.api.produce_state import INLINE_EXPANSION_FACTOR, ProduceState
from gregor.futures import then
from gregor.protocol import compression
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.primitives import DecodeError
from gregor.protocol.records import (
    HEADER_SIZE,
    BatchHeader,
    InvalidRecordError,
    iter_headers,
    read_header,
    recompress_batch,
)
from gregor.protocol.schema import Struct
from gregor.protocol.validator import (
    BatchValidationError,
    InlineBudgetExceeded,
    SchemaIds,
    ValidationRules,
    validate_batches,
)
from gregor.replication.partition import AppendResult
from gregor.replication.replica_manager import AppendEntry, ReplicaManager
from gregor.schema_registry.checks import SchemaPolicy, batch_records, refused, unavailable, undecodable
from gregor.security.acl import AclOperation, ResourceType
from gregor.storage.errors import StorageError

log = logging.getLogger("gregor.produce")

_ATTRIBUTES_LOW = 22  # the low byte of the first batch's attributes: its codec bits
Prepared = tuple[memoryview, list[BatchHeader], list[SchemaIds]]


def _error(index: int, code: ErrorCode, message: str | None = None) -> dict[str, Any]:
    return {"index": index, "error_code": code, "base_offset": -1, "log_append_time_ms": -1,
            "log_start_offset": -1, "record_errors": [], "error_message": message}


def _prepare(records: memoryview, rules: ValidationRules, compression_type: str, version: int, now_ms: int,
             inline_budget: int | None) -> Prepared:
    """Validate one partition's record set (and recompress it for compression.type). Runs on the
    event loop or on the validation pool. Raises BatchValidationError, KafkaError or
    InlineBudgetExceeded."""
    if len(records) >= HEADER_SIZE:
        h0 = read_header(records, 0)
        if h0.compression == compression.ZSTD and version < 7:
            raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs Produce v7 or later")
    validated = validate_batches(records, rules, now_ms, inline_decompress_bytes=inline_budget)
    headers = validated.headers
    if len(headers) != 1:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"Produce requests with version {version} must contain exactly one record batch per partition")
    if compression_type != "producer":
        return (*_recompress(records, headers, compression_type, rules.max_decompressed_bytes), validated.schema_ids)
    return records, headers, validated.schema_ids


def _recompress(records: memoryview, headers: list[BatchHeader], compression_type: str,
                limit: int) -> tuple[memoryview, list[BatchHeader]]:
    """A topic with compression.type other than `producer` stores batches in its own codec."""
    codec = compression.NONE if compression_type == "uncompressed" else compression.BY_NAME[compression_type]
    if all(h.compression == codec for h in headers):
        return records, headers
    out = bytearray()
    try:
        for h in headers:
            out += records[h.position : h.position + h.size] if h.compression == codec else \
                recompress_batch(records, h, codec, limit)
    except DecodeError as e:
        raise BatchValidationError(f"cannot recompress the batch for compression.type={compression_type}: {e}") from None
    buf = memoryview(out)
    return buf, list(iter_headers(buf))


def _answer(idx: int, exc: BaseException) -> dict[str, Any]:
    """The partition's response for a failed validation or append."""
    if isinstance(exc, BatchValidationError):
        entry = _error(idx, ErrorCode[exc.error], str(exc))
        entry["record_errors"] = [{"batch_index": i, "batch_index_error_message": m} for i, m in exc.record_errors]
        return entry
    if isinstance(exc, InvalidRecordError):
        return _error(idx, ErrorCode[exc.error], str(exc))
    if isinstance(exc, KafkaError):
        return _error(idx, exc.code, exc.message)
    if isinstance(exc, StorageError):
        return _error(idx, ErrorCode[exc.error], str(exc))
    if isinstance(exc, OSError):
        return _error(idx, ErrorCode.KAFKA_STORAGE_ERROR, str(exc))
    log.error("produce failed unexpectedly", exc_info=exc)
    return _error(idx, ErrorCode.UNKNOWN_SERVER_ERROR, f"unexpected error: {exc!r}")


# One partition of the request: a finished answer, a validated record set, or work for the pool.
@dataclass(slots=True)
class _Item:
    topic: str
    index: int
    answer: dict[str, Any] | None = None
    records: memoryview | None = None
    headers: list[BatchHeader] | None = None
    offload: Callable[[], Prepared] | None = None
    policy: SchemaPolicy | None = None  # a schema-checked topic's checks
    rules: ValidationRules | None = None
    pending: asyncio.Future[None] | None = None  # its schema checks, when they need the registry or the pool


def _check_schemas(state: ProduceState, it: _Item, ids: list[SchemaIds]) -> asyncio.Future[None] | None:
    """The schema checks of a validated item: None when its ids are known to be fine; a Future (resolving
    to None, or raising the refusal) when the registry must be asked, records must be named or decoded.
    Raises at once when the broker has no registry to ask."""
    assert it.policy is not None and it.rules is not None
    checks = state.schema_checks
    if checks is None:
        raise BatchValidationError(
            f"topic {it.topic} requires schema validation (confluent.key/value.schema.validation) but this broker has "
            f"no schema registry to check ids against: set confluent.schema.registry.url or schema.registry.listeners",
            "INVALID_RECORD")
    verdicts = [checks.check(it.policy, batch_ids) for batch_ids in ids]
    if not it.policy.deep and all(v is None for v in verdicts):
        return None
    return asyncio.ensure_future(_check_schemas_later(state, it, ids, verdicts))


async def _check_schemas_later(state: ProduceState, it: _Item, ids: list[SchemaIds], verdicts: list[Any]) -> None:
    checks, policy, rules = state.schema_checks, it.policy, it.rules
    assert checks is not None and policy is not None and rules is not None and it.records is not None
    assert it.headers is not None
    loop = asyncio.get_running_loop()
    limit = rules.max_decompressed_bytes
    for h, verdict in zip(it.headers, verdicts, strict=True):
        bad = await verdict if asyncio.isfuture(verdict) or asyncio.iscoroutine(verdict) else verdict
        if bad:
            raise refused(bad, await loop.run_in_executor(state.pool, batch_records, it.records, h, limit))
    if policy.deep:
        for h, batch_ids in zip(it.headers, ids, strict=True):
            try:
                decoders = await checks.decoders(policy, batch_ids)
            except TimeoutError:
                raise unavailable("building the decoders of the batch's schemas took too long") from None
            if decoders:
                failed = await loop.run_in_executor(
                    state.pool, lambda h=h, d=decoders: undecodable(d, policy, batch_records(it.records, h, limit)))
                if failed is not None:
                    raise failed


def _append_all(rm: ReplicaManager, plan: list[tuple[str, list[_Item]]], acks: int, timeout_ms: int
                ) -> list[tuple[str, list[dict[str, Any]]]] | asyncio.Future[Any]:
    """Append every validated item through the ReplicaManager (in request order) and build the answers;
    a Future of them when the appends have to wait (acks=all for the high watermark, flush.messages for
    its fsync, which runs off the event loop)."""
    todo = [it for _, items in plan for it in items if it.answer is None]
    entries = [AppendEntry(it.topic, it.index, it.records, it.headers) for it in todo]  # type: ignore[arg-type]
    got = rm.append_records(timeout_ms, acks, entries) if entries else []

    def build(results: list[AppendResult]) -> list[tuple[str, list[dict[str, Any]]]]:
        for it, res in zip(todo, results, strict=True):
            it.answer = {"index": it.index, "error_code": res.error, "base_offset": res.base_offset,
                         "log_append_time_ms": res.log_append_time_ms, "log_start_offset": res.log_start_offset,
                         "record_errors": [], "error_message": res.message}
        return [(name, [it.answer for it in items]) for name, items in plan]  # type: ignore[misc]

    return then(got, build)


def _response(topics: list[tuple[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    return {"responses": [{"name": name, "partition_responses": parts} for name, parts in topics],
            "throttle_time_ms": 0}


def handle_produce(ctx: RequestContext, req: Struct) -> dict[str, Any] | asyncio.Future[Any] | None:
    services = ctx.services
    rm = services.replica_manager
    state = services.produce
    acks = req.acks
    offload_bytes = state.settings.offload_bytes
    now_ms = int(time.time() * 1000)
    plan: list[tuple[str, list[_Item]]] = []
    offloaded = False
    z = services.authorizer
    denied_all: ErrorCode | None = None
    if z is not None and req.transactional_id is not None and \
            not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        denied_all = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    for td in req.topic_data:
        items: list[_Item] = []
        denied = denied_all
        if denied is None and z is not None and not ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, td.name):
            denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED  # whether or not it exists (Kafka hides existence)
        for pd in td.partition_data:
            item = _Item(td.name, pd.index)
            items.append(item)
            if denied is not None:
                item.answer = _error(pd.index, denied)
                continue
            if acks not in (0, 1, -1):
                item.answer = _error(pd.index, ErrorCode.INVALID_REQUIRED_ACKS)
                continue
            if td.name in INTERNAL_TOPICS:
                item.answer = _error(pd.index, ErrorCode.INVALID_TOPIC_EXCEPTION,
                                     f"Cannot append to internal topic {td.name}")
                continue
            try:
                part = rm.get_leader_partition(td.name, pd.index)
                records = pd.records
                if records is None:
                    raise KafkaError(ErrorCode.INVALID_RECORD, "null record set")
                rules = state.rules(part)
                item.policy = state.schema_policy(part)
                item.rules = rules
                args = (records, rules, part.compression_type, ctx.version, now_ms)
                if _heavy(records, offload_bytes):
                    item.offload = _offload_call(args)
                    offloaded = True
                    continue
                try:
                    item.records, item.headers, ids = _prepare(*args, state.inline_budget)
                except InlineBudgetExceeded:
                    item.offload = _offload_call(args)
                    offloaded = True
                    continue
                if item.policy is not None:
                    item.pending = _check_schemas(state, item, ids)
                    offloaded = offloaded or item.pending is not None
            except Exception as e:  # every failure is this partition's answer, never the connection's
                item.answer = _answer(pd.index, e)
        plan.append((td.name, items))
    conn = ctx.connection
    previous = state.chains.get(conn)
    faults = state.faults  # None unless a test asked for faults
    if not offloaded and (previous is None or previous.done()):
        done = _append_all(rm, plan, acks, req.timeout_ms)
        if faults is not None and faults.drop_response():
            conn.close("test fault: connection dropped after the Produce was appended, before its response")
            return None
        if acks == 0:
            return None
        if isinstance(done, asyncio.Future):  # acks=all waiting for the high watermark (DelayedProduce)
            return then(done, _response)
        return _response(done)
    loop = asyncio.get_running_loop()
    jobs = {id(it): loop.run_in_executor(state.pool, it.offload) for _, items in plan for it in items if it.offload}
    appended: asyncio.Future[None] = loop.create_future()  # the connection's next Produce appends after it
    task = loop.create_task(_finish(rm, state, plan, jobs, previous, acks, req.timeout_ms, appended))
    state.chains[conn] = appended
    state.tasks.add(task)
    task.add_done_callback(state.tasks.discard)
    if faults is not None and faults.drop_response():
        task.add_done_callback(lambda _t: conn.close("test fault: connection dropped after the Produce was "
                                                     "appended, before its response"))
        return None
    return None if acks == 0 else task


def _heavy(records: memoryview, offload_bytes: int) -> bool:
    """Whether validating `records` may take long: compressed and at least offload.bytes, or
    uncompressed and at least INLINE_EXPANSION_FACTOR times that (walking uncompressed records
    costs ~11 ns each in C: a 1 MiB batch of 100-byte records takes ~0.1 ms, fine on the loop)."""
    n = len(records)
    if n < offload_bytes:
        return False
    if n >= HEADER_SIZE and records[_ATTRIBUTES_LOW] & compression.COMPRESSION_MASK:
        return True
    return n >= offload_bytes * INLINE_EXPANSION_FACTOR


def _offload_call(args: tuple[Any, ...]) -> Callable[[], Prepared]:
    return lambda: _prepare(*args, None)


async def _finish(rm: ReplicaManager, state: ProduceState, plan: list[tuple[str, list[_Item]]],
                  jobs: dict[int, asyncio.Future[Any]], previous: asyncio.Future[Any] | None, acks: int, timeout_ms: int,
                  appended: asyncio.Future[None]) -> dict[str, Any]:
    """Wait for this request's off-loop validations and schema checks and for the connection's previous
    Produce, then append in request order (and, for acks=all, wait for the high watermark). Never raises:
    failures are partition answers."""
    try:
        if previous is not None and not previous.done():
            try:
                await asyncio.shield(previous)
            except BaseException:  # the previous request's own failure is its own answer
                pass
        for _, items in plan:
            for it in items:
                if it.answer is None and it.offload is not None:
                    try:
                        it.records, it.headers, ids = await jobs[id(it)]
                        if it.policy is not None:
                            it.pending = _check_schemas(state, it, ids)
                    except Exception as e:
                        it.answer = _answer(it.index, e)
                if it.answer is None and it.pending is not None:
                    try:
                        await it.pending
                    except Exception as e:
                        it.answer = _answer(it.index, e)
        done = _append_all(rm, plan, acks, timeout_ms)
    finally:
        if not appended.done():
            appended.set_result(None)
    if isinstance(done, asyncio.Future):
        done = await done
    return _response(done)
