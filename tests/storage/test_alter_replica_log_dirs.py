"""AlterReplicaLogDirs with real broker processes and clients: kafka-python's admin moves a partition
to another log dir while a producer keeps writing; DescribeLogDirs shows the future replica (isFuture,
its offset lag) while the paced copy runs; a consumer then reads every record in order, also after a
restart. A SIGKILL in the middle of a copy loses nothing: the move begins again at the next start and
completes once the pace is raised with a dynamic broker config. Unknown dirs and partitions get Kafka's
errors."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kafka import KafkaAdminClient
from kafka.errors import LogDirNotFoundError, NoError, ReplicaNotAvailableError
from kafka.structs import TopicPartitionReplica

from gregor.tools.local_broker import BrokerProcess
from tests.storage.jbod_util import describe_dirs, values, where
from tests.tools.cli import gregor
from tests.waiting import wait_for
from tests.wire import WireClient

RATE = "300000"  # replica.alter.log.dirs.io.max.bytes.per.second at the start: a ~1 MB copy takes seconds
RATE_NAME = "replica.alter.log.dirs.io.max.bytes.per.second"


@pytest.fixture(scope="module")
def b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, list[str]]]:
    root = tmp_path_factory.mktemp("mv")
    dirs = [str(root / "d0"), str(root / "d1")]
    broker = BrokerProcess(root / "d0", {"log.dirs": ",".join(dirs), RATE_NAME: RATE,
                                         "log.segment.bytes": "200000"}).start()
    try:
        yield broker, dirs
    finally:
        broker.kill()


def fill(bootstrap: str, topic: str, partition: int, first: int, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
                  "batch.size": 100_000})
    errors: list[object] = []
    for i in range(first, first + n):
        p.produce(topic, value=b"%08d" % i + os.urandom(400), partition=partition,
                  on_delivery=lambda e, _m: e is not None and errors.append(e))
        p.poll(0)
    assert p.flush(30) == 0
    assert not errors, errors[:3]


def numbers(c: WireClient, topic: str, p: int) -> list[int]:
    return [int(v[:8]) for v in values(c, topic, p)]


def move(bootstrap: str, topic: str, p: int, dest: str) -> type:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        (err,) = admin.alter_replica_log_dirs({TopicPartitionReplica(topic, p, 0): dest}).values()
        return err
    finally:
        admin.close()


def test_move_under_load_then_consume_and_restart(b: tuple[BrokerProcess, list[str]]) -> None:
    broker, dirs = b
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("mv", 2, 1)])["mv"].result(30)
    fill(broker.bootstrap, "mv", 0, 0, 3000)  # ~1.3 MB
    src = where(dirs, "mv")[0]
    dest = next(d for d in dirs if d != src)
    assert move(broker.bootstrap, "mv", 0, dest) is NoError
    c = WireClient(broker.bootstrap)
    seen = describe_dirs(c)
    size, lag, future = seen[dest][1][("mv", 0)]
    assert future is True and lag > 0
    assert seen[src][1][("mv", 0)][2] is False  # the current replica is still where it was
    fill(broker.bootstrap, "mv", 0, 3000, 500)  # the producer goes on during the copy
    wait_for(lambda: where(dirs, "mv").get(0) == dest and ("mv", 0) not in describe_dirs(c)[src][1],
             timeout_s=30, what="the move")
    seen = describe_dirs(c)
    assert seen[dest][1][("mv", 0)][1:] == (0, False)
    assert not [n for n in os.listdir(dest) if n.endswith(("-future", "-moved"))]
    fill(broker.bootstrap, "mv", 0, 3500, 100)  # and after it, into the moved log
    assert numbers(c, "mv", 0) == list(range(3600))
    broker.kill()
    broker.restart()
    c = WireClient(broker.bootstrap)
    assert where(dirs, "mv")[0] == dest
    assert numbers(c, "mv", 0) == list(range(3600))
    # Moving to the dir it is in already: nothing to do.
    assert move(broker.bootstrap, "mv", 0, dest) is NoError
    assert not [n for n in os.listdir(dest) if n.endswith("-future")]


def test_errors(b: tuple[BrokerProcess, list[str]]) -> None:
    broker, dirs = b
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("mv-err", 1, 1)])["mv-err"].result(30)
    assert move(broker.bootstrap, "mv-err", 0, str(Path(dirs[0]).parent / "elsewhere")) is LogDirNotFoundError
    assert move(broker.bootstrap, "mv-err", 7, dirs[1]) is ReplicaNotAvailableError
    assert move(broker.bootstrap, "no-such-topic", 0, dirs[1]) is ReplicaNotAvailableError
    # A replica not here yet is created in the dir asked for once it comes (Kafka's preferred log dir): the
    # fuller dir, where the fewest-logs rule would not put it.
    logs = [sum(1 for n in os.listdir(d) if n.rpartition("-")[2].isdigit()) for d in dirs]
    fuller = dirs[1] if logs[1] >= logs[0] else dirs[0]  # on a tie the rule takes the first dir
    assert move(broker.bootstrap, "mv-later", 0, fuller) is ReplicaNotAvailableError
    admin.create_topics([NewTopic("mv-later", 1, 1)])["mv-later"].result(30)
    assert where(dirs, "mv-later") == {0: fuller}


def test_sigkill_mid_copy_then_dynamic_rate(b: tuple[BrokerProcess, list[str]]) -> None:
    broker, dirs = b
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("mv-kill", 1, 1)])["mv-kill"].result(30)
    fill(broker.bootstrap, "mv-kill", 0, 0, 4000)  # ~1.7 MB: ~6 s at the starting rate
    src = where(dirs, "mv-kill")[0]
    dest = next(d for d in dirs if d != src)
    assert move(broker.bootstrap, "mv-kill", 0, dest) is NoError
    c = WireClient(broker.bootstrap)
    wait_for(lambda: 0 < describe_dirs(c)[dest][1].get(("mv-kill", 0), (0, 0, True))[0], timeout_s=30,
             what="a partial copy")
    broker.kill()  # SIGKILL in the middle of the copy
    assert any(n.startswith("mv-kill-0.") and n.endswith("-future") for n in os.listdir(dest))
    broker.restart()
    c = WireClient(broker.bootstrap)
    assert numbers(c, "mv-kill", 0) == list(range(4000))  # served from the current log meanwhile
    assert describe_dirs(c)[dest][1][("mv-kill", 0)][2] is True  # the move began again
    # Faster, without a restart: a dynamic broker config.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry(RATE_NAME, "50000000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(10)
    e = admin.describe_configs([res])[res].result(10)[RATE_NAME]
    assert (e.value, e.source) == ("50000000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    wait_for(lambda: where(dirs, "mv-kill").get(0) == dest, timeout_s=15, what="the move after the restart")
    wait_for(lambda: ("mv-kill", 0) not in describe_dirs(c)[src][1], timeout_s=30, what="the old copy to go")
    assert numbers(c, "mv-kill", 0) == list(range(4000))


def test_reassign_tool_log_dirs(b: tuple[BrokerProcess, list[str]], tmp_path: Path) -> None:
    """`gregor reassign` with kafka-reassign-partitions.sh's `log_dirs`: --execute starts the move, --verify
    reports it in progress, then completed."""
    broker, dirs = b
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("mv-tool", 1, 1)])["mv-tool"].result(30)
    fill(broker.bootstrap, "mv-tool", 0, 0, 300)
    dest = next(d for d in dirs if d != where(dirs, "mv-tool")[0])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "mv-tool", "partition": 0, "replicas": [0], "log_dirs": [dest]}]}))
    common = ("--bootstrap-server", broker.bootstrap, "--reassignment-json-file", str(plan))
    r = gregor("reassign", "--execute", *common)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Successfully started log directory move for: mv-tool-0-0" in r.stdout
    deadline = time.monotonic() + 30
    while True:
        r = gregor("reassign", "--verify", *common)
        if "Reassignment of replica mv-tool-0-0 completed successfully." in r.stdout:
            assert r.returncode == 0, r.stdout + r.stderr
            break
        assert "Reassignment of replica mv-tool-0-0 is still in progress." in r.stdout, r.stdout + r.stderr
        assert time.monotonic() < deadline
        time.sleep(0.3)
    assert where(dirs, "mv-tool")[0] == dest
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "mv-tool", "partition": 0, "replicas": [0], "log_dirs": ["/nowhere"]}]}))
    r = gregor("reassign", "--execute", *common)
    assert r.returncode == 1 and "mv-tool-0-0: LOG_DIR_NOT_FOUND" in r.stdout, r.stdout + r.stderr
