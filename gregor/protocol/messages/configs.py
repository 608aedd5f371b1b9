"""Configuration APIs: DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44).

Kafka 4.0 accepts DescribeConfigs 1-4 (v0, with is_default instead of config_source,
is gone), AlterConfigs 0-2 and IncrementalAlterConfigs 0-1.
"""

from __future__ import annotations

from gregor.protocol.schema import BOOL, INT8, INT16, INT32, STRING, Array, Field, api, f

# Resource types (ConfigResource.Type).
RESOURCE_UNKNOWN = 0
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16
RESOURCE_GROUP = 32

# IncrementalAlterConfigs operations.
OP_SET = 0
OP_DELETE = 1
OP_APPEND = 2
OP_SUBTRACT = 3

DESCRIBE_CONFIGS = api(
    32,
    "DescribeConfigs",
    versions="1-4",
    flexible="4+",
    request=[
        f("resources", [
            f("resource_type", INT8),
            f("resource_name", STRING),
            f("configuration_keys", Array(STRING), nullable="0+"),  # null: all of them
        ]),
        f("include_synonyms", BOOL, "1+", default=False),
        f("include_documentation", BOOL, "3+", default=False),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("results", [
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+"),
            f("resource_type", INT8),
            f("resource_name", STRING),
            f("configs", [
                f("name", STRING),
                f("value", STRING, nullable="0+"),
                f("read_only", BOOL),
                f("config_source", INT8, "1+", default=-1),
                f("is_default", BOOL, "0"),
                f("is_sensitive", BOOL),
                f("synonyms", [
                    f("name", STRING, "1+"),
                    f("value", STRING, "1+", nullable="0+"),
                    f("source", INT8, "1+"),
                ], "1+"),
                f("config_type", INT8, "3+", default=0),
                f("documentation", STRING, "3+", nullable="0+"),
            ]),
        ]),
    ],
)


def _alter_response() -> list[Field]:
    """AlterConfigs and IncrementalAlterConfigs answer with the same per-resource results."""
    return [
        f("throttle_time_ms", INT32),
        f("responses", [
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+"),
            f("resource_type", INT8),
            f("resource_name", STRING),
        ]),
    ]


ALTER_CONFIGS = api(
    33,
    "AlterConfigs",
    versions="0-2",
    flexible="2+",
    request=[
        f("resources", [
            f("resource_type", INT8),
            f("resource_name", STRING),
            f("configs", [
                f("name", STRING),
                f("value", STRING, nullable="0+"),
            ]),
        ]),
        f("validate_only", BOOL),
    ],
    response=_alter_response(),
)

INCREMENTAL_ALTER_CONFIGS = api(
    44,
    "IncrementalAlterConfigs",
    versions="0-1",
    flexible="1+",
    request=[
        f("resources", [
            f("resource_type", INT8),
            f("resource_name", STRING),
            f("configs", [
                f("name", STRING),
                f("config_operation", INT8),
                f("value", STRING, nullable="0+"),
            ]),
        ]),
        f("validate_only", BOOL),
    ],
    response=_alter_response(),
)
