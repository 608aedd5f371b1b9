"""An offline migration of a ZooKeeper-mode cluster's metadata into a new KRaft quorum.

Kafka migrates online (KIP-866: controllers that copy ZooKeeper, then dual-write while brokers roll).
Gregor's migration is offline and simpler to reason about: every broker is stopped, the metadata is read
from ZooKeeper once and becomes the quorum's bootstrap records (gregor.metadata.bootstrap), each node's
directories are formatted with the ZooKeeper cluster's own id and its old broker id, and the nodes start
as KRaft nodes on the same log dirs. Partition data is not touched: logs, their topic ids
(`partition.metadata`), leader epochs, producer state, and with them the consumer groups' committed
offsets and the transactions (`__consumer_offsets`, `__transaction_state` are partitions like any).

What is carried: every topic (its id, assignment, partition states with their leader epochs and ISRs,
its configs), dynamic broker and cluster-default configs, user / client / group configs (so client
quotas and SCRAM credentials, which ZooKeeper keeps there), ACLs, and the producer id blocks handed
out (the quorum hands out ids after them: an idempotent producer's id is never reused). What is not:
broker registrations and the controller (brokers register with the quorum when they start).

Refused, with what to do: a broker still registered (the migration is offline), a reassignment under
way (finish or cancel it), a ZooKeeper path with no cluster in it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

from gregor.metadata import kraft_records as kr
from gregor.metadata.kraft_state import KRaftState
from gregor.metadata.store import MetadataError, MetadataImage
from gregor.storage.log import parse_topic_partition


@dataclass(frozen=True)
class ZooKeeperMetadata:
    """What the migration read from ZooKeeper."""

    cluster_id: str
    image: MetadataImage
    next_producer_id: int  # the first id no block handed out yet
    live_brokers: tuple[int, ...]


def read_zookeeper(connect: str, timeout_s: float = 30.0, max_in_flight: int = 10) -> ZooKeeperMetadata:
    """Everything the migration carries, read once. Writes nothing (a chroot or cluster that is not
    there is an error, not created). kazoo is imported here: it is the `cluster` extra, and the
    `gregor` command must start without it."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError
    from kazoo.handlers.threading import KazooTimeoutError

    from gregor.metadata.zk_watcher import ZooKeeperWatcher
    from gregor.metadata.zk_znodes import BROKER_IDS, CLUSTER_ID, PRODUCER_ID_BLOCK, next_producer_id
    from gregor.metadata.zookeeper import parse_connect

    hosts, chroot = parse_connect(connect)
    if not hosts:
        raise MetadataError(f"zookeeper.connect {connect!r} names no server")
    zk = KazooClient(hosts=hosts, timeout=timeout_s)
    try:
        zk.start(timeout=timeout_s)
    except KazooTimeoutError:
        zk.close()
        raise MetadataError(f"cannot connect to ZooKeeper at {hosts} within {timeout_s:g} s") from None
    try:
        if chroot:
            if zk.exists(chroot) is None:
                raise MetadataError(f"ZooKeeper at {hosts} has no {chroot}: check the chroot of zookeeper.connect")
            zk.chroot = chroot
        try:
            data, _ = zk.get(CLUSTER_ID)
            cluster_id = str(json.loads(data)["id"])
        except NoNodeError:
            raise MetadataError(f"no cluster in ZooKeeper at {connect} (no {CLUSTER_ID}): check zookeeper.connect "
                                "and its chroot") from None
        live = tuple(sorted(int(b) for b in (zk.get_children(BROKER_IDS) if zk.exists(BROKER_IDS) else [])))
        try:
            block, _ = zk.get(PRODUCER_ID_BLOCK)
            next_pid = next_producer_id(block)
        except NoNodeError:
            next_pid = 0
        watcher = ZooKeeperWatcher(zk, cluster_id, max_in_flight, lambda ev: None, lambda: None, lambda: None)
        watcher.reload()
        image = watcher.snapshot()
    finally:
        zk.stop()
        zk.close()
    return ZooKeeperMetadata(cluster_id, image, next_pid, live)


def check_offline(zk: ZooKeeperMetadata) -> None:
    if zk.live_brokers:
        raise MetadataError(f"brokers {', '.join(map(str, zk.live_brokers))} are still registered in ZooKeeper: the "
                            "migration is offline, stop every broker of the cluster first")
    moving = sorted(f"{t.name}-{p}" for t in zk.image.topics.values() for p, s in t.partitions.items()
                    if s.adding_replicas or s.removing_replicas)
    if moving:
        raise MetadataError(f"partitions {', '.join(moving[:10])}{' ...' if len(moving) > 10 else ''} are being "
                            "reassigned: finish or cancel the reassignment (gregor reassign) before migrating")


def bootstrap_records(zk: ZooKeeperMetadata, features: dict[str, int]) -> Iterator[kr.AnyRecord]:
    """The quorum's first records: `features` (its metadata.version) and everything ZooKeeper held, as a
    snapshot of the same state would hold them."""
    state = KRaftState()
    state.features = dict(features)
    state.next_producer_id = zk.next_producer_id
    for name, topic in zk.image.topics.items():
        state.meta.topics[name] = topic.copy()
    for entity, configs in zk.image.broker_configs.items():
        state.meta.set_broker_configs(entity, dict(configs))
    for path, configs in zk.image.entity_configs.items():
        state.meta.set_entity_configs(path, dict(configs))
    for pattern, entries in zk.image.acls.items():
        state.meta.set_acls(pattern, entries)
    return state.records()


def foreign_partitions(zk: ZooKeeperMetadata, node_id: int, log_dirs: list[str]) -> list[str]:
    """The partitions this node's log dirs hold that ZooKeeper does not assign to `node_id`: a node given
    another broker's id (or another cluster's dirs) would serve or delete data that is not its own."""
    wrong: list[str] = []
    for d in log_dirs:
        try:
            names = sorted(os.listdir(d))
        except FileNotFoundError:
            continue
        for name in names:
            if not os.path.isdir(os.path.join(d, name)) or name.startswith("__cluster_metadata"):
                continue
            try:
                topic, partition = parse_topic_partition(name)
            except ValueError:
                continue  # not a partition (a deleted one's renamed dir, a stray file)
            t = zk.image.topics.get(topic)
            if t is not None and partition in t.partitions and node_id not in t.partitions[partition].replicas:
                wrong.append(f"{name} (replicas {t.partitions[partition].replicas})")
    return wrong
