"""From broker config to what each SASL listener serves (`ListenerSasl`), checked at startup.

Kafka's lookup order for a listener `L` and mechanism `M` is kept (BrokerConfig.listener_get):
`listener.name.l.m.KEY`, then `listener.name.l.KEY`, then `KEY`. So:

- `listener.name.l.sasl.enabled.mechanisms` (default `sasl.enabled.mechanisms`, Kafka's GSSAPI);
- `listener.name.l.plain.sasl.jaas.config` with `user_NAME="password"` options: PLAIN's users;
- `listener.name.l.oauthbearer.sasl.jaas.config`: the OAUTHBEARER validator's options;
- `listener.name.l.oauthbearer.sasl.server.callback.handler.class`: the validator (see oauthbearer);
- `listener.name.l.M.connections.max.reauth.ms` and `connection.failed.authentication.delay.ms`.

Everything that can be wrong is found here, before the broker listens: a SASL listener whose
enabled mechanisms are all ones Gregor does not implement (GSSAPI) cannot authenticate anyone,
so it is a startup error, as is a PLAIN listener without a JAAS config (Kafka refuses to start
without one too) or a JAAS text that does not parse.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from gregor.configdef import ConfigError
from gregor.security.principal import sanitize
from gregor.security.sasl.authenticator import IMPLEMENTED_MECHANISMS, ListenerSasl
from gregor.security.sasl.jaas import JaasConfigError, parse_single_module
from gregor.security.sasl.mechanism import SaslServer
from gregor.security.sasl.oauthbearer import OAuthBearerServer, load_validator_factory
from gregor.security.sasl.plain import PlainServer, users_from_jaas_options
from gregor.security.sasl.scram import MECHANISMS as SCRAM_MECHANISMS
from gregor.security.sasl.scram import ScramCredential, ScramServer

log = logging.getLogger("gregor.sasl")


class ListenerConfig(Protocol):
    def listener_get(self, listener_name: str, key: str, mechanism: str | None = None) -> Any: ...


def scram_credential_lookup(entity_configs: Callable[[str, str], dict[str, str]]) -> Callable[[str, str], ScramCredential | None]:
    """(mechanism, user) -> the stored credential, read from the user entity configs
    (`metadata_cache.entity_configs`) at each authentication, so a credential altered on any
    broker is used by the next login everywhere. A malformed stored value counts as none."""

    def lookup(mechanism: str, user: str) -> ScramCredential | None:
        text = entity_configs("users", sanitize(user)).get(mechanism)
        if not text:
            return None
        try:
            return ScramCredential.from_config(text)
        except ValueError as e:
            log.warning("ignoring the malformed %s credential of user %s: %s", mechanism, user, e)
            return None

    return lookup


def _jaas_options(config: ListenerConfig, listener_name: str, mechanism: str, required: bool) -> dict[str, str]:
    text = config.listener_get(listener_name, "sasl.jaas.config", mechanism)
    if not text:
        if required:
            raise ConfigError(
                f"listener {listener_name} enables SASL mechanism {mechanism} but has no JAAS config: set "
                f"listener.name.{listener_name.lower()}.{mechanism.lower()}.sasl.jaas.config")
        return {}
    try:
        return dict(parse_single_module(str(text)).options)
    except JaasConfigError as e:
        raise ConfigError(f"listener.name.{listener_name.lower()}.{mechanism.lower()}.sasl.jaas.config: {e}") from None


def build_listener_sasl(config: ListenerConfig, listener_name: str,
                        scram_credential_of: Callable[[str, str], ScramCredential | None]) -> ListenerSasl:
    """What `listener_name` serves. Raises ConfigError for anything that cannot work."""
    enabled = [str(m).strip().upper() for m in config.listener_get(listener_name, "sasl.enabled.mechanisms") or []]
    usable = [m for m in enabled if m in IMPLEMENTED_MECHANISMS]
    if not usable:
        raise ConfigError(
            f"listener {listener_name} uses SASL but none of its enabled mechanisms ({', '.join(enabled) or 'none'}) is "
            f"implemented by Gregor ({', '.join(IMPLEMENTED_MECHANISMS)}); set "
            f"listener.name.{listener_name.lower()}.sasl.enabled.mechanisms (or sasl.enabled.mechanisms)")
    skipped = [m for m in enabled if m not in IMPLEMENTED_MECHANISMS]
    if skipped:
        log.warning("listener %s: SASL mechanisms %s are not implemented and will be refused", listener_name,
                    ", ".join(skipped))
    servers: dict[str, Callable[[], SaslServer]] = {}
    for mech in usable:
        if mech == "PLAIN":
            users = users_from_jaas_options(_jaas_options(config, listener_name, mech, required=True))
            servers[mech] = lambda users=users: PlainServer(users.get)  # type: ignore[misc]
        elif mech in SCRAM_MECHANISMS:
            sm = SCRAM_MECHANISMS[mech]
            servers[mech] = lambda sm=sm: ScramServer(sm, lambda user: scram_credential_of(sm.mechanism_name, user))  # type: ignore[misc]
        else:  # OAUTHBEARER
            options = _jaas_options(config, listener_name, mech, required=False)
            handler = config.listener_get(listener_name, "sasl.server.callback.handler.class", mech)
            try:
                validate = load_validator_factory(handler)(options)
            except ValueError as e:
                raise ConfigError(f"listener {listener_name}, OAUTHBEARER: {e}") from None
            servers[mech] = lambda validate=validate: OAuthBearerServer(validate)  # type: ignore[misc]
    reauth = {m: int(config.listener_get(listener_name, "connections.max.reauth.ms", m) or 0) for m in usable}
    delay = int(config.listener_get(listener_name, "connection.failed.authentication.delay.ms") or 0)
    return ListenerSasl(listener_name, tuple(usable), servers, reauth, delay)


class _SaslConfig(ListenerConfig, Protocol):
    @property
    def listener_specs(self) -> Any: ...


def build_sasl_listeners(config: _SaslConfig, entity_configs: Callable[[str, str], dict[str, str]]) -> dict[str, ListenerSasl]:
    """What every SASL listener serves, by listener name; raises ConfigError (a startup error) when one cannot work.
    `entity_configs` is the metadata cache's (SCRAM credentials are read from it at each login)."""
    lookup = scram_credential_lookup(entity_configs)
    out = {spec.name: build_listener_sasl(config, spec.name, lookup) for spec in config.listener_specs if spec.uses_sasl}
    inter = getattr(config, "inter_broker_listener", None)
    if inter in out:  # the broker's own login to its peers must work too (checked now, used on first connection)
        from gregor.security.sasl.inter_broker import inter_broker_credentials

        inter_broker_credentials(config, inter)
    return out
