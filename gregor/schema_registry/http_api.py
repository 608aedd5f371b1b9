"""The REST API on aiohttp's server: Confluent's Schema Registry v1 routes, media types and error bodies.

Requests: a body must be JSON sent as application/vnd.schemaregistry.v1+json,
application/vnd.schemaregistry+json, application/json or application/octet-stream (415 otherwise), and
at most schema.registry.max.request.bytes (413). Responses: the first of those three JSON types the
`Accept` header allows (v1 when it allows anything or is absent; 406 when it allows none of them).
Every error is Confluent's body, `{"error_code": ..., "message": ...}`, routing errors included
(`{"error_code": 404, "message": "HTTP 404 Not Found"}`).

Writes go to the primary: on another instance a write request is forwarded as it came (same method,
path, query, body and credentials) and its answer returned as it is, after this instance has read the
topic up to that write, so the caller's next read here sees it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from gregor.schema_registry import errors
from gregor.schema_registry.auth import ANONYMOUS, BasicAuth, SubjectAcls, Unauthorized
from gregor.schema_registry.reads import RegistryReads
from gregor.schema_registry.schemas import schema_request
from gregor.schema_registry.writes import RegistryWrites
from gregor.security.acl import AclOperation

log = logging.getLogger("gregor.schema_registry.http")

V1 = "application/vnd.schemaregistry.v1+json"
RESPONSE_TYPES = (V1, "application/vnd.schemaregistry+json", "application/json")
BODY_TYPES = frozenset({*RESPONSE_TYPES, "application/octet-stream"})
FORWARDED = "X-Gregor-Forwarded"
PRINCIPAL = "gregor.schema_registry.principal"  # the caller's principal, in the request

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# Runs a write on the primary: None when this instance is the primary (run it here), else the primary's answer.
Forwarder = Callable[[web.Request], Awaitable[web.StreamResponse | None]]


def negotiate(accept: str | None) -> str:
    """The response media type for an Accept header; raises 406 when none of ours is acceptable."""
    if not accept:
        return V1
    ranked = []
    for i, part in enumerate(accept.split(",")):
        kind, *params = [p.strip() for p in part.split(";")]
        q = 1.0
        for p in params:
            if p.startswith("q="):
                try:
                    q = float(p[2:])
                except ValueError:
                    q = 0.0
        ranked.append((-q, i, kind.lower()))
    for q, _, kind in sorted(ranked):
        if q == 0:
            continue
        if kind in ("*/*", "application/*"):
            return V1
        if kind in RESPONSE_TYPES:
            return kind
    raise errors.RegistryError(406, 406, "HTTP 406 Not Acceptable")


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").strip().lower() == "true"


def _int_id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise errors.RegistryError(404, 404, "HTTP 404 Not Found") from None


class RegistryApi:
    """Routes, middlewares, authentication and authorization; the work is done by reads and writes."""

    def __init__(self, reads: RegistryReads, writes: RegistryWrites, forward: Forwarder, *,
                 max_request_bytes: int, max_inflight: int, basic_auth: BasicAuth | None = None,
                 acls: SubjectAcls | None = None, realm: str = "SchemaRegistry") -> None:
        self.reads = reads
        self.writes = writes
        self.forward = forward
        self.max_request_bytes = max_request_bytes
        self.max_inflight = max_inflight
        self.basic_auth = basic_auth
        self.acls = acls
        self.realm = realm
        self.inflight = 0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.max_request_bytes, middlewares=[self._errors, self._limit, self._auth])
        r = app.router
        r.add_get("/", self.root)
        r.add_get("/schemas/types", self.schema_types)
        r.add_get("/schemas", self.schemas)
        r.add_get("/schemas/ids/{id}", self.schema_by_id)
        r.add_get("/schemas/ids/{id}/schema", self.raw_schema_by_id)
        r.add_get("/schemas/ids/{id}/subjects", self.id_subjects)
        r.add_get("/schemas/ids/{id}/versions", self.id_versions)
        r.add_get("/subjects", self.subjects)
        r.add_post("/subjects/{subject}", self.lookup)
        r.add_delete("/subjects/{subject}", self.delete_subject)
        r.add_get("/subjects/{subject}/versions", self.versions)
        r.add_post("/subjects/{subject}/versions", self.register)
        r.add_get("/subjects/{subject}/versions/{version}", self.get_version)
        r.add_delete("/subjects/{subject}/versions/{version}", self.delete_version)
        r.add_get("/subjects/{subject}/versions/{version}/schema", self.raw_version)
        r.add_get("/subjects/{subject}/versions/{version}/referencedby", self.referenced_by)
        r.add_post("/compatibility/subjects/{subject}/versions", self.compatibility)
        r.add_post("/compatibility/subjects/{subject}/versions/{version}", self.compatibility)
        for path in ("/config", "/config/{subject}"):
            r.add_get(path, self.get_config)
            r.add_put(path, self.put_config)
            r.add_delete(path, self.delete_config)
        for path in ("/mode", "/mode/{subject}"):
            r.add_get(path, self.get_mode)
            r.add_put(path, self.put_mode)
        r.add_delete("/mode/{subject}", self.delete_mode)
        return app

    # --- middlewares --------------------------------------------------------------------------------
    def _json(self, request: web.Request, obj: Any, status: int = 200) -> web.Response:
        try:
            kind = negotiate(request.headers.get("Accept"))
        except errors.RegistryError:
            kind = V1
        return web.Response(body=json.dumps(obj).encode(), status=status, content_type=kind)

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            negotiate(request.headers.get("Accept"))
            return await handler(request)
        except errors.RegistryError as e:
            return self._json(request, e.body(), e.http_status)
        except Unauthorized:
            resp = self._json(request, {"error_code": 401, "message": "Unauthorized"}, 401)
            resp.headers["WWW-Authenticate"] = f'Basic realm="{self.realm}"'
            return resp
        except web.HTTPException as e:
            if e.status < 400:
                raise
            return self._json(request, {"error_code": e.status, "message": f"HTTP {e.status} {e.reason}"}, e.status)
        except Exception:
            log.exception("Schema registry request %s %s failed", request.method, request.path)
            return self._json(request, {"error_code": 500, "message": "Internal Server Error"}, 500)

    @web.middleware
    async def _limit(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.inflight >= self.max_inflight:
            raise errors.RegistryError(429, errors.TOO_MANY_REQUESTS, "Too many requests: the registry serves at most "
                                       f"{self.max_inflight} at once (schema.registry.max.inflight.requests)")
        self.inflight += 1
        try:
            return await handler(request)
        finally:
            self.inflight -= 1

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        principal = ANONYMOUS
        if self.basic_auth is not None:
            principal = await self.basic_auth.principal(request.headers.get("Authorization"))
        request[PRINCIPAL] = principal
        return await handler(request)

    # --- helpers ------------------------------------------------------------------------------------
    def _may(self, request: web.Request, op: AclOperation, subject: str | None) -> bool:
        if self.acls is None:
            return True
        host = request.remote or ""
        if subject is None:
            return self.acls.cluster(request[PRINCIPAL], host, op)
        return self.acls.subject(request[PRINCIPAL], host, op, subject)

    def _require(self, request: web.Request, op: AclOperation, subject: str | None) -> None:
        if not self._may(request, op, subject):
            what = f"subject: {subject}" if subject is not None else "the global configuration"
            raise errors.RegistryError(403, 40301, f"User {request[PRINCIPAL]} is denied operation {op.kafka_name} on "
                                                   f"{what}")

    def _readable_id(self, request: web.Request, schema_id: int) -> None:
        if self.acls is not None:
            holders = self.reads.state.subjects_of(schema_id, deleted=True)
            if holders and not any(self._may(request, AclOperation.READ, v.subject) for v in holders):
                raise errors.RegistryError(403, 40301, f"User {request[PRINCIPAL]} is denied operation Read on "
                                                       f"schema {schema_id}")

    async def _body(self, request: web.Request) -> Any:
        kind = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind and kind not in BODY_TYPES:
            raise errors.RegistryError(415, 415, "HTTP 415 Unsupported Media Type")
        raw = await request.read()
        try:
            return json.loads(raw) if raw.strip() else None
        except ValueError as e:
            raise errors.bad_request(f"Unrecognized request body: {e}") from None

    async def _write(self, request: web.Request, run: Callable[[], Awaitable[Any]]) -> web.StreamResponse:
        await self._body(request)  # a body we would refuse is refused here, not forwarded
        forwarded = await self.forward(request)
        if forwarded is not None:
            return forwarded
        return self._json(request, await run())

    # --- schemas ------------------------------------------------------------------------------------
    async def root(self, request: web.Request) -> web.StreamResponse:
        return self._json(request, {})

    async def schema_types(self, request: web.Request) -> web.StreamResponse:
        return self._json(request, self.reads.types())

    async def schemas(self, request: web.Request) -> web.StreamResponse:
        out = self.reads.schemas_list(request.query.get("subjectPrefix", ""), _flag(request, "deleted"),
                                      _flag(request, "latestOnly"))
        return self._json(request, [s for s in out if self._may(request, AclOperation.READ, s["subject"])])

    async def schema_by_id(self, request: web.Request) -> web.StreamResponse:
        schema_id = _int_id(request.match_info["id"])
        self._readable_id(request, schema_id)
        return self._json(request, await self.reads.schema_by_id(schema_id, request.query.get("format")))

    async def raw_schema_by_id(self, request: web.Request) -> web.StreamResponse:
        schema_id = _int_id(request.match_info["id"])
        self._readable_id(request, schema_id)
        v = self.reads.by_id(schema_id)
        return web.Response(text=await self.reads.formatted(v, request.query.get("format")), content_type="text/plain")

    async def id_subjects(self, request: web.Request) -> web.StreamResponse:
        schema_id = _int_id(request.match_info["id"])
        out = self.reads.id_subjects(schema_id, _flag(request, "deleted"))
        return self._json(request, [s for s in out if self._may(request, AclOperation.READ, s)])

    async def id_versions(self, request: web.Request) -> web.StreamResponse:
        schema_id = _int_id(request.match_info["id"])
        out = self.reads.id_versions(schema_id, _flag(request, "deleted"))
        return self._json(request, [v for v in out if self._may(request, AclOperation.READ, v["subject"])])

    # --- subjects -----------------------------------------------------------------------------------
    async def subjects(self, request: web.Request) -> web.StreamResponse:
        out = self.reads.subjects(request.query.get("subjectPrefix", ""), _flag(request, "deleted"))
        return self._json(request, [s for s in out if self._may(request, AclOperation.DESCRIBE, s)])

    async def versions(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]
        self._require(request, AclOperation.READ, subject)
        return self._json(request, self.reads.versions(subject, _flag(request, "deleted")))

    async def get_version(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]
        self._require(request, AclOperation.READ, subject)
        return self._json(request, await self.reads.get_version(subject, request.match_info["version"],
                                                          _flag(request, "deleted"), request.query.get("format")))

    async def raw_version(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]
        self._require(request, AclOperation.READ, subject)
        v = self.reads.version(subject, request.match_info["version"], _flag(request, "deleted"))
        return web.Response(text=await self.reads.formatted(v, request.query.get("format")), content_type="text/plain")

    async def referenced_by(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]
        self._require(request, AclOperation.READ, subject)
        return self._json(request, self.reads.referenced_by(subject, request.match_info["version"]))

    async def lookup(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]
        self._require(request, AclOperation.READ, subject)
        req = schema_request(await self._body(request))
        return self._json(request, await self.reads.lookup(subject, req, _flag(request, "normalize"), _flag(request, "deleted")))

    async def register(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]
        self._require(request, AclOperation.WRITE, subject)

        async def run() -> Any:
            req = schema_request(await self._body(request))
            return await self.writes.register(subject, req, _flag(request, "normalize"))

        return await self._write(request, run)

    async def delete_subject(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]
        self._require(request, AclOperation.DELETE, subject)
        return await self._write(request, lambda: self.writes.delete_subject(subject, _flag(request, "permanent")))

    async def delete_version(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]
        self._require(request, AclOperation.DELETE, subject)
        return await self._write(request, lambda: self.writes.delete_version(
            subject, request.match_info["version"], _flag(request, "permanent")))

    async def compatibility(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]
        self._require(request, AclOperation.READ, subject)
        req = schema_request(await self._body(request))
        return self._json(request, await self.reads.compatibility(subject, request.match_info.get("version"), req,
                                                            _flag(request, "normalize"), _flag(request, "verbose")))

    # --- config and mode ----------------------------------------------------------------------------
    async def get_config(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info.get("subject")
        self._require(request, AclOperation.DESCRIBE_CONFIGS, subject)
        return self._json(request, self.reads.get_config(subject, _flag(request, "defaultToGlobal")))

    async def put_config(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info.get("subject")
        self._require(request, AclOperation.ALTER_CONFIGS, subject)

        async def run() -> Any:
            return await self.writes.put_config(subject, await self._body(request))

        return await self._write(request, run)

    async def delete_config(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info.get("subject")
        self._require(request, AclOperation.ALTER_CONFIGS, subject)
        return await self._write(request, lambda: self.writes.delete_config(subject))

    async def get_mode(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info.get("subject")
        self._require(request, AclOperation.DESCRIBE_CONFIGS, subject)
        return self._json(request, self.reads.get_mode(subject, _flag(request, "defaultToGlobal")))

    async def put_mode(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info.get("subject")
        self._require(request, AclOperation.ALTER_CONFIGS, subject)

        async def run() -> Any:
            return await self.writes.put_mode(subject, await self._body(request), _flag(request, "force"))

        return await self._write(request, run)

    async def delete_mode(self, request: web.Request) -> web.StreamResponse:
        subject = request.match_info["subject"]
        self._require(request, AclOperation.ALTER_CONFIGS, subject)
        return await self._write(request, lambda: self.writes.delete_mode(subject))
