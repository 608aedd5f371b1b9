"""The registry's write endpoints, run by the primary only (the others forward writes to it).

Writes are serial on the primary: each first reads the topic to its end (a primary elected a moment
ago has then seen every acknowledged write before it chooses an id or a version), decides from the
state, appends one or more records and answers once they are read back and accepted. Ids come from the
highest id the topic ever held, so an id is never issued twice, across primaries too; a schema already
registered anywhere keeps its id in every subject, as Confluent's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gregor.config.schema_registry import COMPATIBILITY_LEVELS, MODES, RegistryConfig
from gregor.schema_registry import errors
from gregor.schema_registry.reads import RegistryReads
from gregor.schema_registry.records import (
    CONFIG,
    DELETE_SUBJECT,
    MODE,
    SCHEMA,
    Key,
    SchemaValue,
    config_value,
    delete_subject_value,
    encode_value,
    mode_value,
)
from gregor.schema_registry.schemas import SchemaRequest, Schemas, check_subject, parse_version
from gregor.schema_registry.state import RegistryState, content_of
from gregor.schema_registry.store import SchemaStore


class RegistryWrites:
    def __init__(self, config: RegistryConfig, state: RegistryState, schemas: Schemas, reads: RegistryReads,
                 store: SchemaStore) -> None:
        self.config = config
        self.state = state
        self.schemas = schemas
        self.reads = reads
        self.store = store
        self._lock = asyncio.Lock()

    async def _write(self, key: Key, value: bytes | None) -> None:
        outcome = await self.store.write(key, value)
        if not outcome.accepted:
            raise errors.store_error(f"Error while writing to the schema registry topic: the record was refused when "
                                     f"read back ({outcome.reason}); another instance wrote first. Retry the request.")

    # --- register -----------------------------------------------------------------------------------
    async def register(self, subject: str, req: SchemaRequest, normalize: bool) -> dict[str, Any]:
        check_subject(subject)
        async with self._lock:
            await self.store.catch_up()
            return await self._register(subject, req, normalize)

    def _check_mode(self, subject: str, req: SchemaRequest) -> str:
        mode = self.reads.mode(subject)
        if mode == "READONLY":
            raise errors.not_permitted(f"Subject {subject} is in read-only mode")
        if req.id is not None or req.version is not None:
            if mode != "IMPORT":
                raise errors.not_permitted(f"Subject {subject} is not in import mode")
        elif mode != "READWRITE":
            raise errors.not_permitted(f"Subject {subject} is not in read-write mode")
        return mode

    async def _register(self, subject: str, req: SchemaRequest, normalize: bool) -> dict[str, Any]:
        mode = self._check_mode(subject, req)
        parsed, text = await self.reads.stored_text(req, normalize)
        content = (req.schema_type, text, req.references)
        all_versions = self.state.versions(subject, deleted=True)
        live = [v for v in all_versions if not v.deleted]
        for v in reversed(live):  # already registered in this subject: its id, no new version
            if content_of(v) == content and (req.id is None or req.id == v.id):
                return {"id": v.id}
        known_id = self.state.ids.get(content)
        if req.id is not None:
            holder = self.state.contents.get(req.id)
            if holder is not None and holder != content:
                raise errors.id_in_use(req.id)
            if known_id is not None and known_id != req.id:
                raise errors.id_mismatch(known_id, req.id)
            schema_id = req.id
        else:
            schema_id = known_id if known_id is not None else self.state.max_id + 1
        if req.version is not None:
            if self.state.version(subject, req.version) is not None:
                raise errors.version_exists(subject, req.version)
            version = req.version
        else:
            version = max((v.version for v in all_versions), default=0) + 1
        if len(all_versions) >= self.config.max_schemas_per_subject:
            raise errors.not_permitted(f"Subject {subject} has {len(all_versions)} versions: the limit is "
                                       f"{self.config.max_schemas_per_subject} (schema.registry.max.schemas.per.subject)")
        if not all_versions and len(self.state.subjects) >= self.config.max_subjects:
            raise errors.not_permitted(f"The registry holds {len(self.state.subjects)} subjects: the limit is "
                                       f"{self.config.max_subjects} (schema.registry.max.subjects)")
        if mode != "IMPORT":
            problems = await self.schemas.compatibility_errors(self.reads.level(subject), parsed, live)
            if problems:
                raise errors.incompatible(problems)
        value = SchemaValue(subject, version, schema_id, req.schema_type, text, req.references, False)
        await self._write(Key(SCHEMA, subject, version), encode_value(value))
        return {"id": schema_id}

    # --- deletes ------------------------------------------------------------------------------------
    def _check_writable(self, subject: str) -> None:
        if self.reads.mode(subject) == "READONLY":
            raise errors.not_permitted(f"Subject {subject} is in read-only mode")

    def _check_unreferenced(self, subject: str, version: int) -> None:
        if self.state.referenced_by(subject, version):
            raise errors.reference_exists(f"One or more references exist to the schema "
                                          f"{{magic=1,keytype=SCHEMA,subject={subject},version={version}}}.")

    async def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        async with self._lock:
            await self.store.catch_up()
            self._check_writable(subject)
            versions = self.state.versions(subject, deleted=True)
            if not versions:
                raise errors.subject_not_found(subject)
            live = [v for v in versions if not v.deleted]
            if permanent:
                if live:
                    raise errors.subject_not_soft_deleted(subject)
                for v in versions:
                    self._check_unreferenced(subject, v.version)
                for v in versions:
                    await self._write(Key(SCHEMA, subject, v.version), None)
                return [v.version for v in versions]
            if not live:
                raise errors.subject_soft_deleted(subject)
            for v in live:
                self._check_unreferenced(subject, v.version)
            await self._write(Key(DELETE_SUBJECT, subject), encode_value(delete_subject_value(subject, live[-1].version)))
            for table, keytype in ((self.state.configs, CONFIG), (self.state.modes, MODE)):
                if subject in table:  # as Confluent: a deleted subject loses its own level and mode
                    await self._write(Key(keytype, subject), None)
            return [v.version for v in live]

    async def delete_version(self, subject: str, version_text: str, permanent: bool) -> int:
        async with self._lock:
            await self.store.catch_up()
            self._check_writable(subject)
            n = parse_version(version_text)
            versions = self.state.versions(subject, deleted=True)
            if not versions:
                raise errors.subject_not_found(subject)
            if n is None:
                live = [v for v in versions if not v.deleted]
                if not live:
                    raise errors.subject_not_found(subject)
                n = live[-1].version
            v = self.state.version(subject, n)
            if v is None:
                raise errors.version_not_found(n)
            self._check_unreferenced(subject, n)
            if permanent:
                if not v.deleted:
                    raise errors.version_not_soft_deleted(subject, n)
                await self._write(Key(SCHEMA, subject, n), None)
            else:
                if v.deleted:
                    raise errors.version_soft_deleted(subject, n)
                await self._write(Key(SCHEMA, subject, n), encode_value(SchemaValue(
                    v.subject, v.version, v.id, v.schema_type, v.schema, v.references, True)))
            return n

    # --- config and mode ----------------------------------------------------------------------------
    async def put_config(self, subject: str | None, body: Any) -> dict[str, Any]:
        level = body.get("compatibility", body.get("compatibilityLevel")) if isinstance(body, dict) else None
        if not isinstance(level, str) or level.upper() not in COMPATIBILITY_LEVELS:
            raise errors.invalid_compatibility(level)
        if subject is not None:
            check_subject(subject)
        async with self._lock:
            await self._write(Key(CONFIG, subject), encode_value(config_value(level.upper())))
        return {"compatibility": level.upper()}

    async def delete_config(self, subject: str | None) -> dict[str, Any]:
        async with self._lock:
            await self.store.catch_up()
            if subject is not None and subject not in self.state.configs and not self.state.versions(subject, True):
                raise errors.subject_not_found(subject)
            old = self.reads.level(subject)
            await self._write(Key(CONFIG, subject), None)
        return {"compatibilityLevel": old}

    async def put_mode(self, subject: str | None, body: Any, force: bool) -> dict[str, Any]:
        mode = body.get("mode") if isinstance(body, dict) else None
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise errors.invalid_mode(mode)
        mode = mode.upper()
        if not self.config.mode_mutability:
            raise errors.not_permitted("Mode changes are not allowed (schema.registry.mode.mutability is false)")
        if subject is not None:
            check_subject(subject)
        async with self._lock:
            await self.store.catch_up()
            if mode == "IMPORT" and not force:
                holding = self.state.subject_names() if subject is None else self.state.versions(subject)
                if holding:
                    raise errors.not_permitted("Cannot import since found existing subjects")
            await self._write(Key(MODE, subject), encode_value(mode_value(mode)))
        return {"mode": mode}

    async def delete_mode(self, subject: str) -> dict[str, Any]:
        async with self._lock:
            await self.store.catch_up()
            if subject not in self.state.modes and not self.state.versions(subject, True):
                raise errors.subject_not_found(subject)
            old = self.reads.mode(subject)
            await self._write(Key(MODE, subject), None)
        return {"mode": old}

