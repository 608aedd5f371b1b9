"""Helpers of the client quota tests: AlterClientQuotas / DescribeClientQuotas and other raw
requests on Gregor's codec over a real socket (the reference client has no client quota API)."""

from __future__ import annotations

from typing import Any

from gregor.protocol import apis
from gregor.protocol.schema import Struct
from gregor.tools.common import _host_port
from gregor.tools.controller_client import Connection


def connect(bootstrap: str, timeout_s: float = 15.0) -> Connection:
    return Connection(*_host_port(bootstrap), timeout_s)


def request(bootstrap: str, api_key: int, version: int, body: dict[str, Any]) -> Struct:
    conn = connect(bootstrap)
    try:
        return conn.request(apis.BY_KEY[api_key], version, body)
    finally:
        conn.close()


def entity(user: str | None | bool = False, client: str | None | bool = False) -> list[dict[str, Any]]:
    """An entity: False leaves a type out, None is its default entity."""
    out = []
    if user is not False:
        out.append({"entity_type": "user", "entity_name": user})
    if client is not False:
        out.append({"entity_type": "client-id", "entity_name": client})
    return out


def alter(bootstrap: str, entries: list[tuple[list[dict[str, Any]], dict[str, float | None]]],
          validate_only: bool = False) -> list[Any]:
    """Set (value) or remove (None) quota keys per entity; the per-entity results."""
    body = {"entries": [{"entity": ent, "ops": [{"key": k, "value": v or 0.0, "remove": v is None}
                                                 for k, v in ops.items()]} for ent, ops in entries],
            "validate_only": validate_only}
    return list(request(bootstrap, 49, 1, body).entries)


def describe(bootstrap: str, components: list[tuple[str, int, str | None]], strict: bool = False,
             version: int = 1) -> Struct:
    body = {"components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
            "strict": strict}
    return request(bootstrap, 48, version, body)


def as_dict(resp: Struct) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    """A describe response as {((type, name), ...): {key: value}}."""
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in resp.entries}
