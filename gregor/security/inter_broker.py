"""How this broker connects to its peers: the inter-broker listener's security protocol, with its own
credentials (Kafka's `inter.broker.listener.name` / `security.inter.broker.protocol`).

Replication fetches, transaction markers and controlled-shutdown requests all go through BrokerClient,
which takes a `ClientSecurity`: a TLS client context (trusting the listener's trust store, presenting the
listener's own key store for peers that require client certificates, checking the peer's host name when
`ssl.endpoint.identification.algorithm` is https) and, on SASL listeners, the mechanism and credentials
the broker authenticates with before its first request.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gregor.security.tls import TlsSettings, build_client_context

if TYPE_CHECKING:
    from gregor.security.listeners import BrokerListeners

# Sends one request on a connection that is not authenticated yet: (api, version, body) -> response.
RawRequest = Callable[[Any, int, Any], Awaitable[Any]]


@dataclass
class ClientSecurity:
    listener: str
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    # Set for SASL listeners: runs the SASL exchange on a fresh connection (raises on failure).
    authenticate: Callable[[RawRequest], Awaitable[None]] | None = None

    @classmethod
    def from_config(cls, config: BrokerListeners) -> ClientSecurity:
        return cls.for_listener(config, config.inter_broker_listener, "inter-broker listener")

    @classmethod
    def for_listener(cls, config: BrokerListeners, name: str, what: str, controller: bool = False) -> ClientSecurity:
        """How to connect to peers on listener `name` with this node's own credentials for it (the
        inter-broker listener's, or with `controller` a KRaft node's controller listener's, whose SASL
        mechanism is `sasl.mechanism.controller.protocol`)."""
        spec = config.listener(name)
        ctx = None
        if spec.uses_tls:
            ctx = build_client_context(TlsSettings.from_config(config, name), f"{what} {name}")
        auth = None
        if spec.uses_sasl:
            from gregor.security.sasl.inter_broker import CONTROLLER, INTER_BROKER, inter_broker_authenticator

            auth = inter_broker_authenticator(config, name, CONTROLLER if controller else INTER_BROKER)
        return cls(name, spec.protocol, ctx, auth)
