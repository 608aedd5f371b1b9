"""The cluster harness itself, on what runs without replication: one broker in a LocalCluster,
its Metadata read over a socket, signals, restart at the same address, and the checking code
(acknowledgements against what a consumer reads back) on a real producer and consumer."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from gregor.tools.local_cluster import LocalCluster, create_topic
from gregor.tools.numbered_load import Acked, NumberedLoad, check_acked, read_back
from gregor.tools.ports import pick_port, pick_port_block


def test_one_broker_cluster_faults_and_read_back(make_cluster: Callable[..., LocalCluster]) -> None:
    c = make_cluster(1)
    assert c.controller_id() == 0  # ready means a controller is named (wait_ready)
    create_topic(c.bootstrap, "nums", 3, 1)
    c.wait_until(lambda: all(c.leader_of("nums", p) == 0 for p in range(3)), 20, "leaders of nums")
    load = NumberedLoad(c.bootstrap, "nums", 3, 5000).start()
    load.join(60)
    assert not load.errors and load.acked_count() == 5000
    c.freeze(0)
    c.thaw(0)
    c.kill(0)
    assert not c.is_running(0)
    c.restart(0)  # same data dir, same port
    c.wait_ready(30)
    read = read_back(c.bootstrap, "nums", 3)
    res = check_acked(load.acked, read)
    assert res.ok, res.summary()
    assert res.read == 5000


def test_check_acked_finds_loss_duplicates_reordering_and_gaps() -> None:
    acked = [Acked(0, 0, 0), Acked(2, 0, 1), Acked(4, 0, 2), Acked(1, 1, 0)]
    good = {0: [(0, 0), (1, 2), (2, 4)], 1: [(0, 1)]}
    assert check_acked(acked, good).ok
    lost = check_acked(acked, {0: [(0, 0), (1, 2)], 1: [(0, 1)]})
    assert [a.seq for a in lost.lost] == [4]
    dup = check_acked(acked, {0: [(0, 0), (1, 2), (2, 4), (3, 2)], 1: [(0, 1)]})
    assert dup.duplicated == [2] and not dup.lost
    assert check_acked(acked, {0: [(0, 0), (1, 2), (2, 4), (3, 2)], 1: [(0, 1)]}, allow_duplicates=True).ok
    reorder = check_acked([Acked(0, 0, 1), Acked(2, 0, 0)], {0: [(0, 2), (1, 0)]})
    assert reorder.out_of_order == [(0, 2)]
    gap = check_acked([Acked(0, 0, 0), Acked(2, 0, 2)], {0: [(0, 0), (2, 2)]})
    assert gap.offset_gaps == [(0, 0)]


def test_cluster_cli_up_status_down(tmp_path: Path) -> None:
    d = tmp_path / "c"
    env = {**os.environ}
    base, zk_port = pick_port_block(1), pick_port()

    def gregor(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gregor", "cluster", *args, "--dir", str(d)],
                              capture_output=True, text=True, env=env, timeout=200)

    # a broker's start on a machine the whole suite loads once took over the default 60 s
    up = gregor("up", "-n", "1", "--base-port", str(base), "--zookeeper-port", str(zk_port), "--timeout", "150")
    try:
        assert up.returncode == 0, up.stderr
        assert f"127.0.0.1:{base}" in up.stdout and "gregor cluster down" in up.stdout
        again = gregor("up", "-n", "1", "--base-port", str(base), "--zookeeper-port", str(zk_port), "--timeout", "150")
        assert again.returncode == 1 and "already runs" in again.stderr
        st = gregor("status")
        assert st.returncode == 0 and "broker 0" in st.stdout and "running" in st.stdout, st.stdout
    finally:
        down = gregor("down")
    assert down.returncode == 0, down.stderr
    assert "broker 0: stopped" in down.stdout
    st = gregor("status")
    assert st.returncode == 1 and "no cluster" in st.stdout
