"""What a request handler may touch: its request's context, and the broker's services.

Handlers do not receive the Broker. Each request gets a `RequestContext`: the request header, the
connection it came on, and `services`, a `BrokerServices` the broker builds once at start with exactly
what the APIs use (as Kafka's KafkaApis is given its managers): the metadata cache, the replica manager,
the topic admin, the controller, the coordinators, the authorizer, the quotas, the dynamic configs, the
Produce path's state and the fetch session cache, and the handlers' typed settings (`ApiSettings`).
Where a handler needs only a sliver of a broker component, the sliver is a Protocol here (the log dirs,
the coordinators' readiness, the topic config defaults) and the broker provides it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gregor.configdef import Settings, setting
from gregor.network.connection import ResponseBody
from gregor.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType

if TYPE_CHECKING:
    from gregor.admin.topic_admin import TopicAdmin
    from gregor.api.fetch_session import FetchSessionCache
    from gregor.api.produce_state import ProduceState
    from gregor.config.dynamic import DynamicBrokerConfig
    from gregor.controller.controller import Controller
    from gregor.coordinator.group.coordinator import GroupCoordinator
    from gregor.coordinator.transaction.coordinator import TransactionCoordinator
    from gregor.coordinator.transaction.producer_ids import ProducerIdManager
    from gregor.metadata.cache import MetadataCache
    from gregor.metadata.store import TopicMetadata
    from gregor.metrics.registry import BrokerMetrics
    from gregor.network.connection import Connection
    from gregor.protocol.errors import KafkaError
    from gregor.protocol.frames import RequestHeader
    from gregor.protocol.schema import Api, Struct
    from gregor.replication.replica_manager import ReplicaManager
    from gregor.security.authorizer import AclAuthorizer
    from gregor.security.listeners import ListenerSpec
    from gregor.security.principal import KafkaPrincipal
    from gregor.security.quotas import ClientQuotaManager
    from gregor.security.sasl.authenticator import ListenerSasl

    # KRaft mode's DescribeQuorum, answered by the metadata quorum's leader: (version, request) -> response body.
    DescribeQuorum = Callable[[int, Struct], Awaitable[dict[str, Any]]]
    # The active controller's answer to this request (KRaft mode: the broker forwards it); KafkaError if none came.
    ForwardToController = Callable[["RequestContext", Struct], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class ApiSettings(Settings):
    """The broker properties the handlers read (static ones; the dynamic configs are `dynamic_config`'s)."""

    broker_id: int = setting("broker.id")
    fetch_max_bytes: int = setting("fetch.max.bytes")
    auto_create_topics_enable: bool = setting("auto.create.topics.enable")
    max_request_partition_size_limit: int = setting("max.request.partition.size.limit")
    request_timeout_ms: int = setting("request.timeout.ms")


class LogDirs(Protocol):
    """This broker's log dirs as DescribeLogDirs and AlterReplicaLogDirs see them (the LogManager)."""

    offline_dirs: dict[str, str]  # failed log dirs, with why

    def partition_sizes(self) -> dict[str, dict[tuple[str, int], int]]: ...
    def future_replicas(self) -> dict[str, dict[tuple[str, int], tuple[int, int]]]: ...
    def alter_log_dir(self, topic: str, partition: int, dest: str) -> None: ...


class Coordinators(Protocol):
    """The group and transaction coordinators as requests reach them. Each needs its internal topic
    (__consumer_offsets, __transaction_state), created on first use as Kafka does, and the logs loaded."""

    @property
    def loading(self) -> bool:
        """The broker is loading its logs: the coordinators answer COORDINATOR_LOAD_IN_PROGRESS."""

    @property
    def group_coordinator(self) -> GroupCoordinator: ...

    @property
    def txn_coordinator(self) -> TransactionCoordinator: ...

    def group_coordinator_ready(self) -> GroupCoordinator:
        """The group coordinator, its topic created if need be; raises KafkaError while the logs load."""

    def txn_coordinator_ready(self) -> TransactionCoordinator:
        """The transaction coordinator, its topic created if need be; raises KafkaError while the logs load."""

    def offsets_topic_creation(self) -> asyncio.Future[None] | None:
        """A future done when the creation of __consumer_offsets under way (started now if none is) ends;
        None when there is nothing to wait for (it exists, or the logs are loading)."""

    def txn_topic_creation(self) -> asyncio.Future[None] | None:
        """The same for __transaction_state."""


class TopicConfigDefaults(Protocol):
    """A topic's configs over the broker's current defaults (dynamic ones included)."""

    def effective(self, overrides: Mapping[str, str]) -> dict[str, object]:
        """Every topic config's value: the override, else the broker default."""

    def valid_overrides(self, overrides: Mapping[str, str]) -> dict[str, str]:
        """The stored overrides in effect (those that validate)."""

    def default(self, name: str) -> object:
        """The broker's default of the topic config `name`."""


# Metadata's auto topic creation: the topics created (or why not), by name.
AutoCreateTopics = Callable[[list[str]], Awaitable[dict[str, "TopicMetadata | KafkaError"]]]


@dataclass(frozen=True, slots=True)
class BrokerServices:
    """Everything the handlers may use, built by the broker at start; the state here (the Produce path's,
    the fetch sessions) is the broker's, created and shut down by it."""

    settings: ApiSettings
    metadata_cache: MetadataCache
    replica_manager: ReplicaManager
    log_dirs: LogDirs
    topic_admin: TopicAdmin
    controller: Controller
    coordinators: Coordinators
    producer_ids: ProducerIdManager
    authorizer: AclAuthorizer | None  # None: authorizer.class.name unset, every request allowed
    quotas: ClientQuotaManager
    dynamic_config: DynamicBrokerConfig
    topic_configs: TopicConfigDefaults
    auto_create_topics: AutoCreateTopics
    sasl_listeners: Mapping[str, ListenerSasl]  # by listener name
    metrics: BrokerMetrics | None  # None unless metrics.port is set
    supported_apis: tuple[Api, ...]  # what ApiVersions advertises: the APIs with a handler
    produce: ProduceState
    fetch_sessions: FetchSessionCache
    # KRaft mode: the metadata quorum's DescribeQuorum answer (version, request) from its leader; None otherwise.
    describe_quorum: DescribeQuorum | None = None
    # KRaft mode: a request the active controller answers, sent to it whole (gregor.api.forwarding); None otherwise.
    forward_to_controller: ForwardToController | None = None


@dataclass(slots=True)
class RequestContext:
    services: BrokerServices
    header: RequestHeader
    connection: Connection

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def principal(self) -> KafkaPrincipal:
        return self.connection.principal

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""

    @property
    def host(self) -> str:
        """The client's IP address (what ACL hosts match)."""
        return self.connection.ip

    @property
    def listener(self) -> ListenerSpec:
        return self.connection.listener

    # --- authorization (Kafka's AuthHelper): every handler asks here; no authorizer allows everything ---------
    @property
    def principal_text(self) -> str:
        """The connection's principal as Kafka writes it in ACLs ("User:alice"; User:ANONYMOUS unauthenticated)."""
        return str(self.connection.principal)

    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> bool:
        """May this request's principal, from its host, do `operation` on the resource? (CLUSTER by default)"""
        z = self.services.authorizer
        if z is None:
            return True
        return z.authorize(self.principal_text, self.host, operation, resource_type, name)

    def authorize_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """May it do `operation` on some resource of the type (Kafka's authorizeByResourceType)?"""
        z = self.services.authorizer
        return True if z is None else z.authorize_any(self.principal_text, self.host, operation, resource_type)

    def authorized_topics(self, operation: AclOperation, names: Iterable[str]) -> set[str]:
        """The names among `names` the principal may do `operation` on (batch filtering)."""
        z = self.services.authorizer
        if z is None:
            return set(names)
        principal, host = self.principal_text, self.host
        return {n for n in names if z.authorize(principal, host, operation, ResourceType.TOPIC, n)}

    def authorized_operations(self, resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
        """KIP-430's bitfield of the operations allowed on the resource (all supported ones without an authorizer)."""
        z = self.services.authorizer
        if z is None:
            return authorized_operations_all(resource_type)
        return z.authorized_operations(self.principal_text, self.host, resource_type, name)


def authorized_operations_all(resource_type: ResourceType) -> int:
    bits = 0
    for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
        bits |= 1 << op
    return bits


# A handler returns the response body, a Future of it, or None when no response is sent.
Handler = Callable[[RequestContext, "Struct"], "ResponseBody | None"]
