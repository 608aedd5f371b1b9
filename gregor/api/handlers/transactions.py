"""Transactions: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit (client to coordinator),
WriteTxnMarkers (coordinator to partition leader), DescribeTransactions and ListTransactions (admin). InitProducerId with a transactional id is in
producers.py; FindCoordinator with key type 1 in groups.py.

The transaction coordinator of an id is the leader of its __transaction_state partition; the topic is
created on first use, and a request arriving meanwhile waits for the creation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from gregor.api.context import RequestContext, ResponseBody
from gregor.coordinator.group.metadata_manager import OFFSETS_TOPIC
from gregor.coordinator.transaction.coordinator import TransactionCoordinator
from gregor.coordinator.transaction.marker_writer import append_markers
from gregor.coordinator.transaction.state import STATES_BY_NAME
from gregor.coordinator.transaction.state_manager import TRANSACTION_STATE_TOPIC
from gregor.futures import after, gather, then
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.schema import Struct
from gregor.security.acl import AclOperation, ResourceType

TopicPartition = tuple[str, int]
R = TypeVar("R")


def with_coordinator(ctx: RequestContext, call: Callable[[TransactionCoordinator], R | asyncio.Future[R]],
                     answer: Callable[[R], dict[str, Any]], failed: Callable[[ErrorCode], dict[str, Any]]
                     ) -> dict[str, Any] | asyncio.Future[dict[str, Any]]:
    """Run `call` on the transaction coordinator and `answer` its result: at once when the coordinator
    answers at once (as the group coordinator does), else in a Future; `failed` answers the KafkaError
    of a coordinator that cannot take the request. The first request that needs __transaction_state
    starts its creation and waits for it."""
    coordinators = ctx.services.coordinators

    def now() -> dict[str, Any] | asyncio.Future[dict[str, Any]]:
        try:
            got = call(coordinators.txn_coordinator_ready())
        except KafkaError as e:
            return failed(e.code)
        return then(got, answer)

    return after(coordinators.txn_topic_creation(), now)


def find_txn_coordinator(ctx: RequestContext, transactional_id: str) -> tuple[int, str, int]:
    """(node id, host, port) of the coordinator of `transactional_id`; raises KafkaError."""
    cache = ctx.services.metadata_cache
    tc = ctx.services.coordinators.txn_coordinator_ready()
    p = tc.state.partition_for(transactional_id)
    state = cache.partition_state(TRANSACTION_STATE_TOPIC, p)
    leader = cache.broker(state.leader) if state is not None else None
    ep = leader.endpoint(ctx.listener.name) if leader is not None else None
    if leader is None or ep is None:
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{TRANSACTION_STATE_TOPIC}-{p} has no live leader "
                                                              f"on listener {ctx.listener.name}")
    return leader.broker_id, ep[0], ep[1]


def _topic_results(result: dict[TopicPartition, ErrorCode]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (t, p), code in result.items():
        by_topic.setdefault(t, []).append({"partition_index": p, "partition_error_code": code})
    return [{"name": t, "results_by_partition": ps} for t, ps in by_topic.items()]


def _txn_id_denied(ctx: RequestContext, transactional_id: str) -> bool:
    return not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


def handle_add_partitions_to_txn(ctx: RequestContext, req: Struct) -> ResponseBody:
    if ctx.version <= 3:
        tps = [(t.name, p) for t in req.v3_and_below_topics for p in t.partitions]

        def v3_answer(result: dict[TopicPartition, ErrorCode]) -> dict[str, Any]:
            result = {tp: _for_version(c, ctx.version) for tp, c in result.items()}
            return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _topic_results(result)}
        if _txn_id_denied(ctx, req.v3_and_below_transactional_id):
            return v3_answer(dict.fromkeys(tps, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        denied = {t for t, _ in tps if not ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, t)}
        if denied:  # Kafka: the unauthorized topics fail, the others are not attempted
            return v3_answer({tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp[0] in denied
                              else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in tps})
        return with_coordinator(
            ctx, lambda tc: tc.add_partitions(req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                                              req.v3_and_below_producer_epoch, tps),
            v3_answer, lambda code: v3_answer(dict.fromkeys(tps, code)))

    if not ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):  # v4+: brokers only (KIP-890)
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "results_by_transaction": []}

    def all_of(tc: TransactionCoordinator) -> list[Any] | asyncio.Future[list[Any]]:
        """One result per transaction, in order (a Future if any waits for a write)."""
        results: list[Any] = []
        for txn in req.transactions:
            tps = [(t.name, p) for t in txn.topics for p in t.partitions]
            if txn.verify_only:
                results.append(tc.verify_partitions(txn.transactional_id, txn.producer_id, txn.producer_epoch, tps))
            else:
                results.append(tc.add_partitions(txn.transactional_id, txn.producer_id, txn.producer_epoch, tps))
        return gather(results)

    def answer(results: list[dict[TopicPartition, ErrorCode]]) -> dict[str, Any]:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results_by_transaction": [
            {"transactional_id": txn.transactional_id, "topic_results": _topic_results(r)}
            for txn, r in zip(req.transactions, results, strict=True)]}
    return with_coordinator(ctx, all_of, answer,
                            lambda code: {"throttle_time_ms": 0, "error_code": code, "results_by_transaction": []})


def _for_version(code: ErrorCode, version: int) -> ErrorCode:
    """PRODUCER_FENCED is newer than AddOffsetsToTxn/EndTxn v0-1 (KIP-588): they get INVALID_PRODUCER_EPOCH."""
    return ErrorCode.INVALID_PRODUCER_EPOCH if code == ErrorCode.PRODUCER_FENCED and version < 2 else code


def handle_add_offsets_to_txn(ctx: RequestContext, req: Struct) -> ResponseBody:
    if _txn_id_denied(ctx, req.transactional_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}

    def call(tc: TransactionCoordinator) -> Any:
        tp = (OFFSETS_TOPIC, ctx.services.coordinators.group_coordinator_ready().partition_for(req.group_id))
        return tc.add_partitions(req.transactional_id, req.producer_id, req.producer_epoch, [tp])

    def code_of(result: dict[TopicPartition, ErrorCode]) -> dict[str, Any]:
        return {"throttle_time_ms": 0, "error_code": _for_version(next(iter(result.values())), ctx.version)}
    return with_coordinator(ctx, call, code_of,
                            lambda code: {"throttle_time_ms": 0, "error_code": _for_version(code, ctx.version)})


def handle_end_txn(ctx: RequestContext, req: Struct) -> ResponseBody:
    def answer(code: ErrorCode) -> dict[str, Any]:
        return {"throttle_time_ms": 0, "error_code": _for_version(code, ctx.version)}
    if _txn_id_denied(ctx, req.transactional_id):
        return answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    return with_coordinator(
        ctx, lambda tc: tc.end_txn(req.transactional_id, req.producer_id, req.producer_epoch, req.committed),
        answer, answer)


def handle_write_txn_markers(ctx: RequestContext, req: Struct) -> ResponseBody:
    """A coordinator's markers for partitions this broker leads (errors per partition, retried by it)."""
    timeout_ms = ctx.services.settings.request_timeout_ms
    if not ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
        return {"markers": [{"producer_id": m.producer_id, "topics": [
            {"name": t.name, "partitions": [{"partition_index": p, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
                                            for p in t.partition_indexes]} for t in m.topics]} for m in req.markers]}
    results = [append_markers(ctx.services.replica_manager, ctx.services.coordinators.group_coordinator, m.producer_id, m.producer_epoch, m.transaction_result, m.coordinator_epoch,
                              [(t.name, p) for t in m.topics for p in t.partition_indexes], timeout_ms)
               for m in req.markers]

    def answer(done: list[dict[TopicPartition, ErrorCode]]) -> dict[str, Any]:
        out = []
        for m, result in zip(req.markers, done, strict=True):
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for (t, p), code in result.items():
                by_topic.setdefault(t, []).append({"partition_index": p, "error_code": code})
            out.append({"producer_id": m.producer_id,
                        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
        return {"markers": out}

    return then(gather(results), answer)


def handle_txn_offset_commit(ctx: RequestContext, req: Struct) -> ResponseBody:
    topics_meta = ctx.services.metadata_cache.topics()
    unknown: set[TopicPartition] = set()
    offsets = []
    whole: ErrorCode | None = None
    if _txn_id_denied(ctx, req.transactional_id):
        whole = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        whole = ErrorCode.GROUP_AUTHORIZATION_FAILED
    denied = {t.name for t in req.topics if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, t.name)}
    for t in req.topics:
        meta = topics_meta.get(t.name)
        for p in t.partitions:
            if t.name in denied:
                continue
            if meta is None or p.partition_index not in meta.partitions:
                unknown.add((t.name, p.partition_index))
            else:
                offsets.append((t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
                                p.committed_metadata))
    try:
        if whole is not None:
            raise KafkaError(whole)
        gc = ctx.services.coordinators.group_coordinator_ready()
        if not gc.is_local(req.group_id):
            raise KafkaError(ErrorCode.NOT_COORDINATOR, f"not the coordinator of group {req.group_id!r}")
        result = gc.txn_commit_offsets(req.group_id, req.producer_id, req.producer_epoch,
                                       req.get("generation_id", -1), req.get("member_id", ""),
                                       req.get("group_instance_id"), offsets)
    except KafkaError as e:
        result = e.code

    def answer(res: ErrorCode | dict[TopicPartition, ErrorCode]) -> dict[str, Any]:
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                code = (whole if whole is not None else ErrorCode.TOPIC_AUTHORIZATION_FAILED if t.name in denied
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                        else res if isinstance(res, ErrorCode) else res.get(tp, ErrorCode.NONE))
                if code == ErrorCode.INVALID_PRODUCER_EPOCH and ctx.version >= 2:
                    code = ErrorCode.PRODUCER_FENCED
                parts.append({"partition_index": p.partition_index, "error_code": code})
            topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    return then(result, answer)


def handle_describe_transactions(ctx: RequestContext, req: Struct) -> ResponseBody:
    """The state of transactional ids this broker coordinates (admin clients ask each id's coordinator)."""
    def describe(tc: TransactionCoordinator | None, load_error: ErrorCode | None = None) -> dict[str, Any]:
        out = []
        for tid in req.transactional_ids:
            entry: dict[str, Any] = {"error_code": ErrorCode.NONE, "transactional_id": tid, "transaction_state": "",
                                     "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
                                     "producer_id": -1, "producer_epoch": -1, "topics": []}
            try:
                if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
                    raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                if tc is None:
                    raise KafkaError(load_error or ErrorCode.COORDINATOR_NOT_AVAILABLE)
                m = tc.describe(tid)
                by_topic: dict[str, list[int]] = {}
                for t, p in sorted(m.partitions):
                    by_topic.setdefault(t, []).append(p)
                entry.update({"transaction_state": m.state_name, "transaction_timeout_ms": m.timeout_ms,
                              "transaction_start_time_ms": m.start_ms, "producer_id": m.producer_id,
                              "producer_epoch": m.producer_epoch,
                              # As Kafka: only the topics the principal may describe.
                              "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()
                                         if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t)]})
            except KafkaError as e:
                entry["error_code"] = e.code
            out.append(entry)
        return {"throttle_time_ms": 0, "transaction_states": out}
    return with_coordinator(ctx, lambda tc: tc, describe, lambda code: describe(None, code))


def handle_list_transactions(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    """The transactional ids this broker coordinates, filtered by state, producer id and (v1) duration."""
    unknown = [s for s in req.state_filters if s not in STATES_BY_NAME]
    answer: dict[str, Any] = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
                              "unknown_state_filters": unknown, "transaction_states": []}
    coordinators = ctx.services.coordinators
    if coordinators.loading:
        answer["error_code"] = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return answer
    tc = coordinators.txn_coordinator
    answer["transaction_states"] = [
        {"transactional_id": m.transactional_id, "producer_id": m.producer_id, "transaction_state": m.state_name}
        for m in tc.list(list(req.state_filters), list(req.producer_id_filters), req.get("duration_filter", -1))
        if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, m.transactional_id)]
    return answer
