"""Produce (key 0): record sets for partitions, answered with base offsets.

Kafka 4.0 accepts 3-12. Version 12 only exists for KIP-890 transaction v2, where a
transactional Produce implicitly adds its partition to the transaction; we stop at 11
until transaction v2 exists here. Version 13 (4.1) replaces topic names with topic ids.

Records stay opaque (RECORDS is a view into the receive buffer): the broker validates
batch headers itself, see gregor.protocol.records.
"""

from __future__ import annotations

from gregor.protocol.schema import INT16, INT32, INT64, RECORDS, STRING, api, f, struct

# Kafka 4.0 serves Produce from v3, but advertises v0 as its minimum in ApiVersions:
# librdkafka refuses to compress unless the broker advertises Produce v0-2 (KAFKA-18659),
# so ApiVersions advertises this minimum while v0-2 requests are still refused.

PRODUCE = api(
    0,
    "Produce",
    versions="3-11",
    flexible="9+",
    request=[
        f("transactional_id", STRING, "3+", nullable="3+", has_default=True),
        f("acks", INT16),
        f("timeout_ms", INT32),
        f("topic_data", [
            f("name", STRING),
            f("partition_data", [
                f("index", INT32),
                f("records", RECORDS, nullable="0+"),
            ]),
        ]),
    ],
    response=[
        f("responses", [
            f("name", STRING),
            f("partition_responses", [
                f("index", INT32),
                f("error_code", INT16),
                f("base_offset", INT64),
                f("log_append_time_ms", INT64, "2+", default=-1),
                f("log_start_offset", INT64, "5+", default=-1),
                f("record_errors", [
                    f("batch_index", INT32, "8+"),
                    f("batch_index_error_message", STRING, "8+", nullable="8+", has_default=True),
                ], "8+"),
                f("error_message", STRING, "8+", nullable="8+", has_default=True),
                # KIP-951: the new leader, so the client can skip a Metadata round trip.
                f("current_leader", struct(
                    f("leader_id", INT32, "10+", default=-1),
                    f("leader_epoch", INT32, "10+", default=-1),
                ), "10+", tag=0, tagged="10+"),
            ]),
        ]),
        f("throttle_time_ms", INT32, "1+", default=0),
        f("node_endpoints", [
            f("node_id", INT32, "10+"),
            f("host", STRING, "10+"),
            f("port", INT32, "10+"),
            f("rack", STRING, "10+", nullable="10+", has_default=True),
        ], "10+", tag=0, tagged="10+"),
    ],
)
PRODUCE.advertised_min_version = 0
