"""Dynamic broker configs (Kafka's DynamicBrokerConfig): the part built so far.

AlterConfigs and IncrementalAlterConfigs on a BROKER resource write to the metadata store: for one
broker (the resource name is its id) or as the cluster-wide default (the name is empty), kept in
ZooKeeper at /config/brokers/<id> and /config/brokers/<default> as Kafka keeps them. Every broker
watches both and applies a change at once. A value is taken from, in order: this broker's dynamic
configs, the cluster default, server.properties, the property's default.

Only the properties in `APPLIED` may be altered: those this broker applies at runtime, and Kafka's
dynamic configs that have no counterpart here (gregor.known_configs: accepted and stored, documented
as having no effect). A read-only property is refused as Kafka refuses it ("Cannot update these configs
dynamically"); a property Kafka could update and this broker has but cannot yet apply is refused too,
rather than stored and ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gregor.config.broker import BROKER_PROPS, LISTENER_PREFIX, READ_ONLY, BrokerConfig, parse_ip_overrides
from gregor.configdef import CLUSTER_WIDE, PER_BROKER, ConfigError, Prop
from gregor.known_configs import KNOWN_PROPS
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.security.config import listener_overridable
from gregor.security.password_encoder import PasswordDecodeError, encoders_from_config
from gregor.security.tls import TlsSettings, build_server_context, certificate_identity
from gregor.storage.config import CleanerConfig, LogConfig, broker_synonym_props
from gregor.storage.errors import InvalidConfigError

log = logging.getLogger("gregor.config")

# What this broker applies without a restart: the replication throttles of a reassignment; the topic
# configs' broker defaults Kafka's DynamicLogConfig takes (each topic config's finest synonym:
# log.retention.ms, log.segment.bytes, message.max.bytes, ...; the coarser log.retention.hours and
# log.retention.minutes stay read-only, as in Kafka), re-derived for every log without an override;
# and the connection limits (Kafka's DynamicConnectionQuota).
THROTTLES = frozenset({"leader.replication.throttled.rate", "follower.replication.throttled.rate"})
TOPIC_DEFAULTS = frozenset(p.name for p in broker_synonym_props() if p.mode == CLUSTER_WIDE)
CONNECTION_LIMITS = frozenset({"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides"})
# The log cleaner's settings (Kafka's LogCleaner reconfigurable configs): the cleaner threads restart with them.
CLEANER = frozenset({"log.cleaner.threads", "log.cleaner.backoff.ms", "log.cleaner.dedupe.buffer.size",
                     "log.cleaner.io.buffer.size", "log.cleaner.io.max.bytes.per.second"})
# Kafka's dynamic configs Gregor accepts and stores with no effect (gregor.known_configs): nothing to apply,
# so storing them is all there is to do; DescribeConfigs' documentation says they have no effect.
KNOWN_DYNAMIC = frozenset(p.name for p in KNOWN_PROPS if p.mode != READ_ONLY)
KNOWN_PER_BROKER = frozenset(p.name for p in KNOWN_PROPS if p.mode == PER_BROKER)  # never a cluster default (Kafka's rule)
# Thread counts (Kafka's DynamicThreadPool): num.replica.fetchers is applied (the follower's fetcher tasks are
# re-spread, ReplicaFetcherManager.resize); the others are Kafka's pools Gregor does not have (known_configs).
# Each is validated as Kafka validates it: at least half and at most double the current value.
THREAD_POOLS = frozenset({"num.replica.fetchers", "num.io.threads", "num.network.threads",
                          "num.recovery.threads.per.data.dir", "background.threads"})
FETCHERS = frozenset({"num.replica.fetchers"})
# The pace of moves between log dirs (AlterReplicaLogDirs; storage/log_mover.py), read at each copy step.
ALTER_LOG_DIRS_IO = "replica.alter.log.dirs.io.max.bytes.per.second"
APPLIED = THROTTLES | TOPIC_DEFAULTS | CONNECTION_LIMITS | CLEANER | KNOWN_DYNAMIC | FETCHERS | {ALTER_LOG_DIRS_IO}
# A TLS listener's key store and trust store, per broker and only listener-prefixed
# (listener.name.<listener>.ssl.keystore.location, ...): Kafka's reconfigurable SSL configs that apply to
# PEM stores. New connections get the new context (ServerTls.reload); open ones keep theirs.
LISTENER_TLS = frozenset({"ssl.keystore.location", "ssl.key.password", "ssl.keystore.key",
                          "ssl.keystore.certificate.chain", "ssl.truststore.location", "ssl.truststore.certificates"})
# A listener's own connection limit (listener.name.<listener>.max.connections): applied by the socket server
# to new connections on that listener, besides the broker-wide max.connections. Kafka's cluster-level
# listener configs (ClusterLevelListenerConfigs): unlike the TLS stores, they may be set as the cluster default.
LISTENER_CLUSTER_LEVEL = frozenset({"max.connections"})
LISTENER_APPLIED = LISTENER_TLS | LISTENER_CLUSTER_LEVEL


def listener_key(name: str) -> tuple[str, str] | None:
    """(listener, property) of a listener-prefixed name (`listener.name.<l>.<property>`), else None."""
    if not name.startswith(LISTENER_PREFIX):
        return None
    listener, _, key = name[len(LISTENER_PREFIX):].partition(".")
    if not listener or key not in BROKER_PROPS or not listener_overridable(key):
        return None
    return listener.lower(), key


def prop_of(name: str) -> Prop | None:
    """The property behind a broker config name, listener-prefixed or not; None for an unknown name."""
    lk = listener_key(name)
    return BROKER_PROPS[lk[1]] if lk is not None else BROKER_PROPS.get(name)


def applied(name: str) -> bool:
    """Whether this broker applies `name` at runtime."""
    lk = listener_key(name)
    return lk[1] in LISTENER_APPLIED | KNOWN_DYNAMIC if lk is not None else name in APPLIED

# Where a dynamic value comes from: Kafka's ConfigSource ids.
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 2, 3


def validate_alter(configs: Mapping[str, str], current: DynamicBrokerConfig | None = None,
                   default: bool = False) -> dict[str, Any]:
    """Check the dynamic configs an alter would leave (name -> text); returns them parsed. Raises
    KafkaError INVALID_REQUEST for a property that cannot be updated dynamically, INVALID_CONFIG for
    an unknown name or a bad value. With `current` (this broker's view), the topic defaults they
    would give are checked together (log.cleaner.min.compaction.lag.ms against its max, ...): `default`
    says the configs are the cluster default's, else this broker's."""
    static = sorted(n for n in configs if (p := prop_of(n)) is not None and p.mode == READ_ONLY)
    if static:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: {set(static)}")
    unknown = sorted(n for n in configs if prop_of(n) is None)
    if unknown:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown broker configs: {', '.join(unknown)}")
    later = sorted(n for n in configs if not applied(n))
    if later:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically (this broker does "
                                                    f"not apply them at runtime yet): {set(later)}")
    per_broker = sorted(n for n in configs if n in KNOWN_PER_BROKER or (
        (lk := listener_key(n)) is not None and lk[1] not in LISTENER_CLUSTER_LEVEL))
    if default and per_broker:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Cannot update these configs at default cluster level, "
                                                    f"broker id must be specified: {set(per_broker)}")
    parsed: dict[str, Any] = {}
    for name, text in configs.items():
        try:
            prop = prop_of(name)
            assert prop is not None
            parsed[name] = prop.parse(text)
        except ConfigError as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
    if "max.connections.per.ip.overrides" in parsed:
        try:
            parse_ip_overrides(parsed["max.connections.per.ip.overrides"])
        except ConfigError as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
    if current is not None and TOPIC_DEFAULTS & (set(parsed) | set(current.stored(default))):
        mine, dflt = (current._mine, parsed) if default else (parsed, current._default)

        def get(name: str) -> Any:
            if name in mine:
                return mine[name]
            return dflt[name] if name in dflt else current.static.get(name)
        try:
            LogConfig.from_broker(get)
        except InvalidConfigError as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid topic config defaults: {e}") from None
    threads = parsed.get("log.cleaner.threads")
    if current is not None and threads is not None:  # Kafka's LogCleaner.validateReconfiguration
        now = current.get("log.cleaner.threads")
        if threads < now / 2 or threads > now * 2:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Log cleaner threads cannot be reduced to less than half "
                                                       f"or increased to more than double the current value "
                                                       f"{now}: {threads}")
    for name in sorted(THREAD_POOLS & set(parsed)):  # Kafka's DynamicThreadPool.validateReconfiguration
        if current is None:
            break
        new, now = parsed[name], current.get(name)
        if new == now:
            continue
        why = f"Dynamic thread count update validation failed for {name}={new}"
        if new < now / 2:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{why}, value should be at least half the current value {now}")
        if new > now * 2:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"{why}, value should not be greater than double the current value {now}")
    if current is not None and not default:
        _validate_listener_tls(current, parsed)
    return parsed


def _validate_listener_tls(current: DynamicBrokerConfig, parsed: Mapping[str, Any]) -> None:
    """The TLS listeners an alter touches must exist and load their new stores; as in Kafka (without
    ssl.allow.dn.changes / ssl.allow.san.changes) a new key store must keep the certificate's subject
    and subject alternative names, so clients checking them are not broken by a rotation."""
    named = {lk[0] for n in parsed if (lk := listener_key(n)) is not None}
    unknown = sorted(named - {s.name.lower() for s in current.static.listener_specs})
    if unknown:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"There is no listener {unknown[0].upper()} on this broker")
    touched = {lk[0] for n in parsed if (lk := listener_key(n)) is not None and lk[1] in LISTENER_TLS}
    tls_listeners = {s.name.lower(): s.name for s in current.static.listener_specs if s.uses_tls}
    for listener in sorted(touched):
        if listener not in tls_listeners:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"There is no TLS listener {listener.upper()} on this broker")
        name = tls_listeners[listener]
        view = _Overlay(current, {k: v for k, v in parsed.items() if k.startswith(f"{LISTENER_PREFIX}{listener}.")})
        try:
            old, new = TlsSettings.from_config(current, name), TlsSettings.from_config(view, name)
            build_server_context(new, f"listener {name}")
            before, after = certificate_identity(old), certificate_identity(new)
        except ConfigError as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Validation of dynamic config update of SSL keystore/"
                                                       f"truststore failed: {e}") from None
        if before is not None and after is not None and before[0] != after[0]:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Keystore DistinguishedName does not match: existing "
                                                       f"{{{before[0]}}}, new {{{after[0]}}}")
        if before is not None and after is not None and before[1] != after[1]:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Keystore SubjectAltNames do not match: existing "
                                                       f"{before[1]}, new {after[1]}")


class _Overlay:
    """A broker's listener properties with an alter's new values over them (validation only)."""

    def __init__(self, base: DynamicBrokerConfig, new: Mapping[str, Any]) -> None:
        self.base, self.new = base, new

    def listener_get(self, listener: str, key: str, mechanism: str | None = None) -> Any:
        name = f"{LISTENER_PREFIX}{listener.lower()}.{key}"
        return self.new[name] if name in self.new else self.base.listener_get(listener, key, mechanism)


class DynamicBrokerConfig:
    """This broker's view of its dynamic configs over its static ones."""

    def __init__(self, static: BrokerConfig) -> None:
        self.static = static
        self._mine: dict[str, Any] = {}
        self._default: dict[str, Any] = {}
        # Kafka's PasswordEncoder: sensitive dynamic configs are stored encrypted (password_encoder).
        self.encoder, self.old_encoder = encoders_from_config(static.get)

    # --- passwords in the store (Kafka's DynamicBrokerConfig with its PasswordEncoder) ------------------
    @staticmethod
    def sensitive(name: str) -> bool:
        p = prop_of(name)
        return p is not None and p.sensitive

    def decode_password(self, stored: str) -> str:
        """A stored password in clear: the current secret first, then password.encoder.old.secret (before the
        rotation at start rewrote it). PasswordDecodeError when neither opens it or no secret is set."""
        if self.encoder is None:
            raise PasswordDecodeError("password.encoder.secret is not set")
        try:
            return self.encoder.decode(stored)
        except PasswordDecodeError:
            if self.old_encoder is None:
                raise
            return self.old_encoder.decode(stored)

    def decode_stored(self, stored: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        """A stored entity's configs with the passwords in clear, and apart those that cannot be decoded
        (another secret: kept as stored, never shown)."""
        clear, opaque = {}, {}
        for name, text in stored.items():
            if not self.sensitive(name):
                clear[name] = text
                continue
            try:
                clear[name] = self.decode_password(text)
            except PasswordDecodeError:
                opaque[name] = text
        return clear, opaque

    def encode_for_store(self, configs: Mapping[str, str]) -> dict[str, str]:
        """Configs as they are written to the store: passwords encrypted. Kafka's refusal without a secret:
        INVALID_REQUEST "Password encoder secret not configured"."""
        out = dict(configs)
        secret = [n for n in configs if self.sensitive(n)]
        if secret and self.encoder is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Password encoder secret not configured: cannot store the "
                                                        f"dynamic password configs {sorted(secret)}")
        for name in secret:
            assert self.encoder is not None
            out[name] = self.encoder.encode(configs[name])
        return out

    def reencoded(self, stored: Mapping[str, str]) -> dict[str, str] | None:
        """The stored configs with every password the old secret opens encrypted with the new one (Kafka's
        rotation at start with password.encoder.old.secret); None when nothing needs rewriting."""
        if self.encoder is None or self.old_encoder is None:
            return None
        out, changed = dict(stored), False
        for name, text in stored.items():
            if not self.sensitive(name):
                continue
            try:
                self.encoder.decode(text)
                continue  # already under the new secret
            except PasswordDecodeError:
                pass
            try:
                out[name] = self.encoder.encode(self.old_encoder.decode(text))
                changed = True
            except PasswordDecodeError:
                log.error("dynamic password config %s could not be decoded with the old or the new "
                          "password.encoder.secret: left as stored, not applied", name)
        return out if changed else None

    def stored(self, default: bool) -> dict[str, Any]:
        """The parsed dynamic configs of the cluster default (`default`) or of this broker."""
        return dict(self._default if default else self._mine)

    def update(self, default: Mapping[str, str], mine: Mapping[str, str]) -> set[str]:
        """Take the stored dynamic configs (as text); returns the names whose value changed. A stored value
        that does not parse (written by another version) is logged and left out, never fatal."""
        names = set(APPLIED) | set(self._mine) | set(self._default)
        before = {n: self.get(n) for n in names}
        self._default = self._parse(default, "the cluster default")
        self._mine = self._parse(mine, f"broker {self.static.broker_id}")
        names |= set(self._mine) | set(self._default)
        return {n for n in names if self.get(n) != before.get(n)}

    def _parse(self, stored: Mapping[str, str], whose: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, text in stored.items():
            prop = prop_of(name)
            lk = listener_key(name)
            if prop is None or not applied(name) or (whose == "the cluster default" and lk is not None
                                                     and lk[1] not in LISTENER_CLUSTER_LEVEL):
                shown = "[hidden]" if prop is not None and prop.sensitive else text  # passwords are never logged
                log.warning("dynamic config %s=%s of %s is not applied by this broker", name, shown, whose)
                continue
            if prop.sensitive:
                try:
                    text = self.decode_password(text)
                except PasswordDecodeError as e:  # never fatal; the value itself is never logged
                    log.error("dynamic password config %s of %s could not be decoded, ignored: %s", name, whose, e)
                    continue
            try:
                out[name] = prop.parse(text)
            except ConfigError as e:
                log.warning("dynamic config %s of %s ignored: %s", name, whose,
                            "invalid value" if prop.sensitive else e)
        return out

    def cleaner(self) -> CleanerConfig | None:
        """The log cleaner's settings with the dynamic layers applied; None (logged) when invalid."""
        try:
            return CleanerConfig.from_broker(self.get)
        except InvalidConfigError as e:
            log.warning("dynamic log cleaner configs ignored: %s", e)
            return None

    def topic_defaults(self) -> LogConfig | None:
        """Every topic config's broker default with the dynamic layers applied; None (logged) when they
        do not validate together (stored by hand or another version: the previous defaults stay)."""
        try:
            return LogConfig.from_broker(self.get)
        except InvalidConfigError as e:
            log.warning("dynamic topic config defaults ignored: %s", e)
            return None

    def get(self, name: str) -> Any:
        if name in self._mine:
            return self._mine[name]
        if name in self._default:
            return self._default[name]
        lk = listener_key(name)
        return self.static.listener_get(*lk) if lk is not None else self.static.get(name)

    def listener_get(self, listener: str, key: str, mechanism: str | None = None) -> Any:
        """A listener's property with the dynamic listener-prefixed values first (TlsSettings.from_config)."""
        name = f"{LISTENER_PREFIX}{listener.lower()}.{key}"
        if name in self._mine:
            return self._mine[name]
        if name in self._default:
            return self._default[name]
        return self.static.listener_get(listener, key, mechanism)

    def listener_own(self, listener: str, key: str) -> Any:
        """A listener's own (listener-prefixed) value of `key`, dynamic or static; None when only the
        broker-wide property applies (listener.name.<l>.max.connections: no limit of the listener's own)."""
        name = f"{LISTENER_PREFIX}{listener.lower()}.{key}"
        if name in self._mine:
            return self._mine[name]
        if name in self._default:
            return self._default[name]
        return self.static.listener_overrides.get((listener.lower(), "", key))

    def listener_connection_limits(self) -> dict[str, int]:
        """Each listener's own max.connections, where one is set (lower-case listener name -> limit)."""
        out = {}
        for spec in self.static.listener_specs:
            v = self.listener_own(spec.name, "max.connections")
            if v is not None:
                out[spec.name.lower()] = v
        return out

    def static_value(self, name: str) -> Any:
        """`name` as server.properties (or the property's default) sets it, beneath the dynamic layers:
        what DescribeConfigs shows as its static synonym."""
        return self.static.get(name)

    def set_statically(self, name: str) -> bool:
        """Whether server.properties sets `name` (DescribeConfigs' STATIC_BROKER_CONFIG source)."""
        return name in self.static.explicit

    def dynamic_names(self) -> set[str]:
        """Every name set in a dynamic layer (the listener-prefixed ones are not in BROKER_PROPS)."""
        return set(self._mine) | set(self._default)

    def layers(self, name: str) -> list[tuple[int, Any]]:
        """(ConfigSource, value) of each dynamic layer that sets `name`, finest first (DescribeConfigs'
        synonyms, before the static ones)."""
        out: list[tuple[int, Any]] = []
        if name in self._mine:
            out.append((DYNAMIC_BROKER_CONFIG, self._mine[name]))
        if name in self._default:
            out.append((DYNAMIC_DEFAULT_BROKER_CONFIG, self._default[name]))
        return out
