"""df.write / writeStream .format("gregor"): records as given, read back through confluent-kafka."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.broker_process import BrokerProcess
from tests.spark.util import consume_all, create_topic, produce, unique


def write(df: Any, bootstrap: str, **options: str) -> None:
    w = df.write.format("gregor").mode("append").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def test_keys_values_headers_and_partitions_as_given(spark: Any, broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, unique("sink"), 3)
    rows = []
    for i in range(3_000):
        headers = [(f"h{j}", f"{i}-{j}".encode()) for j in range(i % 3)] or None
        rows.append((f"k{i}".encode() if i % 7 else None, None if i % 50 == 0 else f"value-{i}".encode(),
                     headers, i % 3, topic))
    df = spark.createDataFrame(rows, "key binary, value binary, headers array<struct<key:string,value:binary>>, "
                                     "partition int, topic string").repartition(4)
    write(df, broker.bootstrap)
    got = consume_all(broker.bootstrap, topic)
    expected = Counter((p, k, v, tuple(h) if h else None) for k, v, h, p, _ in rows)
    assert Counter((r.partition, r.key, r.value, r.headers) for r in got) == expected


def test_topic_option_overrides_the_column_and_strings_are_utf8(spark: Any, broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, unique("sink-str"), 1)
    df = spark.createDataFrame([("clé", "välue", "ignored-topic", 1.5)], "key string, value string, topic string, x "
                                                                         "double")
    write(df, broker.bootstrap, topic=topic)
    [rec] = consume_all(broker.bootstrap, topic)
    assert (rec.key, rec.value) == ("clé".encode(), "välue".encode())


def test_null_partition_lets_the_key_choose_like_kafkas_partitioner(spark: Any, broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, unique("sink-hash"), 4)
    df = spark.createDataFrame([(f"user-{i % 10}", f"{i}", None) for i in range(200)],
                               "key string, value string, partition int")
    write(df, broker.bootstrap, topic=topic)
    got = consume_all(broker.bootstrap, topic)
    assert len(got) == 200
    by_key: dict[bytes | None, set[int]] = {}
    for r in got:
        by_key.setdefault(r.key, set()).add(r.partition)
    assert {k: parts.pop() for k, parts in by_key.items()} == {
        k: (murmur2(k) & 0x7FFFFFFF) % 4 for k in by_key if k is not None}, "Kafka's Java client mapping"


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (seed 0x9747b28c), as a signed 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = data[length - length % 4:]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


@pytest.mark.parametrize("ddl, options, message", [
    ("key string", {"topic": "t"}, "Required attribute 'value' not found"),
    ("value string", {}, "topic option required when no 'topic' attribute is present"),
    ("value int", {"topic": "t"}, "value attribute type must be a string or binary"),
    ("value string, partition string", {"topic": "t"}, "partition attribute type must be an int"),
    ("value string, headers array<string>", {"topic": "t"}, "headers attribute type must be"),
    ("value string, topic int", {}, "Topic type must be a string"),
])
def test_bad_columns_fail_before_writing(spark: Any, broker: BrokerProcess, ddl: str, options: dict[str, str],
                                         message: str) -> None:
    df = spark.createDataFrame([], ddl)
    with pytest.raises(Exception, match=message):
        write(df, broker.bootstrap, **options)


def test_overwrite_is_refused(spark: Any, broker: BrokerProcess) -> None:
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="Overwrite is not allowed"):
        df.write.format("gregor").mode("overwrite").option("kafka.bootstrap.servers", broker.bootstrap).option(
            "topic", "t").save()


def test_stream_from_topic_to_topic(spark: Any, broker: BrokerProcess, tmp_path: Any) -> None:
    src = create_topic(broker.bootstrap, unique("copy-src"), 2)
    dst = create_topic(broker.bootstrap, unique("copy-dst"), 2)
    produce(broker.bootstrap, src, [{"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 2,
                                     "headers": [("n", str(i).encode())]} for i in range(500)])
    q = (spark.readStream.format("gregor").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("subscribe", src).option("startingOffsets", "earliest").option("includeHeaders", "true").load()
         .selectExpr("key", "upper(cast(value as string)) as value", "headers", "partition")
         .writeStream.format("gregor").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", dst)
         .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    assert q.awaitTermination(180) and q.exception() is None, "the availableNow query did not finish"
    got = consume_all(broker.bootstrap, dst)
    assert sorted((r.partition, r.key, r.value, r.headers) for r in got) == sorted(
        (i % 2, f"k{i}".encode(), f"V{i}".encode(), (("n", str(i).encode()),)) for i in range(500))
