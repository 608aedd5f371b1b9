"""`gregor configs` (like kafka-configs.sh) against a real broker: describe and alter topics, brokers (one
and the cluster default), groups, and users/clients through the quota and SCRAM tools."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.cli import main
from tests.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("configs-cli"), {"sasl.enabled.mechanisms": "SCRAM-SHA-256"}).start()
    yield broker
    broker.kill()


def run(capsys: pytest.CaptureFixture[str], b: BrokerProcess, *argv: str) -> tuple[int, str, str]:
    rc = main(["configs", "--bootstrap-server", b.bootstrap, *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_topics(b: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("cfg-t", 1, 1)])["cfg-t"].result(30)
    rc, out, _ = run(capsys, b, "--alter", "--entity-type", "topics", "--entity-name", "cfg-t",
                     "--add-config", "retention.ms=1000,cleanup.policy=[compact,delete]")
    assert rc == 0 and out.strip() == "Completed updating config for topic cfg-t."
    rc, out, _ = run(capsys, b, "--describe", "--entity-type", "topics", "--entity-name", "cfg-t")
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == "Dynamic configs for topic cfg-t are:"
    assert any(ln.startswith("  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, ")
               for ln in lines), out
    assert "  cleanup.policy=compact,delete sensitive=false" in out
    assert len(lines) == 3  # only the topic's own configs without --all
    rc, out, _ = run(capsys, b, "--describe", "--all", "--entity-type", "topics", "--entity-name", "cfg-t")
    assert out.startswith("All configs for topic cfg-t are:") and "segment.bytes=1073741824" in out
    rc, out, _ = run(capsys, b, "--alter", "--entity-type", "topics", "--entity-name", "cfg-t", "--delete-config",
                     "retention.ms")
    assert rc == 0
    rc, out, _ = run(capsys, b, "--describe", "--entity-type", "topics")  # every topic
    assert "Dynamic configs for topic cfg-t are:" in out and "retention.ms" not in out
    rc, _, err = run(capsys, b, "--alter", "--entity-type", "topics", "--entity-name", "cfg-t", "--add-config", "nope=1")
    assert rc == 1 and "nope" in err


def test_brokers_and_default(b: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, b, "--alter", "--entity-type", "brokers", "--entity-default",
                     "--add-config", "log.retention.ms=7200000")
    assert rc == 0 and out.strip() == "Completed updating default config for brokers in the cluster."
    rc, out, _ = run(capsys, b, "--alter", "--entity-type", "brokers", "--entity-name", "0",
                     "--add-config", "message.max.bytes=2000000")
    assert rc == 0 and out.strip() == "Completed updating config for broker 0."
    rc, out, _ = run(capsys, b, "--describe", "--entity-type", "brokers", "--entity-default")
    assert out.splitlines() == ["Default configs for brokers in the cluster are:",
                                "  log.retention.ms=7200000 sensitive=false "
                                "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000}"]
    rc, out, _ = run(capsys, b, "--describe", "--entity-type", "brokers", "--entity-name", "0")
    assert out.splitlines()[0] == "Dynamic configs for broker 0 are:"
    assert ("  message.max.bytes=2000000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:message.max.bytes=2000000, "
            "DEFAULT_CONFIG:message.max.bytes=1048588}") in out.splitlines()
    assert any(ln.startswith("  log.retention.ms=7200000 ") for ln in out.splitlines())
    rc, _, err = run(capsys, b, "--alter", "--entity-type", "brokers", "--entity-name", "0", "--add-config", "log.dirs=/x")
    assert rc == 1 and "Cannot update these configs dynamically" in err
    for args in (["--entity-type", "brokers", "--entity-default", "--delete-config", "log.retention.ms"],
                 ["--entity-type", "brokers", "--entity-name", "0", "--delete-config", "message.max.bytes"]):
        assert run(capsys, b, "--alter", *args)[0] == 0


def test_groups(b: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, b, "--alter", "--entity-type", "groups", "--entity-name", "cfg-g",
                     "--add-config", "consumer.heartbeat.interval.ms=6000")
    assert rc == 0 and out.strip() == "Completed updating config for group cfg-g."
    rc, out, _ = run(capsys, b, "--describe", "--entity-type", "groups", "--entity-name", "cfg-g")
    assert out.splitlines()[0] == "Dynamic configs for group cfg-g are:"
    assert out.splitlines()[1].startswith("  consumer.heartbeat.interval.ms=6000 sensitive=false "
                                          "synonyms={GROUP_CONFIG:consumer.heartbeat.interval.ms=6000")
    rc, _, err = run(capsys, b, "--alter", "--entity-type", "groups", "--entity-name", "cfg-g",
                     "--add-config", "consumer.heartbeat.interval.ms=1")
    assert rc == 1 and "group.consumer.min.heartbeat.interval.ms" in err


def test_users_and_clients(b: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, b, "--alter", "--entity-type", "clients", "--entity-name", "app",
                     "--add-config", "producer_byte_rate=1024")
    assert rc == 0, out
    rc, out, _ = run(capsys, b, "--describe", "--entity-type", "clients", "--entity-name", "app")
    assert "Quota configs for client-id 'app' are producer_byte_rate=1024.0" in out
    rc, out, _ = run(capsys, b, "--alter", "--entity-type", "users", "--entity-name", "alice",
                     "--add-config", "SCRAM-SHA-256=[iterations=4096,password=alice-secret]")
    assert rc == 0, out
    rc, out, _ = run(capsys, b, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=4096" in out
    rc, _, err = run(capsys, b, "--alter", "--entity-type", "users", "--entity-name", "alice",
                     "--add-config", "SCRAM-SHA-256=[password=x],producer_byte_rate=1")
    assert rc == 2 and "separate commands" in err


def test_usage_errors(b: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    for argv, text in [(["--describe"], "--entity-type is required"),
                       (["--alter", "--entity-type", "topics", "--add-config", "a=1"], "--alter needs --entity-name"),
                       (["--alter", "--entity-type", "topics", "--entity-name", "t"], "--add-config"),
                       (["--describe", "--entity-type", "topics", "--entity-default"], "--entity-default is for")]:
        rc, _, err = run(capsys, b, *argv)
        assert rc == 2 and text in err, (argv, err)
