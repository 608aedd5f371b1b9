"""Committed consumer offsets: OffsetCommit (8), OffsetFetch (9), OffsetDelete (47).

Kafka 4.0 accepts OffsetCommit 2-9 and OffsetFetch 1-9 (KIP-896 removed the older
ones); version 10 of both (4.1) names topics by id. Version 9 of both is the first the
KIP-848 consumer protocol may use: generation_id_or_member_epoch carries the member
epoch there, and OffsetFetch v9 adds member_id/member_epoch to validate it.

OffsetFetch v8 batches several groups; before that one group per request, with a null
topics array (v2+) meaning "all partitions with committed offsets".
"""

from __future__ import annotations

from gregor.protocol.schema import BOOL, INT16, INT32, INT64, STRING, Array, api, f

OFFSET_COMMIT = api(
    8,
    "OffsetCommit",
    versions="2-9",
    flexible="8+",
    request=[
        f("group_id", STRING),
        f("generation_id_or_member_epoch", INT32, "1+", default=-1),
        f("member_id", STRING, "1+"),
        f("group_instance_id", STRING, "7+", nullable="7+", has_default=True),
        f("retention_time_ms", INT64, "2-4", default=-1),
        f("topics", [
            f("name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                f("committed_offset", INT64),
                f("committed_leader_epoch", INT32, "6+", default=-1),
                f("committed_metadata", STRING, nullable="0+"),
            ]),
        ]),
    ],
    response=[
        f("throttle_time_ms", INT32, "3+"),
        f("topics", [
            f("name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                f("error_code", INT16),
            ]),
        ]),
    ],
)

OFFSET_FETCH = api(
    9,
    "OffsetFetch",
    versions="1-9",
    flexible="6+",
    request=[
        f("group_id", STRING, "0-7"),
        f("topics", [
            f("name", STRING, "0-7"),
            f("partition_indexes", Array(INT32), "0-7"),
        ], "0-7", nullable="2-7"),
        f("groups", [
            f("group_id", STRING, "8+"),
            f("member_id", STRING, "9+", nullable="9+", has_default=True),
            f("member_epoch", INT32, "9+", default=-1),
            f("topics", [
                f("name", STRING, "8+"),
                f("partition_indexes", Array(INT32), "8+"),
            ], "8+", nullable="8+"),
        ], "8+"),
        f("require_stable", BOOL, "7+", default=False),
    ],
    response=[
        f("throttle_time_ms", INT32, "3+"),
        f("topics", [
            f("name", STRING, "0-7"),
            f("partitions", [
                f("partition_index", INT32, "0-7"),
                f("committed_offset", INT64, "0-7"),
                f("committed_leader_epoch", INT32, "5-7", default=-1),
                f("metadata", STRING, "0-7", nullable="0-7"),
                f("error_code", INT16, "0-7"),
            ], "0-7"),
        ], "0-7"),
        f("error_code", INT16, "2-7", default=0),
        f("groups", [
            f("group_id", STRING, "8+"),
            f("topics", [
                f("name", STRING, "8+"),
                f("partitions", [
                    f("partition_index", INT32, "8+"),
                    f("committed_offset", INT64, "8+"),
                    f("committed_leader_epoch", INT32, "8+", default=-1),
                    f("metadata", STRING, "8+", nullable="8+"),
                    f("error_code", INT16, "8+"),
                ], "8+"),
            ], "8+"),
            f("error_code", INT16, "8+", default=0),
        ], "8+"),
    ],
)

OFFSET_DELETE = api(
    47,
    "OffsetDelete",
    versions="0",
    flexible="none",
    request=[
        f("group_id", STRING),
        f("topics", [
            f("name", STRING),
            f("partitions", [
                f("partition_index", INT32),
            ]),
        ]),
    ],
    response=[
        f("error_code", INT16),
        f("throttle_time_ms", INT32),
        f("topics", [
            f("name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                f("error_code", INT16),
            ]),
        ]),
    ],
)
