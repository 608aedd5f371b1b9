"""One small module per API family; this table is what the broker serves and advertises."""

from __future__ import annotations

from gregor.api.context import Handler
from gregor.api.handlers.acls import (
    handle_create_acls,
    handle_delete_acls,
    handle_describe_acls,
    refuse_alter_client_quotas,
    refuse_alter_user_scram_credentials,
    refuse_describe_client_quotas,
    refuse_describe_user_scram_credentials,
    requires_cluster,
)
from gregor.api.handlers.api_versions import handle_api_versions
from gregor.api.handlers.client_quotas import handle_alter_client_quotas, handle_describe_client_quotas
from gregor.api.handlers.cluster import handle_describe_cluster, handle_describe_quorum
from gregor.api.handlers.cluster_admin import (
    handle_alter_partition_reassignments,
    handle_controlled_shutdown,
    handle_elect_leaders,
    handle_list_partition_reassignments,
)
from gregor.api.handlers.configs import (
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from gregor.api.handlers.fetch import handle_fetch
from gregor.api.handlers.groups import (
    handle_consumer_group_describe,
    handle_consumer_group_heartbeat,
    handle_delete_groups,
    handle_describe_groups,
    handle_find_coordinator,
    handle_heartbeat,
    handle_join_group,
    handle_leave_group,
    handle_list_groups,
    handle_offset_commit,
    handle_offset_delete,
    handle_offset_fetch,
    handle_sync_group,
)
from gregor.api.handlers.list_offsets import handle_list_offsets
from gregor.api.handlers.log_dirs import (
    handle_alter_replica_log_dirs,
    handle_describe_log_dirs,
    refuse_alter_replica_log_dirs,
    refuse_describe_log_dirs,
)
from gregor.api.handlers.metadata import handle_metadata
from gregor.api.handlers.offset_for_leader_epoch import handle_offset_for_leader_epoch
from gregor.api.handlers.produce import handle_produce
from gregor.api.handlers.producers import handle_describe_producers, handle_init_producer_id
from gregor.api.handlers.sasl import handle_sasl_authenticate, handle_sasl_handshake
from gregor.api.handlers.scram_credentials import (
    handle_alter_user_scram_credentials,
    handle_describe_user_scram_credentials,
)
from gregor.api.handlers.topic_partitions import handle_describe_topic_partitions
from gregor.api.handlers.topics import (
    handle_create_partitions,
    handle_create_topics,
    handle_delete_records,
    handle_delete_topics,
)
from gregor.api.handlers.transactions import (
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_describe_transactions,
    handle_end_txn,
    handle_list_transactions,
    handle_txn_offset_commit,
    handle_write_txn_markers,
)
from gregor.security.acl import AclOperation

HANDLERS: dict[int, Handler] = {
    0: handle_produce,
    1: handle_fetch,
    2: handle_list_offsets,
    3: handle_metadata,
    7: handle_controlled_shutdown,
    8: handle_offset_commit,
    9: handle_offset_fetch,
    10: handle_find_coordinator,
    11: handle_join_group,
    12: handle_heartbeat,
    13: handle_leave_group,
    14: handle_sync_group,
    15: handle_describe_groups,
    16: handle_list_groups,
    17: handle_sasl_handshake,
    18: handle_api_versions,
    19: handle_create_topics,
    20: handle_delete_topics,
    21: handle_delete_records,
    22: handle_init_producer_id,
    23: handle_offset_for_leader_epoch,
    24: handle_add_partitions_to_txn,
    25: handle_add_offsets_to_txn,
    26: handle_end_txn,
    27: handle_write_txn_markers,
    28: handle_txn_offset_commit,
    29: handle_describe_acls,
    30: handle_create_acls,
    31: handle_delete_acls,
    32: handle_describe_configs,
    33: handle_alter_configs,
    34: requires_cluster(AclOperation.ALTER, handle_alter_replica_log_dirs, refuse_alter_replica_log_dirs),
    35: requires_cluster(AclOperation.DESCRIBE, handle_describe_log_dirs, refuse_describe_log_dirs),
    36: handle_sasl_authenticate,
    37: handle_create_partitions,
    42: handle_delete_groups,
    43: handle_elect_leaders,
    44: handle_incremental_alter_configs,
    45: handle_alter_partition_reassignments,
    46: handle_list_partition_reassignments,
    47: handle_offset_delete,
    48: requires_cluster(AclOperation.DESCRIBE_CONFIGS, handle_describe_client_quotas, refuse_describe_client_quotas),
    49: requires_cluster(AclOperation.ALTER_CONFIGS, handle_alter_client_quotas, refuse_alter_client_quotas),
    50: requires_cluster(AclOperation.DESCRIBE, handle_describe_user_scram_credentials,
                         refuse_describe_user_scram_credentials),
    51: requires_cluster(AclOperation.ALTER, handle_alter_user_scram_credentials, refuse_alter_user_scram_credentials),
    55: handle_describe_quorum,
    60: handle_describe_cluster,
    61: handle_describe_producers,
    65: handle_describe_transactions,
    66: handle_list_transactions,
    68: handle_consumer_group_heartbeat,
    69: handle_consumer_group_describe,
    75: handle_describe_topic_partitions,
}
