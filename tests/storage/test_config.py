from __future__ import annotations

import pytest

from gregor.storage import InvalidConfigError, LogConfig


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


def test_broker_properties_precedence() -> None:
    c = LogConfig.from_broker_properties({"log.retention.hours": "1", "log.segment.bytes": "1000", "broker.id": "3"})
    assert c.retention_ms == 3_600_000 and c.segment_bytes == 1000
    c = LogConfig.from_broker_properties({"log.retention.hours": "1", "log.retention.minutes": "2"})
    assert c.retention_ms == 120_000
    c = LogConfig.from_broker_properties({"log.retention.hours": "1", "log.retention.ms": "5"})
    assert c.retention_ms == 5
    c = LogConfig.from_broker_properties({"log.retention.hours": "-1"})
    assert c.retention_ms == -1
    c = LogConfig.from_broker_properties({"log.roll.hours": "2"})
    assert c.segment_ms == 7_200_000


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
    ],
)
def test_invalid(props: dict[str, str]) -> None:
    with pytest.raises(InvalidConfigError) as e:
        LogConfig.from_properties(props)
    assert e.value.error == "INVALID_CONFIG"
