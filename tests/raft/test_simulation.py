"""The quorum under random faults, in the deterministic simulation (tests/raft/sim.py): Raft's safety
checked after every event, then liveness once the faults stop.

Each (profile, seed) runs 30 simulated seconds of faults (crashes that lose unflushed data, restarts,
partitions, lost, delayed, duplicated and reordered messages, resignations, snapshots, a stream of
appends), then heals the network and restarts every node: a leader must be elected within a few
timeouts and an append must commit on the leader and then reach every node. A failing seed
reproduces exactly: `Simulation(seed, **PROFILES[name])`.

RAFT_SIM_SEEDS sets the seeds per profile (default 6, so CI stays short); campaigns run thousands.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.raft.sim import CHAOS, DURABILITY, Simulation

PROFILES: dict[str, dict] = {
    "three-voters": {},
    "five-voters-and-an-observer": dict(voters=5, observers=1),
    "one-voter-two-observers": dict(voters=1, observers=2, crash_rate=1.0),
    "lossy-slow-network": dict(loss=0.25, dup=0.05, max_delay_ms=250),
    "chaos": CHAOS,
    "durability": DURABILITY,
    "durability-five-voters": dict(DURABILITY, voters=5, observers=1, downtime_ms=(1, 20), max_delay_ms=150,
                                   partition_rate=0.3),
}
SEEDS = int(os.environ.get("RAFT_SIM_SEEDS", "6"))
FAULT_MS = 30_000


@pytest.mark.parametrize("seed", range(SEEDS))
@pytest.mark.parametrize("profile", list(PROFILES))
def test_safety_under_faults_then_liveness(profile: str, seed: int) -> None:
    sim = Simulation(seed, **PROFILES[profile])
    sim.run(FAULT_MS)
    sim.heal_all()
    # a lost request waits out its timeout; then at most a fetch timeout, a few election timeouts
    bound = 2500 + 3 * (sim.election_timeout_ms + sim.fetch_timeout_ms)
    took = sim.wait_for(lambda: sim.leader() is not None, bound)
    assert took is not None, f"no leader {bound} ms after the faults stopped: " + str(
        {n: sn.node.describe() for n, sn in sim.nodes.items() if sn.node is not None})
    leader = sim.leader()
    assert leader is not None and leader.node is not None
    everywhere = sim.commit_probe(2 * bound)
    assert everywhere is not None, "an append after the faults did not reach every node"
    sim.checker.final()
    assert sim.stats["appends"] > 0 and sim.checker.committed_end > 0


STORAGE_SEEDS = int(os.environ.get("RAFT_SIM_STORAGE_SEEDS", "3"))


@pytest.mark.parametrize("seed", range(STORAGE_SEEDS))
@pytest.mark.parametrize("profile", ["three-voters", "chaos"])
def test_the_same_on_files(profile: str, seed: int, tmp_path: Path) -> None:
    """The metadata log in files (gregor.storage, tiny segments): crashes close it unflushed and sometimes
    tear its last segment; it is reopened and recovered as after a kill -9."""
    sim = Simulation(seed, **PROFILES[profile], storage_dir=str(tmp_path), segment_bytes=1024)
    sim.run(FAULT_MS // 2)
    sim.heal_all()
    bound = 2500 + 3 * (sim.election_timeout_ms + sim.fetch_timeout_ms)
    assert sim.wait_for(lambda: sim.leader() is not None, bound) is not None
    assert sim.commit_probe(2 * bound) is not None
    sim.checker.final()
    for sn in sim.nodes.values():
        sn.log.close()
