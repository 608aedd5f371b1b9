"""Confluent's Schema Registry errors: an HTTP status, an error code and a message, sent as
`{"error_code": 40401, "message": "Subject 'orders-value' not found."}`.

The codes and message texts are Confluent's (clients such as confluent-kafka's SchemaRegistryClient
raise SchemaRegistryError with them, and scripts match on them): 404xx for what does not exist, 409 for
an incompatible schema, 422xx for a request the registry refuses, 500xx for the registry's own failures.
"""

from __future__ import annotations


class RegistryError(Exception):
    """A request the registry answers with an error body."""

    def __init__(self, http_status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.error_code = error_code
        self.message = message

    def body(self) -> dict[str, object]:
        return {"error_code": self.error_code, "message": self.message}


# 404
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
SCHEMAVERSION_SOFT_DELETED = 40406
SCHEMAVERSION_NOT_SOFT_DELETED = 40407
SUBJECT_COMPATIBILITY_NOT_CONFIGURED = 40408
SUBJECT_MODE_NOT_CONFIGURED = 40409
# 409
INCOMPATIBLE_SCHEMA = 409
# 422
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_MODE = 42204
OPERATION_NOT_PERMITTED = 42205
REFERENCE_EXISTS = 42206
ID_DOES_NOT_MATCH = 42207
INVALID_SUBJECT = 42208
SCHEMA_TOO_LARGE = 42209
# 429
TOO_MANY_REQUESTS = 42901
# 500
STORE_ERROR = 50001
OPERATION_TIMEOUT = 50002
REQUEST_FORWARDING_FAILED = 50003
UNKNOWN_LEADER = 50004


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")


def version_not_found(version: int | str) -> RegistryError:
    return RegistryError(404, VERSION_NOT_FOUND, f"Version {version} not found.")


def schema_not_found(schema_id: int | None = None) -> RegistryError:
    return RegistryError(404, SCHEMA_NOT_FOUND, "Schema not found" if schema_id is None else f"Schema {schema_id} not found")


def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, SUBJECT_SOFT_DELETED,
                         f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently")


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, SUBJECT_NOT_SOFT_DELETED,
                         f"Subject '{subject}' was not deleted first before being permanently deleted")


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(404, SCHEMAVERSION_SOFT_DELETED,
                         f"Subject '{subject}' Version {version} was soft deleted.Set permanent=true to delete permanently")


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(404, SCHEMAVERSION_NOT_SOFT_DELETED,
                         f"Subject '{subject}' Version {version} was not deleted first before being permanently deleted")


def compatibility_not_configured(subject: str) -> RegistryError:
    return RegistryError(404, SUBJECT_COMPATIBILITY_NOT_CONFIGURED,
                         f"Subject '{subject}' does not have subject-level compatibility configured")


def mode_not_configured(subject: str) -> RegistryError:
    return RegistryError(404, SUBJECT_MODE_NOT_CONFIGURED, f"Subject '{subject}' does not have subject-level mode configured")


def incompatible(messages: list[str]) -> RegistryError:
    detail = "; ".join(messages[:10]) or "the schema is not compatible"
    return RegistryError(409, INCOMPATIBLE_SCHEMA,
                         f"Schema being registered is incompatible with an earlier schema for subject, details: [{detail}]")


def invalid_schema(why: str) -> RegistryError:
    return RegistryError(422, INVALID_SCHEMA, f"Invalid schema: {why}")


def invalid_version(version: str) -> RegistryError:
    return RegistryError(422, INVALID_VERSION,
                         f"The specified version '{version}' is not a valid version id. Allowed values are between "
                         f"[1, 2^31-1] and the string \"latest\"")


def invalid_compatibility(level: object) -> RegistryError:
    return RegistryError(422, INVALID_COMPATIBILITY_LEVEL,
                         f"Invalid compatibility level {level}. Valid values are none, backward, forward, full, "
                         f"backward_transitive, forward_transitive, and full_transitive")


def invalid_mode(mode: object) -> RegistryError:
    return RegistryError(422, INVALID_MODE, f"Invalid mode {mode}. Valid values are READWRITE, READONLY and IMPORT")


def id_in_use(schema_id: int) -> RegistryError:
    return RegistryError(422, ID_DOES_NOT_MATCH, f"Overwrite new schema with id {schema_id} is not permitted.")


def id_mismatch(known: int, given: int) -> RegistryError:
    return RegistryError(422, ID_DOES_NOT_MATCH, f"Schema already registered with id {known} instead of input id {given}")


def version_exists(subject: str, version: int) -> RegistryError:
    return RegistryError(422, INVALID_VERSION, f"Version {version} of subject {subject} already exists")


def not_permitted(message: str) -> RegistryError:
    return RegistryError(422, OPERATION_NOT_PERMITTED, message)


def reference_exists(message: str) -> RegistryError:
    return RegistryError(422, REFERENCE_EXISTS, message)


def invalid_subject(subject: str) -> RegistryError:
    return RegistryError(422, INVALID_SUBJECT, f"The specified subject '{subject}' is not a valid.")


def schema_too_large(message: str) -> RegistryError:
    return RegistryError(422, SCHEMA_TOO_LARGE, message)


def store_error(message: str) -> RegistryError:
    return RegistryError(500, STORE_ERROR, message)


def timeout(message: str) -> RegistryError:
    return RegistryError(500, OPERATION_TIMEOUT, message)


def forwarding_failed(message: str) -> RegistryError:
    return RegistryError(500, REQUEST_FORWARDING_FAILED, message)


def unknown_leader(message: str) -> RegistryError:
    return RegistryError(500, UNKNOWN_LEADER, message)


def bad_request(message: str) -> RegistryError:
    """A body that is not the JSON the endpoint takes (Confluent's REST layer answers 400, code 400)."""
    return RegistryError(400, 400, message)
