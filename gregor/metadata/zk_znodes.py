"""Kafka's znode layout on ZooKeeper: the paths, and the JSON each znode holds (encoding and parsing).

Shared by the two halves of the ZooKeeper metadata store: the watcher that reads znodes into the broker's
image (zk_watcher.py and its readers) and the writer (zk_writer.py). See zookeeper.py for the layout.
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from kazoo.exceptions import KazooException, RolledBackError, ZookeeperError
from kazoo.protocol.states import ZnodeStat

from gregor.metadata.store import BrokerInfo, MetadataError, PartitionState, TopicMetadata
from gregor.security.acl import AccessControlEntry, PatternType, ResourcePattern, ResourceType

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
BROKER_IDS, TOPICS, CONFIG_TOPICS = "/brokers/ids", "/brokers/topics", "/config/topics"
CONFIG_BROKERS = "/config/brokers"
# User and client configs (SCRAM credentials, quotas) and Kafka's change notifications for them:
# /config/users/<u>, /config/users/<u>/clients/<c>, /config/clients/<c>; a write also creates the sequential
# /config/changes/config_change_NNNNNNNNNN = {"version":2,"entity_path":"users/alice"}, which every broker watches.
CONFIG_ROOT, CONFIG_CHANGES, CONFIG_CHANGE_PREFIX = "/config", "/config/changes", "config_change_"
CONFIG_USERS, CONFIG_CLIENTS = "/config/users", "/config/clients"
CONFIG_GROUPS = "/config/groups"  # KIP-848 group configs
# Kafka's ACL layout (AclAuthorizer / ZkAclStore): literal patterns under /kafka-acl/<ResourceType>/<name>,
# prefixed ones under /kafka-acl-extended/prefixed/<ResourceType>/<name>; every change also creates a
# sequential notification that brokers watch, /kafka-acl-changes/acl_changes_NNNNNNNNNN (data "Topic:name")
# or /kafka-acl-extended-changes/acl_changes_NNNNNNNNNN (JSON naming the pattern).
ACL_LITERAL, ACL_PREFIXED = "/kafka-acl", "/kafka-acl-extended/prefixed"
ACL_CHANGES, ACL_EXT_CHANGES = "/kafka-acl-changes", "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
# Change notifications (config and ACL) older than this are deleted by the brokers that read them (Kafka's
# ZkNodeChangeNotificationListener: 15 minutes).
CHANGE_EXPIRATION_MS = 15 * 60 * 1000
CONTROLLER, CONTROLLER_EPOCH = "/controller", "/controller_epoch"
# Kafka's log dir failure notifications: a broker whose log dir failed creates the sequential
# /log_dir_event_notification/log_dir_event_NNNNNNNNNN = {"version":1,"broker":B,"event":1} (Gregor adds
# "partitions": [["t", 0], ...], the replicas it took offline); the controller handles and deletes it.
LOG_DIR_EVENTS, LOG_DIR_EVENT_PREFIX = "/log_dir_event_notification", "log_dir_event_"
CLUSTER_ID, PRODUCER_ID_BLOCK = "/cluster/id", "/latest_producer_id_block"
PERSISTENT_PATHS = (BROKER_IDS, TOPICS, CONFIG_TOPICS, CONFIG_BROKERS, "/cluster", CONFIG_CHANGES, CONFIG_USERS,
                    CONFIG_CLIENTS, ACL_LITERAL, ACL_PREFIXED, ACL_CHANGES, ACL_EXT_CHANGES, LOG_DIR_EVENTS)
# Partitions created or deleted per multi (~250 bytes each), so a request stays under ZooKeeper's 1 MB
# jute.maxbuffer, beyond which the server drops the connection.
PARTITIONS_PER_MULTI = 2000
# Partition-state writes per multi: ~150 bytes each, well under ZooKeeper's 1 MB request limit (jute.maxbuffer).
STATE_MULTI_CHUNK = 500


def _topic_path(t: str) -> str:
    return f"{TOPICS}/{t}"


def _state_path(t: str, p: int) -> str:
    return f"{TOPICS}/{t}/partitions/{p}/state"


def next_producer_id(block: bytes | None) -> int:
    """The first producer id after the block /latest_producer_id_block holds (0 when none was handed out)."""
    return int(json.loads(block)["block_end"]) + 1 if block else 0


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


# --- ACLs ---------------------------------------------------------------------------------------
def acl_path(p: ResourcePattern) -> str:
    root = ACL_PREFIXED if p.pattern_type == PatternType.PREFIXED else ACL_LITERAL
    return f"{root}/{p.resource_type.kafka_name}/{p.name}"


def acl_pattern_of(path: str) -> ResourcePattern | None:
    """The pattern a /kafka-acl... znode path stands for, or None for another path."""
    for root, pt in ((ACL_PREFIXED, PatternType.PREFIXED), (ACL_LITERAL, PatternType.LITERAL)):
        if path.startswith(root + "/"):
            rtype, slash, name = path[len(root) + 1:].partition("/")
            rt = ResourceType.parse(rtype)
            if not slash or not name or rt in (ResourceType.UNKNOWN, ResourceType.ANY):
                return None
            return ResourcePattern(ResourceType(rt), name, pt)
    return None


def acl_znode(entries: frozenset[AccessControlEntry]) -> bytes:
    return _dumps({"version": 1, "acls": sorted((e.to_json() for e in entries), key=lambda d: sorted(d.items()))})


def parse_acl_znode(data: bytes) -> frozenset[AccessControlEntry]:
    if not data:
        return frozenset()
    return frozenset(AccessControlEntry.from_json(d) for d in json.loads(data).get("acls") or [])


def acl_change_notification(p: ResourcePattern) -> tuple[str, bytes]:
    """(the sequential znode's path prefix, its data) announcing a change of `p`'s ACLs, as Kafka writes it."""
    if p.pattern_type == PatternType.LITERAL:
        return f"{ACL_CHANGES}/{ACL_CHANGE_PREFIX}", f"{p.resource_type.kafka_name}:{p.name}".encode()
    return f"{ACL_EXT_CHANGES}/{ACL_CHANGE_PREFIX}", _dumps(
        {"version": 1, "resourceType": p.resource_type.kafka_name, "name": p.name,
         "patternType": p.pattern_type.kafka_name.upper()})


def parse_acl_change(changes_root: str, data: bytes) -> ResourcePattern | None:
    """The pattern a change notification names (None when it cannot be read: it is then skipped)."""
    try:
        if changes_root == ACL_CHANGES:
            rtype, _, name = data.decode().partition(":")
            pt = PatternType.LITERAL
        else:
            doc = json.loads(data)
            rtype, name, pt = str(doc["resourceType"]), str(doc["name"]), PatternType.parse(str(doc["patternType"]))
        rt = ResourceType.parse(rtype)
        if rt in (ResourceType.UNKNOWN, ResourceType.ANY) or not name or \
                pt not in (PatternType.LITERAL, PatternType.PREFIXED):
            return None
        return ResourcePattern(ResourceType(rt), name, PatternType(pt))
    except (ValueError, KeyError, UnicodeDecodeError):
        return None
