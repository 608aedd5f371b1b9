from __future__ import annotations

from gregor.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochEntry, LeaderEpochFileCache


def cache(tmp_path) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(str(tmp_path / "leader-epoch-checkpoint"))


def test_assign_keeps_epochs_and_offsets_increasing(tmp_path) -> None:
    c = cache(tmp_path)
    assert c.latest_epoch is None
    assert c.assign(0, 0)
    assert not c.assign(0, 5)  # same epoch, later offset: nothing to record
    assert c.assign(2, 10)
    assert c.assign(3, 20)
    assert c.entries() == [EpochEntry(0, 0), EpochEntry(2, 10), EpochEntry(3, 20)]
    assert c.assign(2, 15)  # lower epoch: drops entries >= 2 first (Kafka's non-monotonic truncation)
    assert c.entries() == [EpochEntry(0, 0), EpochEntry(2, 15)]
    assert c.assign(4, 12)  # start offset below an existing one: drops that entry
    assert c.entries() == [EpochEntry(0, 0), EpochEntry(4, 12)]
    assert not c.assign(-1, 30)


def test_end_offset_for(tmp_path) -> None:
    c = cache(tmp_path)
    assert c.end_offset_for(0, 50) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    c.assign(1, 0)
    c.assign(3, 10)
    c.assign(5, 30)
    assert c.end_offset_for(5, 50) == (5, 50)  # the latest epoch ends at the LEO
    assert c.end_offset_for(3, 50) == (3, 30)
    assert c.end_offset_for(4, 50) == (3, 30)  # unknown epoch between: the floor epoch's end
    assert c.end_offset_for(1, 50) == (1, 10)
    assert c.end_offset_for(0, 50) == (0, 0)  # older than everything: the first start offset
    assert c.end_offset_for(6, 50) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert c.end_offset_for(UNDEFINED_EPOCH, 50) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert c.epoch_for_offset(29) == 3 and c.epoch_for_offset(30) == 5 and c.epoch_for_offset(0) == 1


def test_truncation(tmp_path) -> None:
    c = cache(tmp_path)
    for e, o in [(1, 0), (3, 10), (5, 30)]:
        c.assign(e, o)
    c.truncate_from_end(30)
    assert c.entries() == [EpochEntry(1, 0), EpochEntry(3, 10)]
    c.truncate_from_end(100)
    assert len(c.entries()) == 2
    c.truncate_from_start(15)
    assert c.entries() == [EpochEntry(3, 15)]
    c.truncate_from_start(5)  # nothing before 5
    assert c.entries() == [EpochEntry(3, 15)]
    c.clear()
    assert c.entries() == []


def test_persistence(tmp_path) -> None:
    c = cache(tmp_path)
    c.assign(1, 0)
    c.assign(2, 7)
    assert c.dirty
    c.flush()
    assert not c.dirty
    again = cache(tmp_path)
    assert again.entries() == [EpochEntry(1, 0), EpochEntry(2, 7)]
    assert again.end_offset_for(1, 9) == (1, 7)


def test_corrupt_file_starts_empty(tmp_path) -> None:
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n3\n1 0\n")
    c = cache(tmp_path)
    assert c.entries() == []


def test_entries_without_records_are_not_written(tmp_path) -> None:
    """An epoch beginning at or after the log end offset holds no record: a load drops it, so no write."""
    c = cache(tmp_path)
    c.assign(0, 0)
    assert c.dirty and not c.needs_flush(0)
    c.flush(0)
    assert not (tmp_path / "leader-epoch-checkpoint").exists()
    assert c.needs_flush(3)
    c.flush(3)
    c.assign(1, 3)  # a new leader at the LEO
    assert not c.needs_flush(3) and c.needs_flush(4)
    assert cache(tmp_path).entries() == [EpochEntry(0, 0)]
    c.truncate_from_end(0)
    assert c.needs_flush(0)
    c.flush(0)
    assert cache(tmp_path).entries() == []
