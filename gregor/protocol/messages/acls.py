"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31): the authorizer's ACLs over the wire (KIP-140, KIP-290).

Kafka 4.0 serves v1-3 of each (v0, without pattern types, was removed), flexible from v2. Enums travel as
INT8 codes (gregor.security.acl): resource type, pattern type, operation, permission type. A filter's
null name, principal or host matches any.
"""

from __future__ import annotations

from gregor.protocol.schema import INT8, INT16, INT32, STRING, api, f


def _filter_fields() -> list:  # type: ignore[type-arg]
    return [
        f("resource_type_filter", INT8),
        f("resource_name_filter", STRING, nullable="0+"),
        f("pattern_type_filter", INT8, default=3),
        f("principal_filter", STRING, nullable="0+"),
        f("host_filter", STRING, nullable="0+"),
        f("operation", INT8),
        f("permission_type", INT8),
    ]


DESCRIBE_ACLS = api(
    29,
    "DescribeAcls",
    versions="1-3",
    flexible="2+",
    request=_filter_fields(),
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("error_message", STRING, nullable="0+"),
        f("resources", [
            f("resource_type", INT8),
            f("resource_name", STRING),
            f("pattern_type", INT8, default=3),
            f("acls", [
                f("principal", STRING),
                f("host", STRING),
                f("operation", INT8),
                f("permission_type", INT8),
            ]),
        ]),
    ],
)

CREATE_ACLS = api(
    30,
    "CreateAcls",
    versions="1-3",
    flexible="2+",
    request=[
        f("creations", [
            f("resource_type", INT8),
            f("resource_name", STRING),
            f("resource_pattern_type", INT8, default=3),
            f("principal", STRING),
            f("host", STRING),
            f("operation", INT8),
            f("permission_type", INT8),
        ]),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("results", [
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+"),
        ]),
    ],
)

DELETE_ACLS = api(
    31,
    "DeleteAcls",
    versions="1-3",
    flexible="2+",
    request=[f("filters", _filter_fields())],
    response=[
        f("throttle_time_ms", INT32),
        f("filter_results", [
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+"),
            f("matching_acls", [
                f("error_code", INT16),
                f("error_message", STRING, nullable="0+"),
                f("resource_type", INT8),
                f("resource_name", STRING),
                f("pattern_type", INT8, default=3),
                f("principal", STRING),
                f("host", STRING),
                f("operation", INT8),
                f("permission_type", INT8),
            ]),
        ]),
    ],
)
