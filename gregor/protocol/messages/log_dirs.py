"""AlterReplicaLogDirs (key 34): move replicas between the log dirs of one broker (JBOD);
DescribeLogDirs (key 35): the log dirs of a broker, and per partition hosted in each its size.

Kafka 4.0 serves v1-v4 (v0 was removed by KIP-896); v2+ is flexible. v3 adds a top-level
error_code (CLUSTER_AUTHORIZATION_FAILED goes there), v4 the total and usable bytes of each dir's
volume (KIP-827; -1 when unknown). A null `topics` asks for every partition.

AlterReplicaLogDirs: Kafka 4.0 serves v1-v2 (v0 removed by KIP-896); v2 is flexible. Each entry of
`dirs` names a destination log dir (an absolute path) and the partitions to move there.
"""

from __future__ import annotations

from gregor.protocol.schema import BOOL, INT16, INT32, INT64, STRING, Array, api, f

DESCRIBE_LOG_DIRS = api(
    35,
    "DescribeLogDirs",
    versions="1-4",
    flexible="2+",
    request=[
        f("topics", [
            f("topic", STRING),
            f("partitions", Array(INT32)),
        ], nullable="0+"),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16, "3+"),
        f("results", [
            f("error_code", INT16),
            f("log_dir", STRING),
            f("topics", [
                f("name", STRING),
                f("partitions", [
                    f("partition_index", INT32),
                    f("partition_size", INT64),
                    f("offset_lag", INT64),
                    f("is_future_key", BOOL),
                ]),
            ]),
            f("total_bytes", INT64, "4+", default=-1),
            f("usable_bytes", INT64, "4+", default=-1),
        ]),
    ],
)


ALTER_REPLICA_LOG_DIRS = api(
    34,
    "AlterReplicaLogDirs",
    versions="1-2",
    flexible="2+",
    request=[
        f("dirs", [
            f("path", STRING),
            f("topics", [
                f("name", STRING),
                f("partitions", Array(INT32)),
            ]),
        ]),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("results", [
            f("topic_name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                f("error_code", INT16),
            ]),
        ]),
    ],
)
