"""DescribeCluster (key 60): brokers, controller and cluster id, for admin clients.

Kafka 4.0 accepts 0-2: v1 adds the endpoint type (KIP-919: 1 brokers, 2 controllers),
v2 lets the caller include fenced brokers (KIP-1073).
"""

from __future__ import annotations

from gregor.protocol.schema import BOOL, INT8, INT16, INT32, STRING, api, f

ENDPOINT_TYPE_BROKER = 1
ENDPOINT_TYPE_CONTROLLER = 2
UNSET_AUTHORIZED_OPERATIONS = -2147483648

DESCRIBE_CLUSTER = api(
    60,
    "DescribeCluster",
    versions="0-2",
    flexible="0+",
    request=[
        f("include_cluster_authorized_operations", BOOL),
        f("endpoint_type", INT8, "1+", default=ENDPOINT_TYPE_BROKER),
        f("include_fenced_brokers", BOOL, "2+"),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("error_message", STRING, nullable="0+", has_default=True),
        f("endpoint_type", INT8, "1+", default=ENDPOINT_TYPE_BROKER),
        f("cluster_id", STRING),
        f("controller_id", INT32, default=-1),
        f("brokers", [
            f("broker_id", INT32),
            f("host", STRING),
            f("port", INT32),
            f("rack", STRING, nullable="0+", has_default=True),
            f("is_fenced", BOOL, "2+"),
        ]),
        f("cluster_authorized_operations", INT32, default=UNSET_AUTHORIZED_OPERATIONS),
    ],
)
