"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), KIP-554.

Credentials are user entity configs in the metadata store (`SCRAM-SHA-256` / `SCRAM-SHA-512` in
/config/users/<user> on ZooKeeper, Kafka's place and form), so they survive restarts and every
broker of a cluster authenticates with the same ones; any broker may alter them, as in Kafka's
ZooKeeper mode. The client sends the salt and Hi(password, salt, iterations); the broker derives
and stores StoredKey and ServerKey only.

Errors are per user, with Kafka's codes and messages: DUPLICATE_RESOURCE (a user named twice for
one mechanism in an alter, or twice in a describe), UNSUPPORTED_SASL_MECHANISM (an unknown
mechanism number), UNACCEPTABLE_CREDENTIAL (empty user name, iterations outside 4096..16384,
empty salt or salted password), RESOURCE_NOT_FOUND (deleting or describing a credential that
does not exist). A user's alterations are applied together or not at all.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from gregor.api.context import RequestContext
from gregor.metadata.store import SetEntityConfigs, entity_path
from gregor.protocol.errors import ErrorCode
from gregor.protocol.schema import Struct
from gregor.security.principal import desanitize, sanitize
from gregor.security.sasl.scram import (
    BY_TYPE,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_salted_password,
)

_WAITING: set[asyncio.Future[Any]] = set()  # the loop holds tasks weakly


class _UserError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _credentials(configs: dict[str, str]) -> list[tuple[int, int]]:
    """(mechanism type, iterations) of the SCRAM credentials among a user's entity configs."""
    out = []
    for mech in BY_TYPE.values():
        text = configs.get(mech.mechanism_name)
        if text:
            try:
                out.append((mech.type_code, ScramCredential.from_config(text).iterations))
            except ValueError:
                continue  # a malformed stored credential is not one (authentication ignores it too)
    return out


def handle_describe_user_scram_credentials(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    cache = ctx.services.metadata_cache
    results = []
    if not req.users:  # null or empty: every user that has a credential
        for entity, configs in sorted(cache.entities("users").items()):
            infos = _credentials(configs)
            if infos and "/" not in entity:
                results.append(_describe_result(desanitize(entity), ErrorCode.NONE, None, infos))
    else:
        names = [u.name for u in req.users]
        counts = Counter(names)
        for user in dict.fromkeys(names):
            if counts[user] > 1:
                results.append(_describe_result(user, ErrorCode.DUPLICATE_RESOURCE,
                                                "Cannot describe SCRAM credentials for the same user twice in a "
                                                "single request"))
                continue
            infos = _credentials(cache.entity_configs("users", sanitize(user))) if user else []
            if not infos:
                results.append(_describe_result(user, ErrorCode.RESOURCE_NOT_FOUND,
                                                "Attempt to describe a user credential that does not exist"))
            else:
                results.append(_describe_result(user, ErrorCode.NONE, None, infos))
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "results": results}


def _describe_result(user: str, code: ErrorCode, message: str | None,
                     infos: list[tuple[int, int]] | None = None) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message,
            "credential_infos": [{"mechanism": m, "iterations": i} for m, i in infos or []]}


def _check_mechanism(code: int) -> str:
    mech = BY_TYPE.get(code)
    if mech is None:
        raise _UserError(ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    return mech.mechanism_name


def _new_configs(current: dict[str, str], deletions: list[Struct], upsertions: list[Struct]) -> dict[str, str]:
    """The user's entity configs after its alterations; raises _UserError for the first bad one."""
    new = dict(current)
    for d in deletions:
        if not d.name:
            raise _UserError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        name = _check_mechanism(d.mechanism)
        if name not in new:
            raise _UserError(ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        del new[name]
    for u in upsertions:
        if not u.name:
            raise _UserError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        name = _check_mechanism(u.mechanism)
        if u.iterations < MIN_ITERATIONS:
            raise _UserError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        if u.iterations > MAX_ITERATIONS:
            raise _UserError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        salt, salted = bytes(u.salt or b""), bytes(u.salted_password or b"")
        if not salt or not salted:
            raise _UserError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
        new[name] = credential_from_salted_password(BY_TYPE[u.mechanism], salted, salt, u.iterations).to_config()
    return new


def handle_alter_user_scram_credentials(ctx: RequestContext, req: Struct) -> dict[str, Any] | asyncio.Future[Any]:
    cache = ctx.services.metadata_cache
    by_user: dict[str, tuple[list[Struct], list[Struct]]] = {}
    pairs: Counter[tuple[str, int]] = Counter()
    for d in req.deletions:
        by_user.setdefault(d.name, ([], []))[0].append(d)
        pairs[(d.name, d.mechanism)] += 1
    for u in req.upsertions:
        by_user.setdefault(u.name, ([], []))[1].append(u)
        pairs[(u.name, u.mechanism)] += 1
    duplicated = {user for (user, _), n in pairs.items() if n > 1}
    results: dict[str, dict[str, Any]] = {}
    writes: list[tuple[str, SetEntityConfigs]] = []
    for user, (deletions, upsertions) in by_user.items():
        results[user] = {"user": user, "error_code": ErrorCode.NONE, "error_message": None}
        try:
            if user in duplicated:
                raise _UserError(ErrorCode.DUPLICATE_RESOURCE,
                                 "A user credential cannot be altered twice in the same request")
            if user:
                try:
                    entity_path("users", sanitize(user))
                except ValueError:
                    raise _UserError(ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Invalid user name {user!r}") from None
            new = _new_configs(cache.entity_configs("users", sanitize(user)), deletions, upsertions)
            writes.append((user, SetEntityConfigs("users", sanitize(user), new)))
        except _UserError as e:
            results[user].update(error_code=e.code, error_message=e.message)
    body = {"throttle_time_ms": 0, "results": list(results.values())}
    if not writes:
        return body

    async def write() -> dict[str, Any]:
        errors = await ctx.services.topic_admin.write([change for _, change in writes])
        for (user, _), err in zip(writes, errors, strict=True):
            if err is not None:
                results[user].update(error_code=err.code, error_message=err.message)
        return body

    task = asyncio.ensure_future(write())
    _WAITING.add(task)
    task.add_done_callback(_WAITING.discard)
    return task
