"""`gregor groups`: list, describe with lag, reset offsets (dry run and --execute), delete, in both
spellings (subcommand words and kafka-consumer-groups.sh's options)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module; groups start at once (no initial rebalance delay)."""
    broker = BrokerProcess(tmp_path_factory.mktemp("groups-tool"), {"group.initial.rebalance.delay.ms": "0"}).start()
    yield broker
    broker.kill()


def gregor(b: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gregor", "groups", "--bootstrap-server", b.bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


def kafka_style(b: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """kafka-consumer-groups.sh's spelling, with --bootstrap-server last."""
    return subprocess.run([sys.executable, "-m", "gregor", "groups", *args, "--bootstrap-server", b.bootstrap],
                          capture_output=True, text=True, timeout=60)


def test_list_describe_reset_delete(b: BrokerProcess) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap})
    base = int(time.time() * 1000) - 100_000
    for i in range(100):
        p.produce("tool", str(i).encode(), timestamp=base + i * 1000)
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "tooled", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe(["tool"])
    got = 0
    deadline = time.monotonic() + 30
    while got < 60 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got += 1
            c.commit(message=m, asynchronous=False)
    out = gregor(b, "describe", "tooled").stdout
    assert "Stable" in out
    row = next(ln for ln in out.splitlines() if ln.startswith("tooled"))
    assert row.split()[3:6] == ["60", "100", "40"], row  # current offset, log end offset, lag
    # An active group cannot be reset.
    res = gregor(b, "reset-offsets", "tooled", "--topic", "tool", "--to-earliest", "--execute")
    assert res.returncode == 1 and "inactive" in res.stderr
    c.close()
    assert "tooled" in gregor(b, "list").stdout
    dry = gregor(b, "reset-offsets", "tooled", "--topic", "tool", "--shift-by", "-10")
    assert "50" in dry.stdout and "dry run" in dry.stdout
    check = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "tooled"})
    assert check.committed([TopicPartition("tool", 0)], timeout=10)[0].offset == 60  # dry run changed nothing
    for flags, expected in [(["--shift-by", "-10"], 50), (["--to-offset", "7"], 7), (["--to-latest"], 100),
                            (["--to-earliest"], 0), (["--to-offset", "500"], 100)]:
        res = gregor(b, "reset-offsets", "tooled", "--topic", "tool", *flags, "--execute")
        assert res.returncode == 0, res.stderr
        assert check.committed([TopicPartition("tool", 0)], timeout=10)[0].offset == expected, flags
    when = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime((base + 30_000) / 1000))
    assert gregor(b, "reset-offsets", "tooled", "--topic", "tool", "--to-datetime", when, "--execute").returncode == 0
    assert check.committed([TopicPartition("tool", 0)], timeout=10)[0].offset == 30
    # kafka-consumer-groups.sh's spellings do the same.
    res = kafka_style(b, "--reset-offsets", "--group", "tooled", "--topic", "tool", "--to-offset", "12", "--execute")
    assert res.returncode == 0, res.stderr
    assert check.committed([TopicPartition("tool", 0)], timeout=10)[0].offset == 12
    check.close()
    res = kafka_style(b, "--describe", "--group", "tooled")
    row = next(ln for ln in res.stdout.splitlines() if ln.startswith("tooled"))
    assert res.returncode == 0 and row.split()[3:6] == ["12", "100", "88"], res
    state = kafka_style(b, "--describe", "--group", "tooled", "--state").stdout.splitlines()
    assert state[0].split()[:3] == ["GROUP", "COORDINATOR", "(ID)"], state
    assert state[1].split()[0] == "tooled" and state[1].split()[-2:] == ["Empty", "0"], state
    assert "tooled" in kafka_style(b, "--list").stdout.split()
    assert "tooled\tEmpty" in kafka_style(b, "--list", "--state").stdout
    res = kafka_style(b, "--delete", "--group", "tooled")
    assert res.returncode == 0, res.stderr
    assert "tooled" not in gregor(b, "list").stdout
    res = kafka_style(b, "delete", "tooled")
    assert res.returncode == 1 and res.stderr.startswith("Error: deletion of group 'tooled' failed"), res


def test_describe_unknown_group_fails(b: BrokerProcess) -> None:
    for res in (gregor(b, "describe", "nosuch"), gregor(b, "describe", "--members", "nosuch"), kafka_style(b, "describe", "nosuch"), gregor(b, "--describe", "nosuch"),
                kafka_style(b, "--describe", "--group", "nosuch"), kafka_style(b, "--describe", "--group", "nosuch",
                                                                              "--members")):
        assert res.returncode == 1, res
        assert res.stderr == "Error: Consumer group 'nosuch' does not exist.\n" and res.stdout == "", res


def test_describe_group_with_offsets_of_a_deleted_topic(b: BrokerProcess) -> None:
    from confluent_kafka.admin import AdminClient

    p = Producer({"bootstrap.servers": b.bootstrap})
    p.produce("doomed", b"x")
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "orphan"})
    c.commit(offsets=[TopicPartition("doomed", 0, 1)], asynchronous=False)
    c.close()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.delete_topics(["doomed"])["doomed"].result(10)
    res = gregor(b, "describe", "orphan")
    assert res.returncode == 0 and res.stderr == "", res
    row = next(ln for ln in res.stdout.splitlines() if ln.startswith("orphan"))
    assert row.split()[1:6] == ["doomed", "0", "1", "-", "-"], row  # no log end offset, no lag
