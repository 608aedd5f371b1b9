"""Topic administration: CreateTopics (19), DeleteTopics (20), DeleteRecords (21), CreatePartitions (37).

Kafka 4.0 accepts CreateTopics 2-7 and DeleteTopics 1-6. Both top versions mention
topic ids, but neither needs them: CreateTopics v7 only reports the new topic's id, and
DeleteTopics v6 still accepts names (a request naming a topic by id alone can be
answered UNKNOWN_TOPIC_ID), so we serve the full ranges.
"""

from __future__ import annotations

from gregor.protocol.schema import BOOL, INT8, INT16, INT32, INT64, STRING, UUID, Array, api, f

CREATE_TOPICS = api(
    19,
    "CreateTopics",
    versions="2-7",
    flexible="5+",
    request=[
        f("topics", [
            f("name", STRING),
            # -1 (v4+, KIP-464) means "use the broker default" when assignments are empty.
            f("num_partitions", INT32),
            f("replication_factor", INT16),
            f("assignments", [
                f("partition_index", INT32),
                f("broker_ids", Array(INT32)),
            ]),
            f("configs", [
                f("name", STRING),
                f("value", STRING, nullable="0+"),
            ]),
        ]),
        f("timeout_ms", INT32, default=60000),
        f("validate_only", BOOL, "1+", default=False),
    ],
    response=[
        f("throttle_time_ms", INT32, "2+"),
        f("topics", [
            f("name", STRING),
            f("topic_id", UUID, "7+"),
            f("error_code", INT16),
            f("error_message", STRING, "1+", nullable="0+"),
            f("topic_config_error_code", INT16, "5+", tag=0, tagged="5+"),
            f("num_partitions", INT32, "5+", default=-1),
            f("replication_factor", INT16, "5+", default=-1),
            f("configs", [
                f("name", STRING, "5+"),
                f("value", STRING, "5+", nullable="5+"),
                f("read_only", BOOL, "5+"),
                f("config_source", INT8, "5+", default=-1),
                f("is_sensitive", BOOL, "5+"),
            ], "5+", nullable="5+"),
        ]),
    ],
)

DELETE_TOPICS = api(
    20,
    "DeleteTopics",
    versions="1-6",
    flexible="4+",
    request=[
        f("topics", [
            f("name", STRING, "6+", nullable="6+", has_default=True),
            f("topic_id", UUID, "6+"),
        ], "6+"),
        f("topic_names", Array(STRING), "0-5"),
        f("timeout_ms", INT32),
    ],
    response=[
        f("throttle_time_ms", INT32, "1+"),
        f("responses", [
            f("name", STRING, nullable="6+"),
            f("topic_id", UUID, "6+"),
            f("error_code", INT16),
            f("error_message", STRING, "5+", nullable="5+", has_default=True),
        ]),
    ],
)

DELETE_RECORDS = api(
    21,
    "DeleteRecords",
    versions="0-2",
    flexible="2+",
    request=[
        f("topics", [
            f("name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                f("offset", INT64),  # delete before this offset; -1 means the high watermark
            ]),
        ]),
        f("timeout_ms", INT32),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("topics", [
            f("name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                f("low_watermark", INT64),
                f("error_code", INT16),
            ]),
        ]),
    ],
)

CREATE_PARTITIONS = api(
    37,
    "CreatePartitions",
    versions="0-3",
    flexible="2+",
    request=[
        f("topics", [
            f("name", STRING),
            f("count", INT32),
            f("assignments", [
                f("broker_ids", Array(INT32)),
            ], nullable="0+"),
        ]),
        f("timeout_ms", INT32),
        f("validate_only", BOOL),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("results", [
            f("name", STRING),
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+", has_default=True),
        ]),
    ],
)
