"""One schema registry instance: the `_schemas` store, the primary election and the REST API, started and
stopped together on the running event loop.

It is given a KafkaClient for the loop it runs on, so the same class serves the standalone process
(`gregor schema-registry`) and a broker that runs the registry beside its own listeners; the broker can
also hand it its own authorizer and credential check instead of the ones built from the registry's
properties.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from gregor.config.schema_registry import RegistryConfig
from gregor.configdef import ConfigError
from gregor.schema_registry import errors
from gregor.schema_registry.auth import AclRefresher, BasicAuth, CredentialChecker, JaasUsers, KafkaLogin, SubjectAcls
from gregor.schema_registry.election import Identity, PrimaryElector
from gregor.schema_registry.http_api import FORWARDED, RegistryApi
from gregor.schema_registry.kafka import KafkaClient, KafkaRequestError
from gregor.schema_registry.reads import RegistryReads
from gregor.schema_registry.schemas import Schemas
from gregor.schema_registry.state import RegistryState
from gregor.schema_registry.store import SchemaStore
from gregor.schema_registry.writes import RegistryWrites
from gregor.security.authorizer import AclAuthorizer, create_authorizer
from gregor.security.tls import TlsSettings, build_server_context

log = logging.getLogger("gregor.schema_registry")

_FORWARD_HEADERS = ("Content-Type", "Accept", "Authorization")


class SchemaRegistry:
    def __init__(self, config: RegistryConfig, kafka: KafkaClient, *, authorizer: AclAuthorizer | None = None,
                 credentials: CredentialChecker | None = None) -> None:
        if not config.listeners:
            raise ConfigError("schema.registry.listeners is empty: the registry has nowhere to listen")
        self.config = config
        self.kafka = kafka
        self.state = RegistryState()
        self.store = SchemaStore(kafka, config.topic, self.state, timeout_s=config.kafkastore_timeout_ms / 1000,
                                 may_repair=lambda: self.elector is not None and self.elector.is_primary)
        self.schemas = Schemas(self.state, cache_size=config.schema_cache_size, max_references=config.max_references)
        self.reads = RegistryReads(config, self.state, self.schemas)
        self.writes = RegistryWrites(config, self.state, self.schemas, self.reads, self.store)
        self._authorizer = authorizer
        self._credentials = credentials
        self.elector: PrimaryElector | None = None
        self._acl_refresher: AclRefresher | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.urls: list[str] = []  # the listeners, with the ports they bound

    @property
    def url(self) -> str:
        """The URL other instances forward writes to."""
        return self.config.advertised_url or self.urls[0]

    # --- start and stop -----------------------------------------------------------------------------
    async def start(self) -> None:
        c = self.config
        try:
            await asyncio.wait_for(self._load(), c.init_timeout_ms / 1000)
        except TimeoutError:
            raise errors.timeout(f"The schema registry could not read {c.topic} to its end within "
                                 f"{c.init_timeout_ms} ms (schema.registry.init.timeout.ms)") from None
        api = RegistryApi(self.reads, self.writes, self._forward, max_request_bytes=c.max_request_bytes,
                          max_inflight=c.max_inflight_requests, basic_auth=self._basic_auth(), acls=await self._acls(),
                          realm=c.authentication_realm)
        self._runner = web.AppRunner(api.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        for listener in c.listeners:
            await self._listen(listener)
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=c.request_timeout_ms / 1000))
        self.elector = PrimaryElector(self.kafka, c.group_id, Identity(self.url, c.leader_eligibility),
                                      session_timeout_ms=c.session_timeout_ms,
                                      heartbeat_interval_ms=c.heartbeat_interval_ms)
        self.elector.start()
        log.info("Schema registry listening on %s (topic %s, %d subjects)", ", ".join(self.urls), c.topic,
                 len(self.state.subjects))

    async def _load(self) -> None:
        await self.store.ensure_topic(self.config.topic_replication_factor)
        self.store.start()
        await self.store.catch_up(self.config.init_timeout_ms / 1000)

    async def _listen(self, listener: str) -> None:
        assert self._runner is not None
        parts = urlsplit(listener)
        host, port = parts.hostname or "0.0.0.0", parts.port or 0
        ctx = self._server_tls() if parts.scheme.lower() == "https" else None
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        sock.listen(128)
        sock.setblocking(False)
        site = web.SockSite(self._runner, sock, ssl_context=ctx)
        await site.start()
        bound = sock.getsockname()[1]
        shown = socket.gethostname() if host in ("0.0.0.0", "::") else host
        shown = f"[{shown}]" if ":" in shown else shown
        self.urls.append(f"{parts.scheme.lower()}://{shown}:{bound}")

    def _server_tls(self) -> ssl.SSLContext:
        c = self.config
        settings = TlsSettings(c.ssl_keystore_location, c.ssl_key_password, None, None, c.ssl_truststore_location, None,
                               c.ssl_client_auth, tuple(c.ssl_enabled_protocols), tuple(c.ssl_cipher_suites), "DEFAULT", "")
        return build_server_context(settings, "schema registry https listener")

    def _basic_auth(self) -> BasicAuth | None:
        c = self.config
        if c.authentication_method != "BASIC":
            return None
        checker = self._credentials
        if checker is None and c.basic_auth_jaas_config:
            checker = JaasUsers(c.basic_auth_jaas_config)
        if checker is None and c.basic_auth_sasl_mechanism:
            security = self.kafka.security
            if security is None or "SASL" not in security.protocol:
                raise ConfigError("schema.registry.basic.auth.sasl.mechanism checks users by logging in to the cluster: "
                                  "the registry's connection to it must use SASL_PLAINTEXT or SASL_SSL")
            checker = KafkaLogin(self.kafka.bootstrap[0], c.basic_auth_sasl_mechanism, security,
                                 c.request_timeout_ms / 1000)
        assert checker is not None  # RegistryConfig requires one of the two
        return BasicAuth(checker, c.basic_auth_principal_mapping, cache_size=c.basic_auth_cache_size,
                         cache_ms=c.basic_auth_cache_ms)

    async def _acls(self) -> SubjectAcls | None:
        c = self.config
        authorizer = self._authorizer
        if authorizer is None and c.authorizer_class_name:
            authorizer = create_authorizer(c.authorizer_class_name, c.super_users, c.allow_everyone_if_no_acl_found)
            assert authorizer is not None
            self._acl_refresher = AclRefresher(self.kafka.send, authorizer, c.acl_refresh_ms)
            try:
                await self._acl_refresher.refresh()
            except (ConnectionError, KafkaRequestError, TimeoutError) as e:
                raise ConfigError(f"schema.registry.authorizer.class.name is set but the cluster's ACLs cannot be read: "
                                  f"{e}") from None
            self._acl_refresher.start()
        return SubjectAcls(authorizer, c.topic) if authorizer is not None else None

    async def stop(self) -> None:
        if self.elector is not None:
            await self.elector.stop()
        if self._acl_refresher is not None:
            await self._acl_refresher.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()
        await self.store.stop()

    # --- writes on the primary ----------------------------------------------------------------------
    async def _forward(self, request: web.Request) -> web.StreamResponse | None:
        """None when this instance is the primary; else the primary's answer to the same request."""
        assert self.elector is not None and self._session is not None
        if self.elector.is_primary:
            return None
        timeout_s = self.config.kafkastore_timeout_ms / 1000
        primary = await self.elector.wait_primary(timeout_s)
        if self.elector.is_primary:
            return None
        if primary is None or primary.url == self.url or request.headers.get(FORWARDED):
            raise errors.unknown_leader("Unknown leader: no schema registry primary is elected at the moment; retry "
                                        "the request")
        headers = {h: request.headers[h] for h in _FORWARD_HEADERS if h in request.headers}
        headers[FORWARDED] = self.url
        try:
            async with self._session.request(request.method, primary.url.rstrip("/") + request.path_qs,
                                             data=await request.read(), headers=headers) as resp:
                body = await resp.read()
                status, kind = resp.status, resp.content_type
        except (aiohttp.ClientError, TimeoutError) as e:
            raise errors.forwarding_failed(f"Error while forwarding the request to the primary {primary.url}: "
                                           f"{e!r}") from None
        if status < 300:
            await self.store.catch_up()
        return web.Response(body=body, status=status, content_type=kind)
