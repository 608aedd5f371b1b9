"""`gregor storage`: prepare a KRaft node's directories, as kafka-storage.sh does.

    gregor storage random-uuid
    gregor storage format --cluster-id ID --config server.properties [--override K=V ...] [--ignore-formatted]
                          [--add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]' ...]
    gregor storage info --config server.properties

`format` writes `meta.properties` (version 1: cluster.id, node.id, a new directory.id) in every log dir
and in the metadata log dir of the node the config describes, and, in the metadata log dir of a
controller, the bootstrap records the quorum's first leader writes into its log (the feature levels,
and whatever `gregor migrate zookeeper-to-kraft` adds; with `--add-scram`, SCRAM credentials, KIP-900,
gregor/tools/bootstrap_scram.py). A node refuses to start on a directory without it. Every node of a
cluster is formatted with the same cluster id.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from gregor.config import BrokerConfig, ConfigError, read_properties
from gregor.config.kraft import CONTROLLER_ROLE
from gregor.controller.quorum_controller import default_bootstrap
from gregor.metadata import bootstrap, kraft_records, meta_properties
from gregor.metadata.store import MetadataError
from gregor.tools import bootstrap_scram
from gregor.tools.common import HelpFormatter, ToolError, UsageError, parse_key_values


def add_subcommands(sub: Any) -> None:
    p = sub.add_parser("storage", help="format a KRaft node's directories (like kafka-storage.sh)",
                       description=__doc__, formatter_class=HelpFormatter)
    ops = p.add_subparsers(dest="storage_command", required=True, metavar="COMMAND")
    r = ops.add_parser("random-uuid", help="print a new cluster id", formatter_class=HelpFormatter)
    r.set_defaults(func=run_random_uuid)
    f = ops.add_parser("format", help="format the node's log dirs and metadata log dir", formatter_class=HelpFormatter)
    f.add_argument("--cluster-id", "-t", required=True, help="the cluster id (gregor storage random-uuid)")
    _add_config(f)
    f.add_argument("--ignore-formatted", "-g", action="store_true",
                   help="skip directories already formatted (for this cluster) instead of failing")
    f.add_argument("--add-scram", "-S", action="append", default=[], metavar="MECHANISM=[name=..,password=..]",
                   help="a SCRAM credential in the bootstrap records, e.g. 'SCRAM-SHA-256=[name=alice,password=s3cr3t]' "
                        "(optional iterations=, salt=; repeatable; written on controllers)")
    f.set_defaults(func=run_format)
    i = ops.add_parser("info", help="show what the node's directories are formatted as", formatter_class=HelpFormatter)
    _add_config(i)
    i.set_defaults(func=run_info)


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", required=True, metavar="FILE", help="the node's server.properties")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a property on top of the file's (repeatable)")


def load_config(args: argparse.Namespace) -> BrokerConfig:
    try:
        props = read_properties(args.config)
    except OSError as e:
        raise ToolError(f"cannot read {args.config}: {e}") from None
    except ConfigError as e:
        raise ToolError(str(e)) from None
    props.update(parse_key_values(args.override, "--override"))
    try:
        return BrokerConfig(props)
    except ConfigError as e:
        raise ToolError(f"{args.config}: {e}") from None


def node_directories(config: BrokerConfig) -> list[str]:
    """Every directory of the node: its log dirs and its metadata log dir (metadata.log.dir, else the first
    log dir), once each."""
    return meta_properties.node_directories(config.log_dirs, config.get("metadata.log.dir"))


def metadata_directory(config: BrokerConfig) -> str:
    meta = config.get("metadata.log.dir")
    return os.path.abspath(meta) if meta else config.log_dirs[0]


def run_random_uuid(args: argparse.Namespace) -> int:
    print(meta_properties.random_uuid())
    return 0


def run_format(args: argparse.Namespace) -> int:
    config = load_config(args)
    if not config.process_roles:
        raise UsageError(f"{args.config} does not set process.roles: only a KRaft node's directories are formatted "
                         "(a ZooKeeper-mode or lone broker needs none)")
    try:
        meta_properties.parse_uuid(args.cluster_id)
    except ValueError as e:
        raise UsageError(str(e)) from None
    scram = bootstrap_scram.credential_records(args.add_scram)  # checked before anything is written
    try:
        written = format_node(config, args.cluster_id, args.ignore_formatted)
        meta_dir = os.path.abspath(metadata_directory(config))
        if scram and CONTROLLER_ROLE in config.process_roles and meta_dir in written:
            existing = bootstrap.read(meta_dir)
            bootstrap.write(meta_dir, (existing if existing is not None else
                                       [kraft_records.encode(r) for r in default_bootstrap()]) + scram)
            print(f"Bootstrap records in {bootstrap.path_in(meta_dir)}: {len(scram)} user(s) with SCRAM credentials.")
        elif scram:
            print("--add-scram: nothing written (only a controller newly formatted holds the bootstrap records).")
    except (MetadataError, OSError) as e:
        raise ToolError(str(e)) from None
    if not written:
        print("All of the log directories are already formatted.")
    for d in written:
        print(f"Formatting {d} with cluster id {args.cluster_id} for node {config.get('node.id')}.")
    return 0


def format_node(config: BrokerConfig, cluster_id: str, ignore_formatted: bool = False) -> list[str]:
    """Format every directory of the node `config` describes; the directories written."""
    return meta_properties.format_directories(node_directories(config), cluster_id, config.get("node.id"),
                                              ignore_formatted)


def run_info(args: argparse.Namespace) -> int:
    config = load_config(args)
    found = 0
    for d in node_directories(config):
        try:
            meta = meta_properties.read(d)
        except MetadataError as e:
            print(f"{d}: {e}")
            continue
        if meta is None:
            print(f"{d}: not formatted")
        else:
            found += 1
            print(f"{d}: version={meta.version} cluster.id={meta.cluster_id} node.id={meta.node_id} "
                  f"directory.id={meta.directory_id}")
    return 0 if found else 1
