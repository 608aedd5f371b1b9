"""spark.read.format("gregor"): what a batch query reads, option by option, against a real broker."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from tests.broker_process import BrokerProcess
from tests.spark.util import (
    Rec,
    consume_all,
    create_topic,
    delete_records,
    df_records,
    load,
    produce,
    recent_minute_ms,
    unique,
)

BASE_TS = recent_minute_ms()


def no_headers(r: Rec) -> Rec:
    return dataclasses.replace(r, headers=None)


@pytest.fixture(scope="module")
def big_topic(broker: BrokerProcess) -> tuple[str, list[Rec]]:
    """4 partitions, 100,000 records: keys (some null), values of varied size (some null or
    empty), headers on a third of them, explicit and default timestamps."""
    topic = create_topic(broker.bootstrap, unique("big"), 4)
    rnd = random.Random(7)
    items: list[dict[str, Any]] = []
    for i in range(100_000):
        it: dict[str, Any] = {
            "key": None if i % 11 == 0 else f"k{rnd.randint(0, 999)}".encode(),
            "value": None if i % 97 == 0 else rnd.randbytes(rnd.randint(0, 200)),
            "partition": i % 4,
        }
        if i % 3 == 0:
            it["headers"] = [("h", f"v{i}".encode()), ("empty", None)]
        if i % 2 == 0:
            it["timestamp"] = BASE_TS + i
        items.append(it)
    produce(broker.bootstrap, topic, items)
    return topic, consume_all(broker.bootstrap, topic)


def test_batch_read_equals_the_consumer_row_for_row(spark: Any, broker: BrokerProcess,
                                                     big_topic: tuple[str, list[Rec]]) -> None:
    topic, truth = big_topic
    assert len(truth) == 100_000
    df = load(spark, broker.bootstrap, subscribe=topic, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                                  "timestampType", "headers"]
    got = df_records(df)
    assert len(got) == len(truth)
    for a, b in zip(got, truth, strict=True):
        assert a == b, (a, b)
    assert df.select("topic").distinct().collect()[0][0] == topic


def test_headers_column_only_when_asked(spark: Any, broker: BrokerProcess, big_topic: tuple[str, list[Rec]]) -> None:
    topic, truth = big_topic
    df = load(spark, broker.bootstrap, subscribe=topic)
    assert "headers" not in df.columns
    assert df.count() == len(truth)


def test_assign_reads_only_the_given_partitions(spark: Any, broker: BrokerProcess,
                                                big_topic: tuple[str, list[Rec]]) -> None:
    topic, truth = big_topic
    got = df_records(load(spark, broker.bootstrap, assign=f'{{"{topic}":[1,3]}}'))
    assert got == [no_headers(r) for r in truth if r.partition in (1, 3)]


def test_starting_and_ending_offsets_json(spark: Any, broker: BrokerProcess,
                                          big_topic: tuple[str, list[Rec]]) -> None:
    topic, truth = big_topic
    starting = f'{{"{topic}":{{"0":100,"1":-2,"2":24990,"3":7}}}}'
    ending = f'{{"{topic}":{{"0":150,"1":10,"2":-1,"3":7}}}}'
    got = df_records(load(spark, broker.bootstrap, subscribe=topic, startingOffsets=starting,
                          endingOffsets=ending))
    bounds = {0: (100, 150), 1: (0, 10), 2: (24990, 25000), 3: (7, 7)}
    assert [(r.partition, r.offset) for r in got] == [
        (r.partition, r.offset) for r in truth if bounds[r.partition][0] <= r.offset < bounds[r.partition][1]]


def test_specific_offsets_must_cover_every_partition(spark: Any, broker: BrokerProcess,
                                                     big_topic: tuple[str, list[Rec]]) -> None:
    topic, _ = big_topic
    df = load(spark, broker.bootstrap, subscribe=topic, startingOffsets=f'{{"{topic}":{{"0":1}}}}')
    with pytest.raises(Exception, match="you must specify all topic-partitions"):
        df.count()


def test_min_partitions_and_max_records_split_large_ranges(spark: Any, broker: BrokerProcess,
                                                           big_topic: tuple[str, list[Rec]]) -> None:
    topic, truth = big_topic
    df = load(spark, broker.bootstrap, subscribe=topic, minPartitions="10")
    assert df.rdd.getNumPartitions() >= 10
    assert df_records(df) == [no_headers(r) for r in truth]
    df = load(spark, broker.bootstrap, assign=f'{{"{topic}":[0]}}', maxRecordsPerPartition="5000")
    assert df.rdd.getNumPartitions() == 5
    assert df.count() == 25_000


def test_offsets_by_timestamp(spark: Any, broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, unique("ts"), 2)
    produce(broker.bootstrap, topic, [{"value": f"{p}-{i}".encode(), "partition": p, "timestamp": BASE_TS + i * 1000}
                                      for p in range(2) for i in range(10)])

    def offsets(**opts: str) -> list[tuple[int, int]]:
        return [(r.partition, r.offset) for r in df_records(load(spark, broker.bootstrap, subscribe=topic, **opts))]

    # Global timestamps: the first offset whose timestamp is >= the given one.
    assert offsets(startingTimestamp=str(BASE_TS + 7000)) == [(p, o) for p in range(2) for o in (7, 8, 9)]
    assert offsets(startingTimestamp=str(BASE_TS + 2500), endingTimestamp=str(BASE_TS + 5000)) == [
        (p, o) for p in range(2) for o in (3, 4)]
    # Per partition; an ending timestamp past every record means latest.
    by_ts = f'{{"{topic}":{{"0":{BASE_TS + 8000},"1":{BASE_TS}}}}}'
    ending = f'{{"{topic}":{{"0":{BASE_TS + 99_000},"1":{BASE_TS + 2000}}}}}'
    assert offsets(startingOffsetsByTimestamp=by_ts, endingOffsetsByTimestamp=ending) == [
        (0, 8), (0, 9), (1, 0), (1, 1)]
    # A starting timestamp nothing reaches: an error by default, the latest offset on request.
    with pytest.raises(Exception, match="No offset matched the starting timestamp"):
        offsets(startingTimestamp=str(BASE_TS + 99_000))
    assert offsets(startingTimestamp=str(BASE_TS + 99_000), startingOffsetsByTimestampStrategy="latest") == []


def test_subscribe_pattern_and_topic_lists(spark: Any, broker: BrokerProcess) -> None:
    prefix = unique("pat")
    a, b, other = (create_topic(broker.bootstrap, f"{prefix}-{n}", 1) for n in ("a", "b", "zz-other"))
    for t in (a, b, other):
        produce(broker.bootstrap, t, [{"value": t.encode()} for _ in range(5)])

    def topics(**opts: str) -> dict[str, int]:
        rows = load(spark, broker.bootstrap, **opts).groupBy("topic").count().collect()
        return {r["topic"]: r["count"] for r in rows}

    assert topics(subscribePattern=f"{prefix}-[ab]") == {a: 5, b: 5}
    assert topics(subscribe=f"{a},{other}") == {a: 5, other: 5}


def test_fail_on_data_loss(spark: Any, broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, unique("loss"), 1)
    produce(broker.bootstrap, topic, [{"value": str(i).encode()} for i in range(100)])
    delete_records(broker.bootstrap, topic, 0, 40)
    start = f'{{"{topic}":{{"0":10}}}}'
    with pytest.raises(Exception, match="failOnDataLoss"):
        load(spark, broker.bootstrap, subscribe=topic, startingOffsets=start).count()
    got = df_records(load(spark, broker.bootstrap, subscribe=topic, startingOffsets=start, failOnDataLoss="false"))
    assert [r.offset for r in got] == list(range(40, 100))
    # earliest means the log start offset: no loss to report.
    assert load(spark, broker.bootstrap, subscribe=topic).count() == 60


@pytest.mark.parametrize("options, message", [
    ({"subscribe": "x", "assign": '{"x":[0]}'}, "Only one of the following options"),
    ({"subscribe": "x", "endingOffsets": '{"x": {"0": -2}}'}, "can't be earliest"),
    ({"subscribe": "x", "startingOffsets": '{"x": {"0": 1,'}, "Option 'startingOffsets' is not valid JSON"),
    ({"subscribe": "x", "startingOffsets": "latest"}, "can't be latest for batch queries"),
    ({"subscribe": "x", "kafka.auto.offset.reset": "earliest"}, "not supported"),
])
def test_bad_options_fail_at_planning(spark: Any, broker: BrokerProcess, options: dict[str, str],
                                      message: str) -> None:
    with pytest.raises(Exception, match=message):
        load(spark, broker.bootstrap, **options).count()


def test_options_wrong_in_every_mode_fail_at_load(spark: Any, broker: BrokerProcess) -> None:
    with pytest.raises(Exception, match="Only one of the following options"):
        load(spark, broker.bootstrap, subscribe="x", assign='{"x":[0]}')
    # startingOffsets=latest is only wrong for a batch read: load() cannot tell yet.
    load(spark, broker.bootstrap, subscribe="x", startingOffsets="latest")


def test_unknown_topic_fails_at_planning_unless_data_loss_is_tolerated(spark: Any, broker: BrokerProcess) -> None:
    missing = unique("no-such-topic")
    df = load(spark, broker.bootstrap, subscribe=missing)
    with pytest.raises(Exception, match=f"Topics {missing} of subscribe={missing} do not exist"):
        df.count()
    with pytest.raises(Exception, match="Topic-partitions"):
        load(spark, broker.bootstrap, assign=f'{{"{missing}":[0]}}').count()
    assert load(spark, broker.bootstrap, subscribe=missing, failOnDataLoss="false").count() == 0
    # Planning never creates the topic (auto.create.topics.enable is on in this broker).
    assert load(spark, broker.bootstrap, subscribe=missing, failOnDataLoss="false").count() == 0
    with pytest.raises(Exception, match="do not exist"):
        df.count()


def test_kafka_settings_pass_through_to_the_client(spark: Any, broker: BrokerProcess,
                                                   big_topic: tuple[str, list[Rec]]) -> None:
    topic, truth = big_topic
    df = load(spark, broker.bootstrap, subscribe=topic, **{"kafka.client.id": "spark-test",
                                                            "kafka.fetch.max.bytes": "1048576"})
    assert df.count() == len(truth)
    with pytest.raises(Exception, match="Invalid kafka.* consumer setting.*no.such.setting"):
        load(spark, broker.bootstrap, subscribe=topic, **{"kafka.no.such.setting": "1"}).count()


def test_fixed_schema(spark: Any, broker: BrokerProcess, big_topic: tuple[str, list[Rec]]) -> None:
    topic, _ = big_topic
    reader = spark.read.format("gregor").schema("value STRING").option("kafka.bootstrap.servers", broker.bootstrap)
    with pytest.raises(Exception, match="fixed schema"):
        reader.option("subscribe", topic).load().count()
