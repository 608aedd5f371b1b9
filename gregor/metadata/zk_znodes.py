"""Kafka's znode layout on ZooKeeper: the paths, and the JSON each znode holds (encoding and parsing).

Shared by the two halves of the ZooKeeper metadata store: the watcher that reads znodes into the broker's
image (zk_watcher.py) and the store that writes them (zookeeper.py). See zookeeper.py for the layout.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from typing import Any

from kazoo.exceptions import KazooException, RolledBackError, ZookeeperError
from kazoo.protocol.states import ZnodeStat

from gregor.metadata.store import BrokerInfo, MetadataError, PartitionState, TopicMetadata

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
BROKER_IDS, TOPICS, CONFIG_TOPICS = "/brokers/ids", "/brokers/topics", "/config/topics"
CONFIG_BROKERS = "/config/brokers"
# User and client configs (SCRAM credentials, quotas) and Kafka's change notifications for them:
# /config/users/<u>, /config/users/<u>/clients/<c>, /config/clients/<c>; a write also creates the sequential
# /config/changes/config_change_NNNNNNNNNN = {"version":2,"entity_path":"users/alice"}, which every broker watches.
CONFIG_ROOT, CONFIG_CHANGES, CONFIG_CHANGE_PREFIX = "/config", "/config/changes", "config_change_"
CONFIG_USERS, CONFIG_CLIENTS = "/config/users", "/config/clients"
CONFIG_CHANGES_KEPT = 100  # notifications kept (Kafka deletes them after 15 minutes); older ones are deleted
CONTROLLER, CONTROLLER_EPOCH = "/controller", "/controller_epoch"
CLUSTER_ID, PRODUCER_ID_BLOCK = "/cluster/id", "/latest_producer_id_block"
PERSISTENT_PATHS = (BROKER_IDS, TOPICS, CONFIG_TOPICS, CONFIG_BROKERS, "/cluster", CONFIG_CHANGES, CONFIG_USERS,
                    CONFIG_CLIENTS)
# Partitions created or deleted per multi (~250 bytes each), so a request stays under ZooKeeper's 1 MB
# jute.maxbuffer, beyond which the server drops the connection.
PARTITIONS_PER_MULTI = 2000
# Partition-state writes per multi: ~150 bytes each, well under ZooKeeper's 1 MB request limit (jute.maxbuffer).
STATE_MULTI_CHUNK = 500


def _topic_path(t: str) -> str:
    return f"{TOPICS}/{t}"


def _state_path(t: str, p: int) -> str:
    return f"{TOPICS}/{t}/partitions/{p}/state"


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _topic_id_text(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: the 16 bytes in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def _topic_id_parse(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def topic_znode(t: TopicMetadata) -> bytes:
    parts = sorted(t.partitions.items())
    return _dumps({"version": 3, "topic_id": _topic_id_text(t.topic_id),
                   "partitions": {str(p): s.replicas for p, s in parts},
                   "adding_replicas": {str(p): s.adding_replicas for p, s in parts if s.adding_replicas},
                   "removing_replicas": {str(p): s.removing_replicas for p, s in parts if s.removing_replicas}})


def state_znode(s: PartitionState, controller_epoch: int | None = None) -> bytes:
    return _dumps({"controller_epoch": s.controller_epoch if controller_epoch is None else controller_epoch,
                   "leader": s.leader, "version": 1, "leader_epoch": s.leader_epoch, "isr": s.isr,
                   "leader_recovery_state": 0})


def config_znode(configs: dict[str, str]) -> bytes:
    return _dumps({"version": 1, "config": configs})


def _parse_assignment(data: bytes) -> tuple[uuid.UUID, dict[int, tuple[list[int], list[int], list[int]]]]:
    doc = json.loads(data)
    adding, removing = doc.get("adding_replicas") or {}, doc.get("removing_replicas") or {}
    tid = doc.get("topic_id")
    return (_topic_id_parse(tid) if tid else uuid.UUID(int=0),
            {int(p): (list(r), list(adding.get(p, [])), list(removing.get(p, []))) for p, r in doc["partitions"].items()})


def parse_connect(connect: str) -> tuple[str, str]:
    """'h1:p1,h2:p2/chroot' -> ('h1:p1,h2:p2', '/chroot' or '')."""
    hosts, slash, chroot = connect.partition("/")
    chroot = ("/" + chroot).rstrip("/") if slash else ""
    return hosts, chroot


@dataclasses.dataclass
class _Topic:
    """The reader's image of one topic with the znode versions that built it."""

    meta: TopicMetadata
    # Partitions in the assignment whose state znode did not exist yet when read (a creation larger than
    # one multi writes them after the topic znode): an exists watch brings each in once it does.
    pending: dict[int, tuple[list[int], list[int], list[int]]] = dataclasses.field(default_factory=dict)
    assignment_mzxid: int = -1
    config_mzxid: int = -1
    state_mzxid: dict[int, int] = dataclasses.field(default_factory=dict)



def _parse_broker(bid: int, data: bytes, stat: ZnodeStat) -> BrokerInfo:
    doc = json.loads(data)
    host, port = doc.get("host"), doc.get("port")
    endpoints = []
    for ep in doc.get("endpoints") or []:
        name, _, addr = ep.partition("://")
        h, _, p = addr.rpartition(":")
        endpoints.append((name, h.strip("[]"), int(p)))
    if endpoints and (not host or port in (None, -1)):  # Kafka's registrations may leave host/port empty
        _, host, port = endpoints[0]
    protocols = tuple(sorted((str(k), str(v)) for k, v in (doc.get("listener_security_protocol_map") or {}).items()))
    return BrokerInfo(bid, str(host), int(port), doc.get("rack"), int(stat.czxid), tuple(endpoints), protocols)


def _parse_state(data: bytes, stat: ZnodeStat, replicas: list[int], adding: list[int],
                 removing: list[int]) -> PartitionState:
    doc = json.loads(data)
    return PartitionState(list(replicas), int(doc["leader"]), int(doc["leader_epoch"]), list(doc["isr"]),
                          int(doc["controller_epoch"]), int(stat.version), list(adding), list(removing))


def _create_states(tx: Any, name: str, items: list[tuple[int, PartitionState]]) -> None:
    for p, s in items:
        tx.create(f"{_topic_path(name)}/partitions/{p}", b"")
        tx.create(_state_path(name, p), state_znode(s))


def _failed(r: Any) -> bool:
    return isinstance(r, Exception) and not isinstance(r, RolledBackError)


def _raise_first(results: list[Any], what: str) -> None:
    """A multi's first real failure (the others are RolledBackError) as a MetadataError."""
    for r in results:
        if isinstance(r, Exception) and not isinstance(r, RolledBackError):
            if isinstance(r, ZookeeperError | KazooException):
                raise MetadataError(f"{what}: ZooKeeper answered {type(r).__name__}")
            raise MetadataError(f"{what}: {r}")
