"""The KIP-848 consumer group protocol: ConsumerGroupHeartbeat (68), ConsumerGroupDescribe (69).

Kafka 4.0 accepts 0-1 of both. ConsumerGroupHeartbeat v1 adds the subscription regex
and makes the consumer generate its own member id (KIP-1082); ConsumerGroupDescribe v1
adds the member type (KIP-1099: -1 unknown, 0 classic, 1 consumer). Topics are named
by id in assignments, so these need topic ids to be served.

Most heartbeat fields are "null if unchanged since the last heartbeat", which is why so
many are nullable with a null default.
"""

from __future__ import annotations

from gregor.protocol.schema import BOOL, INT8, INT16, INT32, STRING, UUID, Array, Field, api, f, struct

UNSET_AUTHORIZED_OPERATIONS = -2147483648

CONSUMER_GROUP_HEARTBEAT = api(
    68,
    "ConsumerGroupHeartbeat",
    versions="0-1",
    flexible="0+",
    request=[
        f("group_id", STRING),
        f("member_id", STRING),
        f("member_epoch", INT32),
        f("instance_id", STRING, nullable="0+", has_default=True),
        f("rack_id", STRING, nullable="0+", has_default=True),
        f("rebalance_timeout_ms", INT32, default=-1),
        f("subscribed_topic_names", Array(STRING), nullable="0+", has_default=True),
        f("subscribed_topic_regex", STRING, "1+", nullable="1+", has_default=True),
        f("server_assignor", STRING, nullable="0+", has_default=True),
        f("topic_partitions", [
            f("topic_id", UUID),
            f("partitions", Array(INT32)),
        ], nullable="0+", has_default=True),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("error_message", STRING, nullable="0+", has_default=True),
        f("member_id", STRING, nullable="0+", has_default=True),
        f("member_epoch", INT32),
        f("heartbeat_interval_ms", INT32),
        f("assignment", struct(
            f("topic_partitions", [
                f("topic_id", UUID),
                f("partitions", Array(INT32)),
            ]),
        ), nullable="0+", has_default=True),
    ],
)


def _assignment() -> list[Field]:
    """A member's (current or target) assignment; a fresh field list per use."""
    return [
        f("topic_partitions", [
            f("topic_id", UUID),
            f("topic_name", STRING),
            f("partitions", Array(INT32)),
        ]),
    ]


CONSUMER_GROUP_DESCRIBE = api(
    69,
    "ConsumerGroupDescribe",
    versions="0-1",
    flexible="0+",
    request=[
        f("group_ids", Array(STRING)),
        f("include_authorized_operations", BOOL),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("groups", [
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+", has_default=True),
            f("group_id", STRING),
            f("group_state", STRING),
            f("group_epoch", INT32),
            f("assignment_epoch", INT32),
            f("assignor_name", STRING),
            f("members", [
                f("member_id", STRING),
                f("instance_id", STRING, nullable="0+", has_default=True),
                f("rack_id", STRING, nullable="0+", has_default=True),
                f("member_epoch", INT32),
                f("client_id", STRING),
                f("client_host", STRING),
                f("subscribed_topic_names", Array(STRING)),
                f("subscribed_topic_regex", STRING, nullable="0+", has_default=True),
                f("assignment", struct(*_assignment())),
                f("target_assignment", struct(*_assignment())),
                f("member_type", INT8, "1+", default=-1),
            ]),
            f("authorized_operations", INT32, default=UNSET_AUTHORIZED_OPERATIONS),
        ]),
    ],
)
