"""EmbeddedMetadataStore: journal and snapshot, reloading, torn tails, old files, compaction, events."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from pathlib import Path

import pytest

from gregor.metadata.embedded import FILE_NAME, JOURNAL_NAME, EmbeddedMetadataStore
from gregor.metadata.store import (
    AddPartitions,
    BadVersionError,
    CreateTopic,
    DeleteTopic,
    MetadataEvent,
    NoSuchTopicError,
    PartitionState,
    SetTopicConfigs,
    TopicExistsError,
    TopicMetadata,
)


def _topic(name: str, n: int = 3) -> TopicMetadata:
    return TopicMetadata(name, uuid.uuid4(), {p: PartitionState([0], 0, isr=[0]) for p in range(n)})


def _reopen(d: Path) -> EmbeddedMetadataStore:
    return EmbeddedMetadataStore(str(d), 0)


def test_changes_survive_a_crash_through_the_journal(tmp_path: Path) -> None:
    s = _reopen(tmp_path)
    a = _topic("a")
    results = s.apply([CreateTopic(a), CreateTopic(_topic("b")), CreateTopic(_topic("a")),
                       AddPartitions("a", {3: PartitionState([0], 0, isr=[0])}),
                       SetTopicConfigs("b", {"retention.ms": "5"}), DeleteTopic("nope")])
    assert results[:2] == [1, 2] and isinstance(results[2], TopicExistsError)
    assert results[3:5] == [3, 4] and isinstance(results[5], NoSuchTopicError)
    assert s.update_partition_state("a", 0, PartitionState([0], 0, leader_epoch=1, isr=[0]), 0) == 1
    with pytest.raises(BadVersionError):
        s.update_partition_state("a", 0, PartitionState([0], 0, leader_epoch=2, isr=[0]), 0)
    s.delete_topic("b")
    # No close: as after kill -9, the snapshot file knows nothing of these; the journal does.
    assert json.loads((tmp_path / FILE_NAME).read_text())["topics"] == []
    r = _reopen(tmp_path)
    img = r.snapshot()
    assert img.version == s.version == 6 and img.cluster_id == s.cluster_id
    assert sorted(img.topics) == ["a"]
    t = img.topics["a"]
    assert t.topic_id == a.topic_id and sorted(t.partitions) == [0, 1, 2, 3]
    assert t.partitions[0].leader_epoch == 1 and t.partitions[0].version == 1


def test_a_torn_journal_tail_is_ignored_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    s = _reopen(tmp_path)
    s.create_topic(_topic("kept"))
    s.create_topic(_topic("torn"))
    journal = tmp_path / JOURNAL_NAME
    data = journal.read_bytes()
    cut = data.rfind(b"\n", 0, len(data) - 1) + 1 + 30  # into the last record
    journal.write_bytes(data[:cut])
    with caplog.at_level(logging.WARNING, logger="gregor.metadata"):
        r = _reopen(tmp_path)
    assert sorted(r.snapshot().topics) == ["kept"] and r.version == 1
    assert any("incomplete or corrupt" in rec.getMessage() for rec in caplog.records)
    r.create_topic(_topic("after"))  # appended after the cut, not after the garbage
    assert sorted(_reopen(tmp_path).snapshot().topics) == ["after", "kept"]


def test_a_corrupt_record_ends_the_replay(tmp_path: Path) -> None:
    s = _reopen(tmp_path)
    s.create_topic(_topic("one"))
    s.create_topic(_topic("two"))
    journal = tmp_path / JOURNAL_NAME
    lines = journal.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"two"', b'"twp"')  # checksum no longer matches
    journal.write_bytes(b"\n".join(lines))
    assert sorted(_reopen(tmp_path).snapshot().topics) == ["one"]


def test_an_old_metadata_file_still_loads(tmp_path: Path) -> None:
    """The format written before the journal: whole file, indented, no metadata_version."""
    tid = uuid.uuid4()
    doc = {"version": 1, "cluster_id": "AAAAAAAAAAAAAAAAAAAAAA", "topics": [{
        "name": "old", "topic_id": str(tid), "internal": False, "configs": {"retention.ms": "10"},
        "partitions": {"0": {"replicas": [0], "leader": 0, "leader_epoch": 3, "isr": [0], "controller_epoch": 0,
                             "version": 2}}}]}
    (tmp_path / FILE_NAME).write_text(json.dumps(doc, indent=1))
    s = _reopen(tmp_path)
    img = s.snapshot()
    assert img.version == 0 and img.cluster_id == "AAAAAAAAAAAAAAAAAAAAAA"
    t = img.topics["old"]
    assert t.topic_id == tid and t.configs == {"retention.ms": "10"} and t.partitions[0].leader_epoch == 3
    assert s.create_topic(_topic("new")) == 1
    s.close()
    assert sorted(_reopen(tmp_path).snapshot().topics) == ["new", "old"]


def test_close_and_the_size_threshold_fold_the_journal_into_the_snapshot(tmp_path: Path) -> None:
    s = EmbeddedMetadataStore(str(tmp_path), 0, snapshot_bytes=2000)
    for i in range(20):
        s.create_topic(_topic(f"t{i}", 5))
    s.delete_topic("t0")
    compactor = s._journal._compactor
    assert compactor is not None  # the journal passed 2000 bytes: folded on a background thread
    compactor.join()
    snap = json.loads((tmp_path / FILE_NAME).read_text())
    assert snap["metadata_version"] >= 1 and len(snap["topics"]) >= 1
    s.close()
    assert (tmp_path / JOURNAL_NAME).stat().st_size == 0
    snap = json.loads((tmp_path / FILE_NAME).read_text())
    assert snap["metadata_version"] == 21 and len(snap["topics"]) == 19
    r = _reopen(tmp_path)
    assert r.version == 21 and sorted(r.snapshot().topics) == sorted(f"t{i}" for i in range(1, 20))


def test_records_already_in_the_snapshot_are_not_replayed(tmp_path: Path) -> None:
    """A crash after the snapshot was renamed into place but before the journal was truncated."""
    s = _reopen(tmp_path)
    s.create_topic(_topic("a"))
    s.delete_topic("a")
    s.create_topic(_topic("a", 1))
    journal = (tmp_path / JOURNAL_NAME).read_bytes()
    s.close()
    (tmp_path / JOURNAL_NAME).write_bytes(journal)  # as if the truncation never happened
    r = _reopen(tmp_path)
    assert r.version == 3 and len(r.snapshot().topics["a"].partitions) == 1


def test_events_carry_versions_and_copies(tmp_path: Path) -> None:
    async def run() -> list[MetadataEvent]:
        loop = asyncio.get_running_loop()
        s = _reopen(tmp_path)
        got: list[MetadataEvent] = []
        s.subscribe(loop, got.append)
        t = _topic("e")
        await loop.run_in_executor(None, s.create_topic, t)
        await asyncio.sleep(0.05)
        assert got[0].snapshot is not None
        got[0].snapshot.partitions[0].leader = 9  # the event's objects are not the store's
        assert s.snapshot().topics["e"].partitions[0].leader == 0
        await loop.run_in_executor(None, s.apply, [SetTopicConfigs("e", {"a": "b"}), DeleteTopic("e")])
        await asyncio.sleep(0.05)
        s.close()
        return got

    got = asyncio.run(run())
    assert [(e.version, e.kind, e.topic) for e in got] == [(1, "created", "e"), (2, "configs", "e"), (3, "deleted", "e")]
    assert got[1].snapshot is not None and got[1].snapshot.configs == {"a": "b"} and got[2].snapshot is None


def test_a_journal_whose_snapshot_is_gone_is_kept_aside(tmp_path: Path) -> None:
    s = _reopen(tmp_path)
    s.create_topic(_topic("x"))
    (tmp_path / FILE_NAME).unlink()
    r = _reopen(tmp_path)
    assert r.snapshot().topics == {} and r.cluster_id != s.cluster_id
    kept = list(tmp_path.glob(JOURNAL_NAME + ".orphaned-*"))
    assert len(kept) == 1 and b'"x"' in kept[0].read_bytes()


def test_user_and_client_configs_persist_and_are_published(tmp_path: Path) -> None:
    s = EmbeddedMetadataStore(str(tmp_path), 0)
    s.set_entity_configs("users", "alice", {"producer_byte_rate": "10"})
    s.set_entity_configs("users", "<default>/clients/app", {"consumer_byte_rate": "20"})
    s.set_entity_configs("users", "alice", {})
    s.close()
    again = EmbeddedMetadataStore(str(tmp_path), 0)
    assert again.snapshot().entity_configs == {"users/<default>/clients/app": {"consumer_byte_rate": "20"}}
    again.close()
