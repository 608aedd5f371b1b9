"""DescribeLogDirs and `gregor log-dirs` (kafka-log-dirs.sh) against one broker process with two log
dirs: the sizes reported per partition are those of its segment files on disk (os.stat of the .log
files), through the tool, kafka-python's admin client and the wire (each version, a topic filter); a dir that
cannot be read is a KAFKA_STORAGE_ERROR; without DESCRIBE on the cluster the answer is refused."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient

from gregor.protocol.errors import ErrorCode
from gregor.tools.local_broker import BrokerProcess
from tests.admin.cluster import InProcessCluster
from tests.tools.cli import gregor
from tests.wire import WireClient

TOPICS = {"ld-a": 3, "ld-b": 1, "ld-c": 2}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, list[str]]]:
    root = tmp_path_factory.mktemp("logdirs")
    dirs = [str(root / "d1"), str(root / "d2")]
    b = BrokerProcess(root / "d1", {"log.dirs": ",".join(dirs), "log.segment.bytes": "4096"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.create_topics([NewTopic(t, n, 1) for t, n in TOPICS.items()]).values():
            f.result(30)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
        for i in range(300):
            for t, n in TOPICS.items():
                p.produce(t, value=b"v" * (i % 50), key=str(i).encode(), partition=i % n)
        assert p.flush(30) == 0
        yield b, dirs
    finally:
        b.kill()


def on_disk(dirs: list[str]) -> dict[str, dict[str, int]]:
    """Per log dir, per `<topic>-<partition>` dir of our topics: the bytes of its .log files."""
    out: dict[str, dict[str, int]] = {}
    for d in dirs:
        sizes = out[os.path.abspath(d)] = {}
        for entry in Path(d).iterdir():
            if entry.is_dir() and entry.name.rsplit("-", 1)[0] in TOPICS:
                sizes[entry.name] = sum(os.stat(f).st_size for f in entry.glob("*.log"))
    return out


def reported(out: str) -> dict[str, dict[str, int]]:
    doc = json.loads(out.splitlines()[-1])
    assert doc["version"] == 1
    (broker,) = doc["brokers"]
    assert broker["broker"] == 0
    result: dict[str, dict[str, int]] = {}
    for d in broker["logDirs"]:
        assert d["error"] is None
        result[d["logDir"]] = {}
        for p in d["partitions"]:
            assert p["offsetLag"] == 0 and p["isFuture"] is False
            if p["partition"].rsplit("-", 1)[0] in TOPICS:
                result[d["logDir"]][p["partition"]] = p["size"]
    return result


def test_tool_sizes_match_the_files(cluster: tuple[BrokerProcess, list[str]]) -> None:
    b, dirs = cluster
    r = gregor("log-dirs", "--bootstrap-server", b.bootstrap, "--describe")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "Querying brokers for log directories information"
    assert lines[1] == "Received log directory information from brokers 0"
    got, want = reported(r.stdout), on_disk(dirs)
    assert got == want
    assert sum(len(v) for v in got.values()) == sum(TOPICS.values())
    assert all(got.values()), "partitions are spread over both dirs"
    assert sum(sum(v.values()) for v in got.values()) > 4096 * 2  # several segments


def test_tool_filters_topics_and_brokers(cluster: tuple[BrokerProcess, list[str]]) -> None:
    b, _ = cluster
    r = gregor("log-dirs", "--bootstrap-server", b.bootstrap, "--describe", "--topic-list", "ld-b,ld-c",
               "--broker-list", "0")
    assert r.returncode == 0, r.stderr
    names = {p["partition"] for d in json.loads(r.stdout.splitlines()[-1])["brokers"][0]["logDirs"]
             for p in d["partitions"]}
    assert names == {"ld-b-0", "ld-c-0", "ld-c-1"}
    bad = gregor("log-dirs", "--bootstrap-server", b.bootstrap, "--describe", "--broker-list", "0,7")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert "The given brokers do not exist from --broker-list: 7" in bad.stderr
    usage = gregor("log-dirs", "--bootstrap-server", b.bootstrap)
    assert usage.returncode == 2 and "--describe" in usage.stderr


def test_kafka_python_admin_client(cluster: tuple[BrokerProcess, list[str]]) -> None:
    b, dirs = cluster
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, client_id="logdirs-test")
    try:
        responses = admin.describe_log_dirs()
    finally:
        admin.close()
    got: dict[str, dict[str, int]] = {}
    assert [r["broker"] for r in responses] == [0]
    for resp in responses:
        for result in resp["log_dirs"]:
            assert result["error_code"] == 0
            sizes = got[result["log_dir"]] = {}
            for t in result["topics"]:
                for p in t["partitions"]:
                    if t["name"] in TOPICS:
                        sizes[f"{t['name']}-{p['partition_index']}"] = p["partition_size"]
    assert got == on_disk(dirs)


def test_wire_versions_and_topic_filter(cluster: tuple[BrokerProcess, list[str]]) -> None:
    b, dirs = cluster
    want = on_disk(dirs)
    c = WireClient(b.bootstrap)
    try:
        for version in (1, 2, 3, 4):
            resp = c.request(35, version, {"topics": [{"topic": "ld-a", "partitions": [0, 2]},
                                                      {"topic": "nope", "partitions": [0]}]})
            assert resp.get("error_code", 0) == 0
            got = {f"{t.name}-{p.partition_index}": (r.log_dir, p.partition_size)
                   for r in resp.results for t in r.topics for p in t.partitions}
            assert set(got) == {"ld-a-0", "ld-a-2"}
            for name, (log_dir, size) in got.items():
                assert want[log_dir][name] == size
            if version >= 4:
                assert all(r.total_bytes > 0 and 0 <= r.usable_bytes <= r.total_bytes for r in resp.results)
    finally:
        c.close()


def test_unreadable_log_dir_is_a_storage_error(cluster: tuple[BrokerProcess, list[str]]) -> None:
    b, dirs = cluster
    moved = dirs[1] + ".away"
    os.rename(dirs[1], moved)  # the dir is gone from its path: the broker cannot read it
    try:
        c = WireClient(b.bootstrap)
        try:
            resp = c.request(35, 4, {"topics": None})
        finally:
            c.close()
    finally:
        os.rename(moved, dirs[1])
    by_dir = {r.log_dir: r for r in resp.results}
    assert by_dir[os.path.abspath(dirs[1])].error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert by_dir[os.path.abspath(dirs[1])].topics == []
    assert by_dir[os.path.abspath(dirs[0])].error_code == 0 and by_dir[os.path.abspath(dirs[0])].topics


PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_carol="carol-secret";')


def _props(tmp_path: Path, user: str, password: str) -> str:
    p = tmp_path / f"{user}.properties"
    p.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
                 f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{user}" '
                 f'password="{password}";\n')
    return str(p)


def test_needs_describe_on_the_cluster(start_broker, tmp_path: Path) -> None:
    b = start_broker({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin",
                      "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                      "inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
                      "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS})
    c = WireClient(b.bootstrap_of("PLAINTEXT"))  # User:ANONYMOUS, no ACLs
    try:
        assert c.request(35, 1, {"topics": None}).results == []  # v1-v2: no error field, no dirs
        denied = c.request(35, 3, {"topics": None})
        assert denied.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and denied.results == []
    finally:
        c.close()
    sasl = b.bootstrap_of("SASL_PLAINTEXT")
    r = gregor("log-dirs", "--bootstrap-server", sasl, "--describe", "--command-config",
               _props(tmp_path, "carol", "carol-secret"))
    assert r.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr and "Traceback" not in r.stderr
    r = gregor("log-dirs", "--bootstrap-server", sasl, "--describe", "--command-config",
               _props(tmp_path, "admin", "admin-secret"))  # a super user, authenticated with SASL/PLAIN
    assert r.returncode == 0, r.stderr
    (broker,) = json.loads(r.stdout.splitlines()[-1])["brokers"]
    assert [d["error"] for d in broker["logDirs"]] == [None]


def test_every_broker_of_a_cluster(tmp_path: Path) -> None:
    """Each broker answers for the replicas it hosts, leader or follower; --broker-list picks brokers."""
    c = InProcessCluster(tmp_path, [1, 2])
    try:
        r = gregor("topics", "--bootstrap-server", c.bootstrap, "--create", "--topic", "rep",
                   "--replica-assignment", "1:2,2:1")
        assert r.returncode == 0, r.stderr
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        for i in range(50):
            p.produce("rep", value=b"x" * i, partition=i % 2)
        assert p.flush(30) == 0  # acks=all: both replicas hold every record
        r = gregor("log-dirs", "--bootstrap-server", c.bootstrap, "--describe", "--topic-list", "rep")
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[1] == "Received log directory information from brokers 1,2"
        brokers = json.loads(r.stdout.splitlines()[-1])["brokers"]
        assert [b["broker"] for b in brokers] == [1, 2]
        for b in brokers:
            (d,) = b["logDirs"]
            assert d["logDir"] == str(tmp_path / f"broker-{b['broker']}")
            sizes = {p["partition"]: p["size"] for p in d["partitions"]}
            assert sizes == {name: sum(os.stat(f).st_size for f in (Path(d["logDir"]) / name).glob("*.log"))
                             for name in ("rep-0", "rep-1")}
            assert all(size > 0 for size in sizes.values())
        r = gregor("log-dirs", "--bootstrap-server", c.bootstrap, "--describe", "--broker-list", "2")
        assert r.returncode == 0, r.stderr
        assert [b["broker"] for b in json.loads(r.stdout.splitlines()[-1])["brokers"]] == [2]
    finally:
        c.stop()
