"""What every schema format provides (gregor.schema_registry.formats has the overview)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Dependency:
    """A referenced schema, by the name the referencing schema uses for it."""

    name: str
    schema_type: str
    schema: str


class ParsedSchema(Protocol):
    schema_type: str

    def canonical(self) -> str:
        """The text the registry stores for this schema when not asked to normalize."""
        ...

    def normalized(self) -> str:
        """The format's normal form: two schemas meaning the same thing have the same normal form."""
        ...

    def formatted(self, fmt: str) -> str | None:
        """The schema in one of the format's output formats (?format=...), None for an unknown one."""
        ...

    def reader_errors(self, writer: ParsedSchema) -> list[str]:
        """Why data written with `writer` cannot be read with this schema; empty if it can."""
        ...
