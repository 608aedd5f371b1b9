"""The quorum's messages as the core builds and reads them: one partition, `__cluster_metadata`-0.

Builders return plain dicts the codec encodes (gregor.protocol.messages.raft and raft_fetch);
readers take the codec's decoded Structs and return the one partition the message is about, or None
when it names another (the caller answers UNKNOWN_TOPIC_OR_PARTITION). The versions a node sends are
the newest Kafka 4.0 speaks; it answers any version it accepts in that version.
"""

from __future__ import annotations

from typing import Any

from gregor.protocol.errors import ErrorCode
from gregor.protocol.messages.raft import BEGIN_QUORUM_EPOCH, DESCRIBE_QUORUM, END_QUORUM_EPOCH, FETCH_SNAPSHOT, VOTE
from gregor.protocol.messages.raft_fetch import METADATA_PARTITION, METADATA_TOPIC, METADATA_TOPIC_ID, RAFT_FETCH
from gregor.protocol.schema import Api, Struct
from gregor.raft.config import Endpoint
from gregor.raft.log import OffsetAndEpoch

VOTE_KEY, BEGIN_QUORUM_EPOCH_KEY, END_QUORUM_EPOCH_KEY = VOTE.key, BEGIN_QUORUM_EPOCH.key, END_QUORUM_EPOCH.key
DESCRIBE_QUORUM_KEY, FETCH_SNAPSHOT_KEY, FETCH_KEY = DESCRIBE_QUORUM.key, FETCH_SNAPSHOT.key, RAFT_FETCH.key

# What this node sends (Kafka 4.0's newest).
SEND_VERSION = {VOTE_KEY: 2, BEGIN_QUORUM_EPOCH_KEY: 1, END_QUORUM_EPOCH_KEY: 1, FETCH_KEY: 17,
                FETCH_SNAPSHOT_KEY: 1, DESCRIBE_QUORUM_KEY: 2}

# The APIs a quorum listener serves, by key.
QUORUM_APIS: dict[int, Api] = {a.key: a for a in (VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, DESCRIBE_QUORUM,
                                                   FETCH_SNAPSHOT, RAFT_FETCH)}

NONE = int(ErrorCode.NONE)


def _topic(partition: dict[str, Any], name_key: str = "topic_name") -> list[dict[str, Any]]:
    return [{name_key: METADATA_TOPIC, "partitions": [partition]}]


def node_endpoints(node_id: int, endpoint: Endpoint | None) -> list[dict[str, Any]]:
    return [] if endpoint is None or node_id < 0 else [{"node_id": node_id, "host": endpoint.host,
                                                         "port": endpoint.port}]


def one_partition(body: Struct, topics_key: str = "topics", name_key: str = "topic_name",
                  parts_key: str = "partitions", index_key: str = "partition_index") -> Struct | None:
    """The partition a request or response is about, if it is exactly `__cluster_metadata`-0."""
    topics = getattr(body, topics_key, None) or []
    if len(topics) != 1 or getattr(topics[0], name_key) != METADATA_TOPIC:
        return None
    parts = getattr(topics[0], parts_key) or []
    if len(parts) != 1 or getattr(parts[0], index_key) != METADATA_PARTITION:
        return None
    return parts[0]


def fetch_partition(body: Struct, topics_key: str = "topics", parts_key: str = "partitions",
                    index_key: str = "partition") -> Struct | None:
    topics = getattr(body, topics_key, None) or []
    if len(topics) != 1 or topics[0].topic_id != METADATA_TOPIC_ID:
        return None
    parts = getattr(topics[0], parts_key) or []
    if len(parts) != 1 or getattr(parts[0], index_key) != METADATA_PARTITION:
        return None
    return parts[0]


# --- Vote ---------------------------------------------------------------------------------

def vote_request(cluster_id: str | None, voter_id: int, epoch: int, replica_id: int, last: OffsetAndEpoch,
                 pre_vote: bool) -> dict[str, Any]:
    return {"cluster_id": cluster_id, "voter_id": voter_id, "topics": _topic({
        "partition_index": METADATA_PARTITION, "replica_epoch": epoch, "replica_id": replica_id,
        "last_offset_epoch": last.epoch, "last_offset": last.offset, "pre_vote": pre_vote})}


def vote_response(error: int, leader_id: int, epoch: int, granted: bool, endpoints: list[dict[str, Any]],
                  top_error: int = NONE) -> dict[str, Any]:
    return {"error_code": top_error, "topics": _topic({
        "partition_index": METADATA_PARTITION, "error_code": error, "leader_id": leader_id, "leader_epoch": epoch,
        "vote_granted": granted}), "node_endpoints": endpoints}


# --- BeginQuorumEpoch / EndQuorumEpoch ------------------------------------------------------

def begin_quorum_epoch_request(cluster_id: str | None, voter_id: int, leader_id: int, epoch: int,
                               listener: str, endpoint: Endpoint | None) -> dict[str, Any]:
    eps = [] if endpoint is None else [{"name": listener, "host": endpoint.host, "port": endpoint.port}]
    return {"cluster_id": cluster_id, "voter_id": voter_id, "topics": _topic({
        "partition_index": METADATA_PARTITION, "leader_id": leader_id, "leader_epoch": epoch}),
        "leader_endpoints": eps}


def end_quorum_epoch_request(cluster_id: str | None, leader_id: int, epoch: int, preferred: list[int],
                             listener: str, endpoint: Endpoint | None) -> dict[str, Any]:
    eps = [] if endpoint is None else [{"name": listener, "host": endpoint.host, "port": endpoint.port}]
    return {"cluster_id": cluster_id, "topics": _topic({
        "partition_index": METADATA_PARTITION, "leader_id": leader_id, "leader_epoch": epoch,
        "preferred_successors": preferred, "preferred_candidates": [{"candidate_id": c} for c in preferred]}),
        "leader_endpoints": eps}


def preferred_successors(partition: Struct, version: int) -> list[int]:
    if version == 0:
        return list(partition.preferred_successors or [])
    return [c.candidate_id for c in partition.preferred_candidates or []]


def epoch_response(error: int, leader_id: int, epoch: int, endpoints: list[dict[str, Any]],
                   top_error: int = NONE) -> dict[str, Any]:
    """BeginQuorumEpoch and EndQuorumEpoch answer alike."""
    return {"error_code": top_error, "topics": _topic({
        "partition_index": METADATA_PARTITION, "error_code": error, "leader_id": leader_id,
        "leader_epoch": epoch}), "node_endpoints": endpoints}


# --- Fetch ----------------------------------------------------------------------------------

def fetch_request(cluster_id: str | None, replica_id: int, epoch: int, fetch_offset: int, last_fetched_epoch: int,
                  log_start_offset: int, max_wait_ms: int, max_bytes: int) -> dict[str, Any]:
    return {"cluster_id": cluster_id, "replica_id": replica_id,
            "replica_state": {"replica_id": replica_id, "replica_epoch": -1},
            "max_wait_ms": max_wait_ms, "min_bytes": 0, "max_bytes": max_bytes, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic_id": METADATA_TOPIC_ID, "partitions": [{
                "partition": METADATA_PARTITION, "current_leader_epoch": epoch, "fetch_offset": fetch_offset,
                "last_fetched_epoch": last_fetched_epoch, "log_start_offset": log_start_offset,
                "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def fetch_replica_id(body: Struct, version: int) -> int:
    if version >= 15:
        state = body.replica_state
        return state.replica_id if state is not None else -1
    return body.replica_id


def fetch_response(top_error: int, error: int, leader_id: int, epoch: int, high_watermark: int,
                   log_start_offset: int, records: Any = None, diverging: OffsetAndEpoch | None = None,
                   snapshot: OffsetAndEpoch | None = None, endpoints: list[dict[str, Any]] | None = None,
                   ) -> dict[str, Any]:
    part: dict[str, Any] = {
        "partition_index": METADATA_PARTITION, "error_code": error, "high_watermark": high_watermark,
        "last_stable_offset": high_watermark, "log_start_offset": log_start_offset,
        "current_leader": {"leader_id": leader_id, "leader_epoch": epoch},
        "aborted_transactions": None, "preferred_read_replica": -1, "records": records,
    }
    if diverging is not None:
        part["diverging_epoch"] = {"epoch": diverging.epoch, "end_offset": diverging.offset}
    if snapshot is not None:
        part["snapshot_id"] = {"end_offset": snapshot.offset, "epoch": snapshot.epoch}
    return {"throttle_time_ms": 0, "error_code": top_error, "session_id": 0,
            "responses": [{"topic_id": METADATA_TOPIC_ID, "partitions": [part]}],
            "node_endpoints": [dict(e, rack=None) for e in endpoints or []]}


def fetch_response_partition(body: Struct) -> Struct | None:
    return fetch_partition(body, "responses", "partitions", "partition_index")


# --- FetchSnapshot ----------------------------------------------------------------------------

def fetch_snapshot_request(cluster_id: str | None, replica_id: int, epoch: int, snapshot_id: OffsetAndEpoch,
                           position: int, max_bytes: int) -> dict[str, Any]:
    return {"cluster_id": cluster_id, "replica_id": replica_id, "max_bytes": max_bytes, "topics": [{
        "name": METADATA_TOPIC, "partitions": [{
            "partition": METADATA_PARTITION, "current_leader_epoch": epoch,
            "snapshot_id": {"end_offset": snapshot_id.offset, "epoch": snapshot_id.epoch}, "position": position}]}]}


def fetch_snapshot_partition(body: Struct) -> Struct | None:
    return one_partition(body, "topics", "name", "partitions", "partition")


def fetch_snapshot_response_partition(body: Struct) -> Struct | None:
    return one_partition(body, "topics", "name", "partitions", "index")


def fetch_snapshot_response(top_error: int, error: int, leader_id: int, epoch: int, snapshot_id: OffsetAndEpoch,
                            size: int = -1, position: int = -1, data: bytes = b"",
                            endpoints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": top_error, "topics": [{"name": METADATA_TOPIC, "partitions": [{
        "index": METADATA_PARTITION, "error_code": error,
        "snapshot_id": {"end_offset": snapshot_id.offset, "epoch": snapshot_id.epoch},
        "current_leader": {"leader_id": leader_id, "leader_epoch": epoch},
        "size": size, "position": position, "unaligned_records": data}]}], "node_endpoints": endpoints or []}


# --- DescribeQuorum ---------------------------------------------------------------------------

def describe_quorum_request() -> dict[str, Any]:
    return {"topics": _topic({"partition_index": METADATA_PARTITION})}


def describe_quorum_error(error: int, message: str | None, top_error: int = NONE) -> dict[str, Any]:
    return {"error_code": top_error, "error_message": None, "topics": _topic({
        "partition_index": METADATA_PARTITION, "error_code": error, "error_message": message, "leader_id": -1,
        "leader_epoch": -1, "high_watermark": -1, "current_voters": [], "observers": []}), "nodes": []}
