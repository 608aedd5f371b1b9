"""The pipeline's typed step: Avro page views on a schema-checked topic, a live Spark stream reading typed
columns and writing typed aggregates, and a schema change while it runs.

1. `page_views_avro` is created with `confluent.value.schema.validation=true`: the broker refuses any record
   not framed with a schema id registered under `page_views_avro-value`.
2. Half the page views are produced with confluent-kafka's AvroSerializer and the PageView schema v1.
3. A streaming query reads the topic with `valueFormat=avro` (reader schema: the latest version when it
   starts, v1) and, per micro-batch, writes per-URL views and latency sums as Avro records
   (`valueFormat=avro`, the schema derived from the columns and registered by the sink) to
   `page_view_counts_avro`.
4. While it runs, v2 (a `country` field with a default: a compatible change, the registry checks) is
   registered and the other half is produced with it. The live query keeps its reader schema, v1: the new
   records are resolved to it, and nothing stops.
5. The query is stopped; a batch read with the latest schema (v2) sees `country` for the new records and
   the default for the old ones. The aggregates, read back with confluent-kafka's AvroDeserializer, are
   checked against the same sums computed in plain Python.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gregor.pipeline.events import PageView, page_views
from gregor.pipeline.generator import make_producer, produce_all
from gregor.pipeline.topics import create_topics, read_topic

TOPIC = "page_views_avro"
COUNTS_TOPIC = "page_view_counts_avro"
COUNTRIES = ["de", "fr", "us", "jp", "br"]
UNKNOWN = "unknown"

PAGE_VIEW_V1: dict[str, Any] = {
    "type": "record", "name": "PageView", "namespace": "gregor.pipeline", "fields": [
        {"name": "user", "type": "string"}, {"name": "session", "type": "string"}, {"name": "url", "type": "string"},
        {"name": "referrer", "type": "string"}, {"name": "latency_ms", "type": "int"},
        {"name": "timestamp", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
PAGE_VIEW_V2: dict[str, Any] = {**PAGE_VIEW_V1, "fields": [
    *PAGE_VIEW_V1["fields"], {"name": "country", "type": "string", "default": UNKNOWN}]}


@dataclass
class TypedResult:
    produced_v1: int
    produced_v2: int
    rows_streamed: int
    counts_checked: bool
    evolution_checked: bool

    @property
    def ok(self) -> bool:
        return self.counts_checked and self.evolution_checked


def _avro_dict(e: PageView, country: str | None) -> dict[str, Any]:
    d: dict[str, Any] = {"user": e.user, "session": e.session, "url": e.url, "referrer": e.referrer,
                         "latency_ms": e.latency_ms, "timestamp": e.timestamp_ms}
    if country is not None:
        d["country"] = country
    return d


def _country(e: PageView) -> str:
    return COUNTRIES[sum(map(ord, e.user)) % len(COUNTRIES)]


def wait_for_registry(url: str, subject: str, timeout_s: float = 60.0) -> None:
    """Wait until the registry takes writes (a fresh registry elects its primary first); sets the subject's
    compatibility to BACKWARD on the way, so step 4's change is checked."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    sr = SchemaRegistryClient({"url": url})
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            sr.set_compatibility(subject, "BACKWARD")
            return
        except (SchemaRegistryError, OSError) as e:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the schema registry at {url} takes no writes: {e}") from e
            time.sleep(0.3)


def _produce(bootstrap: str, url: str, topic: str, schema: dict[str, Any], events: list[PageView], v2: bool) -> int:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    ser = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(schema), conf={"auto.register.schemas": True})
    ctx = SerializationContext(topic, MessageField.VALUE)
    return produce_all(make_producer(bootstrap), topic,
                       ((e.user.encode(), ser(_avro_dict(e, _country(e) if v2 else None), ctx)) for e in events))


def _rows(query: Any) -> int:
    return sum(p["numInputRows"] for p in query.recentProgress)


def _wait_rows(query: Any, n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while _rows(query) < n:
        if query.exception() is not None:
            raise RuntimeError(f"the typed stream failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the typed stream read {_rows(query)} of {n} page views in {timeout_s:.0f} s")
        time.sleep(0.5)


def start_typed_stream(spark: Any, bootstrap: str, url: str, checkpoint: Path, topic: str = TOPIC,
                       counts_topic: str = COUNTS_TOPIC, trigger: str = "2 seconds") -> Any:
    """Typed page views -> per micro-batch, per URL: views and latency sum, as Avro records."""
    from pyspark.sql import functions as F  # noqa: N812

    registry = {"schema.registry.url": url}
    views = (spark.readStream.format("gregor").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("valueFormat", "avro").option("keyFormat", "string").options(**registry).load())

    def write_counts(batch: Any, batch_id: int) -> None:
        counts = (batch.groupBy(F.col("value.url").alias("url"))
                  .agg(F.count("*").alias("views"), F.sum("value.latency_ms").alias("latency_ms_sum"))
                  .select(F.col("url").alias("key"),
                          F.struct(F.lit(batch_id).cast("long").alias("batch_id"), "url", "views",
                                   "latency_ms_sum").alias("value")))
        (counts.write.format("gregor").mode("append").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", counts_topic).option("valueFormat", "avro").options(**registry).save())

    return (views.writeStream.foreachBatch(write_counts).option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=trigger).start())


def run_typed_step(spark: Any, bootstrap: str, url: str, out: Path, events: int, *, seed: int = 7,
                   say: Any = print, timeout_s: float = 180.0, suffix: str = "", trigger: str = "2 seconds"
                   ) -> TypedResult:
    """Steps 1-5 of the module docstring; `url` is the schema registry's. The checks expect topics of
    their own: `suffix` is appended to both names (a broker that has run the step before)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext


    topic, counts_topic = TOPIC + suffix, COUNTS_TOPIC + suffix
    _create_checked_topic(bootstrap, topic)
    create_topics(bootstrap, {counts_topic: 1})
    wait_for_registry(url, f"{topic}-value")
    truth = list(page_views(events, seed=seed, start_ms=int(time.time() * 1000) - events * 20))
    first, second = truth[:events // 2], truth[events // 2:]
    n1 = _produce(bootstrap, url, topic, PAGE_VIEW_V1, first, v2=False)
    say(f"typed: produced {n1:,} Avro page views (schema v1) to the schema-checked topic {topic}")
    query = start_typed_stream(spark, bootstrap, url, out / "checkpoints" / f"typed{suffix}", topic, counts_topic,
                               trigger)
    try:
        _wait_rows(query, n1, timeout_s)
        n2 = _produce(bootstrap, url, topic, PAGE_VIEW_V2, second, v2=True)
        say(f"typed: registered v2 (+country, default {UNKNOWN!r}) and produced {n2:,} page views with it, "
            "the stream live")
        _wait_rows(query, n1 + n2, timeout_s)
        streamed = _rows(query)
    finally:
        query.stop()
    say(f"typed: the stream read {streamed:,} page views across the schema change without a failure")

    latest = (spark.read.format("gregor").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("valueFormat", "avro").option("schema.registry.url", url).load()
              .selectExpr("value.user as user", "unix_millis(value.timestamp) as ts", "value.country as country")
              .collect())
    want = Counter((e.user, e.timestamp_ms, UNKNOWN) for e in first) + Counter(
        (e.user, e.timestamp_ms, _country(e)) for e in second)
    evolution_ok = Counter((r["user"], r["ts"], r["country"]) for r in latest) == want
    say(f"typed: a batch read with v2 {'sees' if evolution_ok else 'DOES NOT see'} country on new records and "
        f"{UNKNOWN!r} on old ones")

    views: Counter[str] = Counter()
    latency: Counter[str] = Counter()
    de = AvroDeserializer(SchemaRegistryClient({"url": url}))
    for raw in read_topic(bootstrap, counts_topic):
        rec = de(raw, SerializationContext(counts_topic, MessageField.VALUE))
        views[rec["url"]] += rec["views"]
        latency[rec["url"]] += rec["latency_ms_sum"]
    counts_ok = views == Counter(e.url for e in truth) and latency == Counter(
        {u: sum(e.latency_ms for e in truth if e.url == u) for u in {e.url for e in truth}})
    say(f"typed: per-URL views and latency in {counts_topic} (Avro, read by confluent-kafka's AvroDeserializer) "
        f"{'match' if counts_ok else 'DO NOT match'} the plain-Python sums")
    return TypedResult(n1, n2, streamed, counts_ok, evolution_ok)


def _create_checked_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    f = admin.create_topics([NewTopic(topic, 2, -1, config={"confluent.value.schema.validation": "true"})])[topic]
    try:
        f.result(30)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
