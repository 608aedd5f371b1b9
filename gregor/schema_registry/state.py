"""What the `_schemas` topic says, applied record by record in offset order: subjects, versions, ids,
configs and modes.

Every registry instance builds this state from the same records in the same order, and `apply` decides
from the records before it alone, so every instance, a restarted one and a new primary included, agrees
on it. That is also what makes writes safe without a lock held across instances: a SCHEMA record that
would give a schema id to different schema text than the id already has, or a subject version to a
different schema than it already holds, is rejected by every reader (the first record in the log
wins). A primary that wrote such a record, because another instance also believed it was the primary,
sees the rejection when it reads its own record back and does not acknowledge the write. Re-reading a
record (a retried produce) changes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from gregor.schema_registry.records import (
    CLEAR_SUBJECT,
    CONFIG,
    DELETE_SUBJECT,
    MODE,
    NOOP,
    SCHEMA,
    Key,
    RecordError,
    Reference,
    SchemaValue,
    decode_key,
    decode_object,
    decode_schema_value,
)

log = logging.getLogger("gregor.schema_registry")

# The content that a schema id names: its type, text and references.
Content = tuple[str, str, tuple[Reference, ...]]


@dataclass(slots=True)
class Applied:
    """What applying one record did: `accepted` False with a reason when the record was rejected."""

    offset: int
    accepted: bool = True
    reason: str = ""
    # A rejected record that took the key of an accepted version: compaction would keep it and drop the
    # accepted one, so the primary writes this value (the accepted one) again after it.
    repair: SchemaValue | None = None


@dataclass(slots=True)
class SubjectState:
    versions: dict[int, SchemaValue] = field(default_factory=dict)  # soft-deleted ones included

    def live(self) -> list[SchemaValue]:
        return [v for _, v in sorted(self.versions.items()) if not v.deleted]


def content_of(v: SchemaValue) -> Content:
    return (v.schema_type, v.schema, v.references)


class RegistryState:
    def __init__(self) -> None:
        self.subjects: dict[str, SubjectState] = {}
        self.contents: dict[int, Content] = {}  # schema id -> what it names
        self.ids: dict[Content, int] = {}  # and back
        self.holders: dict[int, set[tuple[str, int]]] = {}  # schema id -> the (subject, version)s holding it
        self.max_id = 0
        self.configs: dict[str | None, str] = {}  # subject (None: global) -> compatibility level
        self.modes: dict[str | None, str] = {}  # subject (None: global) -> mode
        self.applied_offset = -1  # the last offset applied

    # --- applying records ---------------------------------------------------------------------------
    def apply_record(self, offset: int, key: bytes | None, value: bytes | None, where: str) -> Applied:
        """Apply one record; a record that does not decode is skipped with a warning naming `where` and the offset."""
        self.applied_offset = offset
        try:
            k = decode_key(key)
            return self._apply(offset, k, value)
        except RecordError as e:
            log.warning("Skipping record at offset %d of %s: %s", offset, where, e)
            return Applied(offset, False, str(e))

    def _apply(self, offset: int, key: Key, value: bytes | None) -> Applied:
        if key.keytype == SCHEMA:
            assert key.subject is not None and key.version is not None
            if value is None:
                self._drop_version(key.subject, key.version)
                return Applied(offset)
            return self._apply_schema(offset, key, decode_schema_value(value))
        if key.keytype == CONFIG:
            self._set(self.configs, key.subject, value, "compatibilityLevel", "CONFIG")
        elif key.keytype == MODE:
            self._set(self.modes, key.subject, value, "mode", "MODE")
        elif key.keytype == DELETE_SUBJECT and value is not None:
            obj = decode_object(value, "DELETE_SUBJECT value")
            upto = obj.get("version")
            subject = self.subjects.get(key.subject or "")
            if subject is not None and isinstance(upto, int):
                for v, sv in subject.versions.items():
                    if v <= upto and not sv.deleted:
                        subject.versions[v] = replace(sv, deleted=True)
        elif key.keytype == CLEAR_SUBJECT and value is not None:
            subject = self.subjects.get(key.subject or "")
            if subject is not None:
                for v in [v for v, sv in subject.versions.items() if sv.deleted]:
                    self._drop_version(key.subject or "", v)
        elif key.keytype == NOOP:
            pass
        return Applied(offset)

    def _set(self, table: dict[str | None, str], subject: str | None, value: bytes | None, name: str, what: str) -> None:
        if value is None:
            table.pop(subject, None)
            return
        obj = decode_object(value, f"{what} value")
        level = obj.get(name)
        if not isinstance(level, str):
            raise RecordError(f"{what} value has no string {name!r}")
        table[subject] = level.upper()

    def _apply_schema(self, offset: int, key: Key, v: SchemaValue) -> Applied:
        if v.subject != key.subject or v.version != key.version or v.version < 1 or v.id < 0:
            return Applied(offset, False, "SCHEMA key and value disagree")
        content = content_of(v)
        subject = self.subjects.get(v.subject)
        existing = subject.versions.get(v.version) if subject is not None else None
        clash = existing is not None and (existing.id != v.id or content_of(existing) != content)
        holder = self.contents.get(v.id)
        if holder is not None and holder != content:
            return Applied(offset, False, f"schema id {v.id} already names another schema", existing if clash else None)
        if clash:
            assert existing is not None
            return Applied(offset, False, f"version {v.version} of subject '{v.subject}' already holds schema id "
                                          f"{existing.id}", existing)
        if subject is None:
            subject = self.subjects[v.subject] = SubjectState()
        subject.versions[v.version] = v
        self.holders.setdefault(v.id, set()).add((v.subject, v.version))
        self.contents[v.id] = content
        self.ids.setdefault(content, v.id)
        self.max_id = max(self.max_id, v.id)
        return Applied(offset)

    def _drop_version(self, subject_name: str, version: int) -> None:
        subject = self.subjects.get(subject_name)
        if subject is None:
            return
        gone = subject.versions.pop(version, None)
        if gone is not None:
            held = self.holders.get(gone.id)
            if held is not None:
                held.discard((subject_name, version))
                if not held:
                    del self.holders[gone.id]
        if not subject.versions:
            del self.subjects[subject_name]
        if gone is not None and not self.subjects_of(gone.id, deleted=True):
            content = self.contents.pop(gone.id, None)  # no version names it any more
            if content is not None and self.ids.get(content) == gone.id:
                del self.ids[content]

    # --- reading ------------------------------------------------------------------------------------
    def subject_names(self, deleted: bool = False) -> list[str]:
        return sorted(s for s, st in self.subjects.items() if deleted or st.live())

    def versions(self, subject: str, deleted: bool = False) -> list[SchemaValue]:
        st = self.subjects.get(subject)
        if st is None:
            return []
        return [v for _, v in sorted(st.versions.items()) if deleted or not v.deleted]

    def version(self, subject: str, version: int) -> SchemaValue | None:
        st = self.subjects.get(subject)
        return st.versions.get(version) if st is not None else None

    def subjects_of(self, schema_id: int, deleted: bool = False) -> list[SchemaValue]:
        """Every subject version holding the schema id, by subject then version."""
        out = []
        for name, version in sorted(self.holders.get(schema_id, ())):
            v = self.subjects[name].versions[version]
            if deleted or not v.deleted:
                out.append(v)
        return out

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of the live schemas that reference the subject version."""
        ids = set()
        for st in self.subjects.values():
            for v in st.live():
                if any(r.subject == subject and r.version == version for r in v.references):
                    ids.add(v.id)
        return sorted(ids)
