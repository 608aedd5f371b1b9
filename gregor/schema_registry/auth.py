"""Who is calling, and what they may do: HTTP basic authentication mapped to Kafka principals, and
subject-level permissions from Kafka ACLs.

Users are the cluster's users, checked as the broker checks them: a PlainLoginModule JAAS text with
`user_NAME="password"` options (checked by the broker's own SASL/PLAIN server code), or a login to the
cluster itself over SASL (PLAIN or SCRAM) with the caller's credentials, so the SCRAM users an operator
manages with `gregor users` are the registry's users too. Accepted credentials are remembered, as a
salted hash and for a bounded time and count, so a client does not cost a login per request. A user acts
as the principal `User:<name>` unless `schema.registry.basic.auth.principal.mapping` names another.

ACL resources (docs/schema-registry.md): subject S is the TOPIC resource `<topic>:S` (`_schemas:S` with
the default topic; no real topic name contains ':'), so LITERAL and PREFIXED ACLs work as for topics
(`_schemas:orders-` prefixed covers every subject starting with orders-, `_schemas:` all subjects).
Operations: READ to read a subject's schemas (and a schema by id: READ on one subject holding it),
WRITE to register, DELETE to delete, DESCRIBE_CONFIGS / ALTER_CONFIGS for its compatibility level and
mode; DESCRIBE (implied by the others) to see it listed. The global level and mode are the CLUSTER
resource's DESCRIBE_CONFIGS / ALTER_CONFIGS.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import hashlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from gregor.client.broker_client import BrokerClient, BrokerConnectionError
from gregor.protocol.apis import BY_KEY
from gregor.protocol.errors import ErrorCode
from gregor.protocol.schema import Api, Struct
from gregor.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from gregor.security.authorizer import AclAuthorizer
from gregor.security.inter_broker import ClientSecurity, RawRequest
from gregor.security.sasl.client import SaslClientError, sasl_client
from gregor.security.sasl.jaas import parse_single_module
from gregor.security.sasl.mechanism import SaslAuthenticationError, SaslError
from gregor.security.sasl.plain import PlainServer, users_from_jaas_options

log = logging.getLogger("gregor.schema_registry.auth")

ANONYMOUS = "User:ANONYMOUS"
SASL_HANDSHAKE, SASL_AUTHENTICATE, DESCRIBE_ACLS = BY_KEY[17], BY_KEY[36], BY_KEY[29]


class CredentialChecker(Protocol):
    async def check(self, user: str, password: str) -> bool: ...


class JaasUsers:
    """The user_NAME="password" options of a PlainLoginModule entry, checked by the SASL/PLAIN server."""

    def __init__(self, jaas_text: str) -> None:
        self._users = users_from_jaas_options(parse_single_module(jaas_text).options)

    async def check(self, user: str, password: str) -> bool:
        server = PlainServer(self._users.get)
        try:
            server.evaluate(f"\x00{user}\x00{password}".encode(), int(time.time() * 1000))
        except (SaslAuthenticationError, SaslError):
            return False
        return server.complete


class KafkaLogin:
    """Checks credentials by logging in to a broker with them over SASL (and closing the connection)."""

    def __init__(self, address: tuple[str, int], mechanism: str, security: ClientSecurity, timeout_s: float) -> None:
        self.address = address
        self.mechanism = mechanism
        self.security = security
        self.timeout_s = timeout_s
        # Logins in flight: credentials nobody has checked yet cost a connection each, so a flood of wrong
        # passwords waits here instead of opening connections to the broker without end.
        self._logins = asyncio.Semaphore(8)

    async def check(self, user: str, password: str) -> bool:
        async with self._logins:
            return await self._login(user, password)

    async def _login(self, user: str, password: str) -> bool:
        mech = self.mechanism

        async def authenticate(request: RawRequest) -> None:
            resp = await request(SASL_HANDSHAKE, 1, {"mechanism": mech})
            if resp.error_code != ErrorCode.NONE:
                raise SaslClientError(f"the cluster does not enable SASL {mech}")
            client = sasl_client(mech, user, password)
            token: bytes | None = client.first_message()
            while token is not None:
                r = await request(SASL_AUTHENTICATE, 2, {"auth_bytes": token})
                if r.error_code != ErrorCode.NONE:
                    raise SaslClientError(str(r.error_message))
                token = client.evaluate(bytes(r.auth_bytes or b""))

        security = ClientSecurity(self.security.listener, self.security.protocol, self.security.ssl_context, authenticate)
        conn = BrokerClient(self.address[0], self.address[1], "schema-registry-login", security=security,
                            connect_timeout_s=self.timeout_s)
        try:
            await conn.connect()
            return True
        except BrokerConnectionError as e:
            log.info("Basic authentication of %s against the cluster failed: %s", user, e)
            return False
        finally:
            conn.close()


class Unauthorized(Exception):
    """No credentials, or wrong ones."""


class BasicAuth:
    def __init__(self, checker: CredentialChecker, principal_mapping: list[str], *, cache_size: int,
                 cache_ms: int) -> None:
        self.checker = checker
        self.principals = {}
        for pair in principal_mapping:
            user, _, principal = pair.partition("=")
            self.principals[user.strip()] = principal.strip()
        self.cache_size = cache_size
        self.cache_ms = cache_ms
        self._salt = secrets.token_bytes(16)
        self._accepted: collections.OrderedDict[bytes, float] = collections.OrderedDict()
        self._checking: dict[bytes, asyncio.Future[bool]] = {}

    def principal_of(self, user: str) -> str:
        return self.principals.get(user) or f"User:{user}"

    async def principal(self, header: str | None) -> str:
        """The principal of an `Authorization: Basic ...` header; raises Unauthorized."""
        if not header or not header[:6].lower() == "basic ":
            raise Unauthorized("missing credentials")
        try:
            user, sep, password = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise Unauthorized("malformed credentials") from None
        if not sep or not user:
            raise Unauthorized("malformed credentials")
        key = hashlib.sha256(self._salt + user.encode() + b"\x00" + password.encode()).digest()
        now = time.monotonic()
        expires = self._accepted.get(key)
        if expires is not None and expires > now:
            return self.principal_of(user)
        pending = self._checking.get(key)
        if pending is None:  # concurrent requests with the same credentials share one check
            pending = asyncio.ensure_future(self.checker.check(user, password))
            self._checking[key] = pending
            pending.add_done_callback(lambda _f: self._checking.pop(key, None))
        if not await asyncio.shield(pending):
            raise Unauthorized("invalid credentials")
        if self.cache_size and self.cache_ms:
            self._accepted[key] = now + self.cache_ms / 1000
            self._accepted.move_to_end(key)
            while len(self._accepted) > self.cache_size:
                self._accepted.popitem(last=False)
        return self.principal_of(user)


class SubjectAcls:
    """Subject and global permissions, decided by an AclAuthorizer (the broker's, or one fed by AclRefresher)."""

    def __init__(self, authorizer: AclAuthorizer, topic: str) -> None:
        self.authorizer = authorizer
        self.topic = topic

    def resource(self, subject: str) -> str:
        return f"{self.topic}:{subject}"

    def subject(self, principal: str, host: str, op: AclOperation, subject: str) -> bool:
        return self.authorizer.authorize(principal, host, op, ResourceType.TOPIC, self.resource(subject))

    def cluster(self, principal: str, host: str, op: AclOperation) -> bool:
        return self.authorizer.authorize(principal, host, op, ResourceType.CLUSTER, CLUSTER_NAME)


class AclRefresher:
    """Keeps a standalone registry's AclAuthorizer loaded with the cluster's TOPIC and CLUSTER ACLs."""

    def __init__(self, send: Callable[[Api, dict[str, Any]], Awaitable[tuple[Struct, int]]], authorizer: AclAuthorizer,
                 interval_ms: int) -> None:
        self.send = send  # KafkaClient.send
        self.authorizer = authorizer
        self.interval_ms = interval_ms
        self._task: asyncio.Task[None] | None = None

    async def refresh(self) -> None:
        acls: dict[ResourcePattern, list[AccessControlEntry]] = {}
        for rtype in (ResourceType.TOPIC, ResourceType.CLUSTER):
            resp, _ = await self.send(DESCRIBE_ACLS, {
                "resource_type_filter": rtype, "resource_name_filter": None, "pattern_type_filter": PatternType.ANY,
                "principal_filter": None, "host_filter": None, "operation": AclOperation.ANY,
                "permission_type": AclPermissionType.ANY})
            if resp.error_code != ErrorCode.NONE:
                raise ConnectionError(f"DescribeAcls: {ErrorCode(resp.error_code).name} {resp.error_message or ''}")
            for r in resp.resources:
                pattern = ResourcePattern(ResourceType(r.resource_type), r.resource_name, PatternType(r.pattern_type))
                acls.setdefault(pattern, []).extend(
                    AccessControlEntry(a.principal, a.host, AclOperation(a.operation), AclPermissionType(a.permission_type))
                    for a in r.acls)
        self.authorizer.load(acls)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="schema-registry-acls")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_ms / 1000)
            try:
                await self.refresh()
            except Exception as e:  # whatever failed, the ACLs read last stay in force until a refresh succeeds
                log.warning("Reading the cluster's ACLs failed (the registry keeps the last ones read): %s", e)
