"""The schema registry a broker runs beside its listeners, and the schema checks of its topics.

With `schema.registry.listeners` set, the broker runs a `SchemaRegistry` (gregor.schema_registry.server)
on its own event loop: started once the broker listens (in the background: it reads `_schemas` through
the broker's own inter-broker listener, with the broker's own credentials, as soon as the logs serve),
stopped first at shutdown (it leaves its group, so another instance takes over at once). It uses the
broker's authorizer, so subjects are guarded by the cluster's ACLs as they stand; with
`schema.registry.authentication.method=BASIC` and no user list of its own, the users are the broker's:
the PLAIN users of its SASL listeners and the SCRAM users of the cluster (`gregor users`). A start that
fails (the topic cannot be read within schema.registry.init.timeout.ms, a port taken) is logged and
tried again; the broker serves Kafka meanwhile.

Schema-checked topics (confluent.key/value.schema.validation) look ids up in `confluent.schema.registry.url`
when it is set, else in this registry, read directly (gregor.schema_registry.sources). The checks are
handed to the Produce path's state (`ProduceState.schema_checks`). Without either registry there are no
checks, and a schema-checked topic refuses records with a message saying so.

The registry needs the `registry` extra (aiohttp, avro, ...): it is imported only when configured.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gregor.api.produce_state import ProduceState
from gregor.config import BrokerConfig, ConfigError
from gregor.config.schema_registry import RegistryConfig
from gregor.schema_registry.checks import SchemaCheckSettings
from gregor.security.authorizer import AclAuthorizer
from gregor.security.inter_broker import ClientSecurity
from gregor.security.sasl.authenticator import ListenerSasl
from gregor.security.sasl.mechanism import SaslAuthenticationError, SaslError
from gregor.security.sasl.scram import MECHANISMS as SCRAM_MECHANISMS
from gregor.security.sasl.scram import ScramCredential, credential_from_password

if TYPE_CHECKING:
    from gregor.schema_registry.checks import SchemaChecks
    from gregor.schema_registry.kafka import KafkaClient
    from gregor.schema_registry.server import SchemaRegistry

log = logging.getLogger("gregor.broker.schema_registry")

_RETRY_S = (1.0, 2.0, 5.0, 10.0, 30.0)
STOP_TIMEOUT_S = 10.0


class BrokerUsers:
    """HTTP basic credentials checked against the broker's own SASL users (see the module docstring)."""

    def __init__(self, sasl_listeners: dict[str, ListenerSasl],
                 scram_credential_of: Callable[[str, str], ScramCredential | None]) -> None:
        self.plain = [ls.servers["PLAIN"] for ls in sasl_listeners.values() if "PLAIN" in ls.servers]
        self.scram_credential_of = scram_credential_of

    async def check(self, user: str, password: str) -> bool:
        token = f"\x00{user}\x00{password}".encode()
        for new_server in self.plain:
            server = new_server()
            try:
                server.evaluate(token, int(time.time() * 1000))
            except (SaslAuthenticationError, SaslError):
                continue
            if server.complete:
                return True
        for name, mech in SCRAM_MECHANISMS.items():
            cred = self.scram_credential_of(name, user)
            if cred is None:
                continue
            # PBKDF2 of the stored iteration count: milliseconds, off the loop.
            got = await asyncio.to_thread(credential_from_password, mech, password, cred.salt, cred.iterations)
            if hmac.compare_digest(got.stored_key, cred.stored_key) and hmac.compare_digest(got.server_key,
                                                                                            cred.server_key):
                return True
        return False


class BrokerSchemaRegistry:
    """The broker's registry (None configured: nothing runs) and its schema checks; see the module docstring."""

    def __init__(self, config: BrokerConfig, produce: ProduceState, authorizer: AclAuthorizer | None,
                 sasl_listeners: dict[str, ListenerSasl], entity_configs: Callable[[str, str], dict[str, str]],
                 client_security: ClientSecurity) -> None:
        self.registry_config = RegistryConfig.from_config(config)  # a bad value is a startup error
        self.runs = bool(self.registry_config.listeners)
        self.authorizer = authorizer
        self.client_security = client_security
        self.registry: SchemaRegistry | None = None  # once started
        self._kafka: KafkaClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._users: BrokerUsers | None = None
        rc = self.registry_config
        if self.runs and rc.authorizer_class_name and authorizer is None:
            raise ConfigError("schema.registry.authorizer.class.name is set but the broker has no authorizer: a registry "
                              "inside the broker guards subjects with the broker's own (set authorizer.class.name)")
        if self.runs and rc.authentication_method == "BASIC" and not (rc.basic_auth_jaas_config
                                                                      or rc.basic_auth_sasl_mechanism):
            from gregor.security.sasl.listener import scram_credential_lookup

            self._users = BrokerUsers(sasl_listeners, scram_credential_lookup(entity_configs))
        settings = SchemaCheckSettings.from_config(config)
        self.checks: SchemaChecks | None = None
        if settings.registry_urls or self.runs:
            from gregor.schema_registry.checks import SchemaChecks
            from gregor.schema_registry.sources import HttpSource, LocalSource

            source = HttpSource(settings.registry_urls, settings.user_info, settings.truststore,
                                settings.timeout_ms / 1000) if settings.registry_urls else LocalSource(lambda: self.registry)
            self.checks = SchemaChecks(settings, source)
            produce.schema_checks = self.checks

    def start(self, host: str, port: int) -> None:
        """Start the registry in the background, reading `_schemas` through the broker's listener host:port."""
        if self.runs:
            self._task = asyncio.create_task(self._run(host, port), name="schema-registry-start")

    async def _run(self, host: str, port: int) -> None:
        from gregor.schema_registry.kafka import KafkaClient
        from gregor.schema_registry.server import SchemaRegistry

        rc = self.registry_config
        attempt = 0
        while True:
            kafka = KafkaClient(f"{host}:{port}", client_id="schema-registry", security=self.client_security,
                                request_timeout_s=rc.request_timeout_ms / 1000)
            registry = SchemaRegistry(rc, kafka, authorizer=self.authorizer, credentials=self._users)
            try:
                await registry.start()
            except asyncio.CancelledError:
                await self._discard(registry, kafka)
                raise
            except Exception as e:  # whatever stopped it, the broker serves on and the start is tried again
                wait = _RETRY_S[min(attempt, len(_RETRY_S) - 1)]
                log.error("The schema registry could not start (trying again in %.0f s): %s", wait, e)
                await self._discard(registry, kafka)
                await asyncio.sleep(wait)
                attempt += 1
                continue
            self.registry, self._kafka = registry, kafka
            return

    @staticmethod
    async def _discard(registry: SchemaRegistry, kafka: KafkaClient) -> None:
        try:
            await registry.stop()
        finally:
            await kafka.close()

    async def stop(self) -> None:
        """At broker shutdown, before the listeners close: the registry leaves its group and stops serving."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.registry is not None and self._kafka is not None:
            registry, kafka, self.registry = self.registry, self._kafka, None
            try:
                await asyncio.wait_for(self._discard(registry, kafka), STOP_TIMEOUT_S)
            except (TimeoutError, Exception) as e:  # a stop that hangs must not hold up the broker's
                log.warning("The schema registry did not stop cleanly: %r", e)
        if self.checks is not None:
            await self.checks.close()
