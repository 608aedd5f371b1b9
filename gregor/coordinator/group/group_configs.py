"""KIP-848 group configs: a consumer group's own session timeout and heartbeat interval.

Set with IncrementalAlterConfigs on a GROUP resource (type 32) and kept in the metadata store as Kafka
keeps them (/config/groups/<group> on ZooKeeper: the "groups" entity type of SetEntityConfigs, the
group id sanitized like a user name). Each is bounded by the broker's group.consumer.min/max.* and
defaults to the broker's group.consumer.*; the consumer-protocol coordinator reads them at each
heartbeat and session timer, so a change applies to the group's members from their next heartbeat.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gregor.configdef import ConfigError, Prop
from gregor.security.principal import sanitize


@dataclass(frozen=True)
class GroupConfigDef:
    prop: Prop
    broker_default: str  # the broker property it defaults to
    lo: str  # the broker properties bounding it
    hi: str


GROUP_CONFIGS: dict[str, GroupConfigDef] = {d.prop.name: d for d in (
    GroupConfigDef(Prop("consumer.session.timeout.ms", "int", None, 1,
                        doc="The timeout to detect client failures when using the consumer group protocol"),
                   "group.consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms",
                   "group.consumer.max.session.timeout.ms"),
    GroupConfigDef(Prop("consumer.heartbeat.interval.ms", "int", None, 1,
                        doc="The heartbeat interval given to the members of a consumer group"),
                   "group.consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms",
                   "group.consumer.max.heartbeat.interval.ms"),
)}

SESSION, HEARTBEAT = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"


def store_name(group_id: str) -> str:
    """The group's entity name in the metadata store (Kafka sanitizes it as it does user names)."""
    return sanitize(group_id)


def validate_group_configs(configs: Mapping[str, str], broker_get: Callable[[str], Any]) -> dict[str, int]:
    """Check a group's configs after an alter; returns them parsed. Raises ConfigError naming the bound
    (Kafka's GroupConfig.validate): unknown names, values outside the broker's min/max, and a heartbeat
    interval not below the session timeout."""
    parsed: dict[str, int] = {}
    for name, text in configs.items():
        d = GROUP_CONFIGS.get(name)
        if d is None:
            raise ConfigError(f"Unknown group config name: {name}")
        v = d.prop.parse(text)
        lo, hi = broker_get(d.lo), broker_get(d.hi)
        if v < lo:
            raise ConfigError(f"{name} must be greater than or equal to {d.lo} ({lo})")
        if v > hi:
            raise ConfigError(f"{name} must be less than or equal to {d.hi} ({hi})")
        parsed[name] = v
    eff = effective(parsed, broker_get)
    if eff[HEARTBEAT] >= eff[SESSION]:
        raise ConfigError(f"{HEARTBEAT} ({eff[HEARTBEAT]}) must be less than {SESSION} ({eff[SESSION]})")
    return parsed


def effective(stored: Mapping[str, Any], broker_get: Callable[[str], Any]) -> dict[str, int]:
    """Each group config's value for a group: its own (parsed or text), else the broker default. A stored
    value that does not parse (an edited store) is ignored."""
    out: dict[str, int] = {}
    for name, d in GROUP_CONFIGS.items():
        v = stored.get(name)
        try:
            out[name] = broker_get(d.broker_default) if v is None else int(v)
        except ValueError:
            out[name] = broker_get(d.broker_default)
    return out
