"""`gregor dump-log`: decode a broker's files offline, as kafka-dump-log.sh does; no broker needed.

    gregor dump-log --files 00000000000000000000.log[,00000000000000000000.index,...] \\
        [--deep-iteration] [--print-data-log] [--index-sanity-check] [--verify-index-only] [--max-bytes N]

    .log                     batch headers (baseOffset lastOffset count ... crc isvalid); with
                             --deep-iteration or --print-data-log every record too (keys and values
                             with --print-data-log), a transaction marker as "endTxnMarker: COMMIT
                             coordinatorEpoch: N"
    .index / .timeindex      the entries, each checked against the segment's .log next to it (Kafka's
                             "Mismatches in :FILE" report on stderr); --verify-index-only checks without
                             printing the entries, --index-sanity-check runs the broker's own load-time
                             checks and prints "FILE passed sanity check."
    .snapshot                the producer-state snapshot: one line per producer
    .txnindex                the aborted transactions
    leader-epoch-checkpoint  the leader epochs and their start offsets

It reads with the broker's own decoders (gregor.protocol.records, gregor.storage.index,
producer_state, txn_index, checkpoint) and never writes. Reading a .log is bounded: batch by batch,
at most --max-bytes of it (Kafka's default: Integer.MAX_VALUE), each batch at most
--max-message-size (Kafka's default: 5 MiB). Whatever does not decode (a bad CRC, a torn or corrupt
batch, a damaged index, snapshot or checkpoint) is reported on its line and the command exits 1
after dumping every file, instead of a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from gregor.protocol import compression
from gregor.protocol.primitives import DecodeError
from gregor.protocol.records import (
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    MAGIC,
    BatchHeader,
    batch_size_at,
    compute_crc,
    decode_records,
    read_control_record,
    read_header,
)
from gregor.storage.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from gregor.storage.errors import CorruptCheckpointError, CorruptIndexError
from gregor.storage.index import OffsetIndex, TimeIndex
from gregor.storage.producer_state import SNAPSHOT_SUFFIX, last_sequence, read_snapshot_file
from gregor.storage.segment import INDEX_SUFFIX, TIME_INDEX_SUFFIX, parse_base_offset
from gregor.storage.segment_files import LOG_SUFFIX
from gregor.storage.txn_index import TXN_INDEX_SUFFIX, parse_entries
from gregor.tools.common import HelpFormatter, ToolError, UsageError

DEFAULT_MAX_BYTES = 2**31 - 1  # kafka-dump-log.sh's --max-bytes default (Integer.MAX_VALUE)
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024  # kafka-dump-log.sh's --max-message-size default
MARKER_NAMES = {0: "ABORT", 1: "COMMIT"}


def add_subcommands(sub: Any) -> None:
    p = sub.add_parser("dump-log", help="decode log segments, indexes and snapshots offline (like kafka-dump-log.sh)",
                       description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--files", required=True, metavar="F1,F2", help="the files to dump, comma-separated")
    p.add_argument("--deep-iteration", action="store_true", help="print every record, not only batch headers")
    p.add_argument("--print-data-log", action="store_true", help="print record keys and values (implies deep)")
    p.add_argument("--index-sanity-check", action="store_true",
                   help="only check the index files as the broker does when it loads them")
    p.add_argument("--verify-index-only", action="store_true",
                   help="check index entries against the log without printing them")
    p.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES, metavar="N",
                   help="read at most this many bytes of each .log file")
    p.add_argument("--max-message-size", type=int, default=DEFAULT_MAX_MESSAGE_SIZE, metavar="N",
                   help="the largest batch read")
    p.set_defaults(func=run_dump_log)


@dataclass
class Dump:
    """Options, and the problems found so far (they make the exit status 1)."""

    args: argparse.Namespace
    problems: list[str] = field(default_factory=list)

    def problem(self, path: str, text: str) -> None:
        print(text)
        self.problems.append(f"{path}: {text}")


# --- .log ---------------------------------------------------------------------------------------

def read_batches(fh: BinaryIO, max_bytes: int, max_message_size: int, trouble: list[str], *,
                 with_data: bool = True) -> Iterator[tuple[BatchHeader, bytes]]:
    """The batches of a segment file, read one at a time (never the whole file): those wholly in its
    first `max_bytes`, with their bytes (or only the header's, without `with_data`). A batch that cannot
    be read appends why to `trouble` and ends the scan."""
    size = os.fstat(fh.fileno()).st_size
    limit = min(size, max(max_bytes, 0))
    pos = 0
    while pos < limit:
        fh.seek(pos)
        head = fh.read(HEADER_SIZE)
        n = batch_size_at(head, 0)
        if n is None or len(head) < HEADER_SIZE or n < HEADER_SIZE or pos + n > size:
            # torn by a crash, or a length field that is garbage: Kafka's words for what is left
            trouble.append(f"Found {size - pos} invalid bytes at the end of {os.path.basename(fh.name)}")
            return
        if pos + n > limit:
            return  # --max-bytes ends the read before this batch
        if n > max_message_size:
            trouble.append(f"the batch at position {pos} is {n} bytes, more than --max-message-size "
                           f"{max_message_size}: stopped there")
            return
        header = read_header(head, 0)
        if header.magic != MAGIC:
            trouble.append(f"the batch at position {pos} has magic {header.magic}; only magic {MAGIC} is supported")
            return
        data = head + fh.read(n - HEADER_SIZE) if with_data else head
        header.position = pos
        yield header, data
        pos += n


def batch_line(h: BatchHeader, valid: bool) -> str:
    last_seq = last_sequence(h.base_sequence, h.last_offset_delta) if h.base_sequence >= 0 else -1
    horizon = f"OptionalLong[{h.base_timestamp}]" if h.attributes & DELETE_HORIZON_BIT else "OptionalLong.empty"
    ts_type = "LogAppendTime" if h.log_append_time else "CreateTime"
    return (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {last_seq} producerId: {h.producer_id} "
            f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
            f"deleteHorizonMs: {horizon} position: {h.position} {ts_type}: {h.max_timestamp} size: {h.size} "
            f"magic: {h.magic} compresscodec: {compression.NAMES.get(h.compression, h.compression)} "
            f"crc: {h.crc} isvalid: {str(valid).lower()}")


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def record_lines(dump: Dump, path: str, h: BatchHeader, data: bytes) -> Iterator[str]:
    """`| offset: ...` lines of one batch (decoded with the broker's decoder)."""
    h0 = dataclasses.replace(h, position=0)  # `data` holds this batch alone
    try:
        records = decode_records(data, h0)
        control = read_control_record(data, h0) if h.is_control else None
    except (DecodeError, ValueError) as e:
        dump.problem(path, f"the records of the batch at offset {h.base_offset} do not decode: {e}")
        return
    ts_type = "LogAppendTime" if h.log_append_time else "CreateTime"
    for r in records:
        seq = h.base_sequence + (r.offset - h.base_offset) if h.base_sequence >= 0 else -1
        line = (f"| offset: {r.offset} {ts_type}: {r.timestamp} keySize: {-1 if r.key is None else len(r.key)} "
                f"valueSize: {-1 if r.value is None else len(r.value)} sequence: {seq} "
                f"headerKeys: [{','.join(x.key for x in r.headers)}]")
        if control is not None:
            if control.is_txn_marker:
                line += f" endTxnMarker: {MARKER_NAMES[control.type]} coordinatorEpoch: {control.coordinator_epoch}"
            else:
                line += f" unknownControlType: {control.type}"
        elif dump.args.print_data_log:
            if r.key is not None:
                line += f" key: {_text(r.key)}"
            if r.value is not None:
                line += f" payload: {_text(r.value)}"
        yield line


def dump_log_file(dump: Dump, path: str) -> None:
    deep = dump.args.deep_iteration or dump.args.print_data_log
    base = parse_base_offset(os.path.basename(path))
    print(f"Log starting offset: {base if base is not None else 0}")
    trouble: list[str] = []
    with open(path, "rb") as fh:
        for h, data in read_batches(fh, dump.args.max_bytes, dump.args.max_message_size, trouble):
            valid = compute_crc(data, 0, h.size) == h.crc
            print(batch_line(h, valid))
            if not valid:
                dump.problem(path, f"the batch at offset {h.base_offset} (position {h.position}) fails its CRC check")
            elif deep:
                for line in record_lines(dump, path, h, data):
                    print(line)
    for t in trouble:
        dump.problem(path, t)


# --- .index and .timeindex -------------------------------------------------------------------------

def _segment_log(path: str, suffix: str) -> str:
    return path[: -len(suffix)] + LOG_SUFFIX


def _log_headers(dump: Dump, log_path: str) -> Iterator[BatchHeader]:
    """The segment's batch headers in file order, read one at a time: an index is checked against
    them in one pass, so memory does not grow with the segment."""
    trouble: list[str] = []
    with open(log_path, "rb") as fh:
        for h, _ in read_batches(fh, DEFAULT_MAX_BYTES, dump.args.max_message_size, trouble, with_data=False):
            yield h


def dump_index_file(dump: Dump, path: str, time_index: bool) -> None:
    suffix = TIME_INDEX_SUFFIX if time_index else INDEX_SUFFIX
    base = parse_base_offset(os.path.basename(path)) or 0
    index: OffsetIndex | TimeIndex = (TimeIndex if time_index else OffsetIndex)(path, base, 1 << 30, new=False)
    log_path = _segment_log(path, suffix)
    try:
        index.load()  # the broker's load-time checks: whole entries, increasing
        if dump.args.index_sanity_check:
            if isinstance(index, OffsetIndex):
                index.sanity_check(os.path.getsize(log_path) if os.path.exists(log_path) else 1 << 62)
            else:
                index.sanity_check()
    except CorruptIndexError as e:
        dump.problem(path, f"{path} failed the sanity check: {e}")
        return
    if dump.args.index_sanity_check:
        print(f"{path} passed sanity check.")
        return
    if not os.path.exists(log_path):
        dump.problem(path, f"no segment file {os.path.basename(log_path)} to check {os.path.basename(path)} against")
        return
    headers = _log_headers(dump, log_path)
    h: BatchHeader | None = next(headers, None)
    mismatches: list[str] = []
    prev_ts = -1
    for i in range(index.entries):  # entries increase in position and offset, as the batches do
        if isinstance(index, OffsetIndex):
            offset, position = index.entry(i)
            while h is not None and h.position < position:
                h = next(headers, None)
            if h is None or h.position != position or h.last_offset != offset:
                found = h.last_offset if h is not None and h.position == position else -1
                mismatches.append(f"  Index offset: {offset}, log offset: {found}")
            if not dump.args.verify_index_only:
                print(f"offset: {offset} position: {position}")
        else:
            timestamp, offset = index.entry(i)
            while h is not None and h.last_offset < offset:
                h = next(headers, None)
            if h is None or h.last_offset != offset:
                mismatches.append(f"  Index offset: {offset}, no batch of the log ends there")
            elif h.max_timestamp != timestamp:
                mismatches.append(f"  Index timestamp: {timestamp}, log timestamp: {h.max_timestamp}")
            if timestamp <= prev_ts:
                mismatches.append(f"  Index timestamp: {timestamp}, Previously indexed timestamp: {prev_ts}")
            prev_ts = timestamp
            if not dump.args.verify_index_only:
                print(f"timestamp: {timestamp} offset: {offset}")
    if mismatches:
        print(f"Mismatches in :{path}", file=sys.stderr)
        for m in mismatches:
            print(m, file=sys.stderr)
        dump.problems.append(f"{path}: {len(mismatches)} index entries do not match the log")


# --- .snapshot, .txnindex, leader-epoch-checkpoint ---------------------------------------------------

def dump_snapshot_file(dump: Dump, path: str) -> None:
    try:
        producers = read_snapshot_file(path)
    except ValueError as e:
        dump.problem(path, f"the snapshot is damaged: {e}")
        return
    for e in producers.values():
        txn = f"Optional[{e.current_txn_first_offset}]" if e.current_txn_first_offset >= 0 else "Optional.empty"
        line = (f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} coordinatorEpoch: "
                f"{e.coordinator_epoch} currentTxnFirstOffset: {txn} lastTimestamp: {e.last_timestamp}")
        if e.batches:
            b = e.batches[-1]
            line += (f" firstSequence: {b.first_seq} lastSequence: {b.last_seq} lastOffset: {b.last_offset} "
                     f"offsetDelta: {b.last_offset - b.first_offset} timestamp: {b.timestamp}")
        print(line)


def dump_txn_index_file(dump: Dump, path: str) -> None:
    with open(path, "rb") as fh:
        data = fh.read()
    entries, whole, problem = parse_entries(data)
    for e in entries:
        print(f"version: 0 producerId: {e.producer_id} firstOffset: {e.first_offset} lastOffset: {e.last_offset} "
              f"lastStableOffset: {e.last_stable_offset}")
    if problem is not None:
        dump.problem(path, problem)
    elif whole != len(data):
        dump.problem(path, f"Found {len(data) - whole} invalid bytes at the end of {os.path.basename(path)}")


def dump_leader_epochs(dump: Dump, path: str) -> None:
    try:
        entries = LeaderEpochCheckpointFile(path).read()
    except (CorruptCheckpointError, UnicodeDecodeError) as e:
        dump.problem(path, f"the checkpoint is damaged: {e}")
        return
    for epoch, start in entries:
        print(f"epoch: {epoch} startOffset: {start}")


def _dumper(name: str) -> Callable[[Dump, str], None] | None:
    """The dump function for a file name, or None for a file kafka-dump-log.sh ignores too."""
    if name.endswith(LOG_SUFFIX):
        return dump_log_file
    if name.endswith(INDEX_SUFFIX):
        return lambda d, p: dump_index_file(d, p, time_index=False)
    if name.endswith(TIME_INDEX_SUFFIX):
        return lambda d, p: dump_index_file(d, p, time_index=True)
    if name.endswith(SNAPSHOT_SUFFIX):
        return dump_snapshot_file
    if name.endswith(TXN_INDEX_SUFFIX):
        return dump_txn_index_file
    if name == LEADER_EPOCH_CHECKPOINT:
        return dump_leader_epochs
    return None


def dump_file(dump: Dump, path: str) -> None:
    func = _dumper(os.path.basename(path))
    if func is None:
        print(f"Ignoring unknown file {path}")
        return
    print(f"Dumping {path}")
    try:
        func(dump, path)
    except OSError as e:
        dump.problem(path, f"cannot read {path}: {e.strerror or e}")
    except Exception as e:  # a damaged file a decoder did not foresee: reported, and the next file dumped
        dump.problem(path, f"cannot decode {path}: {e!r}")


def run_dump_log(args: argparse.Namespace) -> int:
    files = [f.strip() for f in args.files.split(",") if f.strip()]
    if not files:
        raise UsageError("--files needs at least one file")
    if args.max_bytes <= 0 or args.max_message_size <= 0:
        raise UsageError("--max-bytes and --max-message-size must be positive")
    dump = Dump(args)
    for path in files:
        dump_file(dump, path)
    if dump.problems:
        raise ToolError(f"{len(dump.problems)} problem(s) found: " + "; ".join(dump.problems[:5])
                        + (" ..." if len(dump.problems) > 5 else ""))
    return 0
