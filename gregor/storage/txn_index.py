"""TransactionIndex: a segment's `.txnindex`, the aborted transactions whose abort marker it holds.

A read_committed Fetch returns, with its records, the producer id and first offset of every
aborted transaction overlapping them, so the client drops those records. Finding them must not
mean decoding the log: each abort marker appended adds one fixed-size entry (Kafka's layout,
34 bytes: version int16 = 0, producer id int64, first offset int64, last offset int64 (the
marker's), last stable offset int64 (the partition's LSO once the marker completed it)) to the
index of the segment the marker went to. Entries are in marker order, so their last offsets
increase.

Most segments never hold an abort: the file exists only once it has an entry, and is read at most
once, on first use. A process crash loses nothing (each entry is one write(2) before the append
returns); entries past the recovery point are checked again on load, where the producer state's
replay of those batches adds back any lost with a machine crash (`add_if_absent`).
"""

from __future__ import annotations

import logging
import os
import struct
from typing import NamedTuple

from gregor.storage.files import fsync_file, unlink_if_exists

logger = logging.getLogger(__name__)

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
_VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: str, new: bool = False) -> None:
        self.path = path
        # None until read; a new segment's index is known empty without touching the disk.
        self._entries: list[AbortedTxn] | None = [] if new else None
        self._last_offsets: set[int] | None = set() if new else None
        self._dirty = False  # written since the last fsync

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._load()
        assert self._entries is not None
        return self._entries

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            data = b""
        entries, whole, problem = parse_entries(data)
        if problem is not None:
            logger.warning("%s: %s; dropping it and the rest", self.path, problem)
        if whole != len(data):
            self._rewrite(entries)  # a torn last entry (a crash mid-write) or a bad one: keep the good prefix
        self._entries = entries
        self._last_offsets = {e.last_offset for e in entries}

    def __len__(self) -> int:
        return len(self.entries)

    def append(self, entry: AbortedTxn) -> None:
        entries = self.entries
        if entries and entry.last_offset <= entries[-1].last_offset:
            raise ValueError(f"{self.path}: abort marker at {entry.last_offset} is not after the last entry's "
                             f"{entries[-1].last_offset}")
        with open(self.path, "ab") as fh:
            fh.write(_ENTRY.pack(_VERSION, *entry))
        entries.append(entry)
        assert self._last_offsets is not None
        self._last_offsets.add(entry.last_offset)
        self._dirty = True

    def add_if_absent(self, entry: AbortedTxn) -> bool:
        """Replay's append: the marker's entry unless the index has it already. Returns whether added."""
        self.entries  # noqa: B018 - loads the set
        assert self._last_offsets is not None
        if entry.last_offset in self._last_offsets:
            return False
        if self._entries and entry.last_offset < self._entries[-1].last_offset:
            self._rewrite(sorted([*self._entries, entry], key=lambda e: e.last_offset))
            return True
        self.append(entry)
        return True

    def collect(self, fetch_offset: int, upper_bound: int, out: list[AbortedTxn]) -> bool:
        """Add the entries of transactions overlapping [fetch_offset, upper_bound) to `out`. Returns
        True when no later segment can hold one: an entry whose LSO reached `upper_bound` was written
        after every transaction begun below it had ended."""
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
                out.append(e)
            if e.last_stable_offset >= upper_bound:
                return True
        return False

    def truncate_to(self, offset: int) -> None:
        """Forget the entries of markers at or after `offset` (the log was truncated there)."""
        entries = self.entries
        keep = [e for e in entries if e.last_offset < offset]
        if len(keep) != len(entries):
            self._rewrite(keep)

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        if not entries:
            unlink_if_exists(self.path)
        else:
            tmp = self.path + ".tmp"
            with open(tmp, "wb") as fh:
                fh.write(b"".join(_ENTRY.pack(_VERSION, *e) for e in entries))
            os.replace(tmp, self.path)
        self._entries = list(entries)
        self._last_offsets = {e.last_offset for e in entries}
        self._dirty = True

    def reset(self) -> None:
        """Drop every entry and the file."""
        self._rewrite([])

    def rename(self, path: str) -> None:
        if self._entries is None or self._entries:
            try:
                os.replace(self.path, path)
            except FileNotFoundError:
                pass
        self.path = path

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def fsync(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        fsync_file(self.path)

    def delete(self) -> None:
        unlink_if_exists(self.path)


def parse_entries(data: bytes) -> tuple[list[AbortedTxn], int, str | None]:
    """The valid entries at the start of a .txnindex file's bytes, how many bytes they take, and what is
    wrong with the first invalid entry (None if every whole entry is valid; a torn tail is not an
    entry). Reads only: the index rewrites its file to the valid prefix, `gregor dump-log` reports."""
    entries: list[AbortedTxn] = []
    whole = len(data) - len(data) % ENTRY_SIZE
    for pos in range(0, whole, ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
        if version != _VERSION or first > last or (entries and last <= entries[-1].last_offset):
            return entries, pos, f"entry {pos // ENTRY_SIZE} is invalid (version {version}, offsets {first}..{last})"
        entries.append(AbortedTxn(pid, first, last, lso))
    return entries, whole, None
