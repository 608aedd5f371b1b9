"""Shared fixtures (real broker processes on loopback, each with its own data dir), what kind each test is
(unit under tests/unit, integration elsewhere; the unit ones guarded, see tests/unit_guard.py), and how
the suite is spread over pytest-xdist workers."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from gregor.config import BrokerConfig
from gregor.metadata.zookeeper import ZooKeeperMetadataStore, ZooKeeperSettings, parse_connect
from gregor.tools.local_zookeeper import ZooKeeperServer, zookeeper_available
from tests import unit_guard
from tests.broker_process import BrokerProcess

UNIT_DIR = Path(__file__).resolve().parent / "unit"

# Each xdist worker picks the ports of the nodes it starts from its own slice (gregor/tools/ports.py),
# so two workers never hand out the same port; the brokers and tools it starts inherit the slice.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ["GREGOR_PORT_SLICE"] = (f"{int(os.environ['PYTEST_XDIST_WORKER'].removeprefix('gw'))}"
                                       f"/{os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1')}")


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
        pytest.fail(f"ZooKeeper cannot start: {why}; scripts/install.sh cluster installs it")
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
        s = ZooKeeperMetadataStore(ZooKeeperSettings.from_config(BrokerConfig(
            {"zookeeper.connect": zk_connect, "broker.id": str(broker_id), "zookeeper.session.timeout.ms": "4000",
             **props})))
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


# --- how the suite is spread over pytest-xdist workers (scripts/test.sh: -n 3 --dist loadfile) ---

# The groups that take longest, longest first: the workers take them before the short ones, so no
# worker is left with a long one at the end while the others are idle. From `pytest --durations`
# (a group missing here only runs later: the order never changes a result).
SLOW_FIRST = (
    "spark-pipeline",
    "spark",
    "tests/test_benchmarks_start.py",
    "tests/cluster/test_transactions_cluster.py",
    "tests/spark/test_standalone.py",
    "tests/clients/test_transactions.py",
    "tests/groups/test_consumer_groups.py",
    "tests/cluster/test_membership.py",
    "tests/groups/test_consumer_protocol.py",
    "tests/cluster/test_replication_inprocess.py",
    "tests/cluster/test_acceptance_rolling.py",
    "tests/cluster/test_acceptance_durability.py",
    "tests/cluster/test_acceptance_isr.py",
    "tests/cluster/test_acceptance_idempotent.py",
    "tests/cluster/test_fault_campaign.py",
    "tests/cluster/test_groups_cluster.py",
    "tests/server/test_hostile_clients.py",
    "tests/metadata/test_zookeeper_store.py",
    "tests/security/test_sasl.py",
    "tests/security/test_acl_broker.py",
    "tests/server/test_durability.py",
)

# The modules under tests/spark/ share the `spark` session fixture and take minutes together: two
# SparkSessions (5-10 s and 1 GiB each) share them, the pipelines' modules on one worker, the other
# modules on another. test_standalone.py starts a Spark cluster of its own instead.
SPARK_PIPELINE_MODULES = ("tests/spark/test_pipeline.py", "tests/spark/test_pipeline_cluster.py")
SPARK_OWN_CLUSTER_MODULES = ("tests/spark/test_standalone.py",)


def group_of(nodeid: str) -> str:
    """The tests one worker runs together: a module (its module-scoped broker starts once), or the
    Spark modules of one SparkSession."""
    module = nodeid.split("::", 1)[0]
    if module in SPARK_PIPELINE_MODULES:
        return "spark-pipeline"
    if module.startswith("tests/spark/") and module not in SPARK_OWN_CLUSTER_MODULES:
        return "spark"
    return module


def is_unit(item: pytest.Item) -> bool:
    return Path(item.path).is_relative_to(UNIT_DIR)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The folder says what a test is, so `-m unit` and `-m integration` select by it (scripts/test.sh unit).
    for item in items:
        item.add_marker(pytest.mark.unit if is_unit(item) else pytest.mark.integration)
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    # A stable sort: the collection order stays within a group, and among the groups not named.
    items.sort(key=lambda item: rank.get(group_of(item.nodeid), len(rank)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`--dist loadfile` by group_of: a file's tests on one worker, and the Spark modules of one
    SparkSession too. (xdist's own `--dist loadgroup` cannot do it on pytest 9: it renames items
    through an attribute pytest no longer reads.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class GroupScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)


# --- unit tests stay unit tests: no sockets, no processes (tests/unit_guard.py) ---

@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> object:
    """Fixtures too: a unit test that asks for a broker is not one. (Teardown is not guarded: the session's
    fixtures, ZooKeeper among them, are finalized in the last test's teardown, whichever it is.)"""
    if item.get_closest_marker("unit") is None:
        return (yield)
    with unit_guard.guarded(item.nodeid):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> object:
    if item.get_closest_marker("unit") is None:
        return (yield)
    with unit_guard.guarded(item.nodeid):
        return (yield)
