"""The classic consumer group protocol and group administration.

JoinGroup (11), Heartbeat (12), LeaveGroup (13), SyncGroup (14), DescribeGroups (15),
ListGroups (16), DeleteGroups (42). Member metadata and assignments are opaque bytes
here (the consumer protocol inside them is the client's business).

JoinGroup: Kafka 4.0.0 dropped v0-1 (KIP-896) but 4.0.1 put them back (KAFKA-19444)
because older librdkafka still sends them, so we serve 0-9 as 4.0.1+ does.
"""

from __future__ import annotations

from gregor.protocol.schema import BOOL, BYTES, INT16, INT32, STRING, Array, api, f

UNSET_AUTHORIZED_OPERATIONS = -2147483648

JOIN_GROUP = api(
    11,
    "JoinGroup",
    versions="0-9",
    flexible="6+",
    request=[
        f("group_id", STRING),
        f("session_timeout_ms", INT32),
        # Absent before v1: the coordinator then uses the session timeout instead.
        f("rebalance_timeout_ms", INT32, "1+", default=-1),
        f("member_id", STRING),
        f("group_instance_id", STRING, "5+", nullable="5+", has_default=True),
        f("protocol_type", STRING),
        f("protocols", [
            f("name", STRING),
            f("metadata", BYTES),
        ]),
        f("reason", STRING, "8+", nullable="8+", has_default=True),
    ],
    response=[
        f("throttle_time_ms", INT32, "2+"),
        f("error_code", INT16),
        f("generation_id", INT32, default=-1),
        f("protocol_type", STRING, "7+", nullable="7+", has_default=True),
        f("protocol_name", STRING, nullable="7+"),
        f("leader", STRING),
        f("skip_assignment", BOOL, "9+", default=False),
        f("member_id", STRING),
        f("members", [
            f("member_id", STRING),
            f("group_instance_id", STRING, "5+", nullable="5+", has_default=True),
            f("metadata", BYTES),
        ]),
    ],
)

HEARTBEAT = api(
    12,
    "Heartbeat",
    versions="0-4",
    flexible="4+",
    request=[
        f("group_id", STRING),
        f("generation_id", INT32),
        f("member_id", STRING),
        f("group_instance_id", STRING, "3+", nullable="3+", has_default=True),
    ],
    response=[
        f("throttle_time_ms", INT32, "1+"),
        f("error_code", INT16),
    ],
)

LEAVE_GROUP = api(
    13,
    "LeaveGroup",
    versions="0-5",
    flexible="4+",
    request=[
        f("group_id", STRING),
        f("member_id", STRING, "0-2"),
        f("members", [
            f("member_id", STRING, "3+"),
            f("group_instance_id", STRING, "3+", nullable="3+", has_default=True),
            f("reason", STRING, "5+", nullable="5+", has_default=True),
        ], "3+"),
    ],
    response=[
        f("throttle_time_ms", INT32, "1+"),
        f("error_code", INT16),
        f("members", [
            f("member_id", STRING, "3+"),
            f("group_instance_id", STRING, "3+", nullable="3+"),
            f("error_code", INT16, "3+"),
        ], "3+"),
    ],
)

SYNC_GROUP = api(
    14,
    "SyncGroup",
    versions="0-5",
    flexible="4+",
    request=[
        f("group_id", STRING),
        f("generation_id", INT32),
        f("member_id", STRING),
        f("group_instance_id", STRING, "3+", nullable="3+", has_default=True),
        f("protocol_type", STRING, "5+", nullable="5+", has_default=True),
        f("protocol_name", STRING, "5+", nullable="5+", has_default=True),
        f("assignments", [
            f("member_id", STRING),
            f("assignment", BYTES),
        ]),
    ],
    response=[
        f("throttle_time_ms", INT32, "1+"),
        f("error_code", INT16),
        f("protocol_type", STRING, "5+", nullable="5+", has_default=True),
        f("protocol_name", STRING, "5+", nullable="5+", has_default=True),
        f("assignment", BYTES),
    ],
)

DESCRIBE_GROUPS = api(
    15,
    "DescribeGroups",
    versions="0-6",
    flexible="5+",
    request=[
        f("groups", Array(STRING)),
        f("include_authorized_operations", BOOL, "3+"),
    ],
    response=[
        f("throttle_time_ms", INT32, "1+"),
        f("groups", [
            f("error_code", INT16),
            # v6 (KIP-1043) also answers GROUP_ID_NOT_FOUND for unknown groups, with a message.
            f("error_message", STRING, "6+", nullable="6+", has_default=True),
            f("group_id", STRING),
            f("group_state", STRING),
            f("protocol_type", STRING),
            f("protocol_data", STRING),
            f("members", [
                f("member_id", STRING),
                f("group_instance_id", STRING, "4+", nullable="4+", has_default=True),
                f("client_id", STRING),
                f("client_host", STRING),
                f("member_metadata", BYTES),
                f("member_assignment", BYTES),
            ]),
            f("authorized_operations", INT32, "3+", default=UNSET_AUTHORIZED_OPERATIONS),
        ]),
    ],
)

LIST_GROUPS = api(
    16,
    "ListGroups",
    versions="0-5",
    flexible="3+",
    request=[
        f("states_filter", Array(STRING), "4+"),
        f("types_filter", Array(STRING), "5+"),
    ],
    response=[
        f("throttle_time_ms", INT32, "1+"),
        f("error_code", INT16),
        f("groups", [
            f("group_id", STRING),
            f("protocol_type", STRING),
            f("group_state", STRING, "4+"),
            f("group_type", STRING, "5+"),
        ]),
    ],
)

DELETE_GROUPS = api(
    42,
    "DeleteGroups",
    versions="0-2",
    flexible="2+",
    request=[
        f("groups_names", Array(STRING)),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("results", [
            f("group_id", STRING),
            f("error_code", INT16),
        ]),
    ],
)
