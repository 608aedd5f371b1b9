"""`gregor reassign`: kafka-reassign-partitions.sh. --generate proposes a layout for some topics over a
broker list (Kafka's placement, gregor.admin.topic_admin.assign_replicas); --execute sends the
reassignment JSON to the controller (AlterPartitionReassignments, 45) after printing the current
assignment for rollback; --verify compares ListPartitionReassignments (46) and Metadata with the
JSON; --cancel withdraws reassignments under way. The JSON is Kafka's:
{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}.

--execute --throttle B paces the copying as Kafka's tool does, through configs
(IncrementalAlterConfigs, 44): every broker of the old and new replica sets gets the dynamic configs
leader.replication.throttled.rate and follower.replication.throttled.rate = B bytes/s; each topic gets
leader.replication.throttled.replicas (the moving partitions' current replicas, which send) and
follower.replication.throttled.replicas (their new replicas, which copy). --verify removes all of
them once every reassignment in the file has completed.

`log_dirs` entries other than "any" (absolute paths) place replicas on log dirs, as Kafka's tool does:
--execute sends AlterReplicaLogDirs (34) to each broker named, retrying while the replica is not there
yet (a new replica of the reassignment; until --timeout); --verify asks each broker's DescribeLogDirs
(35) whether the replica sits in its dir (done), is being copied there (a future replica: in progress),
or neither."""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from gregor.metadata.store import BrokerInfo
from gregor.protocol.errors import ErrorCode, KafkaError
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

Assignment = dict[tuple[str, int], list[int]]
LogDirs = dict[tuple[str, int, int], str]  # (topic, partition, broker) -> the log dir its replica goes to
ACTIONS = ("generate", "execute", "verify", "cancel")


def _read(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{path} is not JSON: {e}") from None


def parse_topics_json(doc: Any, where: str) -> list[str]:
    """{"topics": [{"topic": "t"}, ...], "version": 1}: --topics-to-move-json-file."""
    items = doc.get("topics") if isinstance(doc, dict) else None
    if not isinstance(items, list) or not items:
        raise UsageError(f'{where} needs {{"topics": [{{"topic": "t"}}], "version": 1}}')
    names = []
    for i, item in enumerate(items):
        name = item.get("topic") if isinstance(item, dict) else None
        if not isinstance(name, str):
            raise UsageError(f'{where}: entry {i} needs "topic" (a string)')
        if name in names:
            raise UsageError(f"{where}: topic {name} is listed twice")
        names.append(name)
    return names


def parse_reassignment_json(doc: Any, where: str) -> Assignment:
    """Kafka's reassignment JSON, checked: version 1, each partition once, distinct integer replicas,
    log_dirs (if given) one per replica, each "any" or an absolute path (`parse_replica_log_dirs`)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise UsageError(f'{where} needs {{"version": 1, "partitions": [{{"topic": "t", "partition": 0, '
                         f'"replicas": [1, 2]}}]}}')
    if doc.get("version", 1) != 1:
        raise UsageError(f"{where}: version {doc.get('version')} is not supported (1 is)")
    out: Assignment = {}
    for i, item in enumerate(doc["partitions"]):
        if not isinstance(item, dict):
            raise UsageError(f"{where}: entry {i} is not an object")
        topic, partition, replicas = item.get("topic"), item.get("partition"), item.get("replicas")
        if not isinstance(topic, str) or not isinstance(partition, int) or isinstance(partition, bool):
            raise UsageError(f'{where}: entry {i} needs "topic" (a string) and "partition" (an integer)')
        if not isinstance(replicas, list) or not replicas or not all(
                isinstance(r, int) and not isinstance(r, bool) for r in replicas):
            raise UsageError(f"{where}: partition {topic}-{partition} needs a non-empty list of broker ids")
        if len(set(replicas)) != len(replicas):
            raise UsageError(f"{where}: partition {topic}-{partition} has duplicate replicas: {replicas}")
        dirs = item.get("log_dirs")
        if dirs is not None:
            if not isinstance(dirs, list) or len(dirs) != len(replicas):
                raise UsageError(f"{where}: partition {topic}-{partition}: log_dirs needs one entry per replica")
            bad = [d for d in dirs if not isinstance(d, str) or (d != "any" and not os.path.isabs(d))]
            if bad:
                raise UsageError(f'{where}: partition {topic}-{partition}: log dir {bad[0]!r} is neither "any" nor '
                                 f"an absolute path")
        if (topic, partition) in out:
            raise UsageError(f"{where}: partition {topic}-{partition} is listed twice")
        out[(topic, partition)] = list(replicas)
    if not out:
        raise UsageError(f"{where} names no partitions")
    return out


def parse_replica_log_dirs(doc: Any) -> LogDirs:
    """The replicas the reassignment JSON (already checked by parse_reassignment_json) places on a log dir."""
    out: LogDirs = {}
    for item in doc["partitions"]:
        for broker, d in zip(item["replicas"], item.get("log_dirs") or [], strict=False):
            if d != "any":
                out[(item["topic"], item["partition"], broker)] = d
    return out


def _replica(key: tuple[str, int, int]) -> str:
    """Kafka's TopicPartitionReplica as its tool prints it: topic-partition-broker."""
    return f"{key[0]}-{key[1]}-{key[2]}"


def move_log_dirs(client: ClusterClient, moves: LogDirs, timeout_s: float) -> list[str]:
    """AlterReplicaLogDirs to each broker for its replicas in `moves`; a replica not on its broker yet
    (REPLICA_NOT_AVAILABLE: the reassignment has not created it) is asked again until `timeout_s`.
    Returns the failures as "t-p-b: ERROR" lines."""
    pending = dict(moves)
    failed: list[str] = []
    deadline = time.monotonic() + timeout_s
    while pending:
        by_broker: dict[int, dict[str, dict[str, list[int]]]] = {}
        for (t, p, b), d in sorted(pending.items()):
            by_broker.setdefault(b, {}).setdefault(d, {}).setdefault(t, []).append(p)
        for b, dirs in by_broker.items():
            resp = client.to_node(b, 34, {"dirs": [
                {"path": d, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
                for d, topics in dirs.items()]}, max_version=2)
            for r in resp.results:
                for part in r.partitions:
                    key = (r.topic_name, part.partition_index, b)
                    if part.error_code == ErrorCode.REPLICA_NOT_AVAILABLE and time.monotonic() < deadline:
                        continue
                    if part.error_code != ErrorCode.NONE:
                        failed.append(f"{_replica(key)}: {error_name(part.error_code)}")
                    pending.pop(key, None)
        if pending:
            time.sleep(0.2)
    return failed


def verify_log_dirs(client: ClusterClient, moves: LogDirs) -> bool:
    """Print where each replica of `moves` is (DescribeLogDirs of its broker); whether all arrived."""
    done = True
    by_broker: dict[int, list[tuple[str, int, int]]] = {}
    for key in sorted(moves):
        by_broker.setdefault(key[2], []).append(key)
    for b, keys in sorted(by_broker.items()):
        topics: dict[str, list[int]] = {}
        for t, p, _ in keys:
            topics.setdefault(t, []).append(p)
        resp = client.to_node(b, 35, {"topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]},
                              max_version=4)
        current: dict[tuple[str, int], str] = {}
        future: dict[tuple[str, int], str] = {}
        for r in resp.results:
            if r.error_code != ErrorCode.NONE:
                continue
            for t in r.topics:
                for part in t.partitions:
                    (future if part.is_future_key else current)[(t.name, part.partition_index)] = r.log_dir
        for t, p, _ in keys:
            want = moves[(t, p, b)]
            if current.get((t, p)) == want and (t, p) not in future:
                print(f"Reassignment of replica {_replica((t, p, b))} completed successfully.")
                continue
            done = False
            if future.get((t, p)) == want:
                print(f"Reassignment of replica {_replica((t, p, b))} is still in progress.")
            elif (t, p) not in current:
                print(f"Partition {t}-{p} is not found in any live log dir on broker {b}. There is likely an "
                      f"offline log directory on the broker.")
            else:
                print(f"Partition {t}-{p} on broker {b} is not being moved from log dir {current[(t, p)]} to {want}.")
    return done


def format_json(assignment: Assignment) -> str:
    """Kafka's one-line reassignment JSON, partitions in topic-partition order."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(assignment.items())]}, separators=(",", ":"))


def _current(client: ClusterClient, topics: list[str]) -> tuple[Assignment, Any]:
    md = client.metadata(sorted(set(topics)))
    out: Assignment = {}
    for t in md.topics:
        if t.error_code != ErrorCode.NONE:
            raise ToolError(f"Topic '{t.name}': {error_name(t.error_code)}"
                            + (" (it does not exist)" if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else ""))
        for p in t.partitions:
            out[(t.name, p.partition_index)] = list(p.replica_nodes)
    return out, md


def generate(client: ClusterClient, topics: list[str], broker_ids: list[int], rack_aware: bool) -> tuple[Assignment, Assignment]:
    """(current, proposed): every partition of the topics moved onto `broker_ids`, with each topic's
    replication factor, by Kafka's placement (rack-aware when the brokers have racks)."""
    from gregor.admin.topic_admin import assign_replicas

    current, md = _current(client, topics)
    known = {b.node_id: b for b in md.brokers}
    missing = [b for b in broker_ids if b not in known]
    if missing:
        raise ToolError(f"Broker(s) {','.join(map(str, missing))} in --broker-list are not live brokers")
    brokers = [BrokerInfo(b, known[b].host, known[b].port, known[b].rack if rack_aware else None) for b in broker_ids]
    proposed: Assignment = {}
    for name in topics:
        parts = sorted(p for (t, p) in current if t == name)
        rf = len(current[(name, parts[0])])
        try:
            layout = assign_replicas(brokers, len(parts), rf)
        except KafkaError as e:
            raise ToolError(f"Topic '{name}': {e.message}") from None
        for p, replicas in layout.items():
            proposed[(name, p)] = replicas
    return current, proposed


def _alter(client: ClusterClient, assignment: dict[tuple[str, int], list[int] | None], timeout_ms: int) -> list[str]:
    """AlterPartitionReassignments; the failures as "t-p: ERROR: message" lines."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for (t, p), r in sorted(assignment.items()):
        topics.setdefault(t, []).append({"partition_index": p, "replicas": r})
    resp = client.to_controller(45, {"timeout_ms": timeout_ms, "topics": [
        {"name": t, "partitions": ps} for t, ps in topics.items()]}, max_version=0)
    if resp.error_code != ErrorCode.NONE:
        raise ToolError(f"{error_name(resp.error_code)}{': ' + resp.error_message if resp.error_message else ''}")
    return [f"{t.name}-{p.partition_index}: {error_name(p.error_code)}"
            f"{': ' + p.error_message if p.error_message else ''}"
            for t in resp.responses for p in t.partitions if p.error_code != ErrorCode.NONE]


_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
_REPLICAS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
_SET, _DELETE = 0, 1
_TOPIC, _BROKER = 2, 4


def _alter_configs(client: ClusterClient, resources: list[dict[str, Any]]) -> None:
    resp = client.to_controller(44, {"resources": resources, "validate_only": False}, max_version=1)
    failed = [f"{r.resource_name or 'cluster default'}: {error_name(r.error_code)}: {r.error_message or ''}"
              for r in resp.responses if r.error_code != ErrorCode.NONE]
    if failed:
        raise ToolError("setting the replication throttle failed:\n" + "\n".join(failed))


def set_throttle(client: ClusterClient, current: Assignment, target: Assignment, rate: int) -> list[int]:
    """Kafka's throttle for a reassignment (module doc); returns the brokers whose rate was set."""
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    brokers: set[int] = set()
    for (t, p), new in sorted(target.items()):
        old = current[(t, p)]
        if old == new:
            continue
        brokers.update(old)
        brokers.update(new)
        leaders.setdefault(t, []).extend(f"{p}:{b}" for b in old)
        followers.setdefault(t, []).extend(f"{p}:{b}" for b in new if b not in old)
    resources = [{"resource_type": _BROKER, "resource_name": str(b), "configs": [
        {"name": n, "config_operation": _SET, "value": str(rate)} for n in _RATES]} for b in sorted(brokers)]
    resources += [{"resource_type": _TOPIC, "resource_name": t, "configs": [
        {"name": _REPLICAS[0], "config_operation": _SET, "value": ",".join(leaders[t])},
        {"name": _REPLICAS[1], "config_operation": _SET, "value": ",".join(followers.get(t, []))}]}
        for t in sorted(leaders)]
    if resources:
        _alter_configs(client, resources)
    return sorted(brokers)


def clear_throttle(client: ClusterClient, topics: list[str]) -> list[int]:
    """Remove the throttle rates from every live broker and the throttled replicas from `topics`."""
    brokers = sorted(b.node_id for b in client.metadata([]).brokers)
    resources = [{"resource_type": _BROKER, "resource_name": str(b), "configs": [
        {"name": n, "config_operation": _DELETE, "value": None} for n in _RATES]} for b in brokers]
    resources += [{"resource_type": _TOPIC, "resource_name": t, "configs": [
        {"name": n, "config_operation": _DELETE, "value": None} for n in _REPLICAS]} for t in sorted(set(topics))]
    _alter_configs(client, resources)
    return brokers


def _in_progress(client: ClusterClient, parts: list[tuple[str, int]], timeout_ms: int) -> dict[tuple[str, int], Any]:
    topics: dict[str, list[int]] = {}
    for t, p in sorted(parts):
        topics.setdefault(t, []).append(p)
    resp = client.to_controller(46, {"timeout_ms": timeout_ms, "topics": [
        {"name": t, "partition_indexes": ps} for t, ps in topics.items()]}, max_version=0)
    if resp.error_code != ErrorCode.NONE:
        raise ToolError(f"{error_name(resp.error_code)}{': ' + resp.error_message if resp.error_message else ''}")
    return {(t.name, p.partition_index): p for t in resp.topics for p in t.partitions}


def cmd_reassign(args: argparse.Namespace) -> int:
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        raise UsageError("give exactly one of --generate, --execute, --verify, --cancel")
    action = chosen[0]
    if action == "generate":
        if not args.topics_to_move_json_file or not args.broker_list:
            raise UsageError("--generate needs --topics-to-move-json-file FILE and --broker-list IDS")
        try:
            broker_ids = [int(b) for b in args.broker_list.split(",")]
        except ValueError:
            raise UsageError(f"--broker-list expects comma-separated broker ids, got {args.broker_list!r}") from None
        if len(set(broker_ids)) != len(broker_ids):
            raise UsageError(f"--broker-list has duplicate broker ids: {args.broker_list}")
        topics = parse_topics_json(_read(args.topics_to_move_json_file), args.topics_to_move_json_file)
    else:
        if not args.reassignment_json_file:
            raise UsageError(f"--{action} needs --reassignment-json-file FILE")
        doc = _read(args.reassignment_json_file)
        target = parse_reassignment_json(doc, args.reassignment_json_file)
        dir_moves = parse_replica_log_dirs(doc)
    if args.throttle is not None and (action != "execute" or args.throttle < 0):
        raise UsageError("--throttle takes a rate in bytes/s >= 0, with --execute")
    timeout_ms = int(timeout_s(args) * 1000)
    client = ClusterClient(bootstrap(args), timeout_s(args))
    try:
        if action == "generate":
            current, proposed = generate(client, topics, broker_ids, not args.disable_rack_aware)
            print("Current partition replica assignment")
            print(format_json(current))
            print()
            print("Proposed partition reassignment configuration")
            print(format_json(proposed))
            return 0
        if action == "execute":
            current, _ = _current(client, sorted({t for t, _ in target}))
            unknown = [f"{t}-{p}" for t, p in sorted(target) if (t, p) not in current]
            if unknown:
                raise ToolError(f"Partitions not found: {', '.join(unknown)}")
            print("Current partition replica assignment")
            print()
            print(format_json({tp: current[tp] for tp in target}))
            print()
            print("Save this to use as the --reassignment-json-file option during rollback")
            if args.throttle is not None:
                set_throttle(client, current, dict(target), args.throttle)
                print("Warning: You must run --verify periodically, until the reassignment completes, to ensure "
                      "the throttle is removed.")
                print(f"The inter-broker throttle limit was set to {args.throttle} B/s")
            changing = {tp: r for tp, r in target.items() if current[tp] != r} if dir_moves else dict(target)
            if changing:
                failed = _alter(client, changing, timeout_ms)
                if failed:
                    print("Error reassigning partition(s):\n" + "\n".join(failed))
                    return 1
                print("Successfully started partition reassignments for "
                      f"{','.join(f'{t}-{p}' for t, p in sorted(changing))}")
            if dir_moves:
                failed = move_log_dirs(client, dir_moves, timeout_s(args))
                started = [_replica(k) for k in sorted(dir_moves) if not any(f.startswith(_replica(k) + ":")
                                                                             for f in failed)]
                if started:
                    print(f"Successfully started log directory move{'s' if len(started) > 1 else ''} for: "
                          f"{','.join(started)}")
                if failed:
                    print("Error moving replica(s) between log directories:\n" + "\n".join(failed))
                    return 1
            return 0
        if action == "cancel":
            failed = _alter(client, dict.fromkeys(target), timeout_ms)
            ok = [f"{t}-{p}" for t, p in sorted(target) if not any(f.startswith(f"{t}-{p}:") for f in failed)]
            if ok:
                print(f"Successfully cancelled partition reassignments for: {','.join(ok)}")
            if failed:
                print("Error cancelling partition reassignment(s):\n" + "\n".join(failed))
                return 1
            return 0
        # verify
        moving = _in_progress(client, list(target), timeout_ms)
        current, _ = _current(client, sorted({t for t, _ in target}))
        print("Status of partition reassignment:")
        done = True
        for tp in sorted(target):
            name = f"{tp[0]}-{tp[1]}"
            if tp in moving:
                print(f"Reassignment of partition {name} is still in progress.")
                done = False
            elif current.get(tp) == target[tp]:
                print(f"Reassignment of partition {name} is completed.")
            else:
                have = ",".join(map(str, current.get(tp, [])))
                print(f"There is no active reassignment of partition {name}, but replica set is {have} rather "
                      f"than {','.join(map(str, target[tp]))}.")
                done = False
        if dir_moves:
            print()
            print("Status of log directory movement:")
            done = verify_log_dirs(client, dir_moves) and done
        if done:
            brokers = clear_throttle(client, [t for t, _ in target])
            print(f"Clearing broker-level throttles on brokers {','.join(map(str, brokers))}")
            print(f"Clearing topic-level throttles on topic(s) {','.join(sorted({t for t, _ in target}))}")
        return 0 if done else 1
    finally:
        client.close()


def add_subcommands(sub: Any) -> None:
    r = sub.add_parser("reassign", formatter_class=HelpFormatter, help="move partition replicas between brokers",
                       description="Generate, execute, verify or cancel partition reassignments (the options of "
                                   "kafka-reassign-partitions.sh).",
                       epilog="examples:\n"
                              "  gregor reassign --generate --topics-to-move-json-file topics.json --broker-list 1,2,3\n"
                              '    (topics.json: {"topics": [{"topic": "events"}], "version": 1})\n'
                              "  gregor reassign --execute --reassignment-json-file plan.json\n"
                              "  gregor reassign --verify --reassignment-json-file plan.json")
    actions = r.add_argument_group("actions (exactly one)")
    actions.add_argument("--generate", action="store_true", help="propose a layout of --topics-to-move-json-file "
                                                                 "over --broker-list")
    actions.add_argument("--execute", action="store_true", help="start the reassignment in --reassignment-json-file")
    actions.add_argument("--verify", action="store_true", help="report whether it completed (exit 1 if not)")
    actions.add_argument("--cancel", action="store_true", help="cancel the reassignments under way in the file")
    add_bootstrap(r)
    r.add_argument("--topics-to-move-json-file", metavar="FILE", help='(--generate) {"topics": [{"topic": T}], '
                                                                      '"version": 1}')
    r.add_argument("--broker-list", metavar="IDS", help="(--generate) the brokers to place replicas on: \"1,2,3\"")
    r.add_argument("--disable-rack-aware", action="store_true", help="(--generate) ignore the brokers' racks")
    r.add_argument("--reassignment-json-file", metavar="FILE",
                   help='{"version": 1, "partitions": [{"topic": T, "partition": P, "replicas": [..]}]}')
    r.add_argument("--throttle", type=int, metavar="BYTES_PER_S",
                   help="(--execute) pace the copying to this many bytes/s per broker (removed by --verify once "
                        "done)")
    add_request_timeout(r)
    r.set_defaults(func=cmd_reassign)
