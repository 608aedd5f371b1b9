"""What a typed conversion can fail with."""

from __future__ import annotations


class TypedError(Exception):
    """Base of the errors of gregor.typed."""


class UnsupportedSchema(TypedError):
    """A schema that has no Arrow (Spark) type: a recursive type, a JSON Schema construct without a fixed
    type, a decimal wider than Spark's 38 digits, ..."""


class RegistryLookupError(TypedError):
    """The schema registry refused or failed a request: `status` is the HTTP status (0 when it could not be
    reached), `error_code` Confluent's code from the body (40401 subject not found, 40403 schema not found, ...)."""

    def __init__(self, message: str, status: int = 0, error_code: int = 0) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code


class CorruptRecordError(TypedError):
    """FAILFAST: a payload that cannot be decoded (`row` is its position in the column, `reason` why)."""

    def __init__(self, row: int, reason: str, offset: int | None = None) -> None:
        where = f"row {row}" if offset is None else f"offset {offset}"
        super().__init__(f"malformed record at {where}: {reason} (mode PERMISSIVE keeps such rows, with the raw "
                         "bytes in _corrupt_record)")
        self.row = row
        self.reason = reason
        self.offset = offset
