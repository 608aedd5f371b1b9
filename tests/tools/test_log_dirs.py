"""DescribeLogDirs and `gregor log-dirs` (kafka-log-dirs.sh) against one broker process with two log
dirs: the sizes reported per partition are those of its segment files on disk (os.stat of the .log
files), through the tool and through kafka-python's admin client."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient

from gregor.tools.local_broker import BrokerProcess
from tests.tools.cli import gregor

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
