"""What brokers send the active controller of a KRaft quorum, on the controller listener (KIP-631, KIP-497):
BrokerRegistration (62), BrokerHeartbeat (63), UnregisterBroker (64), AlterPartition (56) and
AllocateProducerIds (67), at the versions Kafka 4.0 accepts; and our own MetadataWrite, a broker's
metadata changes (topics, configs, ACLs, quotas, SCRAM credentials) as encoded metadata records, decided
and written by the controller.

MetadataWrite is Gregor's: Kafka forwards the client's whole request to the controller (Envelope, KIP-590)
and runs its handler there; here the broker runs the handler (authorization included, against the same
replicated ACLs) and forwards only the change it asks for, so the one handler serves both modes. The
requests whose work is the controller's own (ElectLeaders, the reassignments) do go whole, in Envelopes
(gregor.api.forwarding).
"""

from __future__ import annotations

from gregor.protocol.schema import (
    BOOL,
    BYTES,
    INT8,
    INT16,
    INT32,
    INT64,
    STRING,
    UINT16,
    UUID,
    Array,
    Schema,
    api,
    f,
)

BROKER_REGISTRATION = api(
    62,
    "BrokerRegistration",
    versions="0-4",
    flexible="0+",
    request=[
        f("broker_id", INT32),
        f("cluster_id", STRING),
        f("incarnation_id", UUID),
        f("listeners", [
            f("name", STRING),
            f("host", STRING),
            f("port", UINT16),
            f("security_protocol", INT16),
        ]),
        f("features", [
            f("name", STRING),
            f("min_supported_version", INT16),
            f("max_supported_version", INT16),
        ]),
        f("rack", STRING, nullable="0+"),
        f("is_migrating_zk_broker", BOOL, "1+"),
        f("log_dirs", Array(UUID), "2+"),
        f("previous_broker_epoch", INT64, "3+", default=-1),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("broker_epoch", INT64, default=-1),
    ],
)

BROKER_HEARTBEAT = api(
    63,
    "BrokerHeartbeat",
    versions="0-1",
    flexible="0+",
    request=[
        f("broker_id", INT32),
        f("broker_epoch", INT64),
        f("current_metadata_offset", INT64),
        f("want_fence", BOOL),
        f("want_shut_down", BOOL),
        f("offline_log_dirs", Array(UUID), "1+", tag=0, tagged="1+"),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("is_caught_up", BOOL),
        f("is_fenced", BOOL, default=True),
        f("should_shut_down", BOOL),
    ],
)

UNREGISTER_BROKER = api(
    64,
    "UnregisterBroker",
    versions="0",
    flexible="0+",
    request=[f("broker_id", INT32)],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("error_message", STRING, nullable="0+"),
    ],
)

ALTER_PARTITION = api(
    56,
    "AlterPartition",
    versions="0-3",
    flexible="0+",
    request=[
        f("broker_id", INT32),
        f("broker_epoch", INT64, default=-1),
        f("topics", [
            f("topic_name", STRING, "0-1"),
            f("topic_id", UUID, "2+"),
            f("partitions", [
                f("partition_index", INT32),
                f("leader_epoch", INT32),
                f("new_isr", Array(INT32), "0-2"),
                f("new_isr_with_epochs", [
                    f("broker_id", INT32, "3+"),
                    f("broker_epoch", INT64, "3+", default=-1),
                ], "3+"),
                f("leader_recovery_state", INT8, "1+"),
                f("partition_epoch", INT32),
            ]),
        ]),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("topics", [
            f("topic_name", STRING, "0-1"),
            f("topic_id", UUID, "2+"),
            f("partitions", [
                f("partition_index", INT32),
                f("error_code", INT16),
                f("leader_id", INT32),
                f("leader_epoch", INT32),
                f("isr", Array(INT32)),
                f("leader_recovery_state", INT8, "1+"),
                f("partition_epoch", INT32),
            ]),
        ]),
    ],
)

ALLOCATE_PRODUCER_IDS = api(
    67,
    "AllocateProducerIds",
    versions="0",
    flexible="0+",
    request=[f("broker_id", INT32), f("broker_epoch", INT64)],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("producer_id_start", INT64),
        f("producer_id_len", INT32),
    ],
)

# Gregor's own: not a Kafka API key (Kafka's end well below), served on the controller listener only.
METADATA_WRITE = api(
    32000,
    "GregorMetadataWrite",
    versions="0",
    flexible="0+",
    request=[
        f("broker_id", INT32),
        f("broker_epoch", INT64, default=-1),
        f("changes", Array(BYTES)),
    ],
    response=[
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("error_message", STRING, nullable="0+"),
        f("results", [
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+"),
            f("offset", INT64, default=-1),
        ]),
    ],
)

# KIP-590: a broker forwards a client's whole request to the active controller: the request as it would be
# sent (header and body, without the size prefix), who sent it and from where. The answer is the inner
# response (header and body) or, when the controller cannot take it (not active), an error of its own.
ENVELOPE = api(
    58,
    "Envelope",
    versions="0",
    flexible="0+",
    request=[
        f("request_data", BYTES),
        f("request_principal", BYTES, nullable="0+"),
        f("client_host_address", BYTES),
    ],
    response=[
        f("response_data", BYTES, nullable="0+", default=None),
        f("error_code", INT16),
    ],
)

# How the forwarding broker names the client's principal in an Envelope (our own encoding, flexible v0).
ENVELOPE_PRINCIPAL = Schema("EnvelopePrincipal", [
    f("type", STRING),
    f("name", STRING),
    f("token_authenticated", BOOL),
], valid="0", flexible="0+")

CONTROLLER_APIS = {a.key: a for a in (BROKER_REGISTRATION, BROKER_HEARTBEAT, UNREGISTER_BROKER, ALTER_PARTITION,
                                      ALLOCATE_PRODUCER_IDS, METADATA_WRITE, ENVELOPE)}
