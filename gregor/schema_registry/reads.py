"""The registry's read endpoints, answered from the applied state (any instance serves them).

Each method returns the JSON Confluent's API returns, or raises RegistryError with Confluent's code.
`deleted=True` includes soft-deleted versions, as Confluent's `?deleted=true`.
"""

from __future__ import annotations

from typing import Any

from gregor.config.schema_registry import RegistryConfig
from gregor.schema_registry import errors
from gregor.schema_registry.formats import ParsedSchema
from gregor.schema_registry.records import AVRO, PROTOBUF, SCHEMA_TYPES, SchemaValue
from gregor.schema_registry.schemas import SchemaRequest, Schemas, parse_version
from gregor.schema_registry.state import RegistryState


def schema_json(v: SchemaValue, text: str | None = None, *, with_subject: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"subject": v.subject, "version": v.version, "id": v.id} if with_subject else {}
    if v.schema_type != AVRO:
        out["schemaType"] = v.schema_type
    if v.references:
        out["references"] = [r.to_json() for r in v.references]
    out["schema"] = v.schema if text is None else text
    return out


class RegistryReads:
    def __init__(self, config: RegistryConfig, state: RegistryState, schemas: Schemas) -> None:
        self.config = config
        self.state = state
        self.schemas = schemas

    # --- levels and modes ---------------------------------------------------------------------------
    def level(self, subject: str | None) -> str:
        return self.state.configs.get(subject) or self.state.configs.get(None) or self.config.compatibility_level

    def mode(self, subject: str | None) -> str:
        return self.state.modes.get(subject) or self.state.modes.get(None) or "READWRITE"

    def get_config(self, subject: str | None, default_to_global: bool) -> dict[str, Any]:
        if subject is not None and subject not in self.state.configs:
            if not default_to_global:
                raise errors.compatibility_not_configured(subject)
            subject = None
        return {"compatibilityLevel": self.level(subject)}

    def get_mode(self, subject: str | None, default_to_global: bool) -> dict[str, Any]:
        if subject is not None and subject not in self.state.modes:
            if not default_to_global:
                raise errors.mode_not_configured(subject)
            subject = None
        return {"mode": self.mode(subject)}

    # --- schemas by id ------------------------------------------------------------------------------
    async def formatted(self, v: SchemaValue, fmt: str | None) -> str:
        """The schema as `?format=` asks; without one, as stored (a Protobuf schema registered serialized is
        shown as .proto text, as Confluent shows it)."""
        if not fmt and v.schema_type != PROTOBUF:
            return v.schema
        return (await self.schemas.parse_stored(v)).formatted(fmt or "") or v.schema

    def by_id(self, schema_id: int) -> SchemaValue:
        holders = self.state.subjects_of(schema_id, deleted=True)
        if not holders:
            raise errors.schema_not_found(schema_id)
        return holders[0]

    async def schema_by_id(self, schema_id: int, fmt: str | None) -> dict[str, Any]:
        v = self.by_id(schema_id)
        return schema_json(v, await self.formatted(v, fmt), with_subject=False)

    def id_versions(self, schema_id: int, deleted: bool) -> list[dict[str, Any]]:
        self.by_id(schema_id)
        return [{"subject": v.subject, "version": v.version} for v in self.state.subjects_of(schema_id, deleted)]

    def id_subjects(self, schema_id: int, deleted: bool) -> list[str]:
        self.by_id(schema_id)
        return sorted({v.subject for v in self.state.subjects_of(schema_id, deleted)})

    def schemas_list(self, prefix: str, deleted: bool, latest_only: bool) -> list[dict[str, Any]]:
        out = []
        for subject in self.state.subject_names(deleted):
            if not subject.startswith(prefix):
                continue
            versions = self.state.versions(subject, deleted)
            out.extend(schema_json(v) for v in (versions[-1:] if latest_only else versions))
        return out

    @staticmethod
    def types() -> list[str]:
        return list(SCHEMA_TYPES)

    # --- subjects -----------------------------------------------------------------------------------
    def subjects(self, prefix: str, deleted: bool) -> list[str]:
        return [s for s in self.state.subject_names(deleted) if s.startswith(prefix)]

    def versions(self, subject: str, deleted: bool) -> list[int]:
        versions = self.state.versions(subject, deleted)
        if not versions:
            raise errors.subject_not_found(subject)
        return [v.version for v in versions]

    def version(self, subject: str, version_text: str, deleted: bool) -> SchemaValue:
        """A subject version by its path text; 40401 if the subject has no (live) version, 40402 if not this one."""
        n = parse_version(version_text)
        versions = self.state.versions(subject, deleted=True)
        if not versions or (not deleted and all(v.deleted for v in versions)):
            raise errors.subject_not_found(subject)
        if n is None:
            live = [v for v in versions if deleted or not v.deleted]
            return live[-1]
        v = self.state.version(subject, n)
        if v is None or (v.deleted and not deleted):
            raise errors.version_not_found(n)
        return v

    async def get_version(self, subject: str, version_text: str, deleted: bool, fmt: str | None) -> dict[str, Any]:
        v = self.version(subject, version_text, deleted)
        return schema_json(v, await self.formatted(v, fmt))

    def referenced_by(self, subject: str, version_text: str) -> list[int]:
        v = self.version(subject, version_text, deleted=True)
        return self.state.referenced_by(subject, v.version)

    async def stored_text(self, req: SchemaRequest, normalize: bool) -> tuple[ParsedSchema, str]:
        parsed = await self.schemas.parse(req.schema_type, req.schema, req.references)
        return parsed, parsed.normalized() if normalize else parsed.canonical()

    async def lookup(self, subject: str, req: SchemaRequest, normalize: bool, deleted: bool) -> dict[str, Any]:
        """POST /subjects/{subject}: the version of the subject holding this schema."""
        versions = self.state.versions(subject, deleted)
        if not versions:
            raise errors.subject_not_found(subject)
        parsed, text = await self.stored_text(req, normalize)
        normal = parsed.normalized()
        for v in reversed(versions):
            if v.schema_type != req.schema_type or v.references != req.references:
                continue
            if v.schema == text or (normalize and (await self.schemas.parse_stored(v)).normalized() == normal):
                return schema_json(v)
        raise errors.schema_not_found()

    async def compatibility(self, subject: str, version_text: str | None, req: SchemaRequest, normalize: bool,
                      verbose: bool) -> dict[str, Any]:
        """POST /compatibility/subjects/{subject}/versions[/{version}]."""
        if version_text is None:
            previous = self.state.versions(subject)
            level = self.level(subject)
        else:
            previous = [self.version(subject, version_text, deleted=False)]
            level = self.level(subject).removesuffix("_TRANSITIVE")
        parsed, _ = await self.stored_text(req, normalize)
        problems = await self.schemas.compatibility_errors(level, parsed, previous)
        out: dict[str, Any] = {"is_compatible": not problems}
        if verbose:
            out["messages"] = problems
        return out
