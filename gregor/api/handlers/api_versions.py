"""ApiVersions: advertise exactly the APIs that have handlers, at the codec's version ranges."""

from __future__ import annotations

from typing import Any

from gregor.api.context import RequestContext
from gregor.protocol.errors import ErrorCode
from gregor.protocol.schema import Api, Struct


def handle_api_versions(ctx: RequestContext, req: Struct) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.NONE,
        "api_keys": [
            {"api_key": a.key, "min_version": _advertised_min(a), "max_version": a.max_version}
            for a in ctx.services.supported_apis
        ],
        "throttle_time_ms": 0,
    }


def _advertised_min(a: Api) -> int:
    return a.min_version if a.advertised_min_version is None else a.advertised_min_version
