"""`gregor transactions`: kafka-transactions.sh. `list` asks every broker for the transactional ids it
coordinates (ListTransactions), `describe` asks an id's coordinator (FindCoordinator key type 1, then
DescribeTransactions), `abort` ends a hanging transaction on one partition: it finds the producer whose
open transaction starts at --start-offset there (DescribeProducers on the leader) and writes an abort
marker for it (WriteTxnMarkers to the leader), as Kafka's admin abortTransaction does."""

from __future__ import annotations

import argparse
import time
from typing import Any

from gregor.protocol.errors import ErrorCode
from gregor.tools.common import HelpFormatter, ToolError, add_bootstrap, add_request_timeout, bootstrap, timeout_s
from gregor.tools.controller_client import ClusterClient, error_name

FIND_COORDINATOR, WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 10, 27, 61, 65, 66


def _table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


def cmd_list(args: argparse.Namespace, client: ClusterClient) -> int:
    rows = []
    failed = 0
    for b in sorted(client.metadata([]).brokers, key=lambda b: b.node_id):
        resp = client.to_node(b.node_id, LIST_TRANSACTIONS, {"state_filters": [], "producer_id_filters": [],
                                                             "duration_filter": -1}, 1)
        if resp.error_code != ErrorCode.NONE:
            print(f"broker {b.node_id}: {error_name(resp.error_code)}")
            failed += 1
            continue
        for t in resp.transaction_states:
            rows.append([t.transactional_id, str(b.node_id), str(t.producer_id), t.transaction_state])
    _table(sorted(rows), ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"])
    return 1 if failed else 0


def _coordinator(client: ClusterClient, transactional_id: str) -> int:
    any_broker = sorted(client.metadata([]).brokers, key=lambda b: b.node_id)[0].node_id
    resp = client.to_node(any_broker, FIND_COORDINATOR, {"key": transactional_id, "key_type": 1,
                                                        "coordinator_keys": [transactional_id]}, 4)
    (c,) = resp.coordinators
    if c.error_code != ErrorCode.NONE:
        raise ToolError(f"cannot find the coordinator of {transactional_id}: {error_name(c.error_code)}")
    return int(c.node_id)


def cmd_describe(args: argparse.Namespace, client: ClusterClient) -> int:
    node = _coordinator(client, args.transactional_id)
    resp = client.to_node(node, DESCRIBE_TRANSACTIONS, {"transactional_ids": [args.transactional_id]}, 0)
    (t,) = resp.transaction_states
    if t.error_code != ErrorCode.NONE:
        raise ToolError(f"transactional id {args.transactional_id}: {error_name(t.error_code)}")
    now = int(time.time() * 1000)
    duration = str(now - t.transaction_start_time_ms) if t.transaction_start_time_ms >= 0 else "None"
    parts = ",".join(f"{x.topic}-{p}" for x in t.topics for p in x.partitions)
    _table([[str(node), t.transactional_id, str(t.producer_id), str(t.producer_epoch), t.transaction_state,
             str(t.transaction_timeout_ms), str(t.transaction_start_time_ms), duration, parts]],
           ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
            "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"])
    return 0


def _leader(client: ClusterClient, topic: str, partition: int) -> int:
    (t,) = client.metadata([topic]).topics
    if t.error_code != ErrorCode.NONE:
        raise ToolError(f"topic {topic}: {error_name(t.error_code)}")
    p = next((p for p in t.partitions if p.partition_index == partition), None)
    if p is None or p.leader_id < 0:
        raise ToolError(f"{topic}-{partition} has no leader")
    return int(p.leader_id)


def cmd_abort(args: argparse.Namespace, client: ClusterClient) -> int:
    leader = _leader(client, args.topic, args.partition)
    resp = client.to_node(leader, DESCRIBE_PRODUCERS,
                          {"topics": [{"name": args.topic, "partition_indexes": [args.partition]}]}, 0)
    part = resp.topics[0].partitions[0]
    if part.error_code != ErrorCode.NONE:
        raise ToolError(f"{args.topic}-{args.partition}: {error_name(part.error_code)}")
    producer: Any = next((p for p in part.active_producers if p.current_txn_start_offset == args.start_offset), None)
    if producer is None:
        raise ToolError(f"no open transaction starts at offset {args.start_offset} in {args.topic}-{args.partition}")
    body = {"markers": [{"producer_id": producer.producer_id, "producer_epoch": producer.producer_epoch,
                         "transaction_result": False, "coordinator_epoch": max(producer.coordinator_epoch, 0),
                         "topics": [{"name": args.topic, "partition_indexes": [args.partition]}]}]}
    out = client.to_node(leader, WRITE_TXN_MARKERS, body, 1)
    code = out.markers[0].topics[0].partitions[0].error_code
    if code != ErrorCode.NONE:
        raise ToolError(f"aborting the transaction of producer {producer.producer_id}: {error_name(code)}")
    print(f"Aborted the transaction of producer {producer.producer_id} (epoch {producer.producer_epoch}) "
          f"starting at offset {args.start_offset} in {args.topic}-{args.partition}")
    return 0


def run(args: argparse.Namespace) -> int:
    client = ClusterClient(bootstrap(args), timeout_s(args))
    try:
        return int(args.action(args, client))
    finally:
        client.close()


def add_subcommands(sub: Any) -> None:
    t = sub.add_parser("transactions", formatter_class=HelpFormatter,
                       help="list, describe and abort transactions (like kafka-transactions.sh)",
                       description="Inspect transactions and abort a hanging one.",
                       epilog="examples:\n"
                              "  gregor transactions list\n"
                              "  gregor transactions describe --transactional-id my-app\n"
                              "  gregor transactions abort --topic events --partition 0 --start-offset 42")
    add_bootstrap(t)
    add_request_timeout(t)
    ts = t.add_subparsers(dest="transactions_command", required=True, metavar="ACTION")
    ls = ts.add_parser("list", help="every transactional id and its state, by coordinator")
    d = ts.add_parser("describe", help="one transactional id's state and partitions")
    a = ts.add_parser("abort", help="abort the open transaction starting at an offset of a partition")
    for child in (ls, d, a):  # the connection options before or after the action, as kafka-transactions.sh
        child.add_argument("--bootstrap-server", default=argparse.SUPPRESS, metavar="HOST:PORT[,HOST:PORT]",
                           help="broker(s) to connect to")
        child.add_argument("--request-timeout-ms", type=int, default=argparse.SUPPRESS,
                           help="give up on a broker that does not answer within this time")
    ls.set_defaults(func=run, action=cmd_list)
    d.add_argument("--transactional-id", required=True)
    d.set_defaults(func=run, action=cmd_describe)
    a.add_argument("--topic", required=True)
    a.add_argument("--partition", type=int, required=True)
    a.add_argument("--start-offset", type=int, required=True,
                   help="the first offset of the hanging transaction (DescribeProducers' current_txn_start_offset)")
    a.set_defaults(func=run, action=cmd_abort)
