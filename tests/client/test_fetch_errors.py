"""Leader moves, follower reads (KIP-392) and Kafka's retriable and fatal Fetch errors, through the real codec
against scripted fake brokers."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gregor.client import (
    BrokerUnavailableError,
    CorruptBatchError,
    OffsetOutOfRangeError,
    ReaderError,
    read_arrow,
)
from gregor.client.arrow import ArrowReader
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import Record
from tests.client.fake_broker import FakeCluster, FakePartition

N = 600
FAST = {"retry.backoff.ms": 5, "retry.backoff.max.ms": 20, "max.partition.fetch.bytes": 4096, "fetch.wait.max.ms": 0}


def records(lo: int, hi: int) -> list[Record]:
    return [Record(o, 1_700_000_000_000 + o, None, b"value-%d" % o) for o in range(lo, hi)]


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    c = FakeCluster({1: "r1", 2: "r2"})
    p = FakePartition(leader=1, epoch=3, replicas=[1, 2])
    for lo in range(0, N, 50):
        p.append(records(lo, lo + 50))
    c.partitions[0] = p
    yield c
    c.close()


def offsets(table) -> list[int]:  # type: ignore[no-untyped-def]
    return table.column("offset").to_pylist()


@pytest.mark.parametrize("error", [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
                                   ErrorCode.UNKNOWN_LEADER_EPOCH])
def test_leader_moves_mid_read(cluster: FakeCluster, error: ErrorCode) -> None:
    def move(node: int, partition: int, offset: int) -> None:
        if offset >= 200 and cluster.partitions[0].leader == 1:
            cluster.move_leader(0, 2)
            cluster.errors[(1, 0)] = [error]  # the old leader's answer to the fetch in flight

    cluster.on_fetch = move
    table = read_arrow(cluster.bootstrap, "t", **FAST)
    assert offsets(table) == list(range(N))
    assert table.column("value").to_pylist() == [b"value-%d" % o for o in range(N)]
    served = [(f.node, f.leader_epoch) for f in cluster.fetches if f.answer.endswith("bytes")]
    assert (1, 3) in served and (2, 4) in served, "fetched from the new leader with its epoch from fresh metadata"
    assert [f.answer for f in cluster.fetches if f.node == 1][-1] == error.name


def test_follower_read_for_our_rack(cluster: FakeCluster) -> None:
    table = read_arrow(cluster.bootstrap, "t", client_rack="r2", **FAST)
    assert offsets(table) == list(range(N))
    assert cluster.fetches[0].node == 1 and cluster.fetches[0].answer == "go to 2"
    data_from = {f.node for f in cluster.fetches if f.answer.endswith("bytes")}
    assert data_from == {2}, "every record came from the follower the leader named"
    assert all(f.rack == "r2" for f in cluster.fetches)


def test_follower_that_fails_sends_the_reader_back_to_the_leader(cluster: FakeCluster) -> None:
    cluster.errors[(2, 0)] = [ErrorCode.OFFSET_OUT_OF_RANGE]  # a follower behind the leader
    table = read_arrow(cluster.bootstrap, "t", client_rack="r2", **FAST)
    assert offsets(table) == list(range(N))
    answers = [(f.node, f.answer) for f in cluster.fetches[:4]]
    assert answers[:3] == [(1, "go to 2"), (2, "OFFSET_OUT_OF_RANGE"), (1, "go to 2")]


@pytest.mark.parametrize("error", [ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.REPLICA_NOT_AVAILABLE,
                                   ErrorCode.LEADER_NOT_AVAILABLE])
def test_retriable_errors_back_off_and_retry(cluster: FakeCluster, error: ErrorCode) -> None:
    cluster.errors[(1, 0)] = [error, error]
    t0 = time.monotonic()
    reader = ArrowReader(cluster.bootstrap, "t", retry_backoff_ms=50, retry_backoff_max_ms=100,
                         max_partition_fetch_bytes=4096)
    table = reader.read_all()
    assert offsets(table) == list(range(N))
    assert reader.stats.retries == 2
    assert time.monotonic() - t0 >= 0.05 * 0.8 + 0.1 * 0.8  # two backoffs: 50 ms, then 100 ms (+-20%)


def test_retries_are_bounded(cluster: FakeCluster) -> None:
    cluster.errors[(1, 0)] = [ErrorCode.KAFKA_STORAGE_ERROR] * 10
    with pytest.raises(ReaderError, match="KAFKA_STORAGE_ERROR") as e:
        read_arrow(cluster.bootstrap, "t", retries=3, **FAST)
    assert "failed 4 times" in str(e.value) and "t-0" in str(e.value)
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR


def test_fatal_errors_fail_at_once(cluster: FakeCluster) -> None:
    cluster.errors[(1, 0)] = [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    with pytest.raises(ReaderError, match="TOPIC_AUTHORIZATION_FAILED"):
        read_arrow(cluster.bootstrap, "t", **FAST)
    assert len(cluster.fetches) == 1


def test_offset_out_of_range_names_the_log_bounds(cluster: FakeCluster) -> None:
    def retention(node: int, partition: int, offset: int) -> None:
        if offset >= 300:
            cluster.partitions[0].log_start = 450  # retention deleted the rest of the range meanwhile

    cluster.on_fetch = retention
    with pytest.raises(OffsetOutOfRangeError) as e:
        read_arrow(cluster.bootstrap, "t", **FAST)
    err = e.value
    assert (err.topic, err.partition, err.log_start_offset, err.log_end_offset) == ("t", 0, 450, N)
    assert 300 <= err.offset < 450 and "out of range" in str(err)


def test_planned_range_outside_the_log_is_refused(cluster: FakeCluster) -> None:
    with pytest.raises(OffsetOutOfRangeError, match="end offset"):
        read_arrow(cluster.bootstrap, "t", end=N + 1, **FAST)
    cluster.partitions[0].log_start = 100
    with pytest.raises(OffsetOutOfRangeError, match="start offset 50"):
        read_arrow(cluster.bootstrap, "t", start=50, **FAST)


def test_a_dropped_connection_is_reopened(cluster: FakeCluster) -> None:
    cluster.drop_connection_at = {2, 5}
    reader = ArrowReader(cluster.bootstrap, "t", **{**FAST, "max.partition.fetch.bytes": 1024})  # a batch a fetch
    assert offsets(reader.read_all()) == list(range(N))
    assert reader.stats.retries == 2


def test_unreachable_brokers(cluster: FakeCluster) -> None:
    cluster.close()
    with pytest.raises(BrokerUnavailableError, match="cannot connect"):
        read_arrow(cluster.bootstrap, "t", retries=1, **{k: v for k, v in FAST.items() if k != "retries"})


def test_corrupt_batch_is_reported_with_its_partition(cluster: FakeCluster) -> None:
    p = cluster.partitions[0]
    bad = bytearray(p.batches)
    bad[bad.index(b"value-7")] = ord("V")
    p.batches = bytes(bad)
    with pytest.raises(CorruptBatchError, match="t-0: record batch at offset 0 fails its CRC32C"):
        read_arrow(cluster.bootstrap, "t", **FAST)
    assert offsets(read_arrow(cluster.bootstrap, "t", check_crcs=False, **FAST)) == list(range(N))


def test_a_batch_larger_than_the_fetch_size(cluster: FakeCluster) -> None:
    cluster.truncate_records_to = 100  # an old broker returning a partial batch (before KIP-74)
    with pytest.raises(ReaderError, match="larger than the 100 bytes fetched"):
        read_arrow(cluster.bootstrap, "t", **FAST)
