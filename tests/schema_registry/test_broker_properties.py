"""The registry's properties are broker properties, checked by the one table both read: a file written for
`gregor schema-registry` is accepted in server.properties, and a bad value is refused by both alike."""

from __future__ import annotations

import pytest

from gregor.config import BROKER_PROPS, BrokerConfig, ConfigError
from gregor.config.schema_registry import REGISTRY_PROPS, RegistryConfig

REGISTRY_FILE = {
    "schema.registry.listeners": "http://127.0.0.1:8081,http://127.0.0.1:8082",
    "schema.registry.compatibility.level": "FULL",
    "schema.registry.max.schemas.per.subject": "50",
    "schema.registry.authentication.method": "BASIC",
    "schema.registry.basic.auth.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                              'user_alice="pw";',
}


def test_every_registry_property_is_a_broker_property_with_one_definition() -> None:
    for name, prop in REGISTRY_PROPS.items():
        assert BROKER_PROPS[name] is prop


def test_the_same_file_configures_both() -> None:
    standalone = RegistryConfig.from_properties(REGISTRY_FILE)
    in_broker = RegistryConfig.from_config(BrokerConfig(dict(REGISTRY_FILE)))
    assert standalone == in_broker
    assert in_broker.listeners == ["http://127.0.0.1:8081", "http://127.0.0.1:8082"]
    assert in_broker.max_schemas_per_subject == 50


@pytest.mark.parametrize(("props", "message"), [
    ({"schema.registry.listeners": "ftp://x:1"}, "expected http://host:port or https://host:port"),
    ({"schema.registry.listeners": "https://127.0.0.1:8081"}, "needs schema.registry.ssl.keystore.location"),
    ({"schema.registry.compatibility.level": "SOMETIMES"}, "String must be one of"),
    ({"schema.registry.session.timeout.ms": "2000", "schema.registry.heartbeat.interval.ms": "3000"},
     "heartbeat.interval.ms must be below"),
    ({"schema.registry.no.such.thing": "1"}, "Unknown"),
    ({"confluent.schema.registry.cache.size": "0"}, "confluent.schema.registry.cache.size: Value must be at least 1"),
])
def test_bad_values_are_refused_by_the_broker_and_the_standalone_registry(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(props)
    registry_only = {k: v for k, v in props.items() if k.startswith("schema.registry.")}
    if registry_only:
        with pytest.raises(ConfigError, match=message):
            RegistryConfig.from_properties(registry_only)


def test_basic_auth_inside_a_broker_may_leave_the_users_to_the_broker() -> None:
    props = {"schema.registry.listeners": "http://127.0.0.1:0", "schema.registry.authentication.method": "BASIC"}
    assert RegistryConfig.from_config(BrokerConfig(props)).authentication_method == "BASIC"
    with pytest.raises(ConfigError, match="needs schema.registry.basic.auth.jaas.config"):
        RegistryConfig.from_properties(props)  # standalone, someone must say who the users are
