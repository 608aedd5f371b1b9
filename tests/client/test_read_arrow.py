"""read_arrow through a real broker: the same rows as confluent-kafka's consumer for every codec, transactions,
compacted topics with gaps, headers, null keys and tombstones, rolled segments, timestamps and partitions."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from gregor.client import ByTimestamp, OffsetOutOfRangeError, read_arrow, read_arrow_batches
from gregor.client.arrow import ArrowReader
from tests.broker_process import BrokerProcess
from tests.client.reference import consume, create_topic, rows

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("arrow-broker"), {
        "log.cleaner.backoff.ms": "100", "group.initial.rebalance.delay.ms": "0", "num.partitions": "1"}).start()
    yield b
    b.kill()


def produce_mixed(bootstrap: str, topic: str, n: int, seed: int, partitions: int = 1, **conf: object) -> None:
    """n records: null keys, tombstones, headers (none, several, null values), varied sizes."""
    rnd = random.Random(seed)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for i in range(n):
        key = None if i % 4 == 0 else f"key-{rnd.randrange(50)}".encode()
        value = None if i % 11 == 0 else bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 300)))
        headers = [(f"h{j}", None if j == 2 else f"{i}-{j}".encode()) for j in range(rnd.choice([0, 0, 1, 3]))]
        p.produce(topic, value=value, key=key, headers=headers or None, partition=i % partitions)
    assert p.flush(30) == 0


@pytest.mark.parametrize("codec", CODECS)
def test_same_rows_as_confluent_for_every_codec(broker: BrokerProcess, codec: str) -> None:
    topic = f"codec-{codec}"
    create_topic(broker.bootstrap, topic)
    produce_mixed(broker.bootstrap, topic, 3000, seed=len(codec), **{"compression.type": codec})
    expected = consume(broker.bootstrap, topic)
    assert len(expected) == 3000
    assert rows(read_arrow(broker.bootstrap, topic)) == expected
    # An inner range, with fetches that hold a batch or two and small Arrow batches.
    got = read_arrow(broker.bootstrap, topic, start=777, end=2222, max_partition_fetch_bytes=20_000,
                     arrow_batch_max_records=100)
    assert rows(got) == expected[777:2222]


def test_transactions_read_committed_and_uncommitted(broker: BrokerProcess) -> None:
    topic = "txn"
    create_topic(broker.bootstrap, topic)
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "arrow-txn", "linger.ms": 1})
    plain = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1})
    txn.init_transactions(30)
    for t in range(12):
        txn.begin_transaction()
        for i in range(50):
            txn.produce(topic, value=f"t{t}-{i}".encode(), key=None if i % 3 else b"k")
            if i % 10 == 0:
                plain.produce(topic, value=f"plain-{t}-{i}".encode())
                plain.flush(10)
        txn.flush(10)
        if t % 3 == 1:
            txn.abort_transaction(30)
        else:
            txn.commit_transaction(30)
    for isolation in ("read_committed", "read_uncommitted"):
        expected = consume(broker.bootstrap, topic, isolation=isolation)
        got = rows(read_arrow(broker.bootstrap, topic, isolation_level=isolation))
        assert got == expected, isolation
    committed = consume(broker.bootstrap, topic, isolation="read_committed")
    assert not any(r["value"].startswith(b"t1-") for r in committed) and any(r["value"].startswith(b"t2-")
                                                                             for r in committed)
    # An open transaction holds the last stable offset back: "latest" is it under read_committed.
    txn.begin_transaction()
    txn.produce(topic, value=b"open")
    txn.flush(10)
    stable = read_arrow(broker.bootstrap, topic, isolation_level="read_committed")
    assert rows(stable) == committed
    hw = read_arrow(broker.bootstrap, topic, columns=["offset"]).column("offset")[-1].as_py() + 1
    with pytest.raises(OffsetOutOfRangeError, match="last stable offset"):
        read_arrow(broker.bootstrap, topic, end=hw, isolation_level="read_committed")
    txn.abort_transaction(30)
    assert rows(read_arrow(broker.bootstrap, topic, isolation_level="read_committed")) == committed


def test_compacted_topic_with_offset_gaps(broker: BrokerProcess) -> None:
    topic = "compacted"
    create_topic(broker.bootstrap, topic, **{"cleanup.policy": "compact", "segment.bytes": "20000",
                                             "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "100000"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 4000})
    for i in range(6000):
        key = f"keep-{i}" if i % 50 == 0 else f"user-{i % 100}"  # keep-*: never overwritten, so kept apart
        p.produce(topic, key=key.encode(), value=None if i % 97 == 0 else f"v{i}".encode())
    assert p.flush(30) == 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        expected = consume(broker.bootstrap, topic)
        if len(expected) < 3000:
            break
        time.sleep(0.5)
    offsets = [r["offset"] for r in expected]
    assert len(offsets) < 3000 and offsets[-1] == 5999, "the cleaner ran and left gaps"
    assert rows(read_arrow(broker.bootstrap, topic)) == expected
    gap = next(o for a, o in zip(offsets, offsets[1:], strict=False) if o - a > 5 and o > 100)
    for start, end in [(gap - 2, gap + 300), (1, 4000), (gap - 1, gap)]:
        got = rows(read_arrow(broker.bootstrap, topic, start=start, end=end, max_partition_fetch_bytes=3000))
        assert got == [r for r in expected if start <= r["offset"] < end], (start, end)


def test_segments_rolled_mid_range(broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = "rolled"
    create_topic(broker.bootstrap, topic, **{"segment.bytes": "16384"})
    produce_mixed(broker.bootstrap, topic, 4000, seed=7, **{"batch.size": 4000})
    segments = list((broker.data_dir / f"{topic}-0").glob("*.log"))
    assert len(segments) > 20
    expected = consume(broker.bootstrap, topic)
    for fetch_bytes in (1024, 50_000, 16 << 20):
        got = read_arrow(broker.bootstrap, topic, start=123, end=3900, max_partition_fetch_bytes=fetch_bytes)
        assert rows(got) == expected[123:3900], fetch_bytes
    # The range split into sub-ranges read in parallel, each starting and ending inside a batch.
    monkeypatch.setattr("gregor.client.arrow.MIN_SUBRANGE_OFFSETS", 100)
    for ranges in (2, 7):
        reader = ArrowReader(broker.bootstrap, topic, start=123, end=3900, fetch_partition_ranges=ranges,
                             max_partition_fetch_bytes=20_000, arrow_batch_max_records=300)
        assert rows(reader.read_all()) == expected[123:3900], ranges
        batches = list(ArrowReader(broker.bootstrap, topic, start=123, end=3900, fetch_partition_ranges=ranges))
        assert sorted(o for b in batches for o in b.column("offset").to_pylist()) == list(range(123, 3900))


def test_log_append_time(broker: BrokerProcess) -> None:
    topic = "append-time"
    create_topic(broker.bootstrap, topic, **{"message.timestamp.type": "LogAppendTime"})
    produce_mixed(broker.bootstrap, topic, 200, seed=3)
    expected = consume(broker.bootstrap, topic)
    got = rows(read_arrow(broker.bootstrap, topic))
    assert got == expected and {r["timestampType"] for r in got} == {1}


def test_offsets_by_timestamp_and_per_partition(broker: BrokerProcess) -> None:
    topic = "times"
    create_topic(broker.bootstrap, topic, partitions=3)
    base = 1_700_000_000_000
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1})
    for i in range(300):
        p.produce(topic, value=b"%d" % i, partition=i % 3, timestamp=base + i * 1000)
    assert p.flush(30) == 0
    t = read_arrow(broker.bootstrap, topic, start=ByTimestamp(base + 60_000),
                   end=datetime.fromtimestamp((base + 90_000) / 1000, UTC))
    assert sorted(int(v) for v in t.column("value").to_pylist()) == list(range(60, 90))
    assert t.column("partition").to_pylist() == sorted(t.column("partition").to_pylist()), "partition by partition"
    t = read_arrow(broker.bootstrap, topic, start={0: 10, 2: "earliest"}, end={0: 20, 2: 5})
    assert [(r["partition"], r["offset"]) for r in t.select(["partition", "offset"]).to_pylist()] == \
        [(0, o) for o in range(10, 20)] + [(2, o) for o in range(5)]
    assert read_arrow(broker.bootstrap, topic, partitions=[1], start=ByTimestamp(base + 10**9)).num_rows == 0
    with pytest.raises(ValueError, match="no time zone"):
        read_arrow(broker.bootstrap, topic, start=datetime(2026, 1, 1))


def test_batches_stream_in_bounded_sizes(broker: BrokerProcess) -> None:
    topic = "stream"
    create_topic(broker.bootstrap, topic, partitions=2)
    produce_mixed(broker.bootstrap, topic, 5000, seed=11, partitions=2)
    batches = list(read_arrow_batches(broker.bootstrap, topic, arrow_batch_max_records=700,
                                      max_partition_fetch_bytes=30_000))
    assert sum(b.num_rows for b in batches) == 5000
    assert all(b.num_rows <= 1400 for b in batches)  # the cap is checked between Kafka batches
    assert all(len(set(b.column("partition").to_pylist())) == 1 for b in batches)
    with ArrowReader(broker.bootstrap, topic, columns=["offset", "key"]) as reader:
        rbr = reader.to_reader()
        assert rbr.schema.names == ["offset", "key"]
        assert rbr.read_all().num_rows == 5000
    empty = read_arrow(broker.bootstrap, topic, start=10, end=10)
    assert empty.num_rows == 0 and empty.schema.names[0] == "partition"


def test_spark_layout_and_pandas(broker: BrokerProcess) -> None:
    topic = "frames"
    create_topic(broker.bootstrap, topic)
    produce_mixed(broker.bootstrap, topic, 500, seed=5)
    from gregor.spark.schema import arrow_schema, source_schema

    schema = arrow_schema(source_schema(True))
    t = read_arrow(broker.bootstrap, topic, schema=schema)
    assert t.schema == schema
    assert set(t.column("topic").to_pylist()) == {topic}
    expected = consume(broker.bootstrap, topic)
    assert [r["timestamp"] * 1000 for r in expected] == t.column("timestamp").cast(pa.int64()).to_pylist()
    df = read_arrow(broker.bootstrap, topic).to_pandas()
    assert len(df) == 500 and str(df["timestamp"].dt.tz) == "UTC"


def test_a_topic_that_does_not_exist(broker: BrokerProcess) -> None:
    from gregor.client import ReaderError

    with pytest.raises(ReaderError, match="topic nope does not exist"):
        read_arrow(broker.bootstrap, "nope", retries=1, retry_backoff_ms=10)


def test_without_the_c_extension(broker: BrokerProcess) -> None:
    """An install without a compiler reads the same rows through the pure-Python decoder."""
    import json
    import os
    import subprocess
    import sys

    topic = "pure-python"
    create_topic(broker.bootstrap, topic)
    produce_mixed(broker.bootstrap, topic, 400, seed=9, **{"compression.type": "lz4"})
    code = ("import json, sys\n"
            "from gregor.client import decoder, read_arrow\n"
            "from tests.client.reference import rows\n"
            "assert not decoder.C_DECODER\n"
            f"t = read_arrow({broker.bootstrap!r}, {topic!r}, start=5, end=390, max_partition_fetch_bytes=5000)\n"
            "print(json.dumps(rows(t), default=lambda b: b.hex()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "GREGOR_CLIENT_PURE_PYTHON": "1"}).stdout
    expected = json.loads(json.dumps(consume(broker.bootstrap, topic)[5:390], default=lambda b: b.hex()))
    assert json.loads(out) == expected


def test_importing_gregor_client_needs_no_pyarrow(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = ("import sys; sys.modules['pyarrow'] = None\n"
            "import gregor.client, gregor.client.broker_client\n"
            "try:\n    gregor.client.read_arrow('127.0.0.1:1', 't')\n"
            "except ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install pyarrow" in out
