"""Kafka's listener configuration: names, security protocols, advertised addresses, the inter-broker one.

`listeners=PLAINTEXT://:9092,SSL://:9093,INTERNAL://:9094` names each listener; its security protocol is
the name itself when the name is a protocol, else what `listener.security.protocol.map` says
(`INTERNAL:SASL_SSL`). `advertised.listeners` gives, per listener name, the address clients are told;
Metadata answers a client with the addresses of the listener it came through. Brokers talk to each other
through `inter.broker.listener.name`, or the listener whose protocol is `security.inter.broker.protocol`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from gregor.configdef import ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = {p: p for p in SECURITY_PROTOCOLS}


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One listener: its name (upper case, as Kafka normalises it), security protocol and address."""

    name: str
    protocol: str
    host: str
    port: int

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.protocol.endswith("SSL")

    def url(self, port: int | None = None) -> str:
        return f"{self.name}://{self.host}:{self.port if port is None else port}"


class ListenerProperties(Protocol):
    """The properties listeners are parsed from (BrokerConfig is one): values by name, and which were set."""

    explicit: set[str]

    def get(self, name: str) -> Any: ...


class BrokerListeners(Protocol):
    """A broker's parsed listeners and their per-listener properties (BrokerConfig is one)."""

    listener_specs: list[ListenerSpec]
    inter_broker_listener: str

    def listener(self, name: str) -> ListenerSpec: ...

    def listener_get(self, listener: str, key: str, mechanism: str | None = None) -> Any: ...


def parse_protocol_map(entries: list[str]) -> dict[str, str]:
    """listener.security.protocol.map, `NAME:PROTOCOL,...`, as {NAME: PROTOCOL}."""
    out: dict[str, str] = {}
    for entry in entries:
        name, sep, proto = entry.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name or proto not in SECURITY_PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: {entry!r} is not NAME:PROTOCOL with PROTOCOL one of "
                              f"{', '.join(SECURITY_PROTOCOLS)}")
        if name in out:
            raise ConfigError(f"listener.security.protocol.map: listener {name} is mapped twice")
        out[name] = proto
    return out


def parse_listener_url(spec: str, protocol_map: dict[str, str], what: str = "listeners") -> ListenerSpec:
    """'NAME://host:port' -> ListenerSpec; the name must have a protocol (itself, or by the map)."""
    if "://" not in spec:
        raise ConfigError(f"{what}: {spec!r} is not of the form NAME://host:port")
    name = spec.split("://", 1)[0].strip().upper()
    if not name.replace("_", "").replace("-", "").isalnum():
        raise ConfigError(f"{what}: {spec!r} has an invalid listener name")
    proto = protocol_map.get(name)
    if proto is None:
        raise ConfigError(f"{what}: listener {name} has no security protocol: it is none of "
                          f"{', '.join(SECURITY_PROTOCOLS)} and listener.security.protocol.map does not map it")
    parts = urlsplit("x://" + spec.split("://", 1)[1])
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        raise ConfigError(f"{what}: {spec!r} has no valid port")
    return ListenerSpec(name, proto, parts.hostname or "", port)


def protocol_map(config: ListenerProperties) -> dict[str, str]:
    return parse_protocol_map(config.get("listener.security.protocol.map"))


def parse_listeners(config: ListenerProperties) -> list[ListenerSpec]:
    """The broker's listeners, checked: unique names and ports (port 0, "any free port", may repeat)."""
    pmap = protocol_map(config)
    specs = [parse_listener_url(s, pmap) for s in config.get("listeners")]
    if not specs:
        raise ConfigError("listeners: at least one listener is required")
    names = [s.name for s in specs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ConfigError(f"listeners: listener name {', '.join(sorted(dup))} is used more than once")
    ports = [s.port for s in specs if s.port]
    if len(ports) != len(set(ports)):
        raise ConfigError("listeners: each listener needs its own port")
    return specs


def parse_advertised(config: ListenerProperties, listeners: list[ListenerSpec]) -> list[ListenerSpec]:
    """advertised.listeners (default: the listeners), each naming a listener the broker has."""
    raw = config.get("advertised.listeners")
    if not raw:
        return list(listeners)
    pmap = protocol_map(config)
    known = {s.name for s in listeners}
    out = []
    for spec in raw:
        a = parse_listener_url(spec, pmap, "advertised.listeners")
        if a.name not in known:
            raise ConfigError(f"advertised.listeners: {a.name} is not one of the listeners ({', '.join(sorted(known))})")
        out.append(a)
    return out


def inter_broker_listener_name(config: ListenerProperties, listeners: list[ListenerSpec]) -> str:
    """inter.broker.listener.name, or the listener whose protocol is security.inter.broker.protocol; when
    neither names a listener the broker has, the first listener (a lone broker needs none)."""
    explicit = config.get("inter.broker.listener.name")
    if explicit and "security.inter.broker.protocol" in config.explicit:
        raise ConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol may be set")
    names = {s.name: s for s in listeners}
    if explicit:
        name = explicit.strip().upper()
        if name not in names:
            raise ConfigError(f"inter.broker.listener.name: {name} is not one of the listeners "
                              f"({', '.join(sorted(names))})")
        return name
    proto = config.get("security.inter.broker.protocol")
    for s in listeners:
        if s.name == proto:
            return s.name
    for s in listeners:
        if s.protocol == proto:
            return s.name
    if "security.inter.broker.protocol" in config.explicit:
        raise ConfigError(f"security.inter.broker.protocol: no listener uses {proto}")
    return listeners[0].name
