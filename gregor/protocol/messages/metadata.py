"""Metadata (key 3): brokers, controller, topics and their partition leaders."""

from gregor.protocol.schema import BOOL, INT16, INT32, STRING, UUID, Array, api, f

UNSET_AUTHORIZED_OPERATIONS = -2147483648

METADATA = api(
    3,
    "Metadata",
    versions="0-12",
    flexible="9+",
    request=[
        f("topics", [
            f("topic_id", UUID, "10+"),
            f("name", STRING, nullable="10+"),
        ], nullable="1+"),
        f("allow_auto_topic_creation", BOOL, "4+", default=True),
        f("include_cluster_authorized_operations", BOOL, "8-10"),
        f("include_topic_authorized_operations", BOOL, "8+"),
    ],
    response=[
        f("throttle_time_ms", INT32, "3+"),
        f("brokers", [
            f("node_id", INT32),
            f("host", STRING),
            f("port", INT32),
            f("rack", STRING, "1+", nullable="1+", has_default=True),
        ]),
        f("cluster_id", STRING, "2+", nullable="2+", has_default=True),
        f("controller_id", INT32, "1+", default=-1),
        f("topics", [
            f("error_code", INT16),
            f("name", STRING, nullable="12+"),
            f("topic_id", UUID, "10+"),
            f("is_internal", BOOL, "1+"),
            f("partitions", [
                f("error_code", INT16),
                f("partition_index", INT32),
                f("leader_id", INT32),
                f("leader_epoch", INT32, "7+", default=-1),
                f("replica_nodes", Array(INT32)),
                f("isr_nodes", Array(INT32)),
                f("offline_replicas", Array(INT32), "5+"),
            ]),
            f("topic_authorized_operations", INT32, "8+", default=UNSET_AUTHORIZED_OPERATIONS),
        ]),
        f("cluster_authorized_operations", INT32, "8-10", default=UNSET_AUTHORIZED_OPERATIONS),
    ],
)
