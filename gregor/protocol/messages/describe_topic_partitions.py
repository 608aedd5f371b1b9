"""DescribeTopicPartitions (key 75, KIP-966): topics' partitions with leaders, replicas, ISR and the
eligible leader replicas, paged so a client can walk a cluster of many partitions in bounded responses.

v0 only, flexible. An empty `topics` asks for every topic. `response_partition_limit` bounds the
partitions in one response (the broker also bounds it by `max.request.partition.size.limit`); `cursor`
says where a page starts (a topic name and a partition index) and `next_cursor`, null on the last
page, where the next one does. ELR fields are nullable arrays (null: the broker has no ELR).
"""

from gregor.protocol.schema import BOOL, INT16, INT32, STRING, UUID, Array, Field, api, f, struct

UNSET_AUTHORIZED_OPERATIONS = -2147483648


def _cursor() -> list[Field]:
    return [f("topic_name", STRING), f("partition_index", INT32)]


DESCRIBE_TOPIC_PARTITIONS = api(
    75,
    "DescribeTopicPartitions",
    versions="0",
    flexible="0+",
    request=[
        f("topics", [f("name", STRING)]),
        f("response_partition_limit", INT32, default=2000),
        f("cursor", struct(*_cursor()), nullable="0+"),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("topics", [
            f("error_code", INT16),
            f("name", STRING, nullable="0+"),
            f("topic_id", UUID),
            f("is_internal", BOOL),
            f("partitions", [
                f("error_code", INT16),
                f("partition_index", INT32),
                f("leader_id", INT32),
                f("leader_epoch", INT32, default=-1),
                f("replica_nodes", Array(INT32)),
                f("isr_nodes", Array(INT32)),
                f("eligible_leader_replicas", Array(INT32), nullable="0+", has_default=True),
                f("last_known_elr", Array(INT32), nullable="0+", has_default=True),
                f("offline_replicas", Array(INT32)),
            ]),
            f("topic_authorized_operations", INT32, default=UNSET_AUTHORIZED_OPERATIONS),
        ]),
        f("next_cursor", struct(*_cursor()), nullable="0+"),
    ],
)
