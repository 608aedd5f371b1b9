"""A broker authenticating to its peers over a SASL inter-broker listener (the hook ClientSecurity calls).

As in Kafka, the mechanism is `sasl.mechanism.inter.broker.protocol` and the broker's own credentials
are the `username` and `password` options of that mechanism's JAAS config on the inter-broker listener
(`listener.name.<l>.<mechanism>.sasl.jaas.config`, e.g. PlainLoginModule's `username="admin"
password="admin-secret"` next to its `user_NAME` entries, or ScramLoginModule's). PLAIN and SCRAM are
supported on this side; the SCRAM exchange checks the peer's server signature, so a broker never sends
requests to an impostor that merely accepted it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gregor.configdef import ConfigError
from gregor.protocol.apis import BY_KEY
from gregor.protocol.errors import ErrorCode
from gregor.security.sasl.client import SaslClientError, sasl_client
from gregor.security.sasl.jaas import JaasConfigError, parse_single_module
from gregor.security.sasl.scram import MECHANISMS as SCRAM_MECHANISMS

RawRequest = Callable[[Any, int, Any], Awaitable[Any]]
SASL_HANDSHAKE, SASL_AUTHENTICATE = BY_KEY[17], BY_KEY[36]
CLIENT_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)


INTER_BROKER = "sasl.mechanism.inter.broker.protocol"
CONTROLLER = "sasl.mechanism.controller.protocol"  # KRaft: how nodes log in on the controller listener


def inter_broker_credentials(config: Any, listener: str, mechanism_property: str = INTER_BROKER
                             ) -> tuple[str, str, str]:
    """(mechanism, username, password) this broker logs in to its peers with; ConfigError if it cannot.
    `mechanism_property` names the mechanism: the inter-broker one, or the controller listener's."""
    what = "controller" if mechanism_property == CONTROLLER else "inter-broker"
    mech = str(config.get(mechanism_property)).strip().upper()
    if mech not in CLIENT_MECHANISMS:
        raise ConfigError(f"{mechanism_property} is {mech}, which Gregor brokers cannot log in with ({what} listener "
                          f"{listener} uses SASL): use one of {', '.join(CLIENT_MECHANISMS)}")
    enabled = [str(m).strip().upper() for m in config.listener_get(listener, "sasl.enabled.mechanisms") or []]
    if mech not in enabled:
        raise ConfigError(f"{mechanism_property} {mech} is not enabled on the {what} listener "
                          f"{listener} (its sasl.enabled.mechanisms: {', '.join(enabled)})")
    text = config.listener_get(listener, "sasl.jaas.config", mech)
    prop = f"listener.name.{listener.lower()}.{mech.lower()}.sasl.jaas.config"
    if not text:
        raise ConfigError(f"the {what} listener {listener} uses SASL {mech}: set {prop} with the node's own "
                          f"username and password")
    try:
        options = parse_single_module(str(text)).options
    except JaasConfigError as e:
        raise ConfigError(f"{prop}: {e}") from None
    user, password = options.get("username"), options.get("password")
    if not user or password is None:
        raise ConfigError(f"{prop} has no username and password options: the broker logs in to its peers with them")
    return mech, user, password


def inter_broker_authenticator(config: Any, listener: str, mechanism_property: str = INTER_BROKER
                               ) -> Callable[[RawRequest], Awaitable[None]]:
    """What ClientSecurity runs on each new inter-broker (or controller) connection before its first request."""
    mech, user, password = inter_broker_credentials(config, listener, mechanism_property)

    async def authenticate(request: RawRequest) -> None:
        resp = await request(SASL_HANDSHAKE, 1, {"mechanism": mech})
        if resp.error_code != ErrorCode.NONE:
            raise SaslClientError(f"SaslHandshake for {mech} refused: {ErrorCode(resp.error_code).name} "
                                  f"(the peer enables {', '.join(resp.mechanisms) or 'nothing'})")
        client = sasl_client(mech, user, password)
        token: bytes | None = client.first_message()
        while token is not None:
            r = await request(SASL_AUTHENTICATE, 2, {"auth_bytes": token})
            if r.error_code != ErrorCode.NONE:
                raise SaslClientError(f"{ErrorCode(r.error_code).name}: {r.error_message}")
            token = client.evaluate(bytes(r.auth_bytes or b""))

    return authenticate
