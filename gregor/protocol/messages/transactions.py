"""Transactions: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
WriteTxnMarkers (27), TxnOffsetCommit (28).

Kafka 4.0 also accepts EndTxn 5 and TxnOffsetCommit 5, which only exist for KIP-890
transaction v2 (epoch bump per transaction, implicit AddOffsetsToTxn); we stop at 4
until transaction v2 exists here. AddPartitionsToTxn 4-5 are the broker-to-broker
batched form (KIP-890 part 1 verification, not v2) and are defined in full.
WriteTxnMarkers is coordinator-to-leader; 4.0 accepts only v1.
"""

from __future__ import annotations

from gregor.protocol.schema import BOOL, INT16, INT32, INT64, STRING, Array, Field, api, f


def _txn_topics() -> list[Field]:
    """Topics and partitions to add, shared by the client and the broker forms of AddPartitionsToTxn."""
    return [
        f("name", STRING),
        f("partitions", Array(INT32)),
    ]


def _topic_results() -> list[Field]:
    """Per-topic, per-partition errors, in both the per-transaction and the v3-and-below answers."""
    return [
        f("name", STRING),
        f("results_by_partition", [
            f("partition_index", INT32),
            f("partition_error_code", INT16),
        ]),
    ]


ADD_PARTITIONS_TO_TXN = api(
    24,
    "AddPartitionsToTxn",
    versions="0-5",
    flexible="3+",
    request=[
        f("transactions", [
            f("transactional_id", STRING, "4+"),
            f("producer_id", INT64, "4+"),
            f("producer_epoch", INT16, "4+"),
            f("verify_only", BOOL, "4+", default=False),
            f("topics", _txn_topics(), "4+"),
        ], "4+"),
        f("v3_and_below_transactional_id", STRING, "0-3"),
        f("v3_and_below_producer_id", INT64, "0-3"),
        f("v3_and_below_producer_epoch", INT16, "0-3"),
        f("v3_and_below_topics", _txn_topics(), "0-3"),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16, "4+"),
        f("results_by_transaction", [
            f("transactional_id", STRING, "4+"),
            f("topic_results", _topic_results(), "4+"),
        ], "4+"),
        f("results_by_topic_v3_and_below", _topic_results(), "0-3"),
    ],
)

ADD_OFFSETS_TO_TXN = api(
    25,
    "AddOffsetsToTxn",
    versions="0-4",
    flexible="3+",
    request=[
        f("transactional_id", STRING),
        f("producer_id", INT64),
        f("producer_epoch", INT16),
        f("group_id", STRING),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
    ],
)

END_TXN = api(
    26,
    "EndTxn",
    versions="0-4",
    flexible="3+",
    request=[
        f("transactional_id", STRING),
        f("producer_id", INT64),
        f("producer_epoch", INT16),
        f("committed", BOOL),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
    ],
)

WRITE_TXN_MARKERS = api(
    27,
    "WriteTxnMarkers",
    versions="1",
    flexible="1+",
    request=[
        f("markers", [
            f("producer_id", INT64),
            f("producer_epoch", INT16),
            f("transaction_result", BOOL),  # true: commit
            f("topics", [
                f("name", STRING),
                f("partition_indexes", Array(INT32)),
            ]),
            f("coordinator_epoch", INT32),
        ]),
    ],
    response=[
        f("markers", [
            f("producer_id", INT64),
            f("topics", [
                f("name", STRING),
                f("partitions", [
                    f("partition_index", INT32),
                    f("error_code", INT16),
                ]),
            ]),
        ]),
    ],
)

TXN_OFFSET_COMMIT = api(
    28,
    "TxnOffsetCommit",
    versions="0-4",
    flexible="3+",
    request=[
        f("transactional_id", STRING),
        f("group_id", STRING),
        f("producer_id", INT64),
        f("producer_epoch", INT16),
        # v3+ (KIP-447): the group membership, so zombie consumers can be fenced.
        f("generation_id", INT32, "3+", default=-1),
        f("member_id", STRING, "3+", default=""),
        f("group_instance_id", STRING, "3+", nullable="3+", has_default=True),
        f("topics", [
            f("name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                f("committed_offset", INT64),
                f("committed_leader_epoch", INT32, "2+", default=-1),
                f("committed_metadata", STRING, nullable="0+"),
            ]),
        ]),
    ],
    response=[
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


DESCRIBE_TRANSACTIONS = api(
    65,
    "DescribeTransactions",
    versions="0",
    flexible="0+",
    request=[
        f("transactional_ids", Array(STRING)),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("transaction_states", [
            f("error_code", INT16),
            f("transactional_id", STRING),
            f("transaction_state", STRING),
            f("transaction_timeout_ms", INT32),
            f("transaction_start_time_ms", INT64),
            f("producer_id", INT64),
            f("producer_epoch", INT16),
            f("topics", [
                f("topic", STRING),
                f("partitions", Array(INT32)),
            ]),
        ]),
    ],
)

LIST_TRANSACTIONS = api(
    66,
    "ListTransactions",
    versions="0-1",
    flexible="0+",
    request=[
        f("state_filters", Array(STRING)),
        f("producer_id_filters", Array(INT64)),
        # v1 (KIP-994): only transactions running at least this long; -1: all
        f("duration_filter", INT64, "1+", default=-1),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("unknown_state_filters", Array(STRING)),
        f("transaction_states", [
            f("transactional_id", STRING),
            f("producer_id", INT64),
            f("transaction_state", STRING),
        ]),
    ],
)
