"""The metadata quorum's own APIs (KIP-595, KIP-630, KIP-853, KIP-996): Vote (52), BeginQuorumEpoch (53),
EndQuorumEpoch (54), DescribeQuorum (55) and FetchSnapshot (59).

Every request names the one partition it is about (`__cluster_metadata`-0) inside the topics/partitions
nesting that all Kafka APIs share, and every response echoes the sender's view of the leader (id and
epoch), which is how a replica learns of a newer epoch from any answer. Kafka 4.0 accepts:

- Vote 0-2: v1 adds the voter key (receiver id, directory ids, KIP-853); v2 the `pre_vote` flag of
  KIP-996 (a replica asking whether it could win before it bumps the epoch).
- BeginQuorumEpoch 0-1 and EndQuorumEpoch 0-1: v1 is flexible and carries the leader's endpoints; v1
  of EndQuorumEpoch names the preferred successors with directory ids (`preferred_candidates`).
- DescribeQuorum 0-2: v1 adds each replica's last fetch and caught-up times, v2 error messages,
  directory ids and the voters' listener endpoints (`nodes`).
- FetchSnapshot 0-1: a snapshot is read in chunks by position; v1 adds the replica's directory id and
  the leader endpoints.

Response endpoints (`node_endpoints`) are tagged fields: a reply without them is the same bytes as
one of the previous layout.
"""

from __future__ import annotations

from gregor.protocol.schema import (
    BOOL,
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
    UINT16,
    UUID,
    Array,
    Field,
    api,
    f,
    struct,
)


def _node_endpoints(first: str) -> Field:
    """The endpoints of the leaders a response names (KIP-853), tag 0 from `first` on."""
    return f("node_endpoints", [
        f("node_id", INT32, first),
        f("host", STRING, first),
        f("port", UINT16, first),
    ], first, tag=0, tagged=first)


def _leader_endpoints(first: str) -> Field:
    """The sending leader's listeners (KIP-853), a plain field of the request from `first` on."""
    return f("leader_endpoints", [
        f("name", STRING, first),
        f("host", STRING, first),
        f("port", UINT16, first),
    ], first)


def _cluster_id() -> Field:
    return f("cluster_id", STRING, nullable="0+", has_default=True)


VOTE = api(
    52,
    "Vote",
    versions="0-2",
    flexible="0+",
    request=[
        _cluster_id(),
        f("voter_id", INT32, "1+", default=-1),
        f("topics", [
            f("topic_name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                f("replica_epoch", INT32),  # the candidate's epoch (v0-1 call it candidate_epoch)
                f("replica_id", INT32),
                f("replica_directory_id", UUID, "1+"),
                f("voter_directory_id", UUID, "1+"),
                f("last_offset_epoch", INT32),
                f("last_offset", INT64),
                f("pre_vote", BOOL, "2+"),
            ]),
        ]),
    ],
    response=[
        f("error_code", INT16),
        f("topics", [
            f("topic_name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                f("error_code", INT16),
                f("leader_id", INT32),
                f("leader_epoch", INT32),
                f("vote_granted", BOOL),
            ]),
        ]),
        _node_endpoints("1+"),
    ],
)

BEGIN_QUORUM_EPOCH = api(
    53,
    "BeginQuorumEpoch",
    versions="0-1",
    flexible="1+",
    request=[
        _cluster_id(),
        f("voter_id", INT32, "1+", default=-1),
        f("topics", [
            f("topic_name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                f("voter_directory_id", UUID, "1+"),
                f("leader_id", INT32),
                f("leader_epoch", INT32),
            ]),
        ]),
        _leader_endpoints("1+"),
    ],
    response=[
        f("error_code", INT16),
        f("topics", [
            f("topic_name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                f("error_code", INT16),
                f("leader_id", INT32),
                f("leader_epoch", INT32),
            ]),
        ]),
        _node_endpoints("1+"),
    ],
)

END_QUORUM_EPOCH = api(
    54,
    "EndQuorumEpoch",
    versions="0-1",
    flexible="1+",
    request=[
        _cluster_id(),
        f("topics", [
            f("topic_name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                f("leader_id", INT32),
                f("leader_epoch", INT32),
                f("preferred_successors", Array(INT32), "0"),
                f("preferred_candidates", [
                    f("candidate_id", INT32, "1+"),
                    f("candidate_directory_id", UUID, "1+"),
                ], "1+"),
            ]),
        ]),
        _leader_endpoints("1+"),
    ],
    response=[
        f("error_code", INT16),
        f("topics", [
            f("topic_name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                f("error_code", INT16),
                f("leader_id", INT32),
                f("leader_epoch", INT32),
            ]),
        ]),
        _node_endpoints("1+"),
    ],
)


def _replica_state() -> list[Field]:
    return [
        f("replica_id", INT32),
        f("replica_directory_id", UUID, "2+"),
        f("log_end_offset", INT64),
        f("last_fetch_timestamp", INT64, "1+", default=-1),
        f("last_caught_up_timestamp", INT64, "1+", default=-1),
    ]


DESCRIBE_QUORUM = api(
    55,
    "DescribeQuorum",
    versions="0-2",
    flexible="0+",
    request=[
        f("topics", [
            f("topic_name", STRING),
            f("partitions", [f("partition_index", INT32)]),
        ]),
    ],
    response=[
        f("error_code", INT16),
        f("error_message", STRING, "2+", nullable="2+", default=""),
        f("topics", [
            f("topic_name", STRING),
            f("partitions", [
                f("partition_index", INT32),
                f("error_code", INT16),
                f("error_message", STRING, "2+", nullable="2+", default=""),
                f("leader_id", INT32),
                f("leader_epoch", INT32),
                f("high_watermark", INT64),
                f("current_voters", _replica_state()),
                f("observers", _replica_state()),
            ]),
        ]),
        f("nodes", [
            f("node_id", INT32, "2+"),
            f("listeners", [
                f("name", STRING, "2+"),
                f("host", STRING, "2+"),
                f("port", UINT16, "2+"),
            ], "2+"),
        ], "2+"),
    ],
)


def _snapshot_id() -> Field:
    return f("snapshot_id", struct(f("end_offset", INT64), f("epoch", INT32)))


FETCH_SNAPSHOT = api(
    59,
    "FetchSnapshot",
    versions="0-1",
    flexible="0+",
    request=[
        f("cluster_id", STRING, nullable="0+", tag=0, tagged="0+", has_default=True),
        f("replica_id", INT32, default=-1),
        f("max_bytes", INT32, default=0x7FFFFFFF),
        f("topics", [
            f("name", STRING),
            f("partitions", [
                f("partition", INT32),
                f("current_leader_epoch", INT32),
                _snapshot_id(),
                f("position", INT64),
                f("replica_directory_id", UUID, "1+", tag=0, tagged="1+"),
            ]),
        ]),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("topics", [
            f("name", STRING),
            f("partitions", [
                f("index", INT32),
                f("error_code", INT16),
                _snapshot_id(),
                f("current_leader", struct(
                    f("leader_id", INT32, default=-1),
                    f("leader_epoch", INT32, default=-1),
                ), tag=0, tagged="0+"),
                f("size", INT64),
                f("position", INT64),
                f("unaligned_records", RECORDS),
            ]),
        ]),
        _node_endpoints("1+"),
    ],
)
