"""Admin and data requests over a raw socket (tests.wire), for the internal-topic, partition-limit and
bulk-admin tests: they need exact error codes and messages, and requests timed one by one."""

from __future__ import annotations

import uuid
from typing import Any

from gregor.protocol.records import Record, build_batch
from gregor.protocol.schema import Struct
from tests.wire import WireClient

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, METADATA, PRODUCE, FETCH = 19, 20, 37, 3, 0, 1


def create_topic(c: WireClient, name: str, partitions: int, timeout_ms: int = 60_000) -> Struct:
    resp = c.request(CREATE_TOPICS, 5, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                    "configs": []}],
        "timeout_ms": timeout_ms, "validate_only": False})
    return resp.topics[0]


def delete_topic(c: WireClient, name: str, timeout_ms: int = 60_000) -> Struct:
    return c.request(DELETE_TOPICS, 5, {"topic_names": [name], "timeout_ms": timeout_ms}).responses[0]


def create_partitions(c: WireClient, name: str, count: int, timeout_ms: int = 60_000) -> Struct:
    resp = c.request(CREATE_PARTITIONS, 2, {"topics": [{"name": name, "count": count, "assignments": None}],
                                            "timeout_ms": timeout_ms, "validate_only": False})
    return resp.results[0]


def metadata(c: WireClient, *topics: str, auto_create: bool = False) -> Struct:
    return c.request(METADATA, 12, {
        "topics": [{"topic_id": uuid.UUID(int=0), "name": t} for t in topics],
        "allow_auto_topic_creation": auto_create, "include_topic_authorized_operations": False})


def produce(c: WireClient, topic: str, partition: int, values: list[bytes]) -> Struct:
    batch = build_batch([Record(i, 1_700_000_000_000 + i, None, v) for i, v in enumerate(values)])
    resp = c.request(PRODUCE, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    return resp.responses[0].partition_responses[0]


def fetch(c: WireClient, topic: str, partition: int, offset: int = 0) -> Struct:
    resp = c.request(FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [
            {"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset, "log_start_offset": -1,
             "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    return resp.responses[0].partitions[0]


def error_of(entry: Any) -> tuple[int, str]:
    return entry.error_code, entry.get("error_message") or ""
