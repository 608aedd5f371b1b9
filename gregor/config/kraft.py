"""KRaft mode in the broker config: `process.roles`, the controller listeners, and the checks that tie them
to `node.id`, `controller.quorum.voters` and the listeners.

A config with `process.roles` set runs in KRaft mode (Kafka 4's only mode): its metadata is the quorum's
replicated log, and `zookeeper.connect` must not be set. Without it, a broker runs as before: on
ZooKeeper when `zookeeper.connect` is set, else alone on the embedded store. The rules are Kafka's
(KafkaConfig's validation of a KRaft config), each refused with a message naming the property:

- roles are `broker`, `controller` or both; `node.id` is required, and `broker.id`, if set, equals it
  (unset, it takes `node.id`, as Kafka's `broker.id` is `node.id` in KRaft mode);
- `controller.quorum.voters` lists the voters; a node with the controller role is one of them, a
  broker-only node is not;
- `controller.listener.names` names the listener(s) the controllers listen on; a controller lists
  the first of them in `listeners`, at the port its voter entry names; a broker-only node does not
  listen on them; the inter-broker listener is never one of them;
- a controller listener name that `listener.security.protocol.map` does not map is PLAINTEXT (Kafka
  does the same, so `listeners=PLAINTEXT://:9092,CONTROLLER://:9093` needs no map).
"""

from __future__ import annotations

from typing import Any, Protocol

from gregor.configdef import READ_ONLY, ConfigError, Prop

BROKER_ROLE, CONTROLLER_ROLE = "broker", "controller"


def _p(name: str, type_: str, default: Any, lo: float | None = None, choices: tuple[str, ...] | None = None,
       doc: str = "") -> Prop:
    return Prop(name, type_, default, lo, None, choices, doc, READ_ONLY)


KRAFT_PROPS: list[Prop] = [
    _p("process.roles", "list", [],
       doc="KRaft mode: the roles of this node, broker, controller or both (combined). Unset: not KRaft (a "
           "ZooKeeper cluster when zookeeper.connect is set, else a lone broker on the embedded store)"),
    _p("controller.listener.names", "list", [],
       doc="The listeners the controllers listen on (KRaft); a controller serves the quorum and the brokers' "
           "registrations, heartbeats and metadata writes on the first. Unmapped names are PLAINTEXT"),
    _p("broker.session.timeout.ms", "int", 9000, lo=1,
       doc="KRaft: a broker that has not heartbeated to the active controller for this long is fenced (its "
           "leaderships move, it leaves the brokers clients are told of)"),
    _p("broker.heartbeat.interval.ms", "int", 2000, lo=1,
       doc="KRaft: how often a broker heartbeats to the active controller"),
    _p("initial.broker.registration.timeout.ms", "int", 60000, lo=1,
       doc="KRaft: how long a starting broker tries to register with the controller quorum before it gives up"),
]


class KRaftProperties(Protocol):
    """What the checks read (BrokerConfig is one)."""

    explicit: set[str]

    def get(self, name: str) -> Any: ...


def roles_of(config: KRaftProperties) -> frozenset[str]:
    """The node's roles; empty when not in KRaft mode."""
    return frozenset(config.get("process.roles") or ())


def controller_listener_names(config: KRaftProperties) -> list[str]:
    return [n.strip().upper() for n in config.get("controller.listener.names") or [] if n.strip()]


def prepare(values: dict[str, Any], explicit: set[str]) -> None:
    """Before the listeners are parsed: in KRaft mode, `broker.id` takes `node.id` and every controller
    listener name has a security protocol. Raises ConfigError for the rules that need no listeners."""
    listed = [r.strip().lower() for r in values.get("process.roles") or [] if r.strip()]
    bad = [r for r in listed if r not in (BROKER_ROLE, CONTROLLER_ROLE)]
    if bad or len(set(listed)) != len(listed):
        raise ConfigError(f"Invalid value {','.join(values['process.roles'])} for configuration process.roles: "
                          "expected broker, controller, or both (each once)")
    values["process.roles"] = listed
    roles = frozenset(listed)
    if not roles:
        if values.get("controller.listener.names") and "zookeeper.connect" not in explicit:
            raise ConfigError("controller.listener.names is set but process.roles is not: set process.roles "
                              "(broker, controller, or both) to run in KRaft mode")
        return
    if values.get("zookeeper.connect"):
        raise ConfigError("zookeeper.connect must not be set with process.roles: a KRaft node keeps its metadata in "
                          "the controller quorum (gregor migrate zookeeper-to-kraft moves a ZooKeeper cluster over)")
    node_id = values["node.id"]
    if node_id < 0:
        raise ConfigError("node.id must be set (0 or more) when process.roles is set")
    if "broker.id" in explicit and values["broker.id"] != node_id:
        raise ConfigError(f"broker.id ({values['broker.id']}) must equal node.id ({node_id}) in KRaft mode (or be "
                          "left unset)")
    values["broker.id"] = node_id
    names = [n.strip().upper() for n in values.get("controller.listener.names") or [] if n.strip()]
    if not names:
        raise ConfigError("controller.listener.names must be set when process.roles is set (the listener the "
                          "controllers listen on, e.g. CONTROLLER)")
    mapped = {e.partition(":")[0].strip().upper() for e in values["listener.security.protocol.map"]}
    missing = [f"{n}:PLAINTEXT" for n in names if n not in mapped]
    if missing:
        values["listener.security.protocol.map"] = list(values["listener.security.protocol.map"]) + missing


def check(config: KRaftProperties, listener_names: list[str], listener_ports: dict[str, int],
          inter_broker: str) -> None:
    """After the listeners are parsed: the rules tying roles, voters and listeners together."""
    roles = roles_of(config)
    if not roles:
        return
    node_id = config.get("node.id")
    names = controller_listener_names(config)
    voters = _voter_ids(config.get("controller.quorum.voters"))
    if not voters and not config.get("controller.quorum.bootstrap.servers"):
        raise ConfigError("controller.quorum.voters must list the controllers (id@host:port,...) in KRaft mode")
    if CONTROLLER_ROLE in roles:
        if node_id not in voters:
            raise ConfigError(f"node.id {node_id} has the controller role but is not one of controller.quorum.voters "
                              f"({','.join(config.get('controller.quorum.voters'))})")
        if names[0] not in listener_names:
            raise ConfigError(f"controller.listener.names: the controller listener {names[0]} is not one of the "
                              f"listeners ({', '.join(listener_names)})")
        port = voters[node_id]
        if listener_ports.get(names[0]) not in (port, None):
            raise ConfigError(f"listeners: {names[0]} listens on port {listener_ports[names[0]]} but "
                              f"controller.quorum.voters says node {node_id} listens on {port}")
    else:
        if node_id in voters:
            raise ConfigError(f"node.id {node_id} is one of controller.quorum.voters but process.roles has no "
                              "controller role")
        on = [n for n in names if n in listener_names]
        if on:
            raise ConfigError(f"listeners: a broker-only node must not listen on the controller listener {on[0]}")
    if BROKER_ROLE in roles:
        if not [n for n in listener_names if n not in names]:
            raise ConfigError("listeners: a node with the broker role needs a listener that is not a controller "
                              "listener")
        if inter_broker in names:
            raise ConfigError(f"the inter-broker listener {inter_broker} must not be a controller listener "
                              "(controller.listener.names)")


def _voter_ids(entries: list[str]) -> dict[int, int]:
    """controller.quorum.voters as {id: port} (its full checks are gregor.raft.config's)."""
    out: dict[int, int] = {}
    for e in entries:
        vid, sep, address = e.partition("@")
        port = address.rpartition(":")[2]
        if not sep or not vid.strip().isdigit() or not port.isdigit():
            raise ConfigError(f"Invalid value {e} for configuration controller.quorum.voters: expected id@host:port")
        out[int(vid)] = int(port)
    return out
