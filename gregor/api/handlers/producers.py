"""InitProducerId (idempotent producers) and DescribeProducers.

InitProducerId without a transactional id hands out a fresh producer id with epoch 0, as Kafka's
transaction coordinator does for idempotent producers (also when a v3+ producer sends its current
id and epoch: it gets a new id). Ids come from blocks reserved durably in the metadata store
(gregor.coordinator.transaction.producer_ids), so an id is never handed out twice, across restarts
too. With a transactional id the request goes to the transaction coordinator of that id.

DescribeProducers reports, per partition this broker leads, the producer state the log keeps
(gregor.storage.producer_state).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gregor.api.context import RequestContext
from gregor.api.handlers.transactions import with_coordinator
from gregor.coordinator.transaction.producer_ids import ProducerIdManager
from gregor.metadata.store import MetadataError
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.schema import Struct
from gregor.security.acl import AclOperation, ResourceType

log = logging.getLogger("gregor.producers")

def _init_answer(code: ErrorCode, pid: int = -1, epoch: int = -1) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": pid, "producer_epoch": epoch}


def handle_init_producer_id(ctx: RequestContext, req: Struct) -> dict[str, Any] | asyncio.Future[Any]:
    if (req.get("producer_id", -1) == -1) != (req.get("producer_epoch", -1) == -1):
        return _init_answer(ErrorCode.INVALID_REQUEST)  # an id without an epoch or the reverse
    if req.transactional_id is not None and \
            not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return _init_answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    # An idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic (Kafka 2.8+).
    if req.transactional_id is None and not ctx.authorize(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER) \
            and not ctx.authorize_any(AclOperation.WRITE, ResourceType.TOPIC):
        return _init_answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if req.transactional_id is not None:
        def answer(result: tuple[ErrorCode, int, int]) -> dict[str, Any]:
            code, pid, epoch = result
            if code == ErrorCode.PRODUCER_FENCED and ctx.version < 4:
                code = ErrorCode.INVALID_PRODUCER_EPOCH  # PRODUCER_FENCED exists from InitProducerId v4 (KIP-588)
            return _init_answer(code, pid, epoch)
        return with_coordinator(ctx, lambda tc: tc.init_producer_id(
            req.transactional_id, req.transaction_timeout_ms, req.get("producer_id", -1), req.get("producer_epoch", -1)),
            answer, lambda code: _init_answer(code))
    m = ctx.services.producer_ids
    pid = m.try_generate()
    if pid is not None:
        return _init_answer(ErrorCode.NONE, pid, 0)
    return asyncio.ensure_future(_init_later(m))


async def _init_later(m: ProducerIdManager) -> dict[str, Any]:
    try:
        return _init_answer(ErrorCode.NONE, await m.generate(), 0)
    except (OSError, MetadataError) as e:  # the store could not record a new block: the client retries
        log.error("cannot reserve a block of producer ids: %s", e)
        return _init_answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)


def handle_describe_producers(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    rm = ctx.services.replica_manager
    topics = []
    for t in req.topics:
        parts = []
        allowed = ctx.authorize(AclOperation.READ, ResourceType.TOPIC, t.name)
        for index in t.partition_indexes:
            entry: dict[str, Any] = {"partition_index": index, "error_code": ErrorCode.NONE,
                                     "error_message": None, "active_producers": []}
            try:
                if not allowed:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                lg = rm.get_leader_partition(t.name, index).log
                entry["active_producers"] = [
                    {"producer_id": e.producer_id, "producer_epoch": e.producer_epoch, "last_sequence": e.last_seq,
                     "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
                     "current_txn_start_offset": e.current_txn_first_offset}
                    for e in lg.active_producers()
                ]
            except KafkaError as e:
                entry["error_code"], entry["error_message"] = e.code, e.message
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
