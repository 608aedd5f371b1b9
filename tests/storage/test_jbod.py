"""JBOD (several log.dirs) with real broker processes: new partitions spread over the dirs (the one with
the fewest logs first); after a SIGKILL each partition is found in the dir that holds it and keeps every
record; DeleteRecords' log start survives a restart; a failed dir takes only its own partitions offline
(KAFKA_STORAGE_ERROR to producers and consumers, to DescribeLogDirs for that dir) while the others keep
serving: a dir replaced by a file before a start, and a real ENOSPC on a 1 MiB tmpfs at runtime (when this
machine lets the test mount one)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from gregor.protocol.errors import ErrorCode
from gregor.tools.local_broker import BrokerProcess
from tests.server.admin_wire import create_topic, fetch, metadata, produce
from tests.server.test_metrics import scrape, value
from tests.storage.jbod_util import describe_dirs, values, where
from tests.wire import WireClient


@pytest.fixture
def three_dirs(tmp_path: Path) -> Iterator[tuple[BrokerProcess, list[str]]]:
    dirs = [str(tmp_path / f"d{i}") for i in range(3)]
    b = BrokerProcess(tmp_path / "d0", {"log.dirs": ",".join(dirs), "metrics.port": "0"}).start()
    try:
        yield b, dirs
    finally:
        b.kill()


def test_spread_restart_and_delete_records(three_dirs: tuple[BrokerProcess, list[str]]) -> None:
    b, dirs = three_dirs
    c = WireClient(b.bootstrap)
    assert create_topic(c, "spread", 6).error_code == ErrorCode.NONE
    placed = where(dirs, "spread")
    assert sorted(placed) == list(range(6))
    assert sorted(list(placed.values()).count(d) for d in dirs) == [2, 2, 2]  # the fewest logs first
    for p in range(6):
        assert produce(c, "spread", p, [f"{p}-{i}".encode() for i in range(50)]).error_code == ErrorCode.NONE
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    (fut,) = admin.delete_records([TopicPartition("spread", 1, 20)]).values()
    assert fut.result(10).low_watermark == 20
    del admin
    b.kill()  # SIGKILL: recovery finds each log in its own dir
    b.restart()
    c = WireClient(b.bootstrap)
    assert where(dirs, "spread") == placed
    for p in range(6):
        want = [f"{p}-{i}".encode() for i in range(20 if p == 1 else 0, 50)]
        assert values(c, "spread", p) == want
    b.stop()
    b.start()
    c = WireClient(b.bootstrap)
    assert values(c, "spread", 1)[0] == b"1-20"  # the log start survives a clean restart too
    seen = describe_dirs(c)
    assert sorted(seen) == sorted(dirs)
    for d in dirs:
        err, parts = seen[d]
        assert err == ErrorCode.NONE
        assert {tp for tp in parts if tp[0] == "spread"} == {("spread", p) for p, pd in placed.items() if pd == d}
    # New partitions keep going to the dir with the fewest.
    assert create_topic(c, "spread2", 3).error_code == ErrorCode.NONE
    assert sorted(where(dirs, "spread2").values()) == sorted(dirs)


def test_dir_replaced_by_a_file_takes_only_its_partitions_offline(
        three_dirs: tuple[BrokerProcess, list[str]]) -> None:
    b, dirs = three_dirs
    c = WireClient(b.bootstrap)
    assert create_topic(c, "gone", 3).error_code == ErrorCode.NONE
    for p in range(3):
        assert produce(c, "gone", p, [b"before"]).error_code == ErrorCode.NONE
    placed = where(dirs, "gone")
    lost = next(p for p, d in placed.items() if d == dirs[2])
    b.stop()
    shutil.rmtree(dirs[2])
    Path(dirs[2]).write_text("not a directory")
    b.start()
    c = WireClient(b.bootstrap)
    for p in range(3):
        r = produce(c, "gone", p, [b"after"])
        if p == lost:
            assert r.error_code == ErrorCode.KAFKA_STORAGE_ERROR
            assert fetch(c, "gone", p).error_code == ErrorCode.KAFKA_STORAGE_ERROR
        else:
            assert r.error_code == ErrorCode.NONE
            assert values(c, "gone", p) == [b"before", b"after"]
    (t,) = metadata(c, "gone").topics
    assert {p.partition_index: p.error_code for p in t.partitions}[lost] == ErrorCode.KAFKA_STORAGE_ERROR
    seen = describe_dirs(c)
    assert seen[dirs[2]][0] == ErrorCode.KAFKA_STORAGE_ERROR
    assert seen[dirs[0]][0] == seen[dirs[1]][0] == ErrorCode.NONE
    # New partitions go to the dirs still online.
    assert create_topic(c, "after", 4).error_code == ErrorCode.NONE
    assert set(where(dirs[:2], "after")) == {0, 1, 2, 3}
    assert "log dir " + dirs[2] + " is offline" in b.log_text()
    url = re.findall(r"metrics endpoint listening on (http://\S+/metrics)", b.log_text())[-1]
    assert value(scrape(url), "kafka_log_logmanager_offlinelogdirectorycount") == 1
    assert value(scrape(url), "kafka_server_replicamanager_offlinereplicacount") >= 1


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                       check=False)
    return r.returncode == 0


def test_enospc_takes_only_that_dir_offline(tmp_path: Path) -> None:
    full = tmp_path / f"tiny-{uuid.uuid4().hex[:8]}"
    if not _mount_tmpfs(full, "1m"):
        pytest.skip("cannot mount a tmpfs here (needs root): the ENOSPC case is covered where it can")
    b = None
    try:
        dirs = [str(tmp_path / "big"), str(full)]
        b = BrokerProcess(tmp_path / "big", {"log.dirs": ",".join(dirs)}).start()
        c = WireClient(b.bootstrap)
        assert create_topic(c, "fill", 2).error_code == ErrorCode.NONE
        placed = where(dirs, "fill")
        small = next(p for p, d in placed.items() if d == str(full))
        other = 1 - small
        chunk = [os.urandom(1000) for _ in range(100)]  # ~100 KB a request
        errors = []
        for _ in range(15):  # 1.5 MB into a 1 MiB file system
            errors.append(produce(c, "fill", small, chunk).error_code)
            if errors[-1] != ErrorCode.NONE:
                break
        assert errors[-1] == ErrorCode.KAFKA_STORAGE_ERROR, errors
        # Only that dir's partition is lost: the other one serves writes and reads.
        assert produce(c, "fill", small, [b"x"]).error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert fetch(c, "fill", small).error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert produce(c, "fill", other, [b"still", b"here"]).error_code == ErrorCode.NONE
        assert values(c, "fill", other) == [b"still", b"here"]
        seen = describe_dirs(c)
        assert seen[str(full)][0] == ErrorCode.KAFKA_STORAGE_ERROR
        assert seen[dirs[0]][0] == ErrorCode.NONE and ("fill", other) in seen[dirs[0]][1]
        assert create_topic(c, "later", 2).error_code == ErrorCode.NONE
        assert set(where(dirs[:1], "later")) == {0, 1}
        b.wait_for_log(f"log dir {full} failed")
    finally:
        if b is not None:
            b.kill()
        subprocess.run(["umount", "-l", str(full)], check=False)
