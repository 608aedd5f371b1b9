"""OffsetForLeaderEpoch (key 23): where did a leader epoch end? (KIP-101, KIP-279, KIP-320).

A follower asks the leader for the end offset of its latest epoch and truncates to it after a
failover; a consumer asks after a leader change to detect truncation (KIP-320). Kafka 4.0 accepts
2-4 (KIP-896 removed 0-1): v2 adds current_leader_epoch (fencing) and throttle_time_ms, v3 the
replica id (-1 consumer, -2 debugging tools, else the follower's broker id), v4 is flexible.
"""

from __future__ import annotations

from gregor.protocol.schema import INT16, INT32, INT64, STRING, api, f

CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2

OFFSET_FOR_LEADER_EPOCH = api(
    23,
    "OffsetForLeaderEpoch",
    versions="2-4",
    flexible="4+",
    request=[
        f("replica_id", INT32, "3+", default=DEBUGGING_REPLICA_ID),
        f("topics", [
            f("topic", STRING),
            f("partitions", [
                f("partition", INT32),
                f("current_leader_epoch", INT32, "2+", default=-1),
                f("leader_epoch", INT32),
            ]),
        ]),
    ],
    response=[
        f("throttle_time_ms", INT32, "2+"),
        f("topics", [
            f("topic", STRING),
            f("partitions", [
                f("error_code", INT16),
                f("partition", INT32),
                f("leader_epoch", INT32, "1+", default=-1),
                f("end_offset", INT64, default=-1),
            ]),
        ]),
    ],
)
