"""`gregor cluster up -n 3 --kraft` as a user runs it: three detached KRaft nodes and no Java process; the quorum
described by `gregor metadata-quorum`, a replicated topic used, `down` and `up` again with the data back."""

from __future__ import annotations

import random
import socket
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.tools.cli import gregor


def _free_block(n: int) -> int:
    """The first of `n` consecutive loopback ports free now, below the kernel's ephemeral range (32768 up
    here): a port picked there can be taken by any client's outgoing connection before the node binds it,
    and the test binds its ports twice (up, down, up)."""
    for _ in range(200):
        base = random.randrange(20_000, 32_768 - n)
        try:
            for port in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise AssertionError(f"no {n} consecutive free ports between 20000 and 32767")


def test_cluster_up_kraft(tmp_path: Path) -> None:
    d = tmp_path / "c"
    base = _free_block(6)  # brokers on base..base+2, controllers on base+3..base+5
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
