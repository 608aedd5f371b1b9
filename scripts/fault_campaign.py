"""Fault campaign: SIGKILL, SIGSTOP and restart leaders, followers and the controller of a local
cluster (gregor.tools.local_cluster) under acks=all load from an idempotent producer, then check that
every acknowledged record is read back exactly once, in order, with no gap.

    PYTHONPATH=. python scripts/fault_campaign.py --leader-kills 100 --seed 7

Each round picks one fault at random (seeded): kill the leader of a random partition, kill a
follower, kill the controller, or freeze a leader past its ZooKeeper session; it measures the
failover time (from the signal until every running broker names a new leader), brings the broker
back (restart or SIGCONT) and waits until it is in every ISR again, so that min.insync.replicas=2
holds for the next round. Exits 1 on any loss, duplicate, reordering or produce error.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gregor.tools.local_cluster import LocalCluster, NumberedLoad, check_acked, create_topic, read_back

FAULTS = ("kill-leader", "kill-follower", "kill-controller", "freeze-leader")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--leader-kills", "--rounds", dest="rounds", type=int, default=10,
                    help="fault rounds (each kills, freezes or restarts one broker)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--duration", type=float, default=0.0, help="stop starting rounds after this many seconds (0: no limit)")
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--rate", type=float, default=2000.0, help="records/s offered by the producer")
    ap.add_argument("--faults", default=",".join(FAULTS), help="comma-separated subset of " + ",".join(FAULTS))
    ap.add_argument("--zk-connect", help="use this ZooKeeper (with a chroot) instead of starting one")
    ap.add_argument("--dir", help="cluster dir (default: a temporary one, removed)")
    ap.add_argument("--session-timeout-ms", type=int, default=3000, help="zookeeper.session.timeout.ms")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    faults = [f for f in args.faults.split(",") if f]
    unknown = set(faults) - set(FAULTS)
    if unknown:
        ap.error(f"unknown faults {sorted(unknown)}")
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="gregor-campaign-"))
    overrides = {"zookeeper.session.timeout.ms": str(args.session_timeout_ms), "replica.lag.time.max.ms": "5000",
                 "auto.leader.rebalance.enable": "false", "auto.create.topics.enable": "false"}
    c = LocalCluster(args.brokers, base, overrides, zk_connect=args.zk_connect)
    topic, parts = "campaign", args.partitions
    failovers: list[float] = []
    done: dict[str, int] = {f: 0 for f in faults}
    started = time.monotonic()
    try:
        c.start()
        create_topic(c.bootstrap, topic, parts, min(3, args.brokers), {"min.insync.replicas": "2"})

        def full_isr() -> bool:
            live = sorted(c.running())
            return all(c.isr_of(topic, p) == live for p in range(parts))

        c.wait_until(full_isr, 60, "full ISRs")
        load = NumberedLoad(c.bootstrap, topic, parts, 10**9, {"enable.idempotence": True}, rate=args.rate).start()
        c.wait_until(lambda: load.acked_count() > 0, 30, "first acknowledgement")
        for r in range(args.rounds):
            if args.duration and time.monotonic() - started > args.duration:
                break
            fault = rng.choice(faults)
            p = rng.randrange(parts)
            leader = c.leader_of(topic, p)
            if fault == "kill-controller":
                target = c.wait_until(lambda: (lambda cid: (cid,) if cid >= 0 else None)(c.controller_id()),
                                      30, "a controller")[0]
            elif fault == "kill-follower":
                target = rng.choice([i for i in c.running() if i != leader])
            else:
                target = leader
            t0 = time.monotonic()
            if fault == "freeze-leader":
                c.freeze(target)
            else:
                c.kill(target)
            if target == leader:
                c.wait_leader(topic, p, not_in=(target,), timeout_s=60)
                failovers.append(time.monotonic() - t0)
            mark = load.acked_count()
            c.wait_until(lambda m=mark: load.acked_count() > m, 60, "produce progress after the fault")
            if fault == "freeze-leader":
                c.thaw(target)
            else:
                c.restart(target)
            c.wait_until(full_isr, 60, f"broker {target} back in every ISR")
            done[fault] += 1
            print(f"round {r + 1}: {fault} broker {target} (partition {p}); acked {load.acked_count()}", flush=True)
        load.stopping.set()
        load.join(180)
        res = check_acked(load.acked, read_back(c.bootstrap, topic, parts, 180))
    finally:
        c.close()
        if not args.dir:
            import shutil

            shutil.rmtree(base, ignore_errors=True)
    rounds = sum(done.values())
    print(f"rounds: {rounds} ({', '.join(f'{k} {v}' for k, v in done.items())}) in {time.monotonic() - started:.0f} s")
    print(f"records acknowledged: {res.acked}, read back: {res.read}, produce errors: {len(load.errors)}")
    print(f"lost: {len(res.lost)}, duplicated: {len(res.duplicated)}, out of order: {len(res.out_of_order)}, "
          f"offset gaps: {len(res.offset_gaps)}")
    if failovers:
        print(f"failover s: median {statistics.median(failovers):.2f}, max {max(failovers):.2f}, n {len(failovers)}")
    ok = res.ok and not load.errors
    print("RESULT: " + ("OK" if ok else "FAILED " + res.summary() + f" errors {load.errors[:5]}"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
