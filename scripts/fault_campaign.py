"""Fault campaign: SIGKILL, SIGSTOP and restart leaders, followers and the controller of a local
cluster (gregor.tools.local_cluster), ZooKeeper or KRaft (`--kraft`: three combined broker,controller
nodes), under acks=all load from an idempotent producer, then check that every acknowledged record is
read back exactly once, in order, with no gap.

    PYTHONPATH=. python scripts/fault_campaign.py --leader-kills 100 --seed 7
    PYTHONPATH=. python scripts/fault_campaign.py --kraft --rounds 30 --seed 7

Each round picks one fault at random (seeded) and undoes it (restart or SIGCONT):

- kill-leader, kill-follower: SIGKILL of the leader of a random partition, or of one of its followers;
- kill-controller: SIGKILL of the controller (KRaft: the active controller, the quorum's leader);
- freeze-leader: SIGSTOP of a partition's leader until another leads it (its ZooKeeper session or
  its KRaft broker session ended), then SIGCONT;
- KRaft only (a round there also waits until every node names the same controller):
  freeze-controller, freeze-follower: SIGSTOP of the active controller, or of a voter
  following it, for 6 s (past the quorum's fetch timeout and the broker session), then SIGCONT;
  lose-majority: SIGKILL of both voters that are not the active controller: a CreateTopics to the
  survivor must be refused with an error (printed, with the time to the answer) until they return;
  isolate-controller: a network partition of the active controller's controller traffic for 8 s
  (every node reaches the others' controller listeners through a cuttable link,
  gregor/tools/link.py): the others elect a new one and fence its broker while it keeps serving
  clients and its broker listener stays reachable; then the link heals.

A round ends when the cluster converged: every broker back in every ISR (min.insync.replicas=2 then
holds for the next round) and the producer acknowledging records again; "converged" per fault is the
time from the signal to that point, restarts included, and "failover" the time until every broker
names a new leader for the partition a killed or frozen leader led. At the end, in KRaft mode, every
node's log says in which epochs it was the active controller: an epoch with two is a failure, as is
any loss, duplicate, reordering, gap or produce error.

Not injected: a full partition of a node (its broker listener too, cutting replication), which needs
network namespaces or links on every listener.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gregor.tools.local_cluster import LocalCluster, create_topic
from gregor.tools.numbered_load import NumberedLoad, check_acked, read_back

FAULTS = ("kill-leader", "kill-follower", "kill-controller", "freeze-leader")
KRAFT_FAULTS = (*FAULTS, "freeze-controller", "freeze-follower", "lose-majority", "isolate-controller")
FREEZE_S = 6.0
ISOLATE_S = 8.0
_ACTIVE = re.compile(r"node (\d+): active controller of epoch (\d+)")


def active_controllers(c: LocalCluster) -> dict[int, set[int]]:
    """Epoch -> the nodes whose log says they were its active controller."""
    out: dict[int, set[int]] = {}
    for i in range(c.n):
        for m in _ACTIVE.finditer(c.log_text(i)):
            out.setdefault(int(m.group(2)), set()).add(int(m.group(1)))
    return out


def lose_majority(c: LocalCluster, notes: list[str]) -> None:
    """Kill every voter but the active controller, ask the survivor for a metadata change (which must be
    refused), then restart them."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    survivor = c.wait_controller()
    lost = [i for i in c.running() if i != survivor]
    for i in lost:
        c.kill(i)
    admin = AdminClient({"bootstrap.servers": c.brokers[survivor].bootstrap, "log_level": 0})
    asked = time.monotonic()
    try:
        for f in admin.create_topics([NewTopic(f"refused-{len(notes)}", 1, 1)], request_timeout=30).values():
            f.result(40)
        notes.append("lose-majority: a CreateTopics was ACCEPTED without a quorum")
    except KafkaException as e:
        err = e.args[0]
        notes.append(f"lose-majority: CreateTopics refused after {time.monotonic() - asked:.1f} s: "
                     f"{err.str() if hasattr(err, 'str') else err}")
    for i in lost:
        c.restart(i, 60)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--leader-kills", "--rounds", dest="rounds", type=int, default=10,
                    help="fault rounds (each kills, freezes or restarts one broker)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--duration", type=float, default=0.0, help="stop starting rounds after this many seconds (0: no limit)")
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--rate", type=float, default=2000.0, help="records/s offered by the producer")
    ap.add_argument("--kraft", action="store_true", help="a KRaft quorum of combined nodes instead of ZooKeeper")
    ap.add_argument("--faults", help="comma-separated subset of " + ",".join(KRAFT_FAULTS) + " (default: all of the mode's)")
    ap.add_argument("--zk-connect", help="use this ZooKeeper (with a chroot) instead of starting one")
    ap.add_argument("--dir", help="cluster dir (default: a temporary one, removed)")
    ap.add_argument("--session-timeout-ms", type=int, default=3000,
                    help="zookeeper.session.timeout.ms, or KRaft's broker.session.timeout.ms")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    known = KRAFT_FAULTS if args.kraft else FAULTS
    faults = [f for f in (args.faults or ",".join(known)).split(",") if f]
    unknown = set(faults) - set(known)
    if unknown:
        ap.error(f"unknown faults {sorted(unknown)} (in {'KRaft' if args.kraft else 'ZooKeeper'} mode: {', '.join(known)})")
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="gregor-campaign-"))
    overrides = {"replica.lag.time.max.ms": "5000", "auto.leader.rebalance.enable": "false",
                 "auto.create.topics.enable": "false"}
    if args.kraft:
        overrides.update({"broker.session.timeout.ms": str(args.session_timeout_ms),
                          "broker.heartbeat.interval.ms": "500", "request.timeout.ms": "8000"})
    else:
        overrides["zookeeper.session.timeout.ms"] = str(args.session_timeout_ms)
    c = LocalCluster(args.brokers, base, overrides, zk_connect=None if args.kraft else args.zk_connect,
                     kraft=args.kraft, links=args.kraft)
    topic, parts = "campaign", args.partitions
    failovers: list[float] = []
    converged: dict[str, list[float]] = {f: [] for f in faults}
    notes: list[str] = []
    started = time.monotonic()
    try:
        c.start()
        create_topic(c.bootstrap, topic, parts, min(3, args.brokers), {"min.insync.replicas": "2"})

        def full_isr() -> bool:
            live = sorted(c.running())
            return all(c.isr_of(topic, p) == live for p in range(parts))

        def one_controller() -> bool:
            """Every running node names the same controller (KRaft: one that heals rejoins the quorum)."""
            named = {c.controller_id(i) for i in c.running()}
            return len(named) == 1 and -1 not in named

        c.wait_until(full_isr, 60, "full ISRs")
        load = NumberedLoad(c.bootstrap, topic, parts, 10**9, {"enable.idempotence": True}, rate=args.rate).start()
        c.wait_until(lambda: load.acked_count() > 0, 30, "first acknowledgement")
        for r in range(args.rounds):
            if args.duration and time.monotonic() - started > args.duration:
                break
            fault = rng.choice(faults)
            p = rng.randrange(parts)
            leader = c.leader_of(topic, p)
            controller = c.wait_controller()
            if fault in ("kill-controller", "freeze-controller", "lose-majority", "isolate-controller"):
                target = controller
            elif fault == "kill-follower":
                target = rng.choice([i for i in c.running() if i != leader])
            elif fault == "freeze-follower":
                target = rng.choice([i for i in c.running() if i != controller])
            else:
                target = leader
            t0 = time.monotonic()
            mark = load.acked_count()
            if fault == "lose-majority":
                lose_majority(c, notes)
            elif fault == "isolate-controller":
                c.isolate(target)
                others = [i for i in c.running() if i != target]
                try:
                    c.wait_until(lambda t=target, o=others: all(c.controller_id(i) not in (t, -1) for i in o),
                                 ISOLATE_S, "a new controller on the majority's side")
                    notes.append(f"isolate-controller: the majority elected a new controller "
                                 f"{time.monotonic() - t0:.1f} s after the cut")
                except TimeoutError:
                    notes.append(f"isolate-controller: NO new controller within {ISOLATE_S:g} s of the cut")
                time.sleep(max(0.0, t0 + ISOLATE_S - time.monotonic()))
                c.reconnect(target)
            elif fault in ("freeze-controller", "freeze-follower"):
                c.freeze(target)
                time.sleep(FREEZE_S)
                c.thaw(target)
            else:
                if fault == "freeze-leader":
                    c.freeze(target)
                else:
                    c.kill(target)
                if target == leader:
                    c.wait_leader(topic, p, not_in=(target,), timeout_s=60)
                    failovers.append(time.monotonic() - t0)
                c.wait_until(lambda m=mark: load.acked_count() > m, 60, "produce progress after the fault")
                if fault == "freeze-leader":
                    c.thaw(target)
                else:
                    c.restart(target)
            c.wait_until(full_isr, 90, f"every broker back in every ISR after {fault}")
            c.wait_until(one_controller, 60, f"one controller named by every node after {fault}")
            c.wait_until(lambda m=mark: load.acked_count() > m, 60, "produce progress after the fault")
            converged[fault].append(time.monotonic() - t0)
            print(f"round {r + 1}: {fault} broker {target} (partition {p}); converged in {converged[fault][-1]:.1f} s; "
                  f"acked {load.acked_count()}", flush=True)
        load.stopping.set()
        load.join(180)
        res = check_acked(load.acked, read_back(c.bootstrap, topic, parts, 180))
        controllers = active_controllers(c) if args.kraft else {}
    finally:
        c.close()
        if not args.dir:
            import shutil

            shutil.rmtree(base, ignore_errors=True)
    rounds = sum(map(len, converged.values()))
    print(f"rounds: {rounds} ({', '.join(f'{k} {len(v)}' for k, v in converged.items())}) in "
          f"{time.monotonic() - started:.0f} s")
    for fault, ts in converged.items():
        if ts:
            print(f"converged after {fault}: median {statistics.median(ts):.2f} s, max {max(ts):.2f} s, n {len(ts)}")
    for note in notes:
        print(note)
    print(f"records acknowledged: {res.acked}, read back: {res.read}, produce errors: {len(load.errors)}")
    print(f"lost: {len(res.lost)}, duplicated: {len(res.duplicated)}, out of order: {len(res.out_of_order)}, "
          f"offset gaps: {len(res.offset_gaps)}")
    if failovers:
        print(f"failover s: median {statistics.median(failovers):.2f}, max {max(failovers):.2f}, n {len(failovers)}")
    double = {e: sorted(n) for e, n in controllers.items() if len(n) > 1}
    if args.kraft:
        print(f"active controllers: {len(controllers)} epochs, "
              + (f"TWO IN ONE EPOCH: {double}" if double else "one each"))
    accepted = [n for n in notes if "ACCEPTED" in n or "NO new controller" in n]
    ok = res.ok and not load.errors and not double and not accepted
    print("RESULT: " + ("OK" if ok else "FAILED " + res.summary() + f" errors {load.errors[:5]} {double} {accepted}"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
