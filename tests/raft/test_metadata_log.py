"""The replicated log's contract, for both implementations (files through gregor.storage, and memory), the
epoch rules the leader answers fetches with, snapshots as files, quorum-state, and recovery after a
kill -9 (a torn tail truncated, the epochs rebuilt from the batches)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gregor.protocol.records import iter_headers
from gregor.raft import records as rr
from gregor.raft.log import (
    DIVERGING,
    SNAPSHOT,
    VALID,
    OffsetAndEpoch,
    epoch_end,
    last_epoch_at,
    truncation_offset,
    validate_fetch,
)
from gregor.raft.memory_log import MemoryLog
from gregor.raft.metadata_log import METADATA_LOG_DIR_NAME, MetadataLog
from gregor.raft.quorum_state import ElectionState, FileQuorumStateStore, QuorumStateError
from gregor.raft.snapshots import SnapshotError, SnapshotReader, SnapshotWriter, parse_snapshot_file_name


def batch(base: int, epoch: int, n: int = 1, tag: str = "r") -> bytes:
    return rr.data_batch([f"{tag}{base + i}".encode() for i in range(n)], base, epoch, 1000)


@pytest.fixture(params=["files", "memory"])
def make_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], object]]:
    opened: list[object] = []

    def make() -> object:
        log = MetadataLog.open(str(tmp_path), segment_bytes=1024) if request.param == "files" else MemoryLog()
        opened.append(log)
        return log
    yield make
    for log in opened:
        log.close()  # type: ignore[attr-defined]


def fill(log: object, epochs: list[tuple[int, int]]) -> None:
    """Append batches of one record: `epochs` as (epoch, how many)."""
    for epoch, count in epochs:
        for _ in range(count):
            log.append_as_leader(batch(log.end_offset, epoch), epoch)  # type: ignore[attr-defined]


def test_appends_epochs_and_reads(make_log: Callable[[], object]) -> None:
    log = make_log()
    assert (log.end_offset, log.last_fetched_epoch, log.epoch_entries()) == (0, -1, [])  # type: ignore[attr-defined]
    fill(log, [(1, 3), (3, 2)])
    assert log.end_offset == 5 and log.last_fetched_epoch == 3  # type: ignore[attr-defined]
    assert log.epoch_entries() == [(1, 0), (3, 3)]  # type: ignore[attr-defined]
    data = bytes(log.read(2, 1 << 20))  # type: ignore[attr-defined]
    assert [h.base_offset for h in iter_headers(data)] == [2, 3, 4]
    assert bytes(log.read(5, 100)) == b""  # type: ignore[attr-defined]
    assert len(list(iter_headers(bytes(log.read(0, 1))))) == 1  # at least one batch, whatever the limit
    follower = bytes(log.read(0, 1 << 20))  # type: ignore[attr-defined]
    assert log.flushed_offset <= 5  # type: ignore[attr-defined]
    log.flush()  # type: ignore[attr-defined]
    assert log.flushed_offset == 5  # type: ignore[attr-defined]
    other = make_log()
    if isinstance(other, MetadataLog):
        other.close()
        return
    assert other.append_as_follower(follower) == 5  # type: ignore[attr-defined]
    assert other.epoch_entries() == [(1, 0), (3, 3)]  # type: ignore[attr-defined]


def test_follower_appends_are_validated(make_log: Callable[[], object]) -> None:
    log = make_log()
    bad = bytearray(batch(0, 1))
    bad[-1] ^= 0xFF  # breaks the CRC
    with pytest.raises(Exception, match="(?i)crc|corrupt"):
        log.append_as_follower(bytes(bad))  # type: ignore[attr-defined]
    assert log.end_offset == 0  # type: ignore[attr-defined]


def test_truncation_drops_later_epochs(make_log: Callable[[], object]) -> None:
    log = make_log()
    fill(log, [(1, 3), (2, 3), (4, 2)])
    log.truncate_to(4)  # type: ignore[attr-defined]
    assert log.end_offset == 4 and log.epoch_entries() == [(1, 0), (2, 3)]  # type: ignore[attr-defined]
    assert log.last_fetched_epoch == 2  # type: ignore[attr-defined]


def test_snapshots_move_the_log_start(make_log: Callable[[], object]) -> None:
    log = make_log()
    fill(log, [(1, 40), (2, 20)])
    log.set_high_watermark(60)  # type: ignore[attr-defined]
    w = SnapshotWriter(log.new_snapshot(OffsetAndEpoch(45, 2)), 123, 1000, 1 << 20)  # type: ignore[attr-defined]
    w.append([b"state-a", b"state-b"])
    assert log.latest_snapshot_id is None  # type: ignore[attr-defined]  # not before it is frozen
    w.freeze()
    assert log.latest_snapshot_id == OffsetAndEpoch(45, 2)  # type: ignore[attr-defined]
    log.delete_before_snapshot(OffsetAndEpoch(45, 2))  # type: ignore[attr-defined]
    assert log.log_start_offset == 45 and log.end_offset == 60  # type: ignore[attr-defined]
    raw = log.open_snapshot(OffsetAndEpoch(45, 2))  # type: ignore[attr-defined]
    reader = SnapshotReader(raw, 1 << 20)
    assert list(reader.records()) == [b"state-a", b"state-b"] and reader.last_contained_log_time_ms == 123
    raw.close()
    # a follower that installs a newer snapshot starts over there
    w2 = SnapshotWriter(log.new_snapshot(OffsetAndEpoch(100, 5)), 0, 1000, 1 << 20)  # type: ignore[attr-defined]
    w2.freeze()
    log.reset_to_snapshot(OffsetAndEpoch(100, 5))  # type: ignore[attr-defined]
    assert (log.log_start_offset, log.end_offset, log.last_fetched_epoch) == (100, 100, 5)  # type: ignore[attr-defined]
    assert log.open_snapshot(OffsetAndEpoch(45, 2)) is None  # type: ignore[attr-defined]
    log.append_as_follower(batch(100, 6))  # type: ignore[attr-defined]
    assert log.epoch_entries() == [(6, 100)]  # type: ignore[attr-defined]


def test_an_aborted_snapshot_leaves_nothing(make_log: Callable[[], object]) -> None:
    log = make_log()
    fill(log, [(1, 5)])
    log.set_high_watermark(5)  # type: ignore[attr-defined]
    w = SnapshotWriter(log.new_snapshot(OffsetAndEpoch(5, 1)), 0, 0, 1 << 20)  # type: ignore[attr-defined]
    w.append([b"x"])
    w.close()
    assert log.latest_snapshot_id is None  # type: ignore[attr-defined]


# --- the epoch rules ----------------------------------------------------------------------------

def test_epoch_end() -> None:
    entries = [(1, 0), (3, 10), (6, 20)]
    assert epoch_end(entries, None, 30, 6) == OffsetAndEpoch(30, 6)
    assert epoch_end(entries, None, 30, 5) == OffsetAndEpoch(20, 3)  # the largest epoch at or below
    assert epoch_end(entries, None, 30, 1) == OffsetAndEpoch(10, 1)
    assert epoch_end(entries, None, 30, 0) == OffsetAndEpoch(0, 0)  # older than all: Kafka's answer
    snap = OffsetAndEpoch(10, 2)
    assert epoch_end([(3, 10)], snap, 15, 2) == OffsetAndEpoch(10, 2)
    assert epoch_end([(3, 10)], snap, 15, 1) == OffsetAndEpoch(-1, -1)  # only in a snapshot
    assert epoch_end([], snap, 10, 7) == OffsetAndEpoch(10, 2)
    assert last_epoch_at(entries, None, 20) == 3 and last_epoch_at(entries, None, 21) == 6
    assert last_epoch_at([], snap, 10) == 2


def test_validate_fetch_and_truncation() -> None:
    leader = MemoryLog()
    fill(leader, [(1, 5), (2, 5), (4, 5)])
    assert validate_fetch(leader, 0, -1).kind == VALID
    assert validate_fetch(leader, 7, 2).kind == VALID
    assert validate_fetch(leader, 15, 4).kind == VALID
    v = validate_fetch(leader, 12, 3)  # the follower wrote epoch 3 at 10-11, which the leader never had
    assert v.kind == DIVERGING and v.position == OffsetAndEpoch(10, 2)
    follower = MemoryLog()
    fill(follower, [(1, 5), (2, 5), (3, 2)])
    assert truncation_offset(follower, v.position) == 10
    follower.truncate_to(10)
    assert validate_fetch(leader, follower.end_offset, follower.last_fetched_epoch).kind == VALID
    v = validate_fetch(leader, 12, 2)  # epoch 2 ended at 10 on the leader
    assert v.kind == DIVERGING and v.position == OffsetAndEpoch(10, 2)
    leader.set_high_watermark(15)
    leader.new_snapshot(OffsetAndEpoch(12, 4)).freeze()
    leader.delete_before_snapshot(OffsetAndEpoch(12, 4))
    assert validate_fetch(leader, 3, 1) == validate_fetch(leader, 0, -1)
    assert validate_fetch(leader, 3, 1).kind == SNAPSHOT and validate_fetch(leader, 3, 1).position == (12, 4)
    assert validate_fetch(leader, 12, 4).kind == VALID  # a follower that installed the snapshot


# --- files: recovery and names --------------------------------------------------------------------

def test_a_torn_tail_is_truncated_and_the_epochs_rebuilt(tmp_path: Path) -> None:
    log = MetadataLog.open(str(tmp_path), segment_bytes=4096)
    fill(log, [(1, 10), (2, 10)])
    log.flush()
    fill(log, [(3, 5)])
    log.abandon()  # no flush: what a kill -9 leaves (the page cache keeps the writes)
    seg = sorted((tmp_path / METADATA_LOG_DIR_NAME).glob("*.log"))[-1]
    os.truncate(seg, seg.stat().st_size - 7)  # and a power loss tears the last batch
    again = MetadataLog.open(str(tmp_path), segment_bytes=4096)
    try:
        assert again.end_offset == 24
        assert again.epoch_entries() == [(1, 0), (2, 10), (3, 20)]
        assert [h.base_offset for h in iter_headers(bytes(again.read(20, 1 << 20)))] == [20, 21, 22, 23]
    finally:
        again.close()


def test_segments_below_a_snapshot_are_deleted_and_stay_deleted(tmp_path: Path) -> None:
    log = MetadataLog.open(str(tmp_path), segment_bytes=300)
    fill(log, [(1, 60)])
    segments_before = len(list((tmp_path / METADATA_LOG_DIR_NAME).glob("*.log")))
    log.set_high_watermark(50)
    SnapshotWriter(log.new_snapshot(OffsetAndEpoch(50, 1)), 0, 0, 1 << 20).freeze()
    log.delete_before_snapshot(OffsetAndEpoch(50, 1))
    names = sorted(p.name for p in (tmp_path / METADATA_LOG_DIR_NAME).iterdir())
    assert "00000000000000000050-0000000001.checkpoint" in names
    logs = [n for n in names if n.endswith(".log")]
    assert len(logs) < segments_before and int(logs[0].split(".")[0]) <= 50
    log.close()
    again = MetadataLog.open(str(tmp_path), segment_bytes=300)
    try:
        assert (again.log_start_offset, again.end_offset, again.latest_snapshot_id) == (50, 60, (50, 1))
    finally:
        again.close()


def test_unfinished_snapshot_files_are_removed_at_start(tmp_path: Path) -> None:
    d = tmp_path / METADATA_LOG_DIR_NAME
    d.mkdir()
    (d / "00000000000000000009-0000000002.checkpoint.part").write_bytes(b"half")
    (d / "00000000000000000004-0000000001.checkpoint.deleted").write_bytes(b"old")
    log = MetadataLog.open(str(tmp_path))
    try:
        assert log.latest_snapshot_id is None
        assert sorted(p.name for p in d.iterdir() if "checkpoint" in p.name and p.name != "leader-epoch-checkpoint") == []
    finally:
        log.close()


def test_snapshot_names_are_kafkas() -> None:
    assert parse_snapshot_file_name("00000000000000001234-0000000007.checkpoint") == (1234, 7)
    for bad in ("1234-7.checkpoint", "00000000000000001234-0000000007.log", "x" * 20 + "-" + "0" * 10 + ".checkpoint"):
        assert parse_snapshot_file_name(bad) is None


def test_a_snapshot_without_its_footer_is_refused(tmp_path: Path) -> None:
    log = MemoryLog()
    raw = log.new_snapshot(OffsetAndEpoch(3, 1))
    raw.append(rr.snapshot_header_batch(1, 0, 0))
    raw.append(rr.data_batch([b"x"], 1, 1, 0))
    raw.freeze()
    reader = SnapshotReader(log.open_snapshot(OffsetAndEpoch(3, 1)), 1 << 20)  # type: ignore[arg-type]
    with pytest.raises(SnapshotError, match="incomplete"):
        list(reader.records())


def test_quorum_state_file_is_kafkas_json_and_written_atomically(tmp_path: Path) -> None:
    store = FileQuorumStateStore(str(tmp_path))
    assert store.read() is None
    store.write(ElectionState(5, 2, 2, (1, 2, 3)))
    obj = json.loads((tmp_path / "quorum-state").read_text())
    assert obj == {"clusterId": "", "leaderId": 2, "leaderEpoch": 5, "votedId": 2, "appliedOffset": 0,
                   "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}], "data_version": 0}
    assert not (tmp_path / "quorum-state.tmp").exists()
    assert FileQuorumStateStore(str(tmp_path)).read() == ElectionState(5, 2, 2, (1, 2, 3))
    (tmp_path / "quorum-state").write_text("{not json")
    with pytest.raises(QuorumStateError, match="quorum-state"):
        FileQuorumStateStore(str(tmp_path)).read()
