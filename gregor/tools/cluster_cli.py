"""`gregor cluster up|down|status`: a local development cluster (one ZooKeeper, N brokers on loopback)
that outlives the command, like running kafka-server-start.sh in N terminals but in one line.

`up` starts the processes DETACHED (their own sessions, so a Ctrl-C in the terminal does not reach
them), each with its data dir and log file under the cluster dir (default ./gregor-cluster), records
their pids in cluster.json there, waits until every broker is in every broker's Metadata and prints the
bootstrap list. `down` stops the brokers one at a time with SIGTERM (each a controlled shutdown,
handing its leaderships over before the next goes) and then ZooKeeper. `status` shows what runs.
Data stays in the dir: `up` again brings the same cluster back.

`up --kraft` starts no ZooKeeper and no Java process: N nodes that are each a broker and a voter of the
KRaft metadata quorum (node i: broker listener base-port + i, controller listener controller-base-port
+ i), their directories formatted on the first `up` (`gregor storage format`). With `--controllers K`
the roles are apart: K controller-only nodes (ids N..N+K-1, controller listeners controller-base-port +
j) form the quorum and the N brokers are broker-only; `down` stops the brokers first, then the
controllers (a broker's controlled shutdown needs them).

Timeouts are LocalCluster's CLUSTER_DEFAULTS (zookeeper.session.timeout.ms=4000: failover in under
6 s after a crash; replica.lag.time.max.ms=10000), changed with --override.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gregor.tools.common import HelpFormatter, ToolError, UsageError, parse_key_values
from gregor.tools.extras import CLUSTER, require
from gregor.tools.local_cluster import CLUSTER_DEFAULTS, fetch_metadata, wait_until
from gregor.tools.local_zookeeper import ZooKeeperServer

STATE_FILE = "cluster.json"
DEFAULT_DIR = "gregor-cluster"


def _alive(pid: int, marker: str) -> bool:
    """The process runs (not a zombie) and its command line contains `marker`: a pid reused by
    another program after a reboot is never signalled."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return state != "Z" and marker in cmdline


def _read_state(d: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads((d / STATE_FILE).read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ToolError(f"cannot read {d / STATE_FILE}: {e}") from e


def _wait_log(path: Path, proc: subprocess.Popen[bytes], text: str, timeout_s: float) -> None:
    t0 = time.monotonic()
    why = f"did not report {text!r} within {timeout_s:g} s"
    while time.monotonic() < t0 + timeout_s:
        try:
            if text in path.read_text(errors="replace"):
                return
        except FileNotFoundError:
            pass
        code = proc.poll()
        if code is not None:
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            why = f"{how} {time.monotonic() - t0:.1f} s after its start, before it reported {text!r}"
            break
        time.sleep(0.1)
    tail = "\n".join(path.read_text(errors="replace").splitlines()[-20:]) if path.exists() else ""
    raise ToolError(f"broker (pid {proc.pid}) {why}; {path}:\n{tail}")


def kraft_nodes(d: Path, n: int, base_port: int, controller_base_port: int, controllers: int = 0
                ) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The properties of n KRaft brokers (ids 0..n-1) and of the controller-only nodes (ids n.., none when
    `controllers` is 0: the brokers are then combined nodes, all voters), their directories formatted for
    one cluster: the one they already hold if an earlier `up` formatted them, else a new id."""
    from gregor.metadata.meta_properties import format_directories, random_uuid, read

    dirs = [d / f"broker-{i}" / "data" for i in range(n)]
    cdirs = [d / f"controller-{n + j}" / "data" for j in range(controllers)]
    existing = {m.cluster_id for x in dirs + cdirs if (m := read(str(x))) is not None}
    if len(existing) > 1:
        raise ToolError(f"the nodes under {d} are formatted for different clusters: {sorted(existing)}")
    cluster_id = existing.pop() if existing else random_uuid()
    voter_ids = range(n, n + controllers) if controllers else range(n)
    voters = ",".join(f"{v}@127.0.0.1:{controller_base_port + k}" for k, v in enumerate(voter_ids))
    common = {"controller.quorum.voters": voters, "controller.listener.names": "CONTROLLER"}
    brokers, quorum = [], []
    for i, data in enumerate(dirs):
        format_directories([str(data)], cluster_id, i, ignore_formatted=True)
        listeners = f"PLAINTEXT://127.0.0.1:{base_port + i}"
        if not controllers:
            listeners += f",CONTROLLER://127.0.0.1:{controller_base_port + i}"
        brokers.append({"process.roles": "broker" if controllers else "broker,controller", "node.id": str(i),
                        **common, "log.dirs": str(data), "listeners": listeners})
    for j, data in enumerate(cdirs):
        format_directories([str(data)], cluster_id, n + j, ignore_formatted=True)
        quorum.append({"process.roles": "controller", "node.id": str(n + j), **common, "log.dirs": str(data),
                       "listeners": f"CONTROLLER://127.0.0.1:{controller_base_port + j}"})
    return brokers, quorum


def _spawn(props: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """A detached `gregor serve` with these properties, its output appended to `log_path`."""
    cmd = [sys.executable, "-m", "gregor", "serve"]
    for k, v in props.items():
        cmd += ["--override", f"{k}={v}"]
    with open(log_path, "ab") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def cmd_up(args: argparse.Namespace) -> int:
    if args.num_brokers < 1:
        raise UsageError("-n must be at least 1")
    if args.controllers < 0 or (args.controllers and not args.kraft):
        raise UsageError("--controllers needs --kraft, and is 0 (combined nodes) or more")
    d = Path(args.dir).resolve()
    state = _read_state(d)
    if state is not None and any(_alive(b["pid"], "gregor") for b in state["brokers"]):
        raise ToolError(f"a cluster already runs from {d} ('gregor cluster status --dir {args.dir}'; "
                        f"'gregor cluster down --dir {args.dir}' stops it)")
    if not args.kraft:
        require(CLUSTER, "gregor cluster up")
    overrides = {**CLUSTER_DEFAULTS, **parse_key_values(args.override, "--override")}
    d.mkdir(parents=True, exist_ok=True)
    new_state: dict[str, Any]
    controller_props: list[dict[str, str]] = []
    if args.kraft:
        node_props, controller_props = kraft_nodes(d, args.num_brokers, args.base_port, args.controller_base_port,
                                                   args.controllers)
        new_state = {"zookeeper": None, "kraft": True, "brokers": [], "controllers": []}
        zk_line = (f"Quorum:    {node_props[0]['controller.quorum.voters']} (KRaft, no ZooKeeper; "
                   f"{'controller-only nodes' if controller_props else 'combined nodes'})")
    else:
        zk = ZooKeeperServer(d / "zookeeper", port=args.zookeeper_port).start()  # its own session already
        assert zk.proc is not None
        new_state = {"zookeeper": {"pid": zk.proc.pid, "port": zk.port}, "brokers": []}
        node_props = [{"broker.id": str(i), "zookeeper.connect": zk.connect,
                       "log.dirs": str(d / f"broker-{i}" / "data"),
                       "listeners": f"PLAINTEXT://127.0.0.1:{args.base_port + i}"} for i in range(args.num_brokers)]
        zk_line = f"ZooKeeper: {zk.connect}"
    cprocs = []
    for props in controller_props:
        log_path = d / f"controller-{props['node.id']}.log"
        p = _spawn({**overrides, **props}, log_path)
        cprocs.append(p)
        port = int(props["listeners"].rsplit(":", 1)[1])
        new_state["controllers"].append({"id": int(props["node.id"]), "pid": p.pid, "port": port, "log": str(log_path)})
    procs = []
    for i in range(args.num_brokers):
        log_path = d / f"broker-{i}.log"
        p = _spawn({**overrides, **node_props[i]}, log_path)
        procs.append(p)
        new_state["brokers"].append({"id": i, "pid": p.pid, "port": args.base_port + i, "log": str(log_path)})
    (d / STATE_FILE).write_text(json.dumps(new_state, indent=2) + "\n")
    for c, p in zip(new_state.get("controllers", []), cprocs, strict=True):
        _wait_log(Path(c["log"]), p, "Gregor controller", args.timeout)
    for b, p in zip(new_state["brokers"], procs, strict=True):
        _wait_log(Path(b["log"]), p, "all logs loaded:", args.timeout)
    addrs = [f"127.0.0.1:{b['port']}" for b in new_state["brokers"]]
    ids = set(range(args.num_brokers))

    def all_seen() -> bool:
        return all(ids <= set(fetch_metadata(a, [], 2.0).brokers) for a in addrs)

    try:
        wait_until(all_seen, args.timeout, 0.2, "every broker in every broker's Metadata")
    except TimeoutError as e:
        raise ToolError(f"{e}; the cluster is left running for a look at {d}/broker-*.log "
                        f"('gregor cluster down --dir {args.dir}' stops it)") from e
    print(zk_line)
    print(f"Brokers:   {','.join(addrs)}  (logs: {d}/broker-N.log)")
    if controller_props:
        print(f"Controllers: ids {', '.join(p['node.id'] for p in controller_props)}  (logs: {d}/controller-N.log)")
    print(f"Stop with: gregor cluster down --dir {args.dir}")
    return 0


def _terminate(pid: int, marker: str, timeout_s: float) -> bool:
    """SIGTERM and wait; SIGKILL after `timeout_s`. True when it ended within the timeout."""
    if not _alive(pid, marker):
        return True
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid, marker):
            return True
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    return False


def cmd_down(args: argparse.Namespace) -> int:
    d = Path(args.dir).resolve()
    state = _read_state(d)
    if state is None:
        raise ToolError(f"no cluster state in {d} (nothing started with 'gregor cluster up --dir {args.dir}')")
    for b in state["brokers"]:  # one at a time: each controlled shutdown moves leaderships to the rest
        t0 = time.monotonic()
        clean = _terminate(b["pid"], "gregor", args.timeout)
        print(f"broker {b['id']}: {'stopped' if clean else 'killed after ' + str(args.timeout) + ' s'}"
              f" ({time.monotonic() - t0:.1f} s)")
    for c in state.get("controllers", []):  # after the brokers: their controlled shutdowns needed the quorum
        clean = _terminate(c["pid"], "gregor", args.timeout)
        print(f"controller {c['id']}: {'stopped' if clean else 'killed after ' + str(args.timeout) + ' s'}")
    zk = state["zookeeper"]
    if zk is not None:
        _terminate(zk["pid"], "zookeeper", 10.0)
        print("ZooKeeper: stopped")
    (d / STATE_FILE).unlink()
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    d = Path(args.dir).resolve()
    state = _read_state(d)
    if state is None:
        print(f"no cluster in {d}")
        return 1
    zk = state["zookeeper"]
    if zk is not None:
        print(f"ZooKeeper 127.0.0.1:{zk['port']} pid {zk['pid']}: "
              f"{'running' if _alive(zk['pid'], 'zookeeper') else 'not running'}")
    elif state.get("controllers"):
        print("KRaft: broker-only nodes and controller-only nodes, no ZooKeeper")
        for c in state["controllers"]:
            print(f"controller {c['id']} 127.0.0.1:{c['port']} pid {c['pid']}: "
                  f"{'running' if _alive(c['pid'], 'gregor') else 'not running'}")
    else:
        print("KRaft: combined broker and controller nodes, no ZooKeeper")
    md = None
    for b in state["brokers"]:
        up = _alive(b["pid"], "gregor")
        print(f"broker {b['id']} 127.0.0.1:{b['port']} pid {b['pid']}: {'running' if up else 'not running'}")
        if up and md is None:
            try:
                md = fetch_metadata(f"127.0.0.1:{b['port']}", [], 2.0)
            except OSError:
                pass
    if md is not None:
        print(f"live brokers (Metadata): {sorted(md.brokers)}; controller: {md.controller_id}")
    every = state["brokers"] + state.get("controllers", [])
    return 0 if all(_alive(x["pid"], "gregor") for x in every) else 1


def add_subcommands(sub: Any) -> None:
    c = sub.add_parser(
        "cluster", formatter_class=HelpFormatter, help="start, stop and show a local ZooKeeper + N broker cluster",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="examples:\n  gregor cluster up -n 3\n  gregor cluster up -n 3 --kraft\n"
               "  gregor cluster up -n 3 --kraft --controllers 3\n  gregor cluster status\n"
               "  gregor cluster down")
    cs = c.add_subparsers(dest="cluster_command", required=True, metavar="{up,down,status}")
    up = cs.add_parser("up", formatter_class=HelpFormatter, help="start ZooKeeper and N brokers, detached")
    up.add_argument("-n", "--num-brokers", type=int, default=3, help="brokers to start (ids 0..n-1)")
    up.add_argument("--base-port", type=int, default=9092, help="broker i listens on base-port + i")
    up.add_argument("--zookeeper-port", type=int, default=2181, help="ZooKeeper's client port")
    up.add_argument("--kraft", action="store_true",
                    help="no ZooKeeper: every node a broker and a controller of a KRaft quorum (formatted on first up)")
    up.add_argument("--controller-base-port", type=int, default=9192,
                    help="with --kraft: node i's controller listener is on controller-base-port + i")
    up.add_argument("--controllers", type=int, default=0, metavar="K",
                    help="with --kraft: K controller-only nodes form the quorum and the brokers are broker-only "
                         "(default 0: combined nodes)")
    up.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker property for every broker (repeatable)")
    up.set_defaults(func=cmd_up)
    down = cs.add_parser("down", formatter_class=HelpFormatter,
                         help="controlled shutdown of every broker, then ZooKeeper")
    down.set_defaults(func=cmd_down)
    st = cs.add_parser("status", formatter_class=HelpFormatter, help="which processes run; exit 1 if any is down")
    st.set_defaults(func=cmd_status)
    for p, t in ((up, 60.0), (down, 30.0), (st, 10.0)):
        p.add_argument("--dir", default=DEFAULT_DIR, help="cluster dir: data, logs and cluster.json")
        p.add_argument("--timeout", type=float, default=t, help="seconds to wait for each step")
