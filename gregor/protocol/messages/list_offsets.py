"""ListOffsets (key 2): offsets by timestamp, and the earliest/latest offsets.

Kafka 4.0 accepts 1-10 (v0, with its offsets array, is gone). The special timestamps a
partition request may carry: -1 latest, -2 earliest, -3 max timestamp (v7+), -4
earliest local (v8+), -5 latest tiered (v9+). v10 adds a timeout for remote lookups.
"""

from __future__ import annotations

from gregor.protocol.schema import INT8, INT16, INT32, INT64, STRING, api, f

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

LIST_OFFSETS = api(
    2,
    "ListOffsets",
    versions="1-10",
    flexible="6+",
    request=[
        f("replica_id", INT32),
        f("isolation_level", INT8, "2+"),
        f("topics", [
            f("name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                f("current_leader_epoch", INT32, "4+", default=-1),
                f("timestamp", INT64),
            ]),
        ]),
        f("timeout_ms", INT32, "10+"),
    ],
    response=[
        f("throttle_time_ms", INT32, "2+"),
        f("topics", [
            f("name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                f("error_code", INT16),
                f("timestamp", INT64, "1+", default=-1),
                f("offset", INT64, "1+", default=-1),
                f("leader_epoch", INT32, "4+", default=-1),
            ]),
        ]),
    ],
)
