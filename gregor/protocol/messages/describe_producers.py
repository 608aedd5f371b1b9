"""DescribeProducers (key 61, KIP-664): the active producers a partition leader tracks.

Kafka 4.0 serves v0 only, flexible. Each producer is reported with its epoch, the sequence of its
last appended record, the timestamp of its last batch, and its transaction (coordinator epoch,
first offset of its open transaction; -1 when none).
"""

from __future__ import annotations

from gregor.protocol.schema import INT16, INT32, INT64, STRING, Array, api, f

DESCRIBE_PRODUCERS = api(
    61,
    "DescribeProducers",
    versions="0",
    flexible="0+",
    request=[
        f("topics", [
            f("name", STRING),
            f("partition_indexes", Array(INT32)),
        ]),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("topics", [
            f("name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                f("error_code", INT16),
                f("error_message", STRING, nullable="0+", has_default=True),
                f("active_producers", [
                    f("producer_id", INT64),
                    f("producer_epoch", INT32),
                    f("last_sequence", INT32, default=-1),
                    f("last_timestamp", INT64, default=-1),
                    f("coordinator_epoch", INT32),
                    f("current_txn_start_offset", INT64, default=-1),
                ]),
            ]),
        ]),
    ],
)
