"""Topic configs: a topic's stored overrides over the broker's topic defaults, as one LogConfig.

The broker's defaults are a LogConfig built from its `log.*` properties (BrokerConfig.log_config); the
dynamic broker configs replace them at run time, and the owner hands the new ones over. Every value goes
through the one topic-config table (gregor.storage.config), so what CreateTopics accepts is what a log
opens with and what DescribeConfigs shows.

A stored override that does not validate (an older version's bounds, an edited metadata store) must not
stop the broker: that key keeps its default. The replica manager's `TopicLogConfigs` reports it once per
process, naming topic and key; the admin APIs describe only the overrides in effect (`valid_overrides`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from gregor.metadata.cache import MetadataCache
from gregor.replication.partition import Partition
from gregor.storage.config import LogConfig
from gregor.storage.log_manager import LogManager

log = logging.getLogger("gregor.replica")

Invalid = list[tuple[str, object, str]]  # (key, stored value, why) of overrides that do not validate


def log_config_for(defaults: LogConfig, overrides: Mapping[str, str]) -> LogConfig:
    """A topic's configs: its stored overrides over the broker's topic `defaults`; an override that does
    not validate keeps its default."""
    return LogConfig.from_properties(overrides, defaults, [])


def valid_overrides(defaults: LogConfig, overrides: Mapping[str, str]) -> dict[str, str]:
    """The stored overrides that are in effect (those that validate)."""
    invalid: Invalid = []
    LogConfig.from_properties(overrides, defaults, invalid)
    bad = {key for key, _, _ in invalid}
    return {k: v for k, v in overrides.items() if k not in bad}


def effective_topic_configs(defaults: LogConfig, overrides: Mapping[str, str]) -> dict[str, object]:
    """Every topic config's value for a topic: its override, else the broker default."""
    return log_config_for(defaults, overrides).values()


class TopicLogConfigs:
    """The replica manager's topic configs: each topic's LogConfig over the broker's current defaults,
    applied to its hosted partitions and its logs, and the invalid stored overrides reported once."""

    def __init__(self, defaults: LogConfig, log_manager: LogManager, metadata_cache: MetadataCache,
                 partitions: Mapping[tuple[str, int], Partition]) -> None:
        self.defaults = defaults
        self.log_manager = log_manager
        self.metadata_cache = metadata_cache
        self.partitions = partitions  # the replica manager's, read only
        self._reported: set[tuple[str, str, str]] = set()  # (topic, key, value) warned about

    def for_topic(self, topic: str, overrides: Mapping[str, str]) -> LogConfig:
        """The topic's LogConfig; an override that does not validate is reported (once) and ignored."""
        invalid: Invalid = []
        cfg = LogConfig.from_properties(overrides, self.defaults, invalid)
        for key, raw, why in invalid:
            if (topic, key, str(raw)) not in self._reported:
                self._reported.add((topic, key, str(raw)))
                log.warning("topic %s: stored config %s=%s is ignored, using the default %s (%s)",
                            topic, key, raw, self.defaults.to_properties().get(key, "none"), why)
        return cfg

    def refresh(self, defaults: LogConfig) -> None:
        """The broker's topic defaults changed (a dynamic config): re-derive every topic's LogConfig and
        apply it to its logs and partitions now; a topic's own overrides win."""
        self.defaults = defaults
        self.log_manager.default_config = defaults
        for name, t in self.metadata_cache.topics().items():
            cfg = self.for_topic(name, t.configs)
            if self.log_manager.topic_config(name) != cfg:
                self.log_manager.update_topic_config(name, cfg)
            for p in t.partitions:
                part = self.partitions.get((name, p))
                if part is not None:
                    part.update_log_config(cfg)
