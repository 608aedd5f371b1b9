"""`gregor migrate zookeeper-to-kraft`: move a stopped ZooKeeper-mode cluster to a KRaft quorum, offline.

    gregor migrate zookeeper-to-kraft --zookeeper-connect HOST:PORT[/chroot] --config node.properties

Run once on every node, with every broker stopped. `node.properties` is the node's KRaft configuration:
`process.roles=broker,controller`, `node.id` = the broker.id it had, its `controller.quorum.voters`,
and the same `log.dirs` as before. The tool reads the cluster's metadata from ZooKeeper (it writes
nothing there), formats the node's directories with the ZooKeeper cluster's id, and leaves the
metadata as the quorum's bootstrap records (`bootstrap.checkpoint` in the metadata log dir). Then
start the nodes (`gregor serve node.properties`): the first active controller writes those records,
and every topic, config, ACL, quota, SCRAM credential, committed offset and transaction is there,
served from the log dirs as they were. See gregor.metadata.zk_migration for what is carried.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from gregor.config import BrokerConfig
from gregor.config.kraft import CONTROLLER_ROLE
from gregor.controller.quorum_controller import default_bootstrap
from gregor.metadata import bootstrap, meta_properties
from gregor.metadata import kraft_records as kr
from gregor.metadata.store import MetadataError
from gregor.metadata.zk_migration import bootstrap_records, check_offline, foreign_partitions, read_zookeeper
from gregor.raft.metadata_log import METADATA_LOG_DIR_NAME
from gregor.tools.common import HelpFormatter, ToolError, UsageError
from gregor.tools.storage import load_config, metadata_directory, node_directories


def add_subcommands(sub: Any) -> None:
    p = sub.add_parser("migrate", help="move a stopped ZooKeeper-mode cluster to KRaft (offline)",
                       description=__doc__, formatter_class=HelpFormatter)
    ops = p.add_subparsers(dest="migrate_command", required=True, metavar="COMMAND")
    z = ops.add_parser("zookeeper-to-kraft", help="format this node from the cluster's ZooKeeper metadata",
                       formatter_class=HelpFormatter)
    z.add_argument("--zookeeper-connect", required=True, metavar="HOST:PORT[/CHROOT]",
                   help="the cluster's zookeeper.connect, as its brokers had it")
    z.add_argument("--config", "-c", required=True, metavar="FILE", help="the node's KRaft server.properties")
    z.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a property on top of the file's (repeatable)")
    z.add_argument("--zookeeper-timeout-ms", type=int, default=30000, help="connection and request timeout")
    z.set_defaults(func=run_zookeeper_to_kraft)


def _metadata_log_has_records(config: BrokerConfig) -> bool:
    d = os.path.join(metadata_directory(config), METADATA_LOG_DIR_NAME)
    try:
        return any(n.endswith((".log", ".checkpoint")) and os.path.getsize(os.path.join(d, n)) > 0
                   for n in os.listdir(d))
    except FileNotFoundError:
        return False


def run_zookeeper_to_kraft(args: argparse.Namespace) -> int:
    config = load_config(args)
    if CONTROLLER_ROLE not in config.process_roles:
        raise UsageError(f"{args.config}: process.roles must be broker,controller (the node a ZooKeeper-mode "
                         "broker becomes; separate controller-only nodes are not supported yet)")
    if config.get("zookeeper.connect"):
        raise UsageError(f"{args.config} still sets zookeeper.connect: a KRaft node must not")
    node_id: int = config.get("node.id")
    if _metadata_log_has_records(config):
        raise ToolError(f"{metadata_directory(config)} already holds a KRaft metadata log: this node ran as a KRaft "
                        "node, and a migration only starts a new quorum")
    try:
        zk = read_zookeeper(args.zookeeper_connect, args.zookeeper_timeout_ms / 1000)
        check_offline(zk)
    except MetadataError as e:
        raise ToolError(str(e)) from None
    wrong = foreign_partitions(zk, node_id, config.log_dirs)
    if wrong:
        raise ToolError(f"node.id {node_id} is not the broker whose data {', '.join(config.log_dirs)} hold: "
                        f"ZooKeeper assigns {', '.join(wrong[:5])}{' ...' if len(wrong) > 5 else ''} to other "
                        "brokers. Give each node the broker.id it had.")
    features = {r.name: r.feature_level for r in default_bootstrap()}
    records = [kr.encode(r) for r in bootstrap_records(zk, features)]
    try:
        formatted = meta_properties.format_directories(node_directories(config), zk.cluster_id, node_id,
                                                       ignore_formatted=True)
        path = bootstrap.write(metadata_directory(config), records)
    except (MetadataError, OSError) as e:
        raise ToolError(str(e)) from None
    img = zk.image
    partitions = sum(len(t.partitions) for t in img.topics.values())
    print(f"Read cluster {zk.cluster_id} from ZooKeeper: {len(img.topics)} topics ({partitions} partitions), "
          f"{len(img.broker_configs)} broker config entities, {len(img.entity_configs)} user/client/group "
          f"entities, {sum(len(e) for e in img.acls.values())} ACLs; producer ids continue at "
          f"{zk.next_producer_id}.")
    for d in formatted:
        print(f"Formatting {d} with cluster id {zk.cluster_id} for node {node_id}.")
    print(f"Wrote {len(records)} bootstrap records to {path}. Start the node with its KRaft configuration.")
    return 0
