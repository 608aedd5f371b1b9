"""`gregor metadata-quorum`: kafka-metadata-quorum.sh. Sends DescribeQuorum to a broker of a KRaft cluster (which
asks the quorum's leader) and prints the quorum's status or each replica's replication state.

    gregor metadata-quorum --bootstrap-server HOST:PORT describe --status
    gregor metadata-quorum --bootstrap-server HOST:PORT describe --replication [--human-readable]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from gregor.protocol.errors import ErrorCode
from gregor.protocol.messages.raft import DESCRIBE_QUORUM
from gregor.tools.common import (
    HelpFormatter,
    ToolError,
    UsageError,
    add_bootstrap,
    add_request_timeout,
    bootstrap,
    timeout_s,
)
from gregor.tools.controller_client import ClusterClient, error_name

METADATA_TOPIC = "__cluster_metadata"


def describe(client: ClusterClient) -> tuple[str, Any, Any]:
    """(cluster id, the partition's DescribeQuorum answer, the response) from the bootstrap broker."""
    md = client.metadata([])
    resp = client.to_bootstrap(DESCRIBE_QUORUM, {"topics": [{"topic_name": METADATA_TOPIC,
                                                              "partitions": [{"partition_index": 0}]}]},
                               DESCRIBE_QUORUM.max_version, ": it does not run in KRaft mode")
    if resp.error_code != ErrorCode.NONE:
        raise ToolError(f"DescribeQuorum failed: {error_name(resp.error_code)}"
                        f"{': ' + resp.get('error_message') if resp.get('error_message') else ''}")
    (p,) = [p for t in resp.topics for p in t.partitions]
    if p.error_code != ErrorCode.NONE:
        raise ToolError(f"DescribeQuorum failed: {error_name(p.error_code)}"
                        f"{': ' + p.get('error_message') if p.get('error_message') else ''}")
    return md.get("cluster_id") or "", p, resp


def status_lines(cluster_id: str, p: Any, now_ms: int) -> list[str]:
    """kafka-metadata-quorum.sh describe --status."""
    leader = next((v for v in p.current_voters if v.replica_id == p.leader_id), None)
    followers = [v for v in p.current_voters if v.replica_id != p.leader_id]
    leader_end = leader.log_end_offset if leader is not None else p.high_watermark
    lag = max((leader_end - v.log_end_offset for v in followers), default=0)
    lag_ms = max((now_ms - v.last_caught_up_timestamp if v.last_caught_up_timestamp >= 0 else -1
                  for v in followers), default=0)
    return [f"ClusterId:              {cluster_id}",
            f"LeaderId:               {p.leader_id}",
            f"LeaderEpoch:            {p.leader_epoch}",
            f"HighWatermark:          {p.high_watermark}",
            f"MaxFollowerLag:         {lag}",
            f"MaxFollowerLagTimeMs:   {lag_ms}",
            f"CurrentVoters:          [{','.join(str(v.replica_id) for v in p.current_voters)}]",
            f"CurrentObservers:       [{','.join(str(o.replica_id) for o in p.observers)}]"]


def replication_rows(p: Any, now_ms: int, human: bool) -> list[list[str]]:
    """kafka-metadata-quorum.sh describe --replication: the leader, the other voters, then the observers."""
    leader = next((v for v in p.current_voters if v.replica_id == p.leader_id), None)
    leader_end = leader.log_end_offset if leader is not None else p.high_watermark

    def when(ts: int) -> str:
        if ts < 0:
            return "-1"
        return f"{max(0, now_ms - ts)} ms ago" if human else str(ts)

    rows = [["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]]
    ordered = ([(v, "Leader") for v in p.current_voters if v.replica_id == p.leader_id]
               + [(v, "Follower") for v in p.current_voters if v.replica_id != p.leader_id]
               + [(o, "Observer") for o in p.observers])
    for r, status in ordered:
        rows.append([str(r.replica_id), str(r.log_end_offset), str(max(0, leader_end - r.log_end_offset)),
                     when(r.last_fetch_timestamp), when(r.last_caught_up_timestamp), status])
    return rows


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def cmd_describe(args: argparse.Namespace) -> int:
    if args.status == args.replication:
        raise UsageError("give exactly one of --status, --replication")
    client = ClusterClient(bootstrap(args), timeout_s(args))
    try:
        cluster_id, p, _ = describe(client)
    finally:
        client.close()
    now = int(time.time() * 1000)
    lines = status_lines(cluster_id, p, now) if args.status else _table(replication_rows(p, now, args.human_readable))
    print("\n".join(lines))
    return 0


def add_subcommands(sub: Any) -> None:
    m = sub.add_parser("metadata-quorum", formatter_class=HelpFormatter,
                       help="describe a KRaft cluster's metadata quorum (like kafka-metadata-quorum.sh)",
                       description=__doc__)
    add_bootstrap(m)
    add_request_timeout(m)
    ops = m.add_subparsers(dest="quorum_command", required=True, metavar="COMMAND")
    d = ops.add_parser("describe", help="the quorum's status or its replication", formatter_class=HelpFormatter)
    d.add_argument("--status", action="store_true", help="leader, epoch, high watermark, lag, voters, observers")
    d.add_argument("--replication", action="store_true", help="each replica's log end offset, lag and fetch times")
    d.add_argument("--human-readable", action="store_true", help="with --replication: times as 'N ms ago'")
    d.set_defaults(func=cmd_describe)
