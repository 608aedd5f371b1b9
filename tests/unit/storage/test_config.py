from __future__ import annotations

import pytest

from gregor.config import BROKER_PROPS, CLUSTER_WIDE, BrokerConfig, ConfigError
from gregor.storage import InvalidConfigError, LogConfig
from gregor.storage.config import TOPIC_CONFIGS


def test_defaults_are_kafkas() -> None:
    c = LogConfig()
    assert c.segment_bytes == 1073741824
    assert c.segment_ms == 604800000
    assert c.segment_index_bytes == 10485760
    assert c.index_interval_bytes == 4096
    assert c.retention_ms == 604800000 and c.retention_bytes == -1
    assert c.flush_messages == 2**63 - 1 and c.flush_ms == 2**63 - 1
    assert c.max_message_bytes == 1048588
    assert c.message_timestamp_type == "CreateTime"
    assert c.cleanup_policy == "delete" and c.delete and not c.compact
    assert c.file_delete_delay_ms == 60000 and c.preallocate is False
    assert c.delete_retention_ms == 86400000 and c.min_cleanable_dirty_ratio == 0.5
    assert c.min_compaction_lag_ms == 0 and c.max_compaction_lag_ms == 2**63 - 1


def test_from_properties_and_back() -> None:
    c = LogConfig.from_properties({"retention.ms": "-1", "cleanup.policy": "compact,delete", "preallocate": "true",
                                   "message.timestamp.type": "LogAppendTime", "min.cleanable.dirty.ratio": "0.1"})
    assert c.retention_ms == -1 and c.compact and c.delete and c.preallocate and c.log_append_time
    assert c.min_cleanable_dirty_ratio == 0.1
    props = c.to_properties()
    assert props["retention.ms"] == "-1" and props["preallocate"] == "true" and props["segment.bytes"] == "1073741824"
    assert LogConfig.from_properties(props) == c


def _broker(props: dict[str, str]) -> LogConfig:
    """The broker default LogConfig derived from server.properties names, parsed by the broker table."""
    config = BrokerConfig(props)
    assert LogConfig.from_broker(config.get) == config.log_config
    return config.log_config


def test_broker_properties_precedence() -> None:
    c = _broker({"log.retention.hours": "1", "log.segment.bytes": "1000", "broker.id": "3"})
    assert c.retention_ms == 3_600_000 and c.segment_bytes == 1000
    assert _broker({"log.retention.hours": "1", "log.retention.minutes": "2"}).retention_ms == 120_000
    assert _broker({"log.retention.hours": "1", "log.retention.ms": "5"}).retention_ms == 5
    assert _broker({"log.retention.hours": "-1"}).retention_ms == -1
    assert _broker({"log.retention.minutes": "-7"}).retention_ms == -1  # any negative retention: forever
    assert _broker({"log.roll.hours": "2"}).segment_ms == 7_200_000
    assert _broker({"log.roll.jitter.hours": "1"}).segment_jitter_ms == 3_600_000
    assert _broker({"log.flush.scheduler.interval.ms": "10"}).flush_ms == 10
    assert _broker({"log.flush.scheduler.interval.ms": "10", "log.flush.interval.ms": "20"}).flush_ms == 20
    assert _broker({"log.cleanup.policy": "compact,delete"}).cleanup_policies == {"compact", "delete"}
    assert _broker({"message.max.bytes": "77", "min.insync.replicas": "2"}).max_message_bytes == 77


def test_every_topic_config_has_its_broker_synonyms_in_the_broker_table() -> None:
    """One definition: the broker properties of topic configs are the topic table's own entries."""
    topic_only = {"leader.replication.throttled.replicas", "follower.replication.throttled.replicas",
                  *(f"confluent.{f}.schema.validation" for f in ("key", "value")),
                  *(f"confluent.{f}.subject.name.strategy" for f in ("key", "value")),
                  *(f"gregor.{f}.schema.validation.deep" for f in ("key", "value"))}
    for t in TOPIC_CONFIGS.values():
        for prop in t.synonym_props():
            assert BROKER_PROPS[prop.name] == prop
        if t.name in topic_only:  # no broker default, as in Kafka
            assert not t.synonyms
            continue
        first = BROKER_PROPS[t.synonyms[0].name]
        assert first.mode == CLUSTER_WIDE
        if t.synonyms[0].prop is None:  # same definition under the broker's name
            assert (first.type, first.default, first.lo, first.hi, first.choices) == (
                t.prop.type, t.prop.default, t.prop.lo, t.prop.hi, t.prop.choices)
    assert LogConfig() == BrokerConfig().log_config  # Kafka's broker defaults give Kafka's topic defaults


def test_broker_defaults_are_checked_like_topic_configs() -> None:
    with pytest.raises(ConfigError, match="log.index.size.max.bytes: Value must be at least 12"):
        BrokerConfig({"log.index.size.max.bytes": "8"})
    with pytest.raises(ConfigError, match="min.compaction.lag.ms"):
        BrokerConfig({"log.cleaner.min.compaction.lag.ms": "10", "log.cleaner.max.compaction.lag.ms": "5"})


def test_stored_configs_load_leniently() -> None:
    """A stored override that no longer validates keeps its default and is reported; the rest apply."""
    invalid: list[tuple[str, object, str]] = []
    c = LogConfig.from_properties({"segment.index.bytes": "8", "retention.ms": "5000", "nope": "1",
                                   "min.compaction.lag.ms": "9", "max.compaction.lag.ms": "3"}, None, invalid)
    assert c.segment_index_bytes == 10485760 and c.retention_ms == 5000
    # Applied in order: the later of two conflicting configs is the one dropped.
    assert c.min_compaction_lag_ms == 9 and c.max_compaction_lag_ms == 2**63 - 1
    assert sorted(k for k, _, _ in invalid) == ["max.compaction.lag.ms", "nope", "segment.index.bytes"]


@pytest.mark.parametrize(
    "props",
    [
        {"segment.bytes": "10"},
        {"flush.messages": "0"},
        {"retention.ms": "-2"},
        {"cleanup.policy": "purge"},
        {"message.timestamp.type": "Now"},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"segment.bytes": "lots"},
        {"preallocate": "yes"},
        {"no.such.config": "1"},
        {"segment.index.bytes": "8"},  # issue 8 finding 3: was accepted by CreateTopics, refused at load
        {"segment.index.bytes": "11"},
        {"segment.bytes": str(2**31)},
        {"flush.ms": "-1"},
        {"min.cleanable.dirty.ratio": "nan"},
        {"cleanup.policy": ""},
        {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
    ],
)
def test_invalid(props: dict[str, str]) -> None:
    with pytest.raises(InvalidConfigError) as e:
        LogConfig.from_properties(props)
    assert e.value.error == "INVALID_CONFIG"
    assert list(props)[0] in str(e.value)  # the message names the config
