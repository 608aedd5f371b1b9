"""Where schema-checked topics look schema ids up (gregor.schema_registry.checks): the registry this broker
runs, read directly, or an external one over Confluent's REST API.

`LocalSource` reads the broker's own registry's applied state: an id it holds is answered at once,
without HTTP and without waiting, so a batch whose ids are all registered costs no Future. An id it does
not hold may have been registered through another instance a moment ago (its record not read yet): the
source then reads the `_schemas` topic to its end (`catch_up`) before answering that the id is unknown.
While the registry is still starting, lookups wait for it (within the checks' timeout).

`HttpSource` asks `confluent.schema.registry.url` (several URLs are tried in turn):
`GET /schemas/ids/{id}` (40403: unknown) and `GET /schemas/ids/{id}/subjects`, with HTTP basic
authentication (`confluent.basic.auth.user.info`) and the CAs of `confluent.ssl.truststore.location`
for https. References of a schema to parse are read with `GET /subjects/{s}/versions/{v}`. A registry
that cannot be reached, answers 5xx, or refuses the broker's credentials is "unavailable" (the batch
gets a retriable error), never a reason to refuse records.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from gregor.schema_registry.checks import SchemaInfo, unavailable
from gregor.schema_registry.errors import RegistryError
from gregor.schema_registry.formats import Dependency, parse
from gregor.schema_registry.records import AVRO, RecordError, Reference, parse_references

if TYPE_CHECKING:
    import aiohttp

    from gregor.schema_registry.server import SchemaRegistry

log = logging.getLogger("gregor.schema_registry.checks")

_WAIT_STARTED_S = 0.05
MAX_REFERENCES = 100  # referenced schemas resolved for one schema, transitively


class LocalSource:
    """The broker's own registry (see the module docstring); `current()` is None until it has started."""

    def __init__(self, current: Callable[[], SchemaRegistry | None]) -> None:
        self.current = current

    def token(self) -> int:
        """The registry's applied offset: its state changes only with it (a new instance replaying the same
        topic has the same state at the same offset)."""
        reg = self.current()
        return -2 if reg is None else reg.state.applied_offset

    def peek(self, schema_id: int, cached: SchemaInfo | None) -> SchemaInfo | None:
        reg = self.current()
        if reg is None:
            return None
        state = reg.state
        checked_at = cached.checked_at if cached is not None else 0.0
        content = state.contents.get(schema_id)
        if content is None:
            return SchemaInfo(schema_id, False, checked_at=checked_at, token=self.token())
        info = SchemaInfo(schema_id, True, frozenset(v.subject for v in state.subjects_of(schema_id)), content,
                          checked_at, self.token())
        if cached is not None and cached.known and cached.schema == content:
            info.record_name, info.named, info.decoder, info.decodable = (cached.record_name, cached.named,
                                                                          cached.decoder, cached.decodable)
        return info

    async def _started(self) -> SchemaRegistry:
        while (reg := self.current()) is None:
            await asyncio.sleep(_WAIT_STARTED_S)  # the caller's timeout ends this with "unavailable"
        return reg

    def note(self) -> str:
        return "" if self.current() is not None else "the broker's schema registry has not started yet"

    async def fetch(self, schema_id: int) -> SchemaInfo:
        reg = await self._started()
        try:
            await reg.store.catch_up()
        except RegistryError as e:
            raise unavailable(f"the broker's schema registry cannot read its topic: {e.message}") from None
        info = self.peek(schema_id, None)
        assert info is not None
        info.checked_at = time.monotonic()
        return info

    async def parse(self, info: SchemaInfo) -> Any:
        reg = await self._started()
        assert info.schema is not None
        schema_type, text, refs = info.schema
        return await reg.schemas.parse(schema_type, text, refs)

    async def close(self) -> None:
        pass


class HttpSource:
    """An external registry over Confluent's REST API (see the module docstring)."""

    def __init__(self, urls: list[str], user_info: str | None, truststore: str | None, timeout_s: float) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        self.headers = {"Accept": "application/vnd.schemaregistry.v1+json"}
        if user_info:
            self.headers["Authorization"] = "Basic " + base64.b64encode(user_info.encode()).decode("ascii")
        self.ssl: ssl.SSLContext | None = None
        if any(u.startswith("https://") for u in self.urls):
            self.ssl = ssl.create_default_context(cafile=truststore)  # raises now (at start) for a bad file
        self.timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None
        self._last_error = ""

    def token(self) -> int:
        return 0

    def note(self) -> str:
        return self._last_error

    def peek(self, schema_id: int, cached: SchemaInfo | None) -> SchemaInfo | None:
        return cached

    async def _get(self, path: str) -> tuple[int, Any]:
        """(status, JSON body) from the first URL that answers; raises KafkaError REQUEST_TIMED_OUT otherwise."""
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                                                  headers=self.headers)
        last = ""
        for url in self.urls:
            try:
                async with self._session.get(url + path, ssl=self.ssl if url.startswith("https://") else None) as r:
                    body = await r.json(content_type=None)
                    status = r.status
            except (aiohttp.ClientError, TimeoutError, ValueError) as e:
                last = self._last_error = f"{url}: {type(e).__name__}: {e}"
                continue
            if status in (401, 403):
                raise unavailable(f"{url} refused the broker's credentials (HTTP {status}; "
                                  f"confluent.basic.auth.user.info)")
            if status >= 500 or status == 429:
                last = f"{url}: HTTP {status} {body}"
                continue
            return status, body
        raise unavailable(last or "no confluent.schema.registry.url")

    async def fetch(self, schema_id: int) -> SchemaInfo:
        status, body = await self._get(f"/schemas/ids/{schema_id}")
        now = time.monotonic()
        if status == 404 and isinstance(body, dict) and body.get("error_code") == 40403:
            return SchemaInfo(schema_id, False, checked_at=now)
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            raise unavailable(f"GET /schemas/ids/{schema_id} answered HTTP {status} {body}")
        try:
            refs = parse_references(body.get("references"), f"schema id {schema_id}")
        except RecordError as e:
            raise unavailable(str(e)) from None
        status, subjects = await self._get(f"/schemas/ids/{schema_id}/subjects")
        if status == 404:
            subjects = []
        elif status != 200 or not isinstance(subjects, list):
            raise unavailable(f"GET /schemas/ids/{schema_id}/subjects answered HTTP {status} {subjects}")
        return SchemaInfo(schema_id, True, frozenset(s for s in subjects if isinstance(s, str)),
                          (body.get("schemaType") or AVRO, body["schema"], refs), now)

    async def parse(self, info: SchemaInfo) -> Any:
        assert info.schema is not None
        schema_type, text, refs = info.schema
        deps = await self._dependencies(refs)
        return await asyncio.to_thread(parse, schema_type, text, refs, deps)

    async def _dependencies(self, refs: tuple[Reference, ...]) -> list[Dependency]:
        """The referenced schemas, transitively, each before the schemas using it (as Schemas.dependencies)."""
        out: list[Dependency] = []
        done: set[str] = set()

        async def visit(ref: Reference) -> None:
            if ref.name in done:
                return
            if len(done) >= MAX_REFERENCES:
                raise ValueError(f"more than {MAX_REFERENCES} referenced schemas")
            done.add(ref.name)
            version = "latest" if ref.version == -1 else str(ref.version)
            status, body = await self._get(f"/subjects/{quote(ref.subject, safe='')}/versions/{version}")
            if status != 200 or not isinstance(body, dict) or not isinstance(body.get("schema"), str):
                raise unavailable(f"reference {ref.name} (subject {ref.subject} version {ref.version}): HTTP {status}")
            sub = parse_references(body.get("references"), f"reference {ref.name}")
            for r in sub:
                await visit(r)
            out.append(Dependency(ref.name, body.get("schemaType") or AVRO, body["schema"]))

        for ref in refs:
            await visit(ref)
        return out

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
