"""`gregor elect-leaders`: kafka-leader-election.sh. Sends ElectLeaders (43) to the controller for the
partitions named (all, one topic or partition, or a JSON file) and prints Kafka's lines: partitions
elected, partitions whose valid replica was already leader (ELECTION_NOT_NEEDED), and errors, which
make the exit status 1."""

from __future__ import annotations

import argparse
import json
from typing import Any

from gregor.protocol.errors import ErrorCode
from gregor.protocol.messages.cluster_admin import PREFERRED_ELECTION, UNCLEAN_ELECTION
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

ELECTION_TYPES = {"preferred": PREFERRED_ELECTION, "unclean": UNCLEAN_ELECTION}


def parse_partitions_json(text: str, where: str) -> list[tuple[str, int]]:
    """{"partitions": [{"topic": "t", "partition": 0}, ...]}: kafka-leader-election.sh's file."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{where} is not JSON: {e}") from None
    items = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise UsageError(f'{where} needs {{"partitions": [{{"topic": "t", "partition": 0}}, ...]}}')
    out: list[tuple[str, int]] = []
    for i, item in enumerate(items):
        topic = item.get("topic") if isinstance(item, dict) else None
        partition = item.get("partition") if isinstance(item, dict) else None
        if not isinstance(topic, str) or not isinstance(partition, int) or isinstance(partition, bool):
            raise UsageError(f'{where}: entry {i} needs "topic" (a string) and "partition" (an integer)')
        if (topic, partition) in out:
            raise UsageError(f"{where}: duplicate partition {topic}-{partition}")
        out.append((topic, partition))
    if not out:
        raise UsageError(f"{where} names no partitions")
    return out


def _given(args: argparse.Namespace) -> list[tuple[str, int]] | None:
    """Check the options before connecting; the partitions of --path-to-json-file."""
    given = [n for n, v in (("--all-topic-partitions", args.all_topic_partitions), ("--topic", args.topic),
                            ("--path-to-json-file", args.path_to_json_file)) if v]
    if len(given) != 1:
        raise UsageError("give exactly one of --all-topic-partitions, --topic, --path-to-json-file")
    if args.partition is not None and not args.topic:
        raise UsageError("--partition needs --topic")
    if not args.path_to_json_file:
        return None
    try:
        with open(args.path_to_json_file, encoding="utf-8") as f:
            return parse_partitions_json(f.read(), args.path_to_json_file)
    except OSError as e:
        raise UsageError(f"cannot read {args.path_to_json_file}: {e.strerror}") from None


def _targets(args: argparse.Namespace, client: ClusterClient) -> list[tuple[str, int]] | None:
    """The partitions to elect, None for all of them (the options were checked by _given)."""
    if args.all_topic_partitions:
        return None
    if args.partition is not None:
        return [(args.topic, args.partition)]
    (t,) = client.metadata([args.topic]).topics
    if t.error_code != ErrorCode.NONE:
        raise ToolError(f"Topic '{args.topic}': {error_name(t.error_code)}")
    return [(args.topic, p.partition_index) for p in sorted(t.partitions, key=lambda p: p.partition_index)]


def request_body(election: int, targets: list[tuple[str, int]] | None, timeout_ms: int) -> dict[str, Any]:
    grouped: dict[str, list[int]] = {}
    for topic, p in targets or []:
        grouped.setdefault(topic, []).append(p)
    return {"election_type": election, "timeout_ms": timeout_ms,
            "topic_partitions": None if targets is None else
            [{"topic": t, "partitions": ps} for t, ps in grouped.items()]}


def report(election_name: str, resp: Any) -> int:
    """Kafka's lines for an ElectLeaders response; 1 if anything failed."""
    if resp.get("error_code", 0):
        raise ToolError(f"leader election failed: {error_name(resp.error_code)}")
    done, noop, failed = [], [], []
    for t in resp.replica_election_results:
        for p in t.partition_result:
            tp = f"{t.topic}-{p.partition_id}"
            if p.error_code == ErrorCode.NONE:
                done.append(tp)
            elif p.error_code == ErrorCode.ELECTION_NOT_NEEDED:
                noop.append(tp)
            else:
                failed.append((tp, p.error_code, p.error_message))
    if done:
        print(f"Successfully completed leader election ({election_name}) for partitions {', '.join(done)}")
    if noop:
        print(f"Valid replica already elected for partitions {', '.join(noop)}")
    for tp, code, message in failed:
        print(f"Error completing leader election ({election_name}) for partition: {tp}: "
              f"{error_name(code)}{': ' + message if message else ''}")
    if failed:
        print(f"{len(failed)} replica(s) could not be elected")
        return 1
    return 0


def cmd_elect_leaders(args: argparse.Namespace) -> int:
    election = ELECTION_TYPES.get(args.election_type.lower())
    if election is None:
        raise UsageError(f"--election-type must be preferred or unclean, not {args.election_type!r}")
    from_file = _given(args)
    client = ClusterClient(bootstrap(args), timeout_s(args))
    try:
        targets = from_file if from_file is not None else _targets(args, client)
        body = request_body(election, targets, int(timeout_s(args) * 1000))
        # v0 has no election type (preferred only): an unclean election needs v1+, which to_controller
        # picks whenever the controller serves it.
        resp = client.to_controller(43, body, max_version=2)
        return report(args.election_type.upper(), resp)
    finally:
        client.close()


def add_subcommands(sub: Any) -> None:
    e = sub.add_parser("elect-leaders", formatter_class=HelpFormatter,
                       help="elect partition leaders (preferred or unclean)",
                       description="Ask the controller to elect leaders (the options of kafka-leader-election.sh).",
                       epilog="examples:\n"
                              "  gregor elect-leaders --election-type preferred --all-topic-partitions\n"
                              "  gregor elect-leaders --election-type unclean --topic events --partition 3\n"
                              '  gregor elect-leaders --election-type preferred --path-to-json-file p.json\n'
                              '    (p.json: {"partitions": [{"topic": "events", "partition": 0}]})')
    add_bootstrap(e)
    e.add_argument("--election-type", required=True, metavar="preferred|unclean",
                   help="preferred: the first replica leads again if it is in the ISR; unclean: a replica "
                        "outside the ISR may lead when none in it is live (records may be lost)")
    e.add_argument("--all-topic-partitions", action="store_true", help="every partition")
    e.add_argument("--topic", help="a topic (all its partitions, or --partition)")
    e.add_argument("--partition", type=int, help="(with --topic) one partition")
    e.add_argument("--path-to-json-file", metavar="FILE", help='{"partitions": [{"topic": T, "partition": P}]}')
    add_request_timeout(e)
    e.set_defaults(func=cmd_elect_leaders)
