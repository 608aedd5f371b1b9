"""Real KRaft nodes as child processes (tests, benchmarks, `gregor cluster up --kraft`): each a `gregor serve`
with `process.roles`, its directories formatted for one cluster as `gregor storage format` does.

A voter's controller listener must be on the port `controller.quorum.voters` names, so those ports are
picked free up front; the broker listener takes any free port (kept across restarts by BrokerProcess).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from gregor.metadata.meta_properties import format_directories, random_uuid
from gregor.tools.local_broker import BrokerProcess
from gregor.tools.ports import pick_ports


def kraft_quorum(base: Path, n: int, overrides: dict[str, str] | None = None,
                 cluster_id: str | None = None) -> list[BrokerProcess]:
    """`n` combined (broker,controller) nodes 1..n, formatted, not started: node i keeps its data in
    `base/node-i`. `overrides` go to every node."""
    cluster_id = cluster_id or random_uuid()
    ports = pick_ports(n)
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
    nodes = []
    for i, port in enumerate(ports):
        node_id = i + 1
        data = base / f"node-{node_id}"
        format_directories([str(data)], cluster_id, node_id, ignore_formatted=True)
        props = {"process.roles": "broker,controller", "node.id": str(node_id), "controller.quorum.voters": voters,
                 "controller.listener.names": "CONTROLLER",
                 "listeners": f"PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{port}",
                 "log.dirs": str(data)}
        props.update(overrides or {})
        nodes.append(BrokerProcess(data, props))
    return nodes


def kraft_split(base: Path, controllers: int, brokers: int, overrides: dict[str, str] | None = None,
                cluster_id: str | None = None) -> tuple[list[BrokerProcess], list[BrokerProcess]]:
    """A quorum of `controllers` controller-only nodes (ids 1..controllers) and `brokers` broker-only nodes
    (the ids after them), formatted, not started: (controllers, brokers). Node i keeps its data in
    `base/node-i`; `overrides` go to every node."""
    cluster_id = cluster_id or random_uuid()
    ports = pick_ports(controllers)
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
    common = {"controller.quorum.voters": voters, "controller.listener.names": "CONTROLLER"}

    def node(node_id: int, roles: str, listeners: str) -> BrokerProcess:
        data = base / f"node-{node_id}"
        format_directories([str(data)], cluster_id, node_id, ignore_formatted=True)
        props = {"process.roles": roles, "node.id": str(node_id), **common, "listeners": listeners,
                 "log.dirs": str(data), **(overrides or {})}
        return BrokerProcess(data, props)

    quorum = [node(i + 1, "controller", f"CONTROLLER://127.0.0.1:{p}") for i, p in enumerate(ports)]
    return quorum, [node(controllers + i + 1, "broker", "PLAINTEXT://127.0.0.1:0") for i in range(brokers)]


def run_together(starts: list[Callable[[], object]]) -> None:
    """Run the calls at once, one thread each (KRaft nodes must start together: each waits for a quorum
    leader, which needs a majority of the voters running); the first error is raised once every call ended."""
    errors: list[BaseException] = []

    def one(start: Callable[[], object]) -> None:
        try:
            start()
        except BaseException as e:  # raised below, on the caller's thread
            errors.append(e)

    threads = [threading.Thread(target=one, args=(f,), name=f"start-node-{i}") for i, f in enumerate(starts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def start_together(nodes: list[BrokerProcess], timeout_s: float = 90.0) -> float:
    """Start the nodes at once (see run_together); the seconds it took."""
    t0 = time.monotonic()
    run_together([lambda n=n: n.start(timeout_s=timeout_s) for n in nodes])
    return time.monotonic() - t0
