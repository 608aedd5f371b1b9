"""FindCoordinator (key 10): which broker coordinates a group, transaction or share group.

Kafka 4.0 accepts 0-6. v4 (KIP-699) batches keys: `key` goes away in favour of
`coordinator_keys`, and the single-node answer becomes the `coordinators` array.
"""

from __future__ import annotations

from gregor.protocol.schema import INT8, INT16, INT32, STRING, Array, api, f

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2  # v6+, KIP-932

FIND_COORDINATOR = api(
    10,
    "FindCoordinator",
    versions="0-6",
    flexible="3+",
    request=[
        f("key", STRING, "0-3"),
        f("key_type", INT8, "1+", default=0),
        f("coordinator_keys", Array(STRING), "4+"),
    ],
    response=[
        f("throttle_time_ms", INT32, "1+"),
        f("error_code", INT16, "0-3"),
        f("error_message", STRING, "1-3", nullable="1-3"),
        f("node_id", INT32, "0-3"),
        f("host", STRING, "0-3"),
        f("port", INT32, "0-3"),
        f("coordinators", [
            f("key", STRING, "4+"),
            f("node_id", INT32, "4+"),
            f("host", STRING, "4+"),
            f("port", INT32, "4+"),
            f("error_code", INT16, "4+"),
            f("error_message", STRING, "4+", nullable="4+"),
        ], "4+"),
    ],
)
