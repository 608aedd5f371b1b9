"""Option parsing and offset-range planning on their own (no Spark session, no broker)."""

from __future__ import annotations

import re

import pytest

from gregor.spark.errors import DataLossError
from gregor.spark.options import GregorOptionError, parse_sink_options, parse_source_options
from gregor.spark.ranges import OffsetRange, plan_ranges, rate_limit, split_ranges

BS = {"kafka.bootstrap.servers": "127.0.0.1:9"}


def opts(streaming: bool = False, **kw: str):  # type: ignore[no-untyped-def]
    return parse_source_options({**BS, **{k.lower(): v for k, v in kw.items()}}, streaming=streaming)


def test_defaults_follow_the_kafka_source() -> None:
    batch = opts(subscribe="a, b")
    assert batch.subscription.topics == ("a", "b")
    assert (batch.starting.kind, batch.ending.kind) == ("earliest", "latest")
    assert batch.fail_on_data_loss and not batch.include_headers
    stream = opts(streaming=True, subscribe="a")
    assert stream.starting.kind == "latest"
    assert stream.max_trigger_delay_ms == 15 * 60_000


@pytest.mark.parametrize("given, message", [
    ({}, "One of the following options must be specified"),
    ({"subscribe": "a", "assign": '{"a":[0]}'}, "Only one of the following options"),
    ({"subscribe": "a", "subscribePattern": "a.*"}, "Only one of the following options"),
    ({"subscribe": " , "}, "No topics to subscribe to"),
    ({"subscribePattern": "("}, "not a valid regular expression"),
    ({"assign": "{oops"}, "Option 'assign' is not valid JSON"),
    ({"assign": '{"a": 0}'}, "must be a list of integers"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"0":1'}, "Option 'startingOffsets' is not valid JSON"),
    ({"subscribe": "a", "startingOffsets": "sometime"}, "must be 'earliest', 'latest' or a JSON object"),
    ({"subscribe": "a", "startingOffsets": "latest"}, "can't be latest for batch queries"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, "can't be latest (-1) for batch"),
    ({"subscribe": "a", "endingOffsets": "earliest"}, "can't be earliest for batch queries"),
    ({"subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, "can't be earliest (-2) for batch"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"x":1}}'}, "is not an integer"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"0":-3}}'}, "is not valid"),
    ({"subscribe": "a", "startingTimestamp": "yesterday"}, "timestamp in milliseconds"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, "'true' or 'false'"),
    ({"subscribe": "a", "minPartitions": "0"}, "at least 1"),
    ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "'kafka.auto.offset.reset' is not supported"),
    ({"subscribe": "a", "kafka.enable.auto.commit": "true"}, "is not supported"),
    ({"subscribe": "a", "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, "can't be larger"),
    ({"subscribe": "a", "maxTriggerDelay": "soon"}, "duration"),
])
def test_bad_options_name_the_problem(given: dict[str, str], message: str) -> None:
    with pytest.raises(GregorOptionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        opts(**given)


def test_bootstrap_servers_required() -> None:
    with pytest.raises(GregorOptionError, match="kafka.bootstrap.servers"):
        parse_source_options({"subscribe": "a"}, streaming=False)


def test_ending_options_are_batch_only() -> None:
    with pytest.raises(GregorOptionError, match="not valid in streaming"):
        opts(streaming=True, subscribe="a", endingOffsets="latest")


def test_precedence_timestamp_over_by_timestamp_over_offsets() -> None:
    o = opts(subscribe="a", startingTimestamp="1000", startingOffsetsByTimestamp='{"a":{"0":5}}',
             startingOffsets='{"a":{"0":3}}')
    assert (o.starting.kind, o.starting.timestamp_ms) == ("timestamp", 1000)
    o = opts(subscribe="a", startingOffsetsByTimestamp='{"a":{"0":5}}', startingOffsets='{"a":{"0":3}}')
    assert (o.starting.kind, dict(o.starting.offsets)) == ("timestamps", {("a", 0): 5})


def test_kafka_params_pass_through_without_prefix() -> None:
    o = opts(subscribe="a", **{"kafka.client.id": "me", "kafka.fetch.max.bytes": "1000"})
    assert o.kafka_params == {"bootstrap.servers": "127.0.0.1:9", "client.id": "me", "fetch.max.bytes": "1000"}


def test_pattern_is_a_full_match_and_skips_internal_topics() -> None:
    sub = opts(subscribePattern="logs-.*").subscription
    assert sub.matches("logs-web") and not sub.matches("mylogs-web") and not sub.matches("__logs-x")


def test_sink_options() -> None:
    assert parse_sink_options({**BS, "topic": "t"}).topic == "t"
    with pytest.raises(GregorOptionError, match="key.serializer"):
        parse_sink_options({**BS, "kafka.key.serializer": "x"})


def test_rate_limit_is_proportional_and_never_starves() -> None:
    a0, a1, b0 = ("a", 0), ("a", 1), ("b", 0)
    end = rate_limit(100, {a0: 0, a1: 0, b0: 0}, {a0: 900, a1: 100, b0: 1}, lambda tps: {})
    assert end == {a0: 89, a1: 9, b0: 1}  # 100 * 900/1001 floored; the one-record partition still gets 1
    assert rate_limit(10_000, {a0: 5}, {a0: 50}, lambda tps: {}) == {a0: 50}
    # A partition that appeared since the start counts from its earliest offset.
    assert rate_limit(10, {a0: 0}, {a0: 10, a1: 10}, lambda tps: {a1: 0}) == {a0: 5, a1: 5}


def test_split_ranges_min_partitions_and_max_records() -> None:
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 5, 5)]
    assert split_ranges(ranges, None, None) == ranges[:2]  # empty ranges make no task
    pieces = split_ranges(ranges, 5, None)
    assert len(pieces) >= 5
    assert sum(p.size for p in pieces) == 110
    assert [p for p in pieces if p.partition == 0][0].from_offset == 0
    capped = split_ranges(ranges, None, 30)
    assert max(p.size for p in capped) <= 30 and sum(p.size for p in capped) == 110


def test_plan_ranges_reports_data_loss() -> None:
    a0, a1 = ("a", 0), ("a", 1)
    assert plan_ranges({a0: 5}, {a0: 9, a1: 3}, lambda tps: {a1: 0}, True) == [
        OffsetRange("a", 0, 5, 9), OffsetRange("a", 1, 0, 3)]
    with pytest.raises(DataLossError, match="starts from 2 instead of 0"):
        plan_ranges({a0: 5}, {a0: 9, a1: 3}, lambda tps: {a1: 2}, True)
    with pytest.raises(DataLossError, match="are gone"):
        plan_ranges({a0: 5, a1: 1}, {a0: 9}, lambda tps: {}, True)
    with pytest.raises(DataLossError, match="offset was changed from 5 to 2"):
        plan_ranges({a0: 5}, {a0: 2}, lambda tps: {}, True)
    # Without failOnDataLoss the batch goes on with what exists.
    assert plan_ranges({a0: 5}, {a0: 2}, lambda tps: {}, False) == [OffsetRange("a", 0, 5, 2)]
    assert split_ranges([OffsetRange("a", 0, 5, 2)], None, None) == []


def test_transactional_sink_options() -> None:
    base = {"kafka.bootstrap.servers": "b:9092", "topic": "t"}
    assert parse_sink_options(base).transactional is False
    opts = parse_sink_options({**base, "transactional": "true", "transactionalidprefix": "app-"})  # Spark lowercases
    assert (opts.transactional, opts.transactional_id_prefix) == (True, "app-")
    for owned in ("kafka.transactional.id", "kafka.enable.idempotence"):
        with pytest.raises(GregorOptionError, match=owned.replace(".", r"\.")):
            parse_sink_options({**base, "transactional": "true", owned: "x"})


def test_reader_settings_take_the_readers_names_and_javas() -> None:
    from gregor.spark.reader_settings import reader_settings

    params = {"bootstrap.servers": "b:9092", "client.rack": "r2", "isolation.level": "read_committed",
              "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
              "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  'username="alice" password="a \\"quoted\\" secret";',
              "ssl.truststore.type": "PEM", "ssl.truststore.location": "/etc/ca.pem",
              "ssl.endpoint.identification.algorithm": "", "request.timeout.ms": "5000",
              "fetch.max.wait.ms": "100", "group.id": "ignored", "session.timeout.ms": "9999"}
    got = reader_settings(params)
    assert got == {"bootstrap.servers": "b:9092", "client.rack": "r2", "isolation.level": "read_committed",
                   "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                   "sasl.password": 'a "quoted" secret', "ssl.ca.location": "/etc/ca.pem",
                   "ssl.endpoint.identification.algorithm": "none", "socket.timeout.ms": "5000",
                   "fetch.wait.max.ms": "100"}


def test_reader_retries_last_about_the_poll_timeout_unless_given() -> None:
    from gregor.spark.reader_settings import reader_settings

    bs = {"bootstrap.servers": "b:9092"}
    assert "retries" not in reader_settings(bs)  # the driver: the reader's own default
    assert reader_settings(bs, 120_000)["retries"] == 120  # 120 s of waits of at most retry.backoff.max.ms (1 s)
    assert reader_settings({**bs, "retry.backoff.max.ms": "2000"}, 120_000)["retries"] == 60
    assert reader_settings({**bs, "retries": "3"}, 120_000)["retries"] == "3"


@pytest.mark.parametrize("params, message", [
    ({"no.such.setting": "1"}, "Invalid kafka.* consumer setting: 'no.such.setting'"),
    ({"partitioner.class": "x"}, "'partitioner.class' is not a setting"),
    ({"security.protocol": "carrier_pigeon"}, "Invalid value carrier_pigeon for configuration security.protocol"),
    ({"fetch.max.bytes": "lots"}, "fetch.max.bytes"),
    ({"sasl.jaas.config": "com.example.Kerberos required;"}, "only org.apache.kafka.common.security.plain"),
    ({"sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required;"}, "names no username"),
    ({"ssl.truststore.location": "/etc/x.jks"}, "ssl.truststore.type=PEM"),
    ({"security.protocol": "sasl_plaintext"}, "needs sasl.username"),
])
def test_bad_reader_settings_name_what_is_wrong(params: dict[str, str], message: str) -> None:
    from gregor.spark.reader_settings import reader_settings

    with pytest.raises(GregorOptionError, match=re.escape(message)):
        reader_settings({"bootstrap.servers": "b:9092", **params})
