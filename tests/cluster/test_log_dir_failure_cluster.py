"""A log dir failing on one broker of a ZooKeeper cluster: a real ENOSPC on a 1 MiB tmpfs (when this machine
lets the test mount one) takes that dir's partitions offline on the broker, which tells the controller
(/log_dir_event_notification): the leadership moves to the other in-sync replica and the broker leaves the
ISR, while its partitions in the healthy dir keep their leader and full ISR. An idempotent acks=all
producer loses nothing and duplicates nothing across the failure."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.tools.local_cluster import LocalCluster

TOPIC = "jbod-fail"


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                          check=False).returncode == 0


def test_failed_dir_moves_leadership(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    tiny = tmp_path / f"tiny-{uuid.uuid4().hex[:8]}"
    if not _mount_tmpfs(tiny, "1m"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        c = make_cluster(2, per_broker={0: {"log.dirs": f"{tmp_path / 'b0-main'},{tiny}"}})
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2, replica_assignment=[[0, 1], [0, 1]])])[TOPIC].result(30)
        c.wait_until(lambda: all(c.isr_of(TOPIC, p) == [0, 1] for p in (0, 1)), 30, "full ISRs")
        c.wait_until(lambda: any(n.startswith(TOPIC + "-") for n in os.listdir(tiny)), 30, "a log on the tmpfs")
        doomed = next(int(n.rsplit("-", 1)[1]) for n in os.listdir(tiny) if n.startswith(TOPIC + "-"))
        healthy = 1 - doomed
        assert c.leader_of(TOPIC, doomed) == 0 and c.leader_of(TOPIC, healthy) == 0
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                      "batch.size": 50_000, "message.timeout.ms": 60_000, "log_level": 0})
        errors: list[object] = []
        n = 3000  # ~1.5 MB: more than the tmpfs holds
        for i in range(n):
            p.produce(TOPIC, value=b"%06d" % i + os.urandom(500), partition=doomed,
                      on_delivery=lambda e, _m: e is not None and errors.append(e))
            p.poll(0)
        assert p.flush(60) == 0
        assert not errors, errors[:3]
        assert c.leader_of(TOPIC, doomed) == 1 and c.isr_of(TOPIC, doomed) == [1]
        assert c.leader_of(TOPIC, healthy) == 0 and c.isr_of(TOPIC, healthy) == [0, 1]
        assert f"log dir {tiny} failed" in c.log_text(0)
        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "jbod", "enable.auto.commit": False,
                             "log_level": 0})
        consumer.assign([TopicPartition(TOPIC, doomed, 0)])
        got: list[int] = []
        while len(got) < n:
            msgs = consumer.consume(500, timeout=10)
            assert msgs, f"only {len(got)} of {n} records"
            got.extend(int(m.value()[:6]) for m in msgs if m.error() is None)
        consumer.close()
        assert got == list(range(n))  # nothing lost, nothing twice, in order
        # The healthy dir's partition still takes writes on broker 0.
        p.produce(TOPIC, value=b"ok", partition=healthy)
        assert p.flush(30) == 0 and not errors
    finally:
        subprocess.run(["umount", "-l", str(tiny)], check=False)
