"""Broker configuration: the one table of broker properties (`broker`), the dynamic configs layered
over it at run time (`dynamic`), and the components' typed views of it (gregor.configdef.Settings)."""

from gregor.config.broker import (
    BROKER_PROPS,
    CLEANUP_POLICIES,
    CLUSTER_WIDE,
    COMPRESSION_TYPES,
    LISTENER_PREFIX,
    LONG_MAX,
    PER_BROKER,
    READ_ONLY,
    TIMESTAMP_TYPES,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    Prop,
    format_value,
    read_properties,
    validate_topic_configs,
)

__all__ = ["BROKER_PROPS", "CLEANUP_POLICIES", "COMPRESSION_TYPES", "CLUSTER_WIDE", "LISTENER_PREFIX", "LONG_MAX",
           "PER_BROKER", "READ_ONLY", "TIMESTAMP_TYPES", "TOPIC_CONFIGS", "BrokerConfig", "ConfigError", "Prop",
           "format_value", "read_properties", "validate_topic_configs"]
