"""The controller's APIs: ControlledShutdown (7), ElectLeaders (43), AlterPartitionReassignments (45)
and ListPartitionReassignments (46).

ControlledShutdown is inter-broker (a stopping broker asks the controller to move its leaderships);
Kafka removed it with ZooKeeper in 4.0, we serve 1-3 (v0 used a header of its own). The others are
the admin client's, answered by the controller only (NOT_CONTROLLER elsewhere: clients send them to
the controller named by Metadata).
"""

from __future__ import annotations

from gregor.protocol.schema import INT8, INT16, INT32, INT64, STRING, Array, api, f

# ElectLeaders election types
PREFERRED_ELECTION = 0
UNCLEAN_ELECTION = 1

CONTROLLED_SHUTDOWN = api(
    7,
    "ControlledShutdown",
    versions="1-3",
    flexible="3+",
    request=[
        f("broker_id", INT32),
        f("broker_epoch", INT64, "2+", default=-1),
    ],
    response=[
        f("error_code", INT16),
        f("remaining_partitions", [
            f("topic_name", STRING),
            f("partition_index", INT32),
        ]),
    ],
)

ELECT_LEADERS = api(
    43,
    "ElectLeaders",
    versions="0-2",
    flexible="2+",
    request=[
        f("election_type", INT8, "1+", default=PREFERRED_ELECTION),
        # null: every partition
        f("topic_partitions", [
            f("topic", STRING),
            f("partitions", Array(INT32)),
        ], nullable="0+"),
        f("timeout_ms", INT32, default=60000),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16, "1+"),
        f("replica_election_results", [
            f("topic", STRING),
            f("partition_result", [
                f("partition_id", INT32),
                f("error_code", INT16),
                f("error_message", STRING, nullable="0+"),
            ]),
        ]),
    ],
)

ALTER_PARTITION_REASSIGNMENTS = api(
    45,
    "AlterPartitionReassignments",
    versions="0-0",
    flexible="0+",
    request=[
        f("timeout_ms", INT32, default=60000),
        f("topics", [
            f("name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                # null: cancel the partition's reassignment under way
                f("replicas", Array(INT32), nullable="0+", has_default=True),
            ]),
        ]),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("error_message", STRING, nullable="0+"),
        f("responses", [
            f("name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                f("error_code", INT16),
                f("error_message", STRING, nullable="0+"),
            ]),
        ]),
    ],
)

LIST_PARTITION_REASSIGNMENTS = api(
    46,
    "ListPartitionReassignments",
    versions="0-0",
    flexible="0+",
    request=[
        f("timeout_ms", INT32, default=60000),
        # null: every reassignment under way
        f("topics", [
            f("name", STRING),
            f("partition_indexes", Array(INT32)),
        ], nullable="0+", default=None, has_default=True),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("error_message", STRING, nullable="0+"),
        f("topics", [
            f("name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                f("replicas", Array(INT32)),
                f("adding_replicas", Array(INT32)),
                f("removing_replicas", Array(INT32)),
            ]),
        ]),
    ],
)
