"""The executors' read of one offset range (gregor.spark.fetch.read_range) against a real broker, without Spark:
exact ranges in the source's Arrow schema, and failOnDataLoss for offsets below the log start or past its end."""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
import pytest

from gregor.spark.errors import DataLossError
from gregor.spark.fetch import read_range
from gregor.spark.ranges import OffsetRange
from gregor.spark.reader_settings import reader_settings
from gregor.spark.schema import arrow_schema, source_schema
from tests.broker_process import BrokerProcess
from tests.spark.util import consume_all, create_topic, delete_records, produce, unique


def read(broker: BrokerProcess, rng: OffsetRange, *, headers: bool = False, fail: bool = True,
         **settings: str) -> pa.Table:
    schema = arrow_schema(source_schema(headers))
    st = reader_settings({"bootstrap.servers": broker.bootstrap, **settings}, 10_000)
    batches = list(read_range(st, rng, schema, fail_on_data_loss=fail))
    assert all(b.schema == schema for b in batches)
    return pa.Table.from_batches(batches, schema=schema)


@pytest.fixture(scope="module")
def topic(broker: BrokerProcess) -> tuple[str, list[Any]]:
    name = create_topic(broker.bootstrap, unique("fetch"), 1)
    produce(broker.bootstrap, name, [{"value": b"v%d" % i, "key": None if i % 5 else b"k",
                                      "headers": [("h", b"%d" % i)] if i % 7 == 0 else None} for i in range(1000)])
    return name, consume_all(broker.bootstrap, name)


def test_exact_range_in_small_batches(broker: BrokerProcess, topic: tuple[str, list[Any]]) -> None:
    name, truth = topic
    t = read(broker, OffsetRange(name, 0, 123, 877), headers=True, **{"arrow.batch.max.records": "100"})
    assert t.column("offset").to_pylist() == list(range(123, 877))
    assert t.column("value").to_pylist() == [r.value for r in truth[123:877]]
    assert t.column("key").to_pylist() == [r.key for r in truth[123:877]]
    assert [tuple((h["key"], h["value"]) for h in hs) if hs else None for hs in t.column("headers").to_pylist()] == [
        r.headers for r in truth[123:877]]
    assert set(t.column("topic").to_pylist()) == {name} and set(t.column("partition").to_pylist()) == {0}
    assert read(broker, OffsetRange(name, 0, 500, 500)).num_rows == 0


def test_offsets_past_the_end(broker: BrokerProcess, topic: tuple[str, list[Any]],
                              caplog: pytest.LogCaptureFixture) -> None:
    name, _ = topic
    with pytest.raises(DataLossError, match="Cannot fetch offsets up to 1010 of .*: the latest offset is 1000"):
        read(broker, OffsetRange(name, 0, 990, 1010))
    with caplog.at_level(logging.WARNING, logger="gregor.spark"):
        t = read(broker, OffsetRange(name, 0, 990, 1010), fail=False)
    assert t.column("offset").to_pylist() == list(range(990, 1000))
    assert "the latest offset is 1000" in caplog.text


def test_offsets_below_the_log_start(broker: BrokerProcess, caplog: pytest.LogCaptureFixture) -> None:
    name = create_topic(broker.bootstrap, unique("fetch-deleted"), 1)
    produce(broker.bootstrap, name, [{"value": b"%d" % i} for i in range(100)])
    delete_records(broker.bootstrap, name, 0, 60)
    with pytest.raises(DataLossError, match="Cannot fetch offset 10 of .*: the earliest available offset is 60"):
        read(broker, OffsetRange(name, 0, 10, 80))
    with caplog.at_level(logging.WARNING, logger="gregor.spark"):
        assert read(broker, OffsetRange(name, 0, 10, 80), fail=False).column("offset").to_pylist() == list(range(60, 80))
        assert read(broker, OffsetRange(name, 0, 10, 50), fail=False).num_rows == 0  # all of it is gone
    assert "earliest available offset is 60" in caplog.text
