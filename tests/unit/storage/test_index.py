from __future__ import annotations

import struct

import pytest

from gregor.storage.errors import CorruptIndexError
from gregor.storage.index import OffsetIndex, TimeIndex


def test_offset_index_lookup_write_and_reload(tmp_path) -> None:
    path = str(tmp_path / "00000000000000000100.index")
    idx = OffsetIndex(path, 100, max_entries=1000, new=True)
    assert idx.lookup(150) == (100, 0)
    for i in range(1, 11):
        idx.append(100 + i * 10, i * 4096)
    assert idx.lookup(99) == (100, 0)
    assert idx.lookup(110) == (110, 4096)
    assert idx.lookup(119) == (110, 4096)
    assert idx.lookup(10**9) == (200, 40960)
    with pytest.raises(ValueError):
        idx.append(200, 50000)  # offsets must grow
    idx.write_pending()
    data = open(path, "rb").read()
    assert len(data) == 80 and struct.unpack(">ii", data[:8]) == (10, 4096)  # relative offset, position
    again = OffsetIndex(path, 100, 1000, new=False)
    assert again.entries == 10 and not again.loaded
    assert again.last_entry() == (200, 40960)  # from the file tail, without loading
    assert again.lookup(155) == (150, 5 * 4096)
    again.truncate_to(150)
    assert again.entries == 4 and again.last_entry() == (140, 4 * 4096)
    assert len(open(path, "rb").read()) == 32


def test_floor_position(tmp_path) -> None:
    idx = OffsetIndex(str(tmp_path / "0.index"), 0, 100, new=True)
    for i in range(1, 6):
        idx.append(i * 10 - 1, i * 1000)  # the batch at i*1000 ends at offset i*10-1
    assert idx.floor_position(3500, 10**9) == 3000
    assert idx.floor_position(3500, 20) == 2000  # the batch at 3000 ends at 29 >= 20
    assert idx.floor_position(500, 10**9) == -1


def test_offset_index_is_full(tmp_path) -> None:
    idx = OffsetIndex(str(tmp_path / "0.index"), 0, max_entries=2, new=True)
    idx.append(1, 10)
    assert not idx.is_full
    idx.append(2, 20)
    assert idx.is_full


@pytest.mark.parametrize(
    "content",
    [b"\x00" * 7, struct.pack(">iiii", 5, 100, 4, 200), struct.pack(">iiii", 5, 100, 6, 50)],
)
def test_offset_index_corruption_detected(tmp_path, content: bytes) -> None:
    path = tmp_path / "0.index"
    path.write_bytes(content)
    with pytest.raises(CorruptIndexError):
        OffsetIndex(str(path), 0, 100, new=False).load()


def test_offset_index_sanity_check(tmp_path) -> None:
    path = tmp_path / "0.index"
    path.write_bytes(struct.pack(">ii", 5, 9000))
    idx = OffsetIndex(str(path), 0, 100, new=False)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(log_size=4000)  # points past the log
    idx.sanity_check(log_size=10000)
    path.write_bytes(struct.pack(">ii", -5, 0))
    with pytest.raises(CorruptIndexError):
        OffsetIndex(str(path), 0, 100, new=False).sanity_check(10000)
    path.unlink()  # never written (new indexes create their file lazily): an empty index
    missing = OffsetIndex(str(path), 0, 100, new=False)
    missing.sanity_check(10000)
    assert missing.entries == 0 and missing.lookup(7) == (0, 0)


def test_a_new_index_creates_its_file_at_its_first_write(tmp_path) -> None:
    """Creating 10,000 logs made 20,000 empty index files: now a new index writes its file only with
    entries, or empty when its segment (holding data) asks; a stale file of the name is removed."""
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(struct.pack(">ii", 5, 9000))  # stale
    idx = OffsetIndex(str(path), 0, 100, new=True)
    assert not path.exists()
    idx.write_pending(create_empty=False)
    idx.fsync()
    assert not path.exists()
    idx.write_pending()
    assert path.exists() and path.stat().st_size == 0
    idx.append(3, 100)
    idx.write_pending()
    idx.fsync()
    assert OffsetIndex(str(path), 0, 100, new=False).lookup(3) == (3, 100)


def test_time_index(tmp_path) -> None:
    path = str(tmp_path / "00000000000000000050.timeindex")
    idx = TimeIndex(path, 50, max_entries=100, new=True)
    assert idx.last_entry() == (-1, 50)
    assert idx.lookup(5) == (-1, 50)
    assert idx.maybe_append(1000, 55)
    assert not idx.maybe_append(1000, 60)  # not larger: skipped
    assert not idx.maybe_append(900, 61)
    assert idx.maybe_append(2000, 70)
    assert idx.lookup(999) == (-1, 50)
    assert idx.lookup(1500) == (1000, 55)
    assert idx.lookup(2000) == (2000, 70)
    idx.write_pending()
    assert open(path, "rb").read() == struct.pack(">qiqi", 1000, 5, 2000, 20)
    again = TimeIndex(path, 50, 100, new=False)
    assert again.last_entry() == (2000, 70)
    again.sanity_check()
    assert again.lookup(1999) == (1000, 55)
    again.truncate_to(70)
    assert again.last_entry() == (1000, 55)


def test_time_index_corruption_detected(tmp_path) -> None:
    path = tmp_path / "0.timeindex"
    path.write_bytes(struct.pack(">qiqi", 2000, 5, 1000, 6))
    with pytest.raises(CorruptIndexError):
        TimeIndex(str(path), 0, 100, new=False).sanity_check()
    with pytest.raises(CorruptIndexError):
        TimeIndex(str(path), 0, 100, new=False).load()
    path.write_bytes(b"\x01" * 13)
    with pytest.raises(CorruptIndexError):
        TimeIndex(str(path), 0, 100, new=False).load()
