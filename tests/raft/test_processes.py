"""Three quorum processes on loopback ports (python -m gregor.raft.runner), with Kafka's default timeouts,
under a stream of appends: SIGKILL of the leader, and SIGSTOP of the leader past the election timeout.

Afterwards the committed logs are compared: every acknowledged append is there exactly once and in
order, every node applied the same sequence, and each epoch's records were all written by the one
leader its LeaderChange record names (no two leaders accepted writes in one epoch).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gregor.raft.runner import QuorumProcess
from gregor.tools.ports import pick_ports

SNAPSHOT_BYTES = 16 * 1024  # small, so a node that is down long enough comes back behind a snapshot


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[int, QuorumProcess]]:
    ports = pick_ports(6)
    voters = ",".join(f"{i}@127.0.0.1:{ports[i - 1]}" for i in (1, 2, 3))
    overrides = {"metadata.log.segment.bytes": "16384",
                 "metadata.log.max.record.bytes.between.snapshots": str(SNAPSHOT_BYTES)}
    procs = {i: QuorumProcess(i, voters, tmp_path / f"node-{i}", ports[2 + i], overrides) for i in (1, 2, 3)}
    try:
        for p in procs.values():
            p.start()
        yield procs
    finally:
        for p in procs.values():
            p.stop()


def status(p: QuorumProcess) -> dict[str, Any] | None:
    if not p.alive:
        return None
    try:
        return p.request({"op": "status"}, 2.0)
    except OSError:
        return None


def wait_leader(procs: dict[int, QuorumProcess], timeout_s: float, exclude: int | None = None) -> int:
    """The node all live nodes agree leads (and that says so itself)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        st = {n: status(p) for n, p in procs.items() if n != exclude}
        live = {n: s for n, s in st.items() if s is not None}
        leaders = [n for n, s in live.items() if s["role"] == "Leader"]
        if len(leaders) == 1 and all(s["leader_id"] == leaders[0] for s in live.values()):
            return leaders[0]
        time.sleep(0.05)
    raise AssertionError(f"no leader within {timeout_s} s: {st}")


class Appender:
    """Threads appending unique values to whoever leads, recording what was acknowledged."""

    def __init__(self, procs: dict[int, QuorumProcess], threads: int = 4) -> None:
        self.procs = procs
        self.acked: dict[str, tuple[int, int]] = {}  # value -> (offset, epoch)
        self.failed = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(t,), daemon=True) for t in range(threads)]

    def __enter__(self) -> Appender:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _run(self, t: int) -> None:
        target, i = 1, 0
        while not self.stop.is_set():
            value = f"t{t}-{i}"
            p = self.procs[target]
            try:
                r = p.request({"op": "append", "value": value}, 15.0) if p.alive else {"error": "DOWN", "leader": -1}
            except OSError:
                r = {"error": "DOWN", "leader": -1}
            i += 1  # every attempt appends a new value: a timed-out one may still commit (then it is there once)
            if r.get("ok"):
                with self.lock:
                    self.acked[value] = (r["offset"], r["epoch"])
                continue
            self.failed += 1
            leader = r.get("leader", -1)
            target = leader if leader in self.procs and leader != target else (target % 3) + 1
            time.sleep(0.02)

    def count(self) -> int:
        with self.lock:
            return len(self.acked)


def wait_count(app: Appender, n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while app.count() < n and time.monotonic() < deadline:
        time.sleep(0.05)
    assert app.count() >= n, f"only {app.count()} appends acknowledged"


def check_committed(procs: dict[int, QuorumProcess], app: Appender, timeout_s: float = 20.0) -> dict[str, Any]:
    """Wait until every node applied the same, then check it against the acknowledgements."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = {n: p.request({"op": "state"}, 15.0) for n, p in procs.items()}
        ends = {s["next_offset"] for s in states.values()}
        if len(ends) == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(ends) == 1, {n: s["next_offset"] for n, s in states.items()}
    first = next(iter(states.values()))
    for n, s in states.items():
        assert s["entries"] == first["entries"], f"node {n} applied another sequence"
    values = [e[2] for e in first["entries"]]
    assert len(values) == len(set(values)), "a record was committed twice"
    by_offset = {e[0]: e for e in first["entries"]}
    for value, (offset, epoch) in app.acked.items():
        e = by_offset.get(offset)
        assert e is not None and e[2] == value and e[1] == epoch, f"acknowledged {value} at {offset} is {e}"
    leaders = {int(k): v for k, v in first["leaders"].items()}
    for offset, epoch, _value, by in first["entries"]:
        assert leaders.get(epoch) == by, f"offset {offset} of epoch {epoch} written by {by}, its leader is {leaders.get(epoch)}"
    return first


def test_sigkill_of_the_leader_under_appends(cluster: dict[int, QuorumProcess]) -> None:
    procs = cluster
    leader = wait_leader(procs, 15.0)
    with Appender(procs) as app:
        wait_count(app, 100, 30.0)
        killed_at = time.monotonic()
        procs[leader].kill()
        new = wait_leader(procs, 15.0, exclude=leader)
        failover_s = time.monotonic() - killed_at
        assert new != leader and failover_s < 8.0  # fetch timeout 2 s, then pre-vote and vote
        before = app.count()
        # enough new records that the leader snapshots past the killed node's log
        wait_count(app, before + 400, 60.0)
        st = status(procs[new])
        assert st is not None and st["log_start_offset"] > 0 and st["snapshots_taken"] > 0
        procs[leader].start()
        wait_count(app, app.count() + 50, 30.0)
    back = procs[leader].request({"op": "status"})
    final = check_committed(procs, app)
    assert back["snapshots_loaded"] >= 1  # it came back behind the log start: caught up by FetchSnapshot
    assert len(final["entries"]) >= len(app.acked) and app.count() >= 550
    print(f"failover {failover_s:.2f} s, {len(app.acked)} acknowledged, {app.failed} refused or lost")


def test_sigstop_of_the_leader_past_the_election_timeout(cluster: dict[int, QuorumProcess]) -> None:
    procs = cluster
    leader = wait_leader(procs, 15.0)
    with Appender(procs) as app:
        wait_count(app, 100, 30.0)
        procs[leader].signal(signal.SIGSTOP)
        new = wait_leader(procs, 15.0, exclude=leader)
        assert new != leader
        wait_count(app, app.count() + 100, 30.0)
        time.sleep(1.0)
        procs[leader].signal(signal.SIGCONT)
        # it wakes up believing it leads an old epoch: it must step down and follow
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            st = status(procs[leader])
            if st is not None and st["role"] == "Follower" and st["leader_id"] == new:
                break
            time.sleep(0.05)
        assert st is not None and (st["role"], st["leader_id"]) == ("Follower", new), st
        wait_count(app, app.count() + 100, 30.0)
    check_committed(procs, app)
