"""`gregor dump-log` (kafka-dump-log.sh) on the files of a real broker after a clean stop: every batch
a confluent-kafka producer wrote decodes (plain, gzip-compressed, a committed and an aborted
transaction with their markers), the indexes match the segments, the snapshots, transaction index and
leader-epoch checkpoint decode; damaged files are reported with exit status 1, never a traceback."""

from __future__ import annotations

import re
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.tools.local_broker import BrokerProcess
from tests.tools.cli import gregor

TOPIC = "dump"
PLAIN = [f"plain-{i}" for i in range(300)]
GZIPPED = [f"gzip-{i}" for i in range(20)]
COMMITTED = ["txn-commit-0", "txn-commit-1"]
ABORTED = ["txn-abort-0"]
RECORDS = len(PLAIN) + len(GZIPPED) + len(COMMITTED) + len(ABORTED) + 2  # + two transaction markers


@pytest.fixture(scope="module")
def partition_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    data = tmp_path_factory.mktemp("dump")
    b = BrokerProcess(data, {"log.segment.bytes": "4096", "log.index.interval.bytes": "200"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 2, "batch.num.messages": 7})
        for i, v in enumerate(PLAIN):
            p.produce(TOPIC, key=f"k{i}".encode(), value=v.encode(), headers=[("h1", b"x")] if i % 2 else None)
            if i % 50 == 0:
                p.flush(30)
        assert p.flush(30) == 0
        gz = Producer({"bootstrap.servers": b.bootstrap, "compression.type": "gzip", "linger.ms": 50})
        for v in GZIPPED:
            gz.produce(TOPIC, value=v.encode())
        assert gz.flush(30) == 0
        tx = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "dumper"})
        tx.init_transactions(30)
        tx.begin_transaction()
        for v in COMMITTED:
            tx.produce(TOPIC, value=v.encode())
        tx.commit_transaction(30)
        tx.begin_transaction()
        for v in ABORTED:
            tx.produce(TOPIC, value=v.encode())
        tx.flush(30)
        tx.abort_transaction(30)
    finally:
        assert b.stop() == 0
    yield data / f"{TOPIC}-0"


def files(d: Path, pattern: str) -> str:
    found = sorted(d.glob(pattern))
    assert found, pattern
    return ",".join(str(f) for f in found)


def dump(*args: str) -> tuple[int, str, str]:
    r = gregor("dump-log", *args)
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    return r.returncode, r.stdout, r.stderr


def test_every_batch_decodes(partition_dir: Path) -> None:
    assert len(list(partition_dir.glob("*.log"))) > 2, "several segments"
    code, out, err = dump("--files", files(partition_dir, "*.log"), "--print-data-log")
    assert code == 0, err
    batches = [dict(re.findall(r"(\w+): (\S+)", ln)) for ln in out.splitlines() if ln.startswith("baseOffset:")]
    records = [ln for ln in out.splitlines() if ln.startswith("| offset:")]
    assert all(b["isvalid"] == "true" for b in batches)
    assert sum(int(b["count"]) for b in batches) == RECORDS == len(records)
    next_offset = 0
    for b in batches:  # contiguous offsets across segments, from 0
        assert int(b["baseOffset"]) == next_offset
        next_offset = int(b["lastOffset"]) + 1
    assert [int(re.search(r"offset: (\d+)", r).group(1)) for r in records] == list(range(RECORDS))
    payloads = [m.group(1) for r in records if (m := re.search(r" payload: (\S+)", r))]
    assert payloads == PLAIN + GZIPPED + COMMITTED + ABORTED
    assert "| offset: 1 CreateTime:" in out and "key: k1 payload: plain-1" in out and "headerKeys: [h1]" in out
    assert {b["compresscodec"] for b in batches} == {"none", "gzip"}
    controls = [b for b in batches if b["isControl"] == "true"]
    assert len(controls) == 2 and all(b["isTransactional"] == "true" for b in controls)
    markers = re.findall(r"endTxnMarker: (\w+) coordinatorEpoch: (\d+)", out)
    assert [m[0] for m in markers] == ["COMMIT", "ABORT"]
    shallow = dump("--files", files(partition_dir, "*.log"))[1]
    assert "| offset:" not in shallow and shallow.count("baseOffset:") == len(batches)
    deep = dump("--files", files(partition_dir, "*.log"), "--deep-iteration")[1]
    assert deep.count("| offset:") == RECORDS and "payload:" not in deep


def test_indexes_match_the_segments(partition_dir: Path) -> None:
    indexes = files(partition_dir, "*index")
    code, out, err = dump("--files", indexes)
    assert code == 0 and "Mismatches" not in err, err
    assert re.search(r"^offset: \d+ position: \d+$", out, re.M)
    assert re.search(r"^timestamp: \d+ offset: \d+$", out, re.M)
    code, out, err = dump("--files", indexes, "--verify-index-only")
    assert code == 0 and "position:" not in out, err
    code, out, err = dump("--files", files(partition_dir, "*.index") + "," + files(partition_dir, "*.timeindex"),
                          "--index-sanity-check")
    assert code == 0, err
    n = len(list(partition_dir.glob("*.index"))) + len(list(partition_dir.glob("*.timeindex")))
    assert out.count("passed sanity check.") == n


def test_snapshots_transaction_index_and_leader_epochs(partition_dir: Path) -> None:
    code, out, err = dump("--files", files(partition_dir, "*.snapshot"))
    assert code == 0, err
    assert re.search(r"producerId: \d+ producerEpoch: \d+ coordinatorEpoch: \d+ currentTxnFirstOffset: ", out)
    code, out, err = dump("--files", files(partition_dir, "*.txnindex"))
    assert code == 0, err
    aborted = [ln for ln in out.splitlines() if ln.startswith("version: 0 producerId:")]
    assert len(aborted) == 1
    first = len(PLAIN) + len(GZIPPED) + len(COMMITTED) + 1
    assert f"firstOffset: {first} lastOffset: {first + 1}" in aborted[0]
    code, out, err = dump("--files", str(partition_dir / "leader-epoch-checkpoint"))
    assert code == 0 and "epoch: 0 startOffset: 0" in out, err


def test_max_bytes_bounds_the_read(partition_dir: Path) -> None:
    first = sorted(partition_dir.glob("*.log"))[0]
    full = dump("--files", str(first))[1]
    size = int(re.search(r"size: (\d+)", full).group(1))
    code, out, err = dump("--files", str(first), "--max-bytes", str(size + 10))
    assert code == 0, err
    assert out.count("baseOffset:") == 1 < full.count("baseOffset:")


def test_damaged_files_are_reported(partition_dir: Path, tmp_path: Path) -> None:
    first = sorted(partition_dir.glob("*.log"))[0]
    flipped = tmp_path / first.name
    shutil.copy(first, flipped)
    data = bytearray(flipped.read_bytes())
    data[70] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    flipped.write_bytes(bytes(data))
    code, out, err = dump("--files", str(flipped), "--deep-iteration")
    assert code == 1 and "isvalid: false" in out and "fails its CRC check" in err

    torn = tmp_path / "00000000000000000099.log"
    torn.write_bytes(first.read_bytes()[:-5])
    code, out, err = dump("--files", str(torn))
    assert code == 1 and re.search(r"Found \d+ invalid bytes at the end of 00000000000000000099.log", out)

    bad_index = tmp_path / "00000000000000000099.index"
    bad_index.write_bytes(b"\x00\x00\x00\x05\x00\x00\x00")  # not whole entries
    code, out, err = dump("--files", str(bad_index))
    assert code == 1 and "failed the sanity check" in out

    bad_snapshot = tmp_path / "00000000000000000099.snapshot"
    bad_snapshot.write_bytes(b"garbage" * 5)
    code, out, err = dump("--files", str(bad_snapshot))
    assert code == 1 and "the snapshot is damaged" in out

    code, out, err = dump("--files", str(tmp_path / "00000000000000000123.log"))
    assert code == 1 and "cannot read" in err

    code, out, err = dump("--files", str(tmp_path / "notes.txt"))
    assert code == 0 and "Ignoring unknown file" in out


def test_index_mismatches_are_reported(partition_dir: Path, tmp_path: Path) -> None:
    first = sorted(partition_dir.glob("*.log"))[0]
    shutil.copy(first, tmp_path / first.name)
    stem = tmp_path / first.stem
    Path(f"{stem}.index").write_bytes(struct.pack(">ii", 99999, 0))  # no batch at 0 ends at offset 99999
    Path(f"{stem}.timeindex").write_bytes(struct.pack(">qi", 7, 99999))
    code, out, err = dump("--files", f"{stem}.index,{stem}.timeindex")
    assert code == 1
    assert f"Mismatches in :{stem}.index" in err and "Index offset: 99999, log offset:" in err
    assert f"Mismatches in :{stem}.timeindex" in err and "no batch of the log ends there" in err
    assert "offset: 99999 position: 0" in out
    code, out, err = dump("--files", f"{stem}.index", "--verify-index-only")
    assert code == 1 and "position:" not in out and "Index offset: 99999" in err


def test_damaged_checkpoint_and_transaction_index(tmp_path: Path) -> None:
    epochs = tmp_path / "leader-epoch-checkpoint"
    epochs.write_bytes(b"\xff\xfe\x00garbage")
    code, out, err = dump("--files", str(epochs))
    assert code == 1 and "the checkpoint is damaged" in out
    epochs.write_text("0\n2\n0 0\n")  # says two entries, has one
    code, out, err = dump("--files", str(epochs))
    assert code == 1 and "expected 2 entries, found 1" in out
    txn = tmp_path / "00000000000000000000.txnindex"
    entry = struct.pack(">hqqqq", 0, 7, 10, 12, 10)
    txn.write_bytes(entry + entry[:20])  # one entry, then a torn one
    code, out, err = dump("--files", str(txn))
    assert code == 1 and "producerId: 7 firstOffset: 10 lastOffset: 12 lastStableOffset: 10" in out
    assert "Found 20 invalid bytes at the end" in out
    assert txn.stat().st_size == len(entry) + 20  # read only: the file is left as it was
