"""The metadata store through real broker processes: every acknowledged CreateTopics survives SIGKILL in the
middle of a burst, a torn journal tail is ignored with a warning, a metadata file of the earlier format
loads, and a client reads its own creations back at once."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from gregor.metadata.embedded import FILE_NAME, JOURNAL_NAME
from tests.broker_process import BrokerProcess
from tests.server.admin_wire import CREATE_TOPICS, metadata
from tests.wire import WireClient


def _create(c: WireClient, names: list[str], partitions: int) -> dict[str, tuple[int, uuid.UUID]]:
    resp = c.request(CREATE_TOPICS, 7, {
        "topics": [{"name": n, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                    "configs": []} for n in names],
        "timeout_ms": 0, "validate_only": False})
    return {t.name: (t.error_code, t.topic_id) for t in resp.topics}


def _listed(b: BrokerProcess, names: list[str]) -> dict[str, tuple[uuid.UUID, int]]:
    c = WireClient(b.bootstrap)
    try:
        out = {}
        for i in range(0, len(names), 200):
            for t in metadata(c, *names[i:i + 200]).topics:
                if t.error_code == 0:
                    out[t.name] = (t.topic_id, len(t.partitions))
        return out
    finally:
        c.close()


def test_sigkill_during_a_burst_of_create_topics_keeps_every_acknowledged_topic(
        start_broker: Callable[..., BrokerProcess]) -> None:
    b = start_broker({"auto.create.topics.enable": "false"})
    acked: dict[str, uuid.UUID] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def burst(worker: int) -> None:
        c = WireClient(b.bootstrap)
        i = 0
        try:
            while not stop.is_set():
                names = [f"w{worker}-{i}-{k}" for k in range(3)]
                i += 1
                for name, (err, tid) in _create(c, names, 4).items():
                    assert err == 0, (name, err)
                    with lock:
                        acked[name] = tid
        except (OSError, EOFError, ConnectionError):
            pass  # the broker died under the request: that one was never acknowledged
        finally:
            c.close()

    workers = [threading.Thread(target=burst, args=(w,)) for w in range(3)]
    for w in workers:
        w.start()
    deadline = time.monotonic() + 30
    while len(acked) < 150 and time.monotonic() < deadline:
        time.sleep(0.01)
    b.kill()  # SIGKILL with requests in flight
    stop.set()
    for w in workers:
        w.join(15)
    with lock:
        expected = dict(acked)
    assert len(expected) >= 150
    b.restart()
    listed = _listed(b, sorted(expected))
    missing = sorted(set(expected) - set(listed))
    assert not missing, f"{len(missing)} acknowledged topics lost, e.g. {missing[:5]}"
    assert all(listed[n] == (tid, 4) for n, tid in expected.items())


def test_a_torn_journal_tail_is_ignored_with_a_warning(start_broker: Callable[..., BrokerProcess],
                                                      tmp_path: Path) -> None:
    data = tmp_path / "torn"
    b = start_broker({"auto.create.topics.enable": "false"}, data_dir=data)
    c = WireClient(b.bootstrap)
    assert all(err == 0 for err, _ in _create(c, ["before-1", "before-2"], 2).values())
    c.close()
    b.kill()
    journal = data / JOURNAL_NAME
    assert journal.stat().st_size > 0  # a killed broker leaves its changes in the journal
    with journal.open("ab") as fh:  # a record cut short by the crash
        fh.write(b'0badc0de {"v":99,"op":"create","topic":{"name":"half')
    b.restart()
    text = b.log_text()
    assert "incomplete or corrupt" in text and "Traceback" not in text
    assert set(_listed(b, ["before-1", "before-2", "half"])) == {"before-1", "before-2"}
    c = WireClient(b.bootstrap)
    assert _create(c, ["after"], 1)["after"][0] == 0
    c.close()
    assert b.stop() == 0
    assert journal.stat().st_size == 0  # a clean stop folds the journal into the snapshot
    b.restart()
    assert set(_listed(b, ["before-1", "before-2", "after"])) == {"before-1", "before-2", "after"}


def test_a_metadata_file_of_the_earlier_format_loads(start_broker: Callable[..., BrokerProcess],
                                                     tmp_path: Path) -> None:
    data = tmp_path / "old"
    data.mkdir()
    tid = uuid.uuid4()
    doc = {"version": 1, "cluster_id": "q1Sh-9_ISia_zwGINzRvyQ", "topics": [{
        "name": "legacy", "topic_id": str(tid), "internal": False, "configs": {},
        "partitions": {str(p): {"replicas": [0], "leader": 0, "leader_epoch": 0, "isr": [0], "controller_epoch": 0,
                                "version": 0} for p in range(3)}}]}
    (data / FILE_NAME).write_text(json.dumps(doc, indent=1))
    b = start_broker({"auto.create.topics.enable": "false"}, data_dir=data)
    c = WireClient(b.bootstrap)
    md = metadata(c)
    assert md.cluster_id == "q1Sh-9_ISia_zwGINzRvyQ"
    c.close()
    assert _listed(b, ["legacy"]) == {"legacy": (tid, 3)}


def test_a_client_reads_its_own_creations_at_once(start_broker: Callable[..., BrokerProcess]) -> None:
    """The CreateTopics response waits for the metadata cache: Metadata on another connection right after it
    always shows the topic (and a deletion's response, its absence)."""
    b = start_broker({"auto.create.topics.enable": "false"})
    admin, reader = WireClient(b.bootstrap), WireClient(b.bootstrap)
    for i in range(30):
        name = f"own-{i}"
        assert _create(admin, [name], 2)[name][0] == 0
        t = metadata(reader, name).topics[0]
        assert t.error_code == 0 and len(t.partitions) == 2
        resp = admin.request(20, 5, {"topic_names": [name], "timeout_ms": 0})
        assert resp.responses[0].error_code == 0
        assert metadata(reader, name).topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    admin.close()
    reader.close()
