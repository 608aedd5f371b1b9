"""Shared fixtures: real broker processes on loopback, each with its own data dir."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

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


# --- how the suite is spread over pytest-xdist workers (scripts/test.sh runs it with --dist loadgroup) ---

# The groups that take longest, longest first: the workers take them before the short ones, so no
# worker is left with a long one at the end while the others are idle. From `pytest --durations`
# (a group missing here only runs later: the order never changes a result).
SLOW_FIRST = (
    "spark-pipeline",
    "spark",
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

# The modules of the `spark` session fixture take minutes together: two SparkSessions (5-10 s and
# 1 GiB each) share them, the pipelines' modules on one worker, the other modules on another.
SPARK_PIPELINE_MODULES = ("tests/spark/test_pipeline.py", "tests/spark/test_pipeline_cluster.py")


def _groups(items: list[pytest.Item]) -> dict[str, str]:
    """Module path -> group. A module's tests stay together on one worker (its module-scoped broker
    starts once); the modules that use the `spark` session fixture are grouped as above."""
    modules = {item.nodeid.split("::", 1)[0] for item in items}
    spark = {item.nodeid.split("::", 1)[0] for item in items if "spark" in getattr(item, "fixturenames", ())}
    return {m: ("spark-pipeline" if m in SPARK_PIPELINE_MODULES else "spark") if m in spark else m for m in modules}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the xdist_group marks into scopes
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    group = _groups(items)
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}

    def group_of(item: pytest.Item) -> str:
        return group[item.nodeid.split("::", 1)[0]]

    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of(item)))
    # A stable sort: the collection order stays within a group, and among the groups not named.
    items.sort(key=lambda item: rank.get(group_of(item), len(rank)))
