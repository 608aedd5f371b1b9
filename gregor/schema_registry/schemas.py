"""From a request's schema to a parsed one: the body's fields, its references resolved through the
registry's state, the format's parser (with a bounded cache), and the compatibility levels.

A level asks one question of one or more earlier versions (gregor.schema_registry.formats):
BACKWARD: can the new schema read data written with the latest version? FORWARD: can the latest version
read data written with the new one? FULL: both. The _TRANSITIVE variants ask it of every live version,
not only the latest. NONE asks nothing.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass
from typing import Any

from gregor.schema_registry import errors
from gregor.schema_registry.formats import Dependency, ParsedSchema, parse
from gregor.schema_registry.records import AVRO, SCHEMA_TYPES, RecordError, Reference, SchemaValue, parse_references
from gregor.schema_registry.state import RegistryState

MAX_VERSION = 2**31 - 1
MAX_SUBJECT_CHARS = 255


@dataclass(frozen=True, slots=True)
class SchemaRequest:
    """The schema part of a register, lookup or compatibility request body."""

    schema_type: str
    schema: str
    references: tuple[Reference, ...]
    id: int | None = None
    version: int | None = None


def schema_request(body: Any) -> SchemaRequest:
    if not isinstance(body, dict):
        raise errors.bad_request("The request body must be a JSON object")
    schema = body.get("schema")
    if not isinstance(schema, str) or not schema.strip():
        raise errors.invalid_schema("Empty schema" if schema in (None, "") else "schema must be a string")
    schema_type = body.get("schemaType") or AVRO
    if schema_type not in SCHEMA_TYPES:
        raise errors.invalid_schema(f"Unknown schema type {schema_type}; the registry knows {', '.join(SCHEMA_TYPES)}")
    try:
        refs = parse_references(body.get("references"), "the request")
    except RecordError as e:
        raise errors.invalid_schema(str(e)) from None
    out_id, out_version = body.get("id"), body.get("version")
    for name, v in (("id", out_id), ("version", out_version)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise errors.bad_request(f"{name} must be an integer")
    return SchemaRequest(schema_type, schema, refs,
                         out_id if out_id is not None and out_id >= 0 else None,
                         out_version if out_version is not None and out_version > 0 else None)


def check_subject(subject: str) -> None:
    if not subject or len(subject) > MAX_SUBJECT_CHARS or any(ord(c) < 32 for c in subject) or subject.strip() != subject:
        raise errors.invalid_subject(subject)


def parse_version(text: str | int) -> int | None:
    """A version from a path: an int in [1, 2^31-1], or None for "latest" (and -1). 42202 otherwise."""
    if isinstance(text, int):
        n = text
    elif text == "latest":
        return None
    else:
        try:
            n = int(text)
        except ValueError:
            raise errors.invalid_version(str(text)) from None
    if n == -1:
        return None
    if not 1 <= n <= MAX_VERSION:
        raise errors.invalid_version(str(text))
    return n


class Schemas:
    """Parsing with references and a bounded cache of parsed schemas."""

    def __init__(self, state: RegistryState, *, cache_size: int, max_references: int) -> None:
        self.state = state
        self.cache_size = cache_size
        self.max_references = max_references
        self._cache: collections.OrderedDict[tuple[str, str, tuple[Reference, ...]], ParsedSchema] = collections.OrderedDict()

    def dependencies(self, refs: tuple[Reference, ...]) -> list[Dependency]:
        """The referenced schemas, transitively, each before the schemas that use it. 42201 for a reference to
        a version that does not exist, or more than schema.registry.max.references of them."""
        out: list[Dependency] = []
        done: set[str] = set()

        def visit(ref: Reference, depth: int) -> None:
            if ref.name in done:
                return
            if depth > self.max_references or len(done) >= self.max_references:
                raise errors.invalid_schema(f"more than {self.max_references} referenced schemas "
                                            f"(schema.registry.max.references)")
            v = self.resolve_reference(ref)
            done.add(ref.name)
            for sub in v.references:
                visit(sub, depth + 1)
            out.append(Dependency(ref.name, v.schema_type, v.schema))

        for ref in refs:
            visit(ref, 1)
        return out

    def resolve_reference(self, ref: Reference) -> SchemaValue:
        if ref.version == -1:
            versions = self.state.versions(ref.subject)
            v = versions[-1] if versions else None
        else:
            v = self.state.version(ref.subject, ref.version)
        if v is None:
            raise errors.invalid_schema(f"reference {ref.name} names version {ref.version} of subject '{ref.subject}', "
                                        f"which does not exist")
        return v

    async def parse(self, schema_type: str, schema: str, refs: tuple[Reference, ...]) -> ParsedSchema:
        """The parsed schema, from the cache or parsed in a worker thread: a large schema (or protoc) must not
        hold up the event loop, which a registry may share with a broker."""
        key = (schema_type, schema, refs)
        parsed = self._cache.get(key)
        if parsed is not None:
            self._cache.move_to_end(key)
            return parsed
        deps = self.dependencies(refs)  # on the loop: the state is only ever read there
        parsed = await asyncio.to_thread(parse, schema_type, schema, refs, deps)
        self._cache[key] = parsed
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return parsed

    async def parse_stored(self, v: SchemaValue) -> ParsedSchema:
        return await self.parse(v.schema_type, v.schema, v.references)

    async def compatibility_errors(self, level: str, new: ParsedSchema, previous: list[SchemaValue]) -> list[str]:
        """Why `new` breaks `level` against the live versions `previous` (oldest first); empty when it does not."""
        if level == "NONE" or not previous:
            return []
        targets = previous if level.endswith("_TRANSITIVE") else previous[-1:]
        base = level.removesuffix("_TRANSITIVE")
        olds = [(v.version, await self.parse_stored(v)) for v in reversed(targets)]

        def compare() -> list[str]:  # parsed schemas are immutable: comparing them off the loop is safe
            out: list[str] = []
            for version, old in olds:
                if base in ("BACKWARD", "FULL"):
                    out.extend(f"{m} (version {version}, backward)" for m in new.reader_errors(old))
                if base in ("FORWARD", "FULL"):
                    out.extend(f"{m} (version {version}, forward)" for m in old.reader_errors(new))
            return out

        return await asyncio.to_thread(compare)
