"""Metadata's auto topic creation (auto.create.topics.enable), and the topic config defaults the admin
APIs show: the broker-side halves of what the request handlers reach as `BrokerServices.auto_create_topics`
and `BrokerServices.topic_configs`."""

from __future__ import annotations

from collections.abc import Mapping

from gregor.admin.topic_admin import TopicAdmin
from gregor.config import BrokerConfig
from gregor.coordinator.internal_topic import InternalTopic
from gregor.metadata.cache import MetadataCache
from gregor.metadata.store import CreateTopic, TopicMetadata
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.replication.log_configs import effective_topic_configs, valid_overrides


class AutoTopicCreator:
    """Creates the topics a Metadata request names that do not exist, with the broker's defaults."""

    def __init__(self, topic_admin: TopicAdmin, metadata_cache: MetadataCache,
                 internal_topics: Mapping[str, InternalTopic]) -> None:
        self.topic_admin = topic_admin
        self.cache = metadata_cache
        self.internal = internal_topics  # created as their coordinators need them, not as other topics

    async def create(self, names: list[str]) -> dict[str, TopicMetadata | KafkaError]:
        """With the broker's defaults and limits (max.broker.partitions and the open-file budget apply as to
        CreateTopics), in one store write. `__consumer_offsets` is created as the group coordinator needs it,
        as Kafka does; other internal topics are refused by TopicAdmin."""
        out: dict[str, TopicMetadata | KafkaError] = {}
        prepared: list[TopicMetadata] = []
        for name in names:
            internal = self.internal.get(name)
            if internal is not None:
                pending = internal.creation()
                if pending is not None:
                    await pending
                t = self.cache.topic(name)
                out[name] = t if t is not None else KafkaError(
                    ErrorCode.LEADER_NOT_AVAILABLE, f"{name} is being created")
                continue
            try:
                prepared.append(self.topic_admin.prepare_topic(name))
            except KafkaError as e:
                out[name] = e
        errors = await self.topic_admin.write([CreateTopic(t) for t in prepared])
        for t, err in zip(prepared, errors, strict=True):
            out[t.name] = err if err is not None else (self.cache.topic(t.name) or t)
        for name, v in out.items():  # created meanwhile by another request: that is the topic
            if isinstance(v, KafkaError) and v.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                existing = self.cache.topic(name)
                out[name] = existing if existing is not None else KafkaError(
                    ErrorCode.LEADER_NOT_AVAILABLE, f"Topic {name} is being created")
        return out


class BrokerTopicConfigs:
    """A topic's configs over the broker's defaults as they are now (the dynamic ones applied to
    `config.log_config`), for DescribeConfigs, IncrementalAlterConfigs and CreateTopics' answers."""

    def __init__(self, config: BrokerConfig) -> None:
        self._config = config

    def effective(self, overrides: Mapping[str, str]) -> dict[str, object]:
        return effective_topic_configs(self._config.log_config, overrides)

    def valid_overrides(self, overrides: Mapping[str, str]) -> dict[str, str]:
        return valid_overrides(self._config.log_config, overrides)

    def default(self, name: str) -> object:
        return self._config.topic_default(name)
