"""Fetch (key 1) as the metadata quorum speaks it: versions 13-17, topics named by topic id.

The quorum's replicas fetch the one partition of `__cluster_metadata`, whose topic id is fixed
(METADATA_TOPIC_ID, Kafka's `AAAAAAAAAAAAAAAAAAAAAQ`), with the KIP-595 fields: the last fetched epoch
(log divergence), and in the response the diverging epoch, the current leader, the snapshot id
(KIP-630: fetch a snapshot, the log no longer holds this offset) and the high watermark.
v15 moves the replica id into the tagged `replica_state` (KIP-903), v16 adds the leaders' endpoints
(KIP-951) and v17 the replica's directory id (KIP-853).

The broker's own Fetch (fetch.py) serves 4-12 to clients, which name topics; it is the same API, and
this definition is the one to extend it with when the broker itself gains topic ids. Kept apart so
that ApiVersions on a broker listener does not advertise topic-id fetches it cannot serve.
"""

from __future__ import annotations

import uuid

from gregor.protocol.schema import INT8, INT16, INT32, INT64, RECORDS, STRING, UUID, Array, api, f, struct

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's Uuid.METADATA_TOPIC_ID, base64 AAAAAAAAAAAAAAAAAAAAAQ

RAFT_FETCH = api(
    1,
    "Fetch",
    versions="13-17",
    flexible="12+",
    request=[
        f("cluster_id", STRING, "12+", nullable="12+", tag=0, tagged="12+", has_default=True),
        f("replica_id", INT32, "0-14", default=-1),
        f("replica_state", struct(
            f("replica_id", INT32, "15+", default=-1),
            f("replica_epoch", INT64, "15+", default=-1),
        ), "15+", tag=1, tagged="15+"),
        f("max_wait_ms", INT32),
        f("min_bytes", INT32),
        f("max_bytes", INT32, "3+", default=0x7FFFFFFF),
        f("isolation_level", INT8, "4+", default=0),
        f("session_id", INT32, "7+", default=0),
        f("session_epoch", INT32, "7+", default=-1),
        f("topics", [
            f("topic_id", UUID, "13+"),
            f("partitions", [
                f("partition", INT32),
                f("current_leader_epoch", INT32, "9+", default=-1),
                f("fetch_offset", INT64),
                f("last_fetched_epoch", INT32, "12+", default=-1),
                f("log_start_offset", INT64, "5+", default=-1),
                f("partition_max_bytes", INT32),
                f("replica_directory_id", UUID, "17+", tag=0, tagged="17+"),
            ]),
        ]),
        f("forgotten_topics_data", [
            f("topic_id", UUID, "13+"),
            f("partitions", Array(INT32), "7+"),
        ], "7+"),
        f("rack_id", STRING, "11+", default=""),
    ],
    response=[
        f("throttle_time_ms", INT32, "1+"),
        f("error_code", INT16, "7+"),
        f("session_id", INT32, "7+", default=0),
        f("responses", [
            f("topic_id", UUID, "13+"),
            f("partitions", [
                f("partition_index", INT32),
                f("error_code", INT16),
                f("high_watermark", INT64),
                f("last_stable_offset", INT64, "4+", default=-1),
                f("log_start_offset", INT64, "5+", default=-1),
                f("diverging_epoch", struct(
                    f("epoch", INT32, "12+", default=-1),
                    f("end_offset", INT64, "12+", default=-1),
                ), "12+", tag=0, tagged="12+"),
                f("current_leader", struct(
                    f("leader_id", INT32, "12+", default=-1),
                    f("leader_epoch", INT32, "12+", default=-1),
                ), "12+", tag=1, tagged="12+"),
                f("snapshot_id", struct(
                    f("end_offset", INT64, default=-1),
                    f("epoch", INT32, default=-1),
                ), "12+", tag=2, tagged="12+"),
                f("aborted_transactions", [
                    f("producer_id", INT64, "4+"),
                    f("first_offset", INT64, "4+"),
                ], "4+", nullable="4+"),
                f("preferred_read_replica", INT32, "11+", default=-1),
                f("records", RECORDS, nullable="0+"),
            ]),
        ]),
        f("node_endpoints", [
            f("node_id", INT32, "16+"),
            f("host", STRING, "16+"),
            f("port", INT32, "16+"),
            f("rack", STRING, "16+", nullable="16+", has_default=True),
        ], "16+", tag=0, tagged="16+"),
    ],
)
