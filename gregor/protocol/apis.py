"""The registry of every API this codec can encode and decode, by API key."""

from __future__ import annotations

from gregor.protocol.messages.acls import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS
from gregor.protocol.messages.api_versions import API_VERSIONS
from gregor.protocol.messages.client_quotas import ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS
from gregor.protocol.messages.cluster import DESCRIBE_CLUSTER
from gregor.protocol.messages.cluster_admin import (
    ALTER_PARTITION_REASSIGNMENTS,
    CONTROLLED_SHUTDOWN,
    ELECT_LEADERS,
    LIST_PARTITION_REASSIGNMENTS,
)
from gregor.protocol.messages.configs import ALTER_CONFIGS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS
from gregor.protocol.messages.consumer_group import CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT
from gregor.protocol.messages.describe_producers import DESCRIBE_PRODUCERS
from gregor.protocol.messages.describe_topic_partitions import DESCRIBE_TOPIC_PARTITIONS
from gregor.protocol.messages.fetch import FETCH
from gregor.protocol.messages.find_coordinator import FIND_COORDINATOR
from gregor.protocol.messages.groups import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    SYNC_GROUP,
)
from gregor.protocol.messages.init_producer_id import INIT_PRODUCER_ID
from gregor.protocol.messages.list_offsets import LIST_OFFSETS
from gregor.protocol.messages.log_dirs import ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS
from gregor.protocol.messages.metadata import METADATA
from gregor.protocol.messages.offset_for_leader_epoch import OFFSET_FOR_LEADER_EPOCH
from gregor.protocol.messages.offsets import OFFSET_COMMIT, OFFSET_DELETE, OFFSET_FETCH
from gregor.protocol.messages.produce import PRODUCE
from gregor.protocol.messages.raft import BEGIN_QUORUM_EPOCH, DESCRIBE_QUORUM, END_QUORUM_EPOCH, FETCH_SNAPSHOT, VOTE
from gregor.protocol.messages.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE
from gregor.protocol.messages.scram_credentials import ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS
from gregor.protocol.messages.topics import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_RECORDS, DELETE_TOPICS
from gregor.protocol.messages.transactions import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    DESCRIBE_TRANSACTIONS,
    END_TXN,
    LIST_TRANSACTIONS,
    TXN_OFFSET_COMMIT,
    WRITE_TXN_MARKERS,
)
from gregor.protocol.schema import Api

ALL: list[Api] = [
    PRODUCE,
    FETCH,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    FIND_COORDINATOR,
    JOIN_GROUP,
    HEARTBEAT,
    LEAVE_GROUP,
    SYNC_GROUP,
    DESCRIBE_GROUPS,
    LIST_GROUPS,
    API_VERSIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    DELETE_RECORDS,
    INIT_PRODUCER_ID,
    OFFSET_FOR_LEADER_EPOCH,
    ADD_PARTITIONS_TO_TXN,
    ADD_OFFSETS_TO_TXN,
    END_TXN,
    WRITE_TXN_MARKERS,
    TXN_OFFSET_COMMIT,
    DESCRIBE_ACLS,
    CREATE_ACLS,
    DELETE_ACLS,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    ALTER_REPLICA_LOG_DIRS,
    DESCRIBE_LOG_DIRS,
    CREATE_PARTITIONS,
    DELETE_GROUPS,
    INCREMENTAL_ALTER_CONFIGS,
    OFFSET_DELETE,
    DESCRIBE_CLIENT_QUOTAS,
    ALTER_CLIENT_QUOTAS,
    DESCRIBE_CLUSTER,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    LIST_TRANSACTIONS,
    CONSUMER_GROUP_HEARTBEAT,
    CONSUMER_GROUP_DESCRIBE,
    CONTROLLED_SHUTDOWN,
    ELECT_LEADERS,
    ALTER_PARTITION_REASSIGNMENTS,
    LIST_PARTITION_REASSIGNMENTS,
    SASL_HANDSHAKE,
    SASL_AUTHENTICATE,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    ALTER_USER_SCRAM_CREDENTIALS,
    DESCRIBE_TOPIC_PARTITIONS,
    VOTE,
    BEGIN_QUORUM_EPOCH,
    END_QUORUM_EPOCH,
    DESCRIBE_QUORUM,
    FETCH_SNAPSHOT,
]

BY_KEY: dict[int, Api] = {a.key: a for a in ALL}
