"""A partition reassignment on real broker processes, in both metadata modes: the replicas of a topic move
from brokers 0 and 1 to brokers 1 and 2 while an idempotent acks=all producer writes to it; every
acknowledged record is then read back from the new replicas alone (broker 0 killed), once, in order."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from gregor.tools.local_cluster import LocalCluster
from gregor.tools.numbered_load import NumberedLoad, check_acked, read_back
from tests.tools.cli import gregor

TOPIC = "moving"


def test_replicas_move_under_load_and_keep_every_record(make_any_cluster: Callable[..., LocalCluster],
                                                        tmp_path: Path) -> None:
    c = make_any_cluster(3)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, 2, replica_assignment=[[0, 1], [1, 0]])]).values():
        f.result(30)
    c.wait_until(lambda: all(sorted(c.isr_of(TOPIC, p)) == [0, 1] for p in range(2)), 30, "full ISRs")
    load = NumberedLoad(c.bootstrap, TOPIC, 2, 10**9, {"enable.idempotence": True}, rate=500).start()
    c.wait_until(lambda: load.acked_count() > 200, 30, "records acknowledged")

    target = {0: [1, 2], 1: [2, 1]}
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": p, "replicas": r} for p, r in target.items()]}))
    common = ("--bootstrap-server", c.bootstrap, "--reassignment-json-file", str(plan))
    r = gregor("reassign", "--execute", *common)
    assert r.returncode == 0, r.stdout + r.stderr
    deadline = time.monotonic() + 90
    while True:
        r = gregor("reassign", "--verify", *common)
        if r.returncode == 0 and all(f"Reassignment of partition {TOPIC}-{p} is completed." in r.stdout for p in target):
            break
        assert "still in progress" in r.stdout, r.stdout + r.stderr
        assert time.monotonic() < deadline, "the reassignment did not complete:\n" + r.stdout
        time.sleep(0.5)
    for p, replicas in target.items():
        c.wait_until(lambda p=p, replicas=replicas: c.partition(TOPIC, p).replicas == replicas
                     and sorted(c.isr_of(TOPIC, p)) == sorted(replicas), 30, f"{TOPIC}-{p} on {replicas}")
    mark = load.acked_count()
    c.wait_until(lambda: load.acked_count() > mark + 200, 30, "records acknowledged after the move")
    load.stopping.set()
    load.join(60)
    assert not load.errors, load.errors[:5]

    c.kill(0)  # the old replica holds nothing the topic needs any more
    result = check_acked(load.acked, read_back(",".join(c.brokers[i].bootstrap for i in (1, 2)), TOPIC, 2, 60))
    assert result.ok, result.summary()
    assert result.acked > 400
