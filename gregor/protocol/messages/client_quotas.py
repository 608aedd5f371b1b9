"""Client quota APIs (KIP-546): DescribeClientQuotas (48) and AlterClientQuotas (49).

Kafka 4.0 accepts v0-1 of both; v1 is the flexible encoding, nothing else changed. An entity is
a list of (entity_type, entity_name) with entity types "user", "client-id" and "ip"; a null
entity_name is the type's default entity. Quota values are doubles on the wire.
"""

from __future__ import annotations

from gregor.protocol.schema import BOOL, FLOAT64, INT8, INT16, INT32, STRING, api, f

# DescribeClientQuotas component match types.
MATCH_EXACT = 0  # the entity named `match`
MATCH_DEFAULT = 1  # the type's default entity
MATCH_SPECIFIED = 2  # any entity of the type, the default included

DESCRIBE_CLIENT_QUOTAS = api(
    48,
    "DescribeClientQuotas",
    versions="0-1",
    flexible="1+",
    request=[
        f("components", [
            f("entity_type", STRING),
            f("match_type", INT8),
            f("match", STRING, nullable="0+"),
        ]),
        f("strict", BOOL),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("error_message", STRING, nullable="0+"),
        f("entries", [
            f("entity", [
                f("entity_type", STRING),
                f("entity_name", STRING, nullable="0+"),
            ]),
            f("values", [
                f("key", STRING),
                f("value", FLOAT64),
            ]),
        ], nullable="0+"),
    ],
)

ALTER_CLIENT_QUOTAS = api(
    49,
    "AlterClientQuotas",
    versions="0-1",
    flexible="1+",
    request=[
        f("entries", [
            f("entity", [
                f("entity_type", STRING),
                f("entity_name", STRING, nullable="0+"),
            ]),
            f("ops", [
                f("key", STRING),
                f("value", FLOAT64),
                f("remove", BOOL),
            ]),
        ]),
        f("validate_only", BOOL),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("entries", [
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+"),
            f("entity", [
                f("entity_type", STRING),
                f("entity_name", STRING, nullable="0+"),
            ]),
        ]),
    ],
)
