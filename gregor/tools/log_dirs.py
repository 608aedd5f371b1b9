"""`gregor log-dirs`: the log dirs of each broker and the size of every partition in them, as
kafka-log-dirs.sh prints them.

    gregor log-dirs --bootstrap-server localhost:9092 --describe [--topic-list a,b] [--broker-list 0,1]

It reads the live brokers from Metadata, then asks each (or those of --broker-list) with
DescribeLogDirs (35) on Gregor's codec (confluent-kafka's admin client has no DescribeLogDirs), over
a connection secured as --command-config says (see `gregor quotas`). The JSON on stdout is Kafka's:
{"version":1,"brokers":[{"broker":0,"logDirs":[{"logDir":...,"error":null,"partitions":[
{"partition":"t-0","size":N,"offsetLag":0,"isFuture":false}]}]}]}; a dir's error is the Kafka error
name (KAFKA_STORAGE_ERROR for a dir the broker cannot read).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from gregor.protocol import apis
from gregor.protocol.errors import ErrorCode
from gregor.tools.common import (
    HelpFormatter,
    ToolError,
    UsageError,
    _host_port,
    add_bootstrap,
    add_command_config,
    add_request_timeout,
    bootstrap,
    check_reachable,
    read_command_config,
    timeout_s,
)
from gregor.tools.controller_client import METADATA_VERSION, Connection, error_name
from gregor.tools.quotas import secured_connection

DESCRIBE_LOG_DIRS_KEY = 35
MAX_VERSION = 4


def add_subcommands(sub: Any) -> None:
    p = sub.add_parser("log-dirs", help="describe the log dirs of brokers (like kafka-log-dirs.sh)",
                       description=__doc__, formatter_class=HelpFormatter)
    add_bootstrap(p)
    add_request_timeout(p)
    add_command_config(p)
    p.add_argument("--describe", action="store_true", required=True, help="describe the log dirs")
    p.add_argument("--topic-list", metavar="T1,T2", default="", help="only these topics (default: all)")
    p.add_argument("--broker-list", metavar="B1,B2", default="", help="only these brokers (default: all)")
    p.set_defaults(func=run_log_dirs)


def _parse_list(text: str, option: str, conv: Any = str) -> list[Any]:
    try:
        return [conv(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{option} expects a comma-separated list of broker ids, got {text!r}") from None


def _first_connection(args: argparse.Namespace, props: dict[str, str]) -> Connection:
    servers = bootstrap(args)
    check_reachable(servers, timeout_s(args))
    last: ToolError | None = None
    for server in servers.split(","):
        if server.strip():
            try:
                return secured_connection(*_host_port(server), timeout_s(args), props)
            except UsageError:
                raise
            except ToolError as e:
                last = e
    raise last or ToolError(f"cannot connect to any of {servers}")


def describe_broker(conn: Connection, broker_id: int) -> list[Any]:
    """The DescribeLogDirs results of one broker, at the highest version both sides serve."""
    api = apis.BY_KEY[DESCRIBE_LOG_DIRS_KEY]
    served = next((k for k in conn.request(apis.BY_KEY[18], 0, {}).api_keys if k.api_key == api.key), None)
    if served is None or served.max_version < 1:
        raise ToolError(f"broker {broker_id} does not serve {api.name} (API key {api.key})")
    version = min(served.max_version, MAX_VERSION)
    resp = conn.request(api, version, {"topics": None})
    code = resp.get("error_code", ErrorCode.NONE)
    if code != ErrorCode.NONE:
        raise ToolError(f"DescribeLogDirs to broker {broker_id} failed: {error_name(code)}")
    return list(resp.results)


def log_dirs_json(broker_id: int, results: list[Any], topics: set[str] | None) -> dict[str, Any]:
    """One broker's entry of kafka-log-dirs.sh's JSON."""
    dirs = []
    for r in results:
        partitions = [
            {"partition": f"{t.name}-{p.partition_index}", "size": p.partition_size, "offsetLag": p.offset_lag,
             "isFuture": p.is_future_key}
            for t in r.topics if topics is None or t.name in topics for p in t.partitions
        ]
        dirs.append({"logDir": r.log_dir, "error": None if r.error_code == ErrorCode.NONE else error_name(r.error_code),
                     "partitions": partitions})
    return {"broker": broker_id, "logDirs": dirs}


def run_log_dirs(args: argparse.Namespace) -> int:
    topics = set(_parse_list(args.topic_list, "--topic-list")) or None
    wanted = _parse_list(args.broker_list, "--broker-list", int)
    props = read_command_config(args.command_config)
    conn = _first_connection(args, props)
    try:
        md = conn.request(apis.BY_KEY[3], METADATA_VERSION, {"topics": [], "allow_auto_topic_creation": False})
    finally:
        conn.close()
    live = {b.node_id: (b.host, b.port) for b in md.brokers}
    missing = [b for b in wanted if b not in live]
    if missing:
        raise ToolError(f"The given brokers do not exist from --broker-list: {','.join(map(str, missing))}. "
                        f"Current existent brokers: {','.join(map(str, sorted(live)))}")
    ids = wanted or sorted(live)
    print("Querying brokers for log directories information")
    brokers = []
    for broker_id in ids:
        conn = secured_connection(*live[broker_id], timeout_s(args), props)
        try:
            brokers.append(log_dirs_json(broker_id, describe_broker(conn, broker_id), topics))
        finally:
            conn.close()
    print(f"Received log directory information from brokers {','.join(map(str, ids))}")
    print(json.dumps({"version": 1, "brokers": brokers}, separators=(",", ":")))
    return 0
