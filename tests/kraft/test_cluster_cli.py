"""`gregor cluster up -n 3 --kraft` as a user runs it: three detached KRaft nodes and no Java process; the quorum
described by `gregor metadata-quorum`, a replicated topic used, `down` and `up` again with the data back."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.tools.ports import pick_port_block
from tests.tools.cli import gregor


def test_cluster_up_kraft(tmp_path: Path) -> None:
    d = tmp_path / "c"
    base = pick_port_block(6)  # brokers on base..base+2, controllers on base+3..base+5
    up = ["cluster", "up", "-n", "3", "--kraft", "--dir", str(d), "--base-port", str(base),
          "--controller-base-port", str(base + 3)]
    r = gregor(*up, timeout_s=180)
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        assert "KRaft, no ZooKeeper" in r.stdout and not (d / "zookeeper").exists()
        bs = next(line.split()[1] for line in r.stdout.splitlines() if line.startswith("Brokers:"))
        s = gregor("metadata-quorum", "--bootstrap-server", bs, "describe", "--status")
        assert s.returncode == 0, s.stderr
        assert "CurrentVoters:          [0,1,2]" in s.stdout
        admin = AdminClient({"bootstrap.servers": bs})
        for f in admin.create_topics([NewTopic("cli", 3, 3)]).values():
            f.result(30)
        p = Producer({"bootstrap.servers": bs, "acks": "all"})
        for i in range(30):
            p.produce("cli", value=str(i).encode())
        assert p.flush(30) == 0
        st = gregor("cluster", "status", "--dir", str(d))
        assert st.returncode == 0 and "controller:" in st.stdout, st.stdout

        down = gregor("cluster", "down", "--dir", str(d), timeout_s=180)
        assert down.returncode == 0, down.stdout + down.stderr
        assert down.stdout.count("stopped") == 3, down.stdout
        r = gregor(*up, timeout_s=180)
        assert r.returncode == 0, r.stdout + r.stderr
        c = Consumer({"bootstrap.servers": bs, "group.id": "g", "auto.offset.reset": "earliest"})
        c.subscribe(["cli"])
        got = []
        for _ in range(120):
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(int(m.value()))
            if len(got) == 30:
                break
        c.close()
        assert sorted(got) == list(range(30))
    finally:
        gregor("cluster", "down", "--dir", str(d), "--timeout", "10", timeout_s=120)


def test_cluster_up_kraft_with_controller_only_nodes(tmp_path: Path) -> None:
    """`--controllers 1`: a controller-only node holds the quorum and two broker-only nodes serve clients;
    `down` stops the brokers first (their controlled shutdowns need the controller), then the controller."""
    d = tmp_path / "c"
    base = pick_port_block(3)  # brokers on base, base+1; the controller on base+2
    r = gregor("cluster", "up", "-n", "2", "--kraft", "--controllers", "1", "--dir", str(d), "--base-port",
               str(base), "--controller-base-port", str(base + 2), timeout_s=180)
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        assert "controller-only nodes" in r.stdout and "Controllers: ids 2" in r.stdout, r.stdout
        bs = next(line.split()[1] for line in r.stdout.splitlines() if line.startswith("Brokers:"))
        s = gregor("metadata-quorum", "--bootstrap-server", bs, "describe", "--status")
        assert s.returncode == 0, s.stderr
        assert "CurrentVoters:          [2]" in s.stdout and "CurrentObservers:       [0,1]" in s.stdout, s.stdout
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic("cli", 2, 2)])["cli"].result(30)
        assert admin.list_topics(timeout=10).controller_id in (0, 1)  # a broker: the controller is not one
        st = gregor("cluster", "status", "--dir", str(d))
        assert st.returncode == 0 and "controller 2 " in st.stdout, st.stdout
        down = gregor("cluster", "down", "--dir", str(d), timeout_s=180)
        assert down.returncode == 0, down.stdout + down.stderr
        lines = [line.split(":")[0] for line in down.stdout.splitlines() if "stopped" in line]
        assert lines == ["broker 0", "broker 1", "controller 2"], down.stdout
    finally:
        gregor("cluster", "down", "--dir", str(d), "--timeout", "10", timeout_s=120)
