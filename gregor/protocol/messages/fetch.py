"""Fetch (key 1): consumers and follower replicas read record sets.

Kafka 4.0 accepts 4-17. Versions 13 and later name topics by topic id only, which this
broker does not have yet, so we serve 4-12 (librdkafka and kafka-python both settle on
12 when it is the maximum offered).

Fetch sessions (KIP-227, v7+) and the KIP-320/KIP-595 epoch fields are part of the
layout whether or not a handler uses them.
"""

from __future__ import annotations

from gregor.protocol.schema import INT8, INT16, INT32, INT64, RECORDS, STRING, Array, api, f, struct

# The session fields' values (KIP-227), as the protocol defines them (the broker's sessions:
# gregor.api.fetch_session).
INVALID_SESSION_ID = 0  # no session
INITIAL_EPOCH = 0  # a full fetch that asks for a new session
FINAL_EPOCH = -1  # a sessionless full fetch (closing the session named, if any)


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch`: 1, 2, ... wrapping from 2**31-1 back to 1 (0 is only the initial one)."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1


FETCH = api(
    1,
    "Fetch",
    versions="4-12",
    flexible="12+",
    request=[
        f("cluster_id", STRING, "12+", nullable="12+", tag=0, tagged="12+", has_default=True),
        f("replica_id", INT32, "0-14", default=-1),
        f("max_wait_ms", INT32),
        f("min_bytes", INT32),
        f("max_bytes", INT32, "3+", default=0x7FFFFFFF),
        f("isolation_level", INT8, "4+", default=0),
        f("session_id", INT32, "7+", default=0),
        f("session_epoch", INT32, "7+", default=-1),
        f("topics", [
            f("topic", STRING, "0-12"),
            f("partitions", [
                f("partition", INT32),
                f("current_leader_epoch", INT32, "9+", default=-1),
                f("fetch_offset", INT64),
                f("last_fetched_epoch", INT32, "12+", default=-1),
                f("log_start_offset", INT64, "5+", default=-1),
                f("partition_max_bytes", INT32),
            ]),
        ]),
        f("forgotten_topics_data", [
            f("topic", STRING, "7-12"),
            f("partitions", Array(INT32), "7+"),
        ], "7+"),
        f("rack_id", STRING, "11+", default=""),
    ],
    response=[
        f("throttle_time_ms", INT32, "1+"),
        f("error_code", INT16, "7+"),
        f("session_id", INT32, "7+", default=0),
        f("responses", [
            f("topic", STRING, "0-12"),
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
    ],
)
