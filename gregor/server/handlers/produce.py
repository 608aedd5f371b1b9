"""Produce: validate each partition's record batches, append them as leader, answer per partition.

Errors are per partition and never abort the rest of the request. acks=0 gets no response
at all; on a lone broker acks=-1 is acks=1 (the ISR is this broker), checked against
min.insync.replicas all the same.
"""

from __future__ import annotations

import logging
from typing import Any

from gregor.protocol import compression
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import BatchHeader, InvalidRecordError, recompress_batch, validate_record_set
from gregor.protocol.schema import Struct
from gregor.server.dispatcher import RequestContext
from gregor.storage.cleaner import validate_compacted_records
from gregor.storage.errors import RecordValidationError, StorageError

log = logging.getLogger("gregor.produce")


def _error(index: int, code: ErrorCode, message: str | None = None) -> dict[str, Any]:
    return {"index": index, "error_code": code, "base_offset": -1, "log_append_time_ms": -1,
            "log_start_offset": -1, "record_errors": [], "error_message": message}


def _check_batches(headers: list[BatchHeader], version: int) -> None:
    """Kafka's rules for what a Produce v3+ partition may carry."""
    if len(headers) != 1:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"Produce requests with version {version} must contain exactly one record batch per partition")
    h = headers[0]
    if h.compression == compression.ZSTD and version < 7:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs Produce v7 or later")
    if h.producer_id >= 0 or h.is_transactional:
        # InitProducerId is not served yet, so no client can hold a producer id from this broker.
        raise KafkaError(ErrorCode.UNKNOWN_PRODUCER_ID, "idempotent and transactional producers are not supported yet")


def _recompress(records: memoryview, headers: list[BatchHeader], compression_type: str,
                max_batch_bytes: int) -> tuple[memoryview, list[BatchHeader]]:
    """A topic with compression.type other than `producer` stores batches in its own codec."""
    codec = compression.NONE if compression_type == "uncompressed" else compression.BY_NAME[compression_type]
    if all(h.compression == codec for h in headers):
        return records, headers
    out = bytearray()
    for h in headers:
        out += records[h.position : h.position + h.size] if h.compression == codec else recompress_batch(records, h, codec)
    buf = memoryview(out)
    return buf, validate_record_set(buf, max(max_batch_bytes, len(out)))


def handle_produce(ctx: RequestContext, req: Struct) -> dict[str, Any] | None:
    broker = ctx.broker
    rm = broker.replica_manager
    acks = req.acks
    responses = []
    for td in req.topic_data:
        parts = []
        for pd in td.partition_data:
            idx = pd.index
            if acks not in (0, 1, -1):
                parts.append(_error(idx, ErrorCode.INVALID_REQUIRED_ACKS))
                continue
            if req.transactional_id is not None:
                parts.append(_error(idx, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                    "transactions are not supported by this broker yet"))
                continue
            try:
                part = rm.get_leader_partition(td.name, idx)
                if pd.records is None:
                    raise KafkaError(ErrorCode.INVALID_RECORD, "null record set")
                headers = validate_record_set(pd.records, part.log.config.max_message_bytes)
                _check_batches(headers, ctx.version)
                if part.log.config.compact:
                    validate_compacted_records(headers, pd.records)  # every record needs a key
                records = pd.records
                if part.compression_type != "producer":
                    records, headers = _recompress(records, headers, part.compression_type,
                                                   part.log.config.max_message_bytes)
                res = rm.append(td.name, idx, records, headers, acks)
                parts.append({"index": idx, "error_code": ErrorCode.NONE, "base_offset": res.base_offset,
                              "log_append_time_ms": res.log_append_time_ms,
                              "log_start_offset": res.log_start_offset, "record_errors": [], "error_message": None})
            except InvalidRecordError as e:
                parts.append(_error(idx, ErrorCode[e.error], str(e)))
            except KafkaError as e:
                parts.append(_error(idx, e.code, e.message))
            except RecordValidationError as e:
                # KIP-467: name the bad records, so the client fails only those and retries the rest.
                entry = _error(idx, ErrorCode[e.error], str(e))
                entry["record_errors"] = [{"batch_index": i, "batch_index_error_message": str(e)}
                                          for i in e.record_indexes]
                parts.append(entry)
            except StorageError as e:
                parts.append(_error(idx, ErrorCode[e.error], str(e)))
            except OSError as e:
                log.error("append to %s-%d failed: %s", td.name, idx, e)
                parts.append(_error(idx, ErrorCode.KAFKA_STORAGE_ERROR, str(e)))
        responses.append({"name": td.name, "partition_responses": parts})
    if acks == 0:
        return None
    return {"responses": responses, "throttle_time_ms": 0}
