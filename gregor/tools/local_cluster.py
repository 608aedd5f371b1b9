"""A local Gregor cluster: one real ZooKeeper and N real `gregor serve` processes on loopback.

Used by the cluster acceptance tests, the fault campaign (scripts/fault_campaign.py) and the
benchmarks. Every broker is a child process with its own data dir and a port fixed at construction,
so a restarted broker comes back at the same address (clients and the other brokers find it where
ZooKeeper's registration says it is). Faults are signals, as on a real machine: `kill` (SIGKILL, a
crash), `stop` (SIGTERM, a controlled shutdown), `freeze`/`thaw` (SIGSTOP/SIGCONT, a process that
stops answering without closing its sockets or its ZooKeeper session).

What the cluster looks like is read from the outside, as a client would: a Metadata request to a
running broker (`metadata`, `leader_of`, `isr_of`, `controller_id`). A broker reports ready when its
log shows "all logs loaded"; the cluster reports ready when every running broker is in the Metadata of
every running broker, each naming a controller (`wait_ready`).

Timeouts (CLUSTER_DEFAULTS): zookeeper.session.timeout.ms=4000 so that a SIGKILLed leader's session
ends within 4 s and its partitions fail over within the 6 s target (Kafka's 18 s default is for
networks and JVM pauses a loopback cluster does not have); replica.lag.time.max.ms=10000 so that a
dead follower leaves the ISR in 10 s while a follower slowed by two cores shared among three
brokers and the clients does not flap in and out (Kafka's default is 30 s).
"""

from __future__ import annotations

import shutil
import signal
import socket
import struct
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gregor.metadata.meta_properties import format_directories, random_uuid
from gregor.tools.kraft_nodes import run_together
from gregor.tools.link import Link
from gregor.tools.local_broker import BrokerProcess
from gregor.tools.local_zookeeper import ZooKeeperServer
from gregor.tools.ports import pick_ports

T = TypeVar("T")

# The cluster's own defaults, chosen for loopback and failover under 6 s (see the module doc).
CLUSTER_DEFAULTS: dict[str, str] = {
    "zookeeper.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "10000",
}

_METADATA_KEY = 3
_METADATA_VERSION = 7  # leader epochs and offline replicas; not yet flexible


@dataclass
class PartitionInfo:
    """One partition as a Metadata response describes it."""

    error_code: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]


@dataclass
class ClusterMetadata:
    """What one broker answered to a Metadata request."""

    from_broker: int
    controller_id: int
    brokers: dict[int, tuple[str, int]]
    topics: dict[str, dict[int, PartitionInfo]] = field(default_factory=dict)
    topic_errors: dict[str, int] = field(default_factory=dict)


def fetch_metadata(bootstrap: str, topics: list[str] | None = None, timeout_s: float = 5.0,
                   from_broker: int = -1) -> ClusterMetadata:
    """One Metadata request (v7) to one broker over a plain socket: no client library cache between
    the test and the broker's answer. `topics=None` asks for every topic. Raises OSError when the
    broker does not answer within `timeout_s`."""
    from gregor.protocol import apis
    from gregor.protocol.frames import decode_response, encode_request

    api = apis.BY_KEY[_METADATA_KEY]
    body = {"topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False}
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as s:
        s.sendall(encode_request(api, _METADATA_VERSION, 1, "gregor-local-cluster", body))
        size = struct.unpack(">i", _recv_exact(s, 4))[0]
        _, r = decode_response(_recv_exact(s, size), api, _METADATA_VERSION)
    md = ClusterMetadata(from_broker, r.controller_id, {b.node_id: (b.host, b.port) for b in r.brokers})
    for t in r.topics:
        md.topic_errors[t.name] = t.error_code
        md.topics[t.name] = {p.partition_index: PartitionInfo(p.error_code, p.leader_id, p.leader_epoch,
                                                              list(p.replica_nodes), list(p.isr_nodes),
                                                              list(p.offline_replicas))
                             for p in t.partitions}
    return md


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by broker")
        buf += chunk
    return bytes(buf)


def wait_until(predicate: Callable[[], T], timeout_s: float, interval_s: float = 0.1,
               what: str = "condition") -> T:
    """Poll `predicate` until it returns something truthy (returned) or `timeout_s` passes
    (TimeoutError naming `what` and the last value). Exceptions from the predicate count as falsy:
    a broker that is down answers nothing, which is what the caller waits out."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = predicate()
            if last:
                return last
        except (OSError, ValueError, KeyError) as e:
            last = e
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not true within {timeout_s:g} s (last: {last!r})")
        time.sleep(interval_s)


class LocalCluster:
    """ZooKeeper plus brokers 0..n-1. `start()` starts them and waits until all see each other;
    `close()` kills everything and removes the directory unless one was given.

    `zk_connect` joins an existing ZooKeeper (for tests: the session's one with a per-test chroot)
    instead of starting one. `overrides` apply to every broker, `per_broker[i]` to broker i only,
    on top of CLUSTER_DEFAULTS. With `kraft` there is no ZooKeeper: the brokers are combined KRaft
    nodes (node ids 0..n-1, all voters), formatted for one cluster and started together (each waits
    for the quorum, which needs a majority)."""

    def __init__(self, n: int = 3, base_dir: str | Path | None = None, overrides: dict[str, str] | None = None,
                 per_broker: dict[int, dict[str, str]] | None = None, zk_connect: str | None = None,
                 base_port: int = 0, kraft: bool = False, cluster_id: str | None = None,
                 links: bool = False) -> None:
        """`cluster_id`: a KRaft cluster's id (default: a new one), e.g. the one a migration from ZooKeeper
        formatted its directories with. `links` (KRaft): each node reaches each other node's controller
        listener through a Link of its own (gregor/tools/link.py), so `isolate(i)` can cut node i off
        from the quorum (a network partition of its controller traffic) and `reconnect(i)` heal it."""
        self.kraft = kraft
        self._own_dir = base_dir is None
        self.base_dir = Path(base_dir) if base_dir is not None else Path(tempfile.mkdtemp(prefix="gregor-cluster-"))
        self.n = n
        self.overrides = {**CLUSTER_DEFAULTS, **(overrides or {})}
        self.per_broker = per_broker or {}
        self.zk: ZooKeeperServer | None = None
        self._zk_connect = zk_connect
        self.brokers: list[BrokerProcess] = []
        self.frozen: set[int] = set()
        ports = [base_port + i for i in range(n)] if base_port else pick_ports(n)
        self._controller_ports = pick_ports(n) if kraft else []
        # (from, to) -> the link node `from` reaches node `to`'s controller listener through
        self.links: dict[tuple[int, int], Link] = (
            {(a, b): Link(self._controller_ports[b]) for a in range(n) for b in range(n) if a != b}
            if kraft and links else {})
        self._cluster_id = cluster_id or random_uuid()
        for i in range(n):
            b = BrokerProcess(self.base_dir / f"broker-{i}", self.broker_props(i))
            b.port = ports[i]
            self.brokers.append(b)

    @property
    def zk_connect(self) -> str:
        if self._zk_connect is not None:
            return self._zk_connect
        if self.zk is None:
            raise RuntimeError("ZooKeeper is not started")
        return self.zk.connect

    def broker_props(self, i: int) -> dict[str, str]:
        """Broker i's overrides except zookeeper.connect (known once ZooKeeper runs)."""
        if self.kraft:
            return {**self.overrides, **self._kraft_props(i), **self.per_broker.get(i, {})}
        return {**self.overrides, "broker.id": str(i), **self.per_broker.get(i, {})}

    def _kraft_props(self, i: int) -> dict[str, str]:
        voters = ",".join(f"{j}@127.0.0.1:{self.links[(i, j)].port if (i, j) in self.links else p}"
                          for j, p in enumerate(self._controller_ports))
        props = {"process.roles": "broker,controller", "node.id": str(i), "controller.quorum.voters": voters,
                 "controller.listener.names": "CONTROLLER"}
        controller = f"CONTROLLER://127.0.0.1:{self._controller_ports[i]}"
        if "listeners" in self.overrides:  # the caller's listeners (their ports kept by restarts), and this one
            props["listeners"] = f"{self.overrides['listeners']},{controller}"
        elif len(self.brokers) > i:  # its broker port is known: both listeners, pinned
            props["listeners"] = f"PLAINTEXT://127.0.0.1:{self.brokers[i].port},{controller}"
        return props

    @property
    def bootstrap(self) -> str:
        """Every broker's address, comma-separated, as clients take it."""
        return ",".join(b.bootstrap for b in self.brokers)

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> LocalCluster:
        if self._zk_connect is None and not self.kraft:
            self.zk = ZooKeeperServer(self.base_dir / "zookeeper").start()
        try:
            if self.kraft:
                self._start_together(timeout_s)
            else:
                for i in range(self.n):
                    self.start_broker(i)
            self.wait_ready(timeout_s)
        except BaseException:
            self.close()
            raise
        return self

    def start_broker(self, i: int, timeout_s: float = 30.0) -> None:
        """Start broker i. A broker restarted right after a SIGKILL finds its old registration still in
        ZooKeeper until the dead session expires (zookeeper.session.timeout.ms) and refuses to start,
        as Kafka does ("already registered"); it is started again until that session has gone."""
        b = self.brokers[i]
        if self.kraft:  # a restart after a kill registers once the old session ended: the node itself retries
            b.overrides = self.broker_props(i)
            b.start(timeout_s + int(b.overrides.get("broker.session.timeout.ms", "9000")) / 1000)
            self.frozen.discard(i)
            return
        b.overrides = {**self.broker_props(i), "zookeeper.connect": self.zk_connect}
        session_s = int(b.overrides.get("zookeeper.session.timeout.ms", "18000")) / 1000
        deadline = time.monotonic() + timeout_s + session_s
        while True:
            try:
                b.start(timeout_s)
                break
            except RuntimeError as e:
                if "already registered" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        self.frozen.discard(i)

    def _start_together(self, timeout_s: float) -> None:
        """KRaft: every node at once (each waits for a quorum leader before its broker part starts)."""
        for i, b in enumerate(self.brokers):
            format_directories([str(b.data_dir)], self._cluster_id, i, ignore_formatted=True)
        run_together([lambda i=i: self.start_broker(i, timeout_s) for i in range(self.n)])

    def is_running(self, i: int) -> bool:
        p = self.brokers[i].proc
        return p is not None and p.poll() is None

    def running(self) -> list[int]:
        """Brokers whose process runs and is not frozen: the ones that can answer."""
        return [i for i in range(self.n) if self.is_running(i) and i not in self.frozen]

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Until every running broker lists every running broker in its Metadata, and names a controller: an
        admin client that first asks while there is none (the moment between a first broker's start and its
        election) may not ask again for minutes (librdkafka's "Failed while waiting for controller")."""
        def all_seen() -> bool:
            want = set(self.running())
            views = [self.metadata(via=i) for i in want]
            return all(want <= set(md.brokers) and md.controller_id >= 0 for md in views)

        wait_until(all_seen, timeout_s, 0.2, "every running broker in every running broker's Metadata, with a "
                                             "controller")

    def kill(self, i: int) -> None:
        """SIGKILL broker i: a crash (no controlled shutdown, no flush)."""
        if i in self.frozen:
            self.thaw(i)
        self.brokers[i].kill()

    def stop(self, i: int, timeout_s: float = 30.0) -> int:
        """SIGTERM broker i and wait: a controlled shutdown. Returns the exit code."""
        return self.brokers[i].stop(timeout_s)

    def freeze(self, i: int) -> None:
        """SIGSTOP broker i: it stops answering and heartbeating but keeps its sockets."""
        proc = self.brokers[i].proc
        assert proc is not None
        proc.send_signal(signal.SIGSTOP)
        self.frozen.add(i)

    def thaw(self, i: int) -> None:
        """SIGCONT broker i."""
        proc = self.brokers[i].proc
        assert proc is not None
        proc.send_signal(signal.SIGCONT)
        self.frozen.discard(i)

    def restart(self, i: int, timeout_s: float = 30.0) -> None:
        """Start broker i again (after kill or stop) on its data dir and port."""
        if self.is_running(i):
            self.kill(i)
        self.start_broker(i, timeout_s)

    def isolate(self, i: int) -> None:
        """Cut node i's controller traffic both ways (needs `links`): the quorum, heartbeats and metadata
        writes; its broker listener stays reachable by clients and replicas."""
        for (a, b), link in self.links.items():
            if i in (a, b):
                link.cut()

    def reconnect(self, i: int) -> None:
        for (a, b), link in self.links.items():
            if i in (a, b):
                link.heal()

    def close(self) -> None:
        for i in range(self.n):
            if i in self.frozen:
                self.thaw(i)
            self.brokers[i].kill()
        for link in self.links.values():
            link.close()
        if self.zk is not None:
            self.zk.kill()
            self.zk = None
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what the cluster says ---------------------------------------------------------------------

    def metadata(self, topics: list[str] | None = None, via: int | None = None,
                 timeout_s: float = 5.0) -> ClusterMetadata:
        """Metadata from broker `via`, or from the first running broker that answers."""
        candidates = [via] if via is not None else self.running()
        last: Exception | None = None
        for i in candidates:
            try:
                return fetch_metadata(self.brokers[i].bootstrap, topics, timeout_s, from_broker=i)
            except OSError as e:
                last = e
        raise OSError(f"no running broker answered Metadata (last: {last!r})")

    def partition(self, topic: str, p: int, via: int | None = None) -> PartitionInfo:
        return self.metadata([topic], via).topics[topic][p]

    def leader_of(self, topic: str, p: int, via: int | None = None) -> int:
        """The leader's broker id, -1 when the partition has none (offline)."""
        return self.partition(topic, p, via).leader

    def isr_of(self, topic: str, p: int, via: int | None = None) -> list[int]:
        return sorted(self.partition(topic, p, via).isr)

    def controller_id(self, via: int | None = None) -> int:
        return self.metadata([], via).controller_id

    def wait_until(self, predicate: Callable[[], T], timeout_s: float = 30.0, what: str = "condition") -> T:
        return wait_until(predicate, timeout_s, 0.1, what)

    def wait_leader(self, topic: str, p: int, not_in: tuple[int, ...] = (), timeout_s: float = 30.0) -> int:
        """Until the partition has a leader outside `not_in` (as every running broker says); returns it."""
        def leader() -> tuple[int] | None:  # a tuple: broker 0 is a leader too, and 0 is falsy
            views = {self.leader_of(topic, p, via=i) for i in self.running()}
            if len(views) == 1:
                (lead,) = views
                if lead >= 0 and lead not in not_in:
                    return (lead,)
            return None

        return wait_until(leader, timeout_s, 0.1, f"a leader of {topic}-{p} outside {not_in}")[0]

    def wait_controller(self, not_in: tuple[int, ...] = (), timeout_s: float = 30.0) -> int:
        """Until a broker names a controller outside `not_in`; returns it."""
        def controller() -> tuple[int] | None:  # a tuple: broker 0 is a controller too, and 0 is falsy
            cid = self.controller_id()
            return (cid,) if cid >= 0 and cid not in not_in else None

        return wait_until(controller, timeout_s, 0.1, f"a controller outside {not_in}")[0]

    def log_text(self, i: int) -> str:
        return self.brokers[i].log_text()


# -- load and checks: numbered records, their acknowledgements, and what a consumer reads back ------

def create_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int,
                 configs: dict[str, str] | None = None, timeout_s: float = 30.0) -> None:
    """Create a topic with the reference client's AdminClient and wait for the request to succeed."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    fut = admin.create_topics([NewTopic(topic, partitions, replication_factor, config=dict(configs or {}))],
                              request_timeout=timeout_s)[topic]
    fut.result(timeout_s)
