"""`gregor topics` with kafka-topics.sh's options, against a real broker (auto topic creation on)."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient

from tests.broker_process import BrokerProcess
from tests.tools.cli import gregor, one_line


def topics(b: BrokerProcess, *args: str) -> tuple[int, str, str]:
    res = gregor("topics", *args, "--bootstrap-server", b.bootstrap)
    return res.returncode, res.stdout, res.stderr


def names(b: BrokerProcess) -> set[str]:
    return set(AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10).topics)


def test_describe_missing_topic_says_so_and_does_not_create_it(broker: BrokerProcess) -> None:
    code, out, err = topics(broker, "--describe", "--topic", "nosuch")
    assert code == 1 and out == ""
    assert one_line(err) == "Error: Topic 'nosuch' does not exist."
    assert "nosuch" not in names(broker)  # the broker auto-creates topics, but not for a describe
    code, _, err = topics(broker, "--alter", "--topic", "nosuch", "--partitions", "3")
    assert code == 1 and "does not exist" in one_line(err)
    assert "nosuch" not in names(broker)


def test_kafka_spellings_create_describe_alter_list_delete(broker: BrokerProcess) -> None:
    code, out, err = topics(broker, "--create", "--topic", "events", "--partitions", "2", "--replication-factor", "1",
                            "--config", "retention.ms=86400000", "--config", "cleanup.policy=compact")
    assert code == 0, err
    assert out.strip() == "Created topic events."
    code, out, _ = topics(broker, "--describe", "--topic", "events")
    assert code == 0
    head, *rows = out.splitlines()
    fields = dict(f.split(": ", 1) for f in head.split("\t"))
    assert fields["Topic"] == "events" and fields["PartitionCount"] == "2" and fields["ReplicationFactor"] == "1"
    # Only the configs that differ from the defaults, as kafka-topics.sh shows them.
    assert fields["Configs"] == "cleanup.policy=compact,retention.ms=86400000"
    assert rows == [f"\tTopic: events\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0" for p in (0, 1)]

    code, _, err = topics(broker, "--create", "--topic", "events")
    assert code == 1 and "already exists" in one_line(err)
    assert topics(broker, "--create", "--topic", "events", "--if-not-exists")[0] == 0

    code, out, err = topics(broker, "--alter", "--topic", "events", "--partitions", "3",
                            "--config", "segment.ms=3600000", "--delete-config", "cleanup.policy")
    assert code == 0, err
    head = topics(broker, "--describe", "--topic", "events")[1].splitlines()[0]
    assert "PartitionCount: 3" in head and head.endswith("Configs: retention.ms=86400000,segment.ms=3600000")
    code, _, err = topics(broker, "--alter", "--topic", "events", "--partitions", "2")
    assert code == 1 and one_line(err).startswith("Error: altering the partitions of topic 'events' failed")

    code, out, _ = topics(broker, "--list")
    listed = out.split()
    assert code == 0 and "events" in listed
    # --describe without --topic describes every topic, with the same fields.
    out = topics(broker, "--describe")[1]
    assert [ln.split("\t")[0] for ln in out.splitlines() if ln.startswith("Topic: ")] == \
        [f"Topic: {t}" for t in listed]
    # Once a group has used the broker, __consumer_offsets is listed too, unless excluded.
    assert gregor("groups", "describe", "g", "--bootstrap-server", broker.bootstrap).returncode == 1
    assert "__consumer_offsets" in topics(broker, "--list")[1].split()
    assert "__consumer_offsets" not in topics(broker, "--list", "--exclude-internal")[1].split()
    out = topics(broker, "--describe", "--exclude-internal")[1]
    assert "Topic: events\t" in out and "__consumer_offsets" not in out

    assert topics(broker, "--delete", "--topic", "events")[0] == 0
    assert "events" not in names(broker)
    code, _, err = topics(broker, "--delete", "--topic", "events")
    assert code == 1 and "events" in one_line(err)
    assert topics(broker, "--delete", "--topic", "events", "--if-exists")[0] == 0


def test_bootstrap_server_anywhere_on_the_line(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    for argv in (["topics", "--bootstrap-server", bs, "--list"], ["topics", "--list", "--bootstrap-server", bs],
                 ["groups", "--bootstrap-server", bs, "list"], ["groups", "list", "--bootstrap-server", bs],
                 ["groups", "--list", "--bootstrap-server", bs]):
        res = gregor(*argv)
        assert res.returncode == 0 and res.stderr == "", res
