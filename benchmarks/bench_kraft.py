"""KRaft mode against ZooKeeper mode, in the same run: three brokers on loopback each way.

    PYTHONPATH=. python benchmarks/bench_kraft.py [--smoke] [--partitions 1000] [--failovers 3]
                                                  [--modes kraft,zookeeper] [--leader-failovers 3]

For each mode (KRaft: three combined broker,controller nodes, Kafka's quorum defaults; ZooKeeper: one
ZooKeeper and three brokers, LocalCluster's zookeeper.session.timeout.ms=4000):

- start: from launching every process (ZooKeeper's included) to every broker in every broker's Metadata;
- propagation: a CreateTopics of `--partitions` partitions (RF 1) acknowledged, then until every broker's
  Metadata shows all of them with a leader;
- controller failover (`--failovers` times): SIGKILL of the controller (KRaft: the quorum's leader), until
  the survivors' Metadata name a new live controller, and until a CreateTopics is accepted; the killed
  node is restarted and seen by every broker before the next round;
- partition leader failover (`--leader-failovers` times), on a cluster of its own per session setting:
  SIGKILL of a broker that leads partitions of a 6-partition RF=3 topic and is not the controller, until
  every survivor's Metadata names a new leader for each of them. Detection is the session's end:
  Kafka's defaults (KRaft broker.session.timeout.ms=9000 with 2 s heartbeats, ZooKeeper
  zookeeper.session.timeout.ms=18000) and short ones (3000 each, KRaft heartbeats every 500 ms).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: keep PYTHONPATH's gregor first, then this checkout's
    sys.path.append(str(Path(__file__).resolve().parent.parent))

from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from gregor.tools.kraft_nodes import kraft_quorum, start_together  # noqa: E402
from gregor.tools.local_broker import BrokerProcess  # noqa: E402
from gregor.tools.local_cluster import LocalCluster, fetch_metadata  # noqa: E402


def wait(what: str, fn: Callable[[], Any], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if fn():
                return
        except (OSError, KafkaException):
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{what} not within {timeout_s} s")


class Cluster:
    """The three brokers of one mode, by id."""

    def __init__(self, mode: str, root: Path, overrides: dict[str, str] | None = None) -> None:
        self.mode = mode
        self.root = root
        self.overrides = overrides or {}
        self.local: LocalCluster | None = None
        self.nodes: dict[int, BrokerProcess] = {}

    def start(self) -> float:
        t0 = time.monotonic()
        if self.mode == "kraft":
            nodes = kraft_quorum(self.root, 3, self.overrides)
            start_together(nodes)
            self.nodes = {i + 1: n for i, n in enumerate(nodes)}
        else:
            self.local = LocalCluster(3, self.root, self.overrides).start(timeout_s=120)
            self.nodes = dict(enumerate(self.local.brokers))
        self.wait_all_seen()
        return time.monotonic() - t0

    def live(self) -> dict[int, BrokerProcess]:
        return {i: n for i, n in self.nodes.items() if n.proc is not None and n.proc.poll() is None}

    def wait_all_seen(self) -> None:
        ids = set(self.live())
        wait("every broker in every broker's Metadata", lambda: all(
            ids <= set(fetch_metadata(n.bootstrap, [], 2.0).brokers) for n in self.live().values()))

    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.live().values())

    def controller(self) -> int:
        cids = {fetch_metadata(n.bootstrap, [], 2.0).controller_id for n in self.live().values()}
        return cids.pop() if len(cids) == 1 else -1

    def close(self) -> None:
        for n in self.nodes.values():
            n.kill()
        if self.local is not None:
            self.local.close()


def create(bs: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bs})  # kept until the answer: a dropped client cancels it
    for f in admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=60).values():
        f.result(90)


def propagation(c: Cluster, partitions: int) -> tuple[float, float]:
    t0 = time.monotonic()
    create(c.bootstrap(), "wide", partitions)
    acked = time.monotonic() - t0

    def everywhere() -> bool:
        for n in c.live().values():
            md = fetch_metadata(n.bootstrap, ["wide"], 5.0)
            parts = md.topics.get("wide", {})
            if len(parts) != partitions or any(p.leader < 0 for p in parts.values()):
                return False
        return True

    wait("the topic on every broker", everywhere, 300)
    return acked, time.monotonic() - t0


def failover(c: Cluster, round_no: int) -> tuple[float, float]:
    old = c.controller()
    victim = c.nodes[old]
    victim.kill()
    t0 = time.monotonic()
    wait("a new controller", lambda: c.controller() not in (-1, old))
    elected = time.monotonic() - t0
    wait("CreateTopics accepted", lambda: create(c.bootstrap(), f"after-{round_no}", 1) is None)
    writable = time.monotonic() - t0
    victim.restart()
    c.wait_all_seen()
    return elected, writable


SESSIONS = {"default": {"kraft": {}, "zookeeper": {"zookeeper.session.timeout.ms": "18000"}},
            "short": {"kraft": {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"},
                      "zookeeper": {"zookeeper.session.timeout.ms": "3000"}}}


def leader_failovers(mode: str, session: str, rounds: int) -> list[float]:
    """Seconds from the SIGKILL of a leading broker to new leaders of all its partitions everywhere."""
    out: list[float] = []
    with tempfile.TemporaryDirectory(prefix=f"bench-kraft-lf-{mode}-") as root:
        overrides = {"auto.leader.rebalance.enable": "false", **SESSIONS[session][mode]}
        c = Cluster(mode, Path(root), overrides)
        try:
            c.start()
            admin = AdminClient({"bootstrap.servers": c.bootstrap()})
            for f in admin.create_topics([NewTopic("lf", 6, 3)], request_timeout=60).values():
                f.result(90)
            for _ in range(rounds):
                def leaders() -> dict[int, int]:
                    md = fetch_metadata(next(iter(c.live().values())).bootstrap, ["lf"], 5.0)
                    return {p: info.leader for p, info in md.topics.get("lf", {}).items()}

                wait("leaders of every partition", lambda: len(leaders()) == 6 and -1 not in leaders().values())
                controller = c.controller()
                led = leaders()
                victim = next(b for b in sorted(c.live()) if b != controller and b in led.values())
                mine = [p for p, b in led.items() if b == victim]
                c.nodes[victim].kill()
                t0 = time.monotonic()

                def moved(victim: int = victim, mine: list[int] = mine) -> bool:
                    for n in c.live().values():
                        parts = fetch_metadata(n.bootstrap, ["lf"], 5.0).topics.get("lf", {})
                        if any(parts[p].leader in (victim, -1) for p in mine):
                            return False
                    return True

                wait("new leaders", moved, 120)
                out.append(time.monotonic() - t0)
                c.nodes[victim].restart()
                c.wait_all_seen()
        finally:
            c.close()
    return out


def run(mode: str, partitions: int, failovers: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"bench-kraft-{mode}-") as root:
        c = Cluster(mode, Path(root))
        try:
            start_s = c.start()
            acked, everywhere = propagation(c, partitions)
            rounds = [failover(c, i) for i in range(failovers)]
        finally:
            c.close()
    return {"start": start_s, "acked": acked, "everywhere": everywhere, "failovers": rounds}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="a tiny run: 10 partitions, 1 failover, KRaft only")
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--failovers", type=int, default=3)
    ap.add_argument("--modes", default="kraft,zookeeper")
    ap.add_argument("--leader-failovers", type=int, default=3)
    args = ap.parse_args()
    modes = ["kraft"] if args.smoke else [m.strip() for m in args.modes.split(",") if m.strip()]
    partitions, failovers = (10, 1) if args.smoke else (args.partitions, args.failovers)
    for mode in modes:
        r = run(mode, partitions, failovers)
        elected = [e for e, _ in r["failovers"]]
        writable = [w for _, w in r["failovers"]]
        print(f"{mode}: start of 3 brokers {r['start']:.2f} s")
        print(f"{mode}: CreateTopics of {partitions} partitions acknowledged in {r['acked']:.2f} s, on every "
              f"broker in {r['everywhere']:.2f} s")
        print(f"{mode}: controller failover (SIGKILL, {failovers}x): new controller median "
              f"{statistics.median(elected):.2f} s (max {max(elected):.2f}), CreateTopics accepted median "
              f"{statistics.median(writable):.2f} s (max {max(writable):.2f})")
        sys.stdout.flush()
        for session in (["short"] if args.smoke else ["default", "short"]):
            rounds = 1 if args.smoke else args.leader_failovers
            if rounds <= 0:
                continue
            ts = leader_failovers(mode, session, rounds)
            timeouts = ", ".join(f"{k}={v}" for k, v in SESSIONS[session][mode].items()) or "Kafka's defaults"
            print(f"{mode}: partition leader failover (SIGKILL, {session} sessions: {timeouts}; {rounds}x): new "
                  f"leaders everywhere median {statistics.median(ts):.2f} s (max {max(ts):.2f})")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
