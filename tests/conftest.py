"""Shared fixtures: real broker processes on loopback, each with its own data dir."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from gregor.config import BrokerConfig
from gregor.metadata.zookeeper import ZooKeeperMetadataStore, parse_connect
from gregor.tools.local_zookeeper import ZooKeeperServer, zookeeper_available
from tests.broker_process import BrokerProcess


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Start brokers with property overrides; all are killed at the end of the test."""
    started: list[BrokerProcess] = []

    def start(overrides: dict[str, str] | None = None, data_dir: Path | None = None) -> BrokerProcess:
        d = data_dir or tmp_path / f"broker-{len(started)}"
        b = BrokerProcess(d, overrides).start()
        started.append(b)
        return b

    yield start
    for b in started:
        b.kill()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker shared by a test module (auto topic creation on, 1 partition by default)."""
    b = BrokerProcess(tmp_path_factory.mktemp("broker")).start()
    yield b
    b.kill()


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper for the whole run (started on first use, ~1 s); tests keep apart by chroot."""
    why = zookeeper_available()
    if why is not None:
        pytest.fail(f"ZooKeeper cannot start: {why}; scripts/install.sh installs it")
    zk = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    yield zk
    zk.kill()


@pytest.fixture
def zk_connect(zookeeper_server: ZooKeeperServer) -> str:
    """A `zookeeper.connect` value with a chroot of this test's own (brokers create it)."""
    return f"{zookeeper_server.connect}/gregor-test-{uuid.uuid4().hex[:12]}"


StoreFactory = Callable[..., ZooKeeperMetadataStore]


@pytest.fixture
def stores(zk_connect: str) -> Iterator[StoreFactory]:
    """ZooKeeper metadata stores as brokers `broker_id` would open them (closed at the end of the test)."""
    made: list[ZooKeeperMetadataStore] = []

    def make(broker_id: int = 1, **props: str) -> ZooKeeperMetadataStore:
        s = ZooKeeperMetadataStore(BrokerConfig({"zookeeper.connect": zk_connect, "broker.id": str(broker_id),
                                                 "zookeeper.session.timeout.ms": "4000", **props}))
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


@pytest.fixture
def raw_zk(zk_connect: str) -> Iterator[KazooClient]:
    """A plain client on the same chroot, to look at the znodes as Kafka's tools would."""
    hosts, chroot = parse_connect(zk_connect)
    zk = KazooClient(hosts=hosts)
    zk.start(timeout=10)
    zk.ensure_path(chroot)
    zk.chroot = chroot
    yield zk
    zk.stop()
    zk.close()
