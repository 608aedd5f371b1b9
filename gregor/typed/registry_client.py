"""A schema registry client for the Spark driver and its executors: lookups by id and by subject, and
registration, with every answer cached so that decoding a topic costs one HTTP request per schema id,
not one per record or per batch.

Options are the ones Confluent's clients take, prefixed as Spark's Avro functions and Confluent's
serializer configs write them (a bare name without `schema.registry.` works too):

- `schema.registry.url`: one URL or several, comma-separated (tried in order until one answers);
  `http://user:password@host:8081` carries credentials as Confluent's clients accept.
- `schema.registry.basic.auth.user.info`: `user:password` for HTTP basic authentication
  (`schema.registry.basic.auth.credentials.source` may be USER_INFO or URL, as Confluent's).
- TLS: `schema.registry.ssl.ca.location` (PEM CAs to trust; `ssl.truststore.location` is taken as the
  same), `schema.registry.ssl.certificate.location` and `ssl.key.location` (a client certificate;
  `ssl.keystore.location` is a PEM file holding both), `ssl.key.password`,
  `ssl.endpoint.identification.algorithm` (`none` or empty: no host name check).
- `schema.registry.cache.capacity` (1000): entries in each cache, least recently used dropped first;
  `schema.registry.cache.latest.ttl.sec` (-1: never expire): how long the answer for a subject's latest
  version is kept; `schema.registry.cache.missing.ttl.sec` (60): how long "no such id" is remembered, so a
  topic full of records with an unknown id does not ask again per batch;
  `schema.registry.request.timeout.ms` (30000).

Clients are picklable (Spark ships them to executors) and `client_for(options)` shares one per process
and set of options, so the executors of one Python worker keep their cache across tasks.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gregor.typed.errors import RegistryLookupError

PREFIX = "schema.registry."
V1 = "application/vnd.schemaregistry.v1+json"
MAX_REFERENCE_DEPTH = 32
MAX_CLIENTS = 16


@dataclass(frozen=True)
class Reference:
    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class SchemaInfo:
    """A schema as the registry holds it under a global id."""

    id: int
    schema_type: str  # AVRO, JSON or PROTOBUF
    schema: str
    references: tuple[Reference, ...] = ()


@dataclass(frozen=True)
class RegisteredSchema:
    subject: str
    version: int
    info: SchemaInfo


@dataclass(frozen=True)
class RegistryOptions:
    urls: tuple[str, ...]
    user_info: str | None = None
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = None
    check_hostname: bool = True
    cache_capacity: int = 1000
    latest_ttl_s: float = -1.0
    missing_ttl_s: float = 60.0
    timeout_s: float = 30.0
    extra: tuple[tuple[str, str], ...] = field(default=())

    @staticmethod
    def from_options(options: Mapping[str, str], bare_names: bool = True) -> RegistryOptions:
        """The registry options among `options` (any case): `schema.registry.`-prefixed names, and unless
        `bare_names` is false (among a Spark source's options, where `ssl.*` means something else) the
        names of Confluent's Python client (`url`, `basic.auth.user.info`, `ssl.ca.location`, ...)."""
        opts = {k.lower(): str(v) for k, v in options.items()}

        def get(name: str, default: str | None = None) -> str | None:
            return opts.get(PREFIX + name, opts.get(name, default) if bare_names else default)

        url = get("url")
        if not url:
            raise ValueError("schema.registry.url is required: the registry's URL, e.g. http://127.0.0.1:8081")
        urls = tuple(u.strip().rstrip("/") for u in url.split(",") if u.strip())
        for u in urls:
            if urllib.parse.urlsplit(u).scheme not in ("http", "https"):
                raise ValueError(f"schema.registry.url: {u!r} is not an http:// or https:// URL")
        source = (get("basic.auth.credentials.source", "USER_INFO") or "USER_INFO").upper()
        if source not in ("USER_INFO", "URL", "SASL_INHERIT"):
            raise ValueError(f"schema.registry.basic.auth.credentials.source: {source!r} is not USER_INFO or URL")
        user_info = get("basic.auth.user.info") if source == "USER_INFO" else None
        if user_info is not None and ":" not in user_info:
            raise ValueError("schema.registry.basic.auth.user.info must be user:password")
        keystore = get("ssl.keystore.location")
        algorithm = get("ssl.endpoint.identification.algorithm", "https") or ""

        def number(name: str, default: str, low: float) -> float:
            raw = get(name, default) or default
            try:
                v = float(raw)
            except ValueError:
                raise ValueError(f"schema.registry.{name}: {raw!r} is not a number") from None
            if v < low:
                raise ValueError(f"schema.registry.{name} must be at least {low:g}, not {raw}")
            return v

        return RegistryOptions(
            urls=urls, user_info=user_info,
            ca_location=get("ssl.ca.location") or get("ssl.truststore.location"),
            certificate_location=get("ssl.certificate.location") or keystore,
            key_location=get("ssl.key.location") or keystore,
            key_password=get("ssl.key.password"),
            check_hostname=algorithm.lower() not in ("", "none"),
            cache_capacity=int(number("cache.capacity", "1000", 1)),
            latest_ttl_s=number("cache.latest.ttl.sec", "-1", -1),
            missing_ttl_s=number("cache.missing.ttl.sec", "60", 0),
            timeout_s=number("request.timeout.ms", "30000", 1) / 1000.0,
        )


class LruCache:
    """A bounded map: the least recently used entry goes first; entries may expire."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._data: OrderedDict[Any, tuple[float, Any]] = OrderedDict()

    def get(self, key: Any, ttl_s: float = -1.0) -> Any:
        hit = self._data.get(key)
        if hit is None:
            return None
        if ttl_s >= 0 and time.monotonic() - hit[0] > ttl_s:
            del self._data[key]
            return None
        self._data.move_to_end(key)
        return hit[1]

    def put(self, key: Any, value: Any) -> None:
        self._data[key] = (time.monotonic(), value)
        self._data.move_to_end(key)
        while len(self._data) > self.capacity:
            self._data.popitem(last=False)

    def pop(self, key: Any) -> None:
        self._data.pop(key, None)

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


def _parse_info(schema_id: int, body: Mapping[str, Any]) -> SchemaInfo:
    refs = tuple(Reference(r["name"], r["subject"], int(r["version"])) for r in body.get("references") or ())
    return SchemaInfo(schema_id, body.get("schemaType") or "AVRO", body["schema"], refs)


class RegistryClient:
    """Cached lookups and registration against one schema registry (Confluent's REST API v1)."""

    def __init__(self, options: RegistryOptions) -> None:
        self.options = options
        self._init()

    def _init(self) -> None:
        cap = self.options.cache_capacity
        self._by_id = LruCache(cap)
        self._by_version = LruCache(cap)
        self._latest = LruCache(cap)
        self._ids = LruCache(cap)  # (subject, type, schema, refs) -> RegisteredSchema
        self._missing = LruCache(cap)
        self._lock = threading.RLock()
        self._ssl: ssl.SSLContext | None = None
        self.requests_sent = 0

    @staticmethod
    def from_options(options: Mapping[str, str], bare_names: bool = True) -> RegistryClient:
        return RegistryClient(RegistryOptions.from_options(options, bare_names))

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self._init()

    # ---- HTTP ----

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            o = self.options
            ctx = ssl.create_default_context(cafile=o.ca_location)
            if not o.check_hostname:
                ctx.check_hostname = False
            if o.certificate_location:
                ctx.load_cert_chain(o.certificate_location, o.key_location, o.key_password)
            self._ssl = ctx
        return self._ssl

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        last: RegistryLookupError | None = None
        for base in self.options.urls:
            parts = urllib.parse.urlsplit(base)
            user_info = self.options.user_info
            if parts.username is not None:
                user_info = user_info or f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
                base = urllib.parse.urlunsplit(parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")))
            headers = {"Accept": V1}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = V1
            if user_info:
                headers["Authorization"] = "Basic " + base64.b64encode(user_info.encode()).decode()
            req = urllib.request.Request(base + path, data=data, method=method, headers=headers)
            ctx = self._context() if base.startswith("https:") else None
            self.requests_sent += 1
            try:
                with urllib.request.urlopen(req, timeout=self.options.timeout_s, context=ctx) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as e:
                raw = e.read()
                try:
                    err = json.loads(raw)
                    code, message = int(err.get("error_code", e.code)), str(err.get("message", ""))
                except (ValueError, AttributeError):
                    code, message = e.code, raw.decode(errors="replace")[:200]
                if e.code >= 500:
                    last = RegistryLookupError(f"{method} {base}{path}: {e.code} {message}", e.code, code)
                    continue
                raise RegistryLookupError(f"{method} {base}{path}: {e.code} {message}", e.code, code) from None
            except (urllib.error.URLError, OSError, ValueError) as e:
                last = RegistryLookupError(f"{method} {base}{path}: {getattr(e, 'reason', e)}")
        assert last is not None
        raise last

    def _cached(self, cache: LruCache, key: Any, fetch: Callable[[], Any], ttl_s: float = -1.0) -> Any:
        with self._lock:
            hit = cache.get(key, ttl_s)
            if hit is not None:
                return hit
            missing = self._missing.get((id(cache), key), self.options.missing_ttl_s)
            if missing is not None:
                raise missing
            try:
                value = fetch()
            except RegistryLookupError as e:
                if e.status == 404:
                    self._missing.put((id(cache), key), e)
                raise
            cache.put(key, value)
            return value

    # ---- lookups ----

    def schema_by_id(self, schema_id: int) -> SchemaInfo:
        """The schema with global id `schema_id` (RegistryLookupError 40403 when there is none)."""
        return self._cached(self._by_id, schema_id,
                            lambda: _parse_info(schema_id, self._request("GET", f"/schemas/ids/{int(schema_id)}")))

    def version(self, subject: str, version: int | str = "latest") -> RegisteredSchema:
        """A version of `subject` (a number, or "latest"); the latest is kept cache.latest.ttl.sec."""
        is_latest = str(version) in ("latest", "-1")
        key = (subject, "latest" if is_latest else int(version))

        def fetch() -> RegisteredSchema:
            body = self._request("GET", f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/{key[1]}")
            rs = RegisteredSchema(body["subject"], int(body["version"]), _parse_info(int(body["id"]), body))
            with self._lock:
                self._by_id.put(rs.info.id, rs.info)
            return rs

        return self._cached(self._latest if is_latest else self._by_version, key, fetch,
                            self.options.latest_ttl_s if is_latest else -1.0)

    def register(self, subject: str, schema_type: str, schema: str, references: tuple[Reference, ...] = (),
                 normalize: bool = False) -> int:
        """Register `schema` under `subject` (or find it there); returns its global id."""
        key = ("register", subject, schema_type, schema, references, normalize)

        def fetch() -> RegisteredSchema:
            body = self._request("POST", f"/subjects/{urllib.parse.quote(subject, safe='')}/versions"
                                 + ("?normalize=true" if normalize else ""), self._body(schema_type, schema, references))
            return RegisteredSchema(subject, -1, SchemaInfo(int(body["id"]), schema_type, schema, references))

        with self._lock:
            known = self._ids.get(key)
            if known is None:  # the subject changes: forget its latest version and what was not found
                self._latest.pop((subject, "latest"))
                self._missing.clear()
        return self._cached(self._ids, key, fetch).info.id

    def lookup(self, subject: str, schema_type: str, schema: str, references: tuple[Reference, ...] = (),
               normalize: bool = False) -> RegisteredSchema:
        """The version of `subject` holding `schema` (RegistryLookupError 40403 when it holds none)."""
        key = ("lookup", subject, schema_type, schema, references, normalize)

        def fetch() -> RegisteredSchema:
            body = self._request("POST", f"/subjects/{urllib.parse.quote(subject, safe='')}"
                                 + ("?normalize=true" if normalize else ""), self._body(schema_type, schema, references))
            return RegisteredSchema(body["subject"], int(body["version"]), _parse_info(int(body["id"]), body))

        return self._cached(self._ids, key, fetch)

    @staticmethod
    def _body(schema_type: str, schema: str, references: tuple[Reference, ...]) -> dict[str, Any]:
        body: dict[str, Any] = {"schema": schema}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        if references:
            body["references"] = [{"name": r.name, "subject": r.subject, "version": r.version} for r in references]
        return body

    def dependencies(self, info: SchemaInfo) -> list[tuple[str, SchemaInfo]]:
        """The schemas `info` references, transitively, each before the schemas that use it, by reference name."""
        out: list[tuple[str, SchemaInfo]] = []
        seen: set[tuple[str, int]] = set()

        def visit(refs: tuple[Reference, ...], depth: int) -> None:
            if depth > MAX_REFERENCE_DEPTH:
                raise RegistryLookupError(f"schema references nest deeper than {MAX_REFERENCE_DEPTH}")
            for ref in refs:
                if (ref.subject, ref.version) in seen:
                    continue
                seen.add((ref.subject, ref.version))
                dep = self.version(ref.subject, ref.version).info
                visit(dep.references, depth + 1)
                out.append((ref.name, dep))

        visit(info.references, 0)
        return out


_clients: OrderedDict[RegistryOptions, RegistryClient] = OrderedDict()
_clients_lock = threading.Lock()


def client_for(options: Mapping[str, str] | RegistryOptions) -> RegistryClient:
    """The process's client for these options (made on first use, at most MAX_CLIENTS kept)."""
    opts = options if isinstance(options, RegistryOptions) else RegistryOptions.from_options(options)
    with _clients_lock:
        client = _clients.get(opts)
        if client is None:
            client = _clients[opts] = RegistryClient(opts)
            while len(_clients) > MAX_CLIENTS:
                _clients.popitem(last=False)
        _clients.move_to_end(opts)
        return client
