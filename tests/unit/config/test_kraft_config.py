"""KRaft mode in the broker config: process.roles and the rules tying it to node.id, the voters and the
listeners, each refused with a message naming the property."""

from __future__ import annotations

import pytest

from gregor.config import BrokerConfig, ConfigError

COMBINED = {
    "process.roles": "broker,controller", "node.id": "1", "controller.quorum.voters": "1@127.0.0.1:9093",
    "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093", "controller.listener.names": "CONTROLLER",
}


def test_combined_node_takes_its_broker_id_from_node_id_and_maps_the_controller_listener() -> None:
    c = BrokerConfig(COMBINED)
    assert c.process_roles == {"broker", "controller"}
    assert c.broker_id == 1
    assert c.controller_listener_names == ["CONTROLLER"]
    assert c.listener("CONTROLLER").protocol == "PLAINTEXT"
    assert c.inter_broker_listener == "PLAINTEXT"  # never the controller listener


def test_no_roles_is_not_kraft() -> None:
    c = BrokerConfig({})
    assert c.process_roles == frozenset()
    assert c.broker_id == 0


@pytest.mark.parametrize("change, words", [
    ({"process.roles": "brokr"}, "process.roles"),
    ({"process.roles": "broker,broker"}, "process.roles"),
    ({"node.id": "-1"}, "node.id must be set"),
    ({"broker.id": "2"}, "must equal node.id"),
    ({"zookeeper.connect": "127.0.0.1:2181"}, "zookeeper.connect must not be set"),
    ({"controller.listener.names": ""}, "controller.listener.names must be set"),
    ({"controller.quorum.voters": "2@127.0.0.1:9093"}, "not one of controller.quorum.voters"),
    ({"controller.quorum.voters": "1@127.0.0.1:9999"}, "controller.quorum.voters says node 1 listens on 9999"),
    ({"listeners": "PLAINTEXT://127.0.0.1:9092"}, "the controller listener CONTROLLER is not one of the listeners"),
    ({"listeners": "CONTROLLER://127.0.0.1:9093"}, "needs a listener that is not a controller listener"),
    ({"process.roles": "broker"}, "no controller role"),
    ({"inter.broker.listener.name": "CONTROLLER"}, "must not be a controller listener"),
])
def test_bad_kraft_configs_are_refused_naming_the_property(change: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        BrokerConfig({**COMBINED, **change})


def test_broker_only_node_must_not_listen_on_the_controller_listener() -> None:
    broker_only = {**COMBINED, "process.roles": "broker", "node.id": "4"}
    with pytest.raises(ConfigError, match="broker-only node must not listen"):
        BrokerConfig(broker_only)
    c = BrokerConfig({**broker_only, "listeners": "PLAINTEXT://127.0.0.1:9092"})
    assert c.process_roles == {"broker"} and c.broker_id == 4


def test_controller_listener_names_without_roles_is_refused() -> None:
    with pytest.raises(ConfigError, match="process.roles is not"):
        BrokerConfig({"controller.listener.names": "CONTROLLER"})


def test_broker_only_node_connects_to_the_controller_listener_with_its_mapped_protocol() -> None:
    """A broker-only node does not listen on the controller listener, yet must know how to reach it: its
    protocol from the map, its TLS settings from listener.name.controller.*."""
    broker_only = {**COMBINED, "process.roles": "broker", "node.id": "4", "listeners": "PLAINTEXT://127.0.0.1:9092",
                   "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
                   "listener.name.controller.ssl.truststore.location": "/etc/gregor/ca.pem"}
    c = BrokerConfig(broker_only)
    spec = c.listener("CONTROLLER")
    assert (spec.name, spec.protocol, spec.port) == ("CONTROLLER", "SSL", 0)
    assert c.listener_get("CONTROLLER", "ssl.truststore.location") == "/etc/gregor/ca.pem"
    assert [s.name for s in c.listener_specs] == ["PLAINTEXT"]  # it is not served
    with pytest.raises(KeyError):
        c.listener("NOPE")


def test_controller_only_node() -> None:
    c = BrokerConfig({**COMBINED, "process.roles": "controller", "listeners": "CONTROLLER://127.0.0.1:9093"})
    assert c.process_roles == {"controller"} and c.broker_id == 1
    assert [s.name for s in c.listener_specs] == ["CONTROLLER"]
