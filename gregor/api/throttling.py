"""Client quotas applied to requests (KIP-219): who the client is, what it used, throttle_time_ms,
and the muted connection.

The arithmetic is gregor.security.quotas'. Here: a request's client is its principal's name
and its header's client-id (both sanitized as Kafka stores them); Produce records its record
batches' bytes, Fetch its response's bytes, every request the time the event loop spent decoding
and handling it (request_percentage). When a quota is violated the response still goes out at
once, carrying `throttle_time_ms`, and the connection is muted (not read, no further request
processed) for that long, as Kafka does since KIP-219; a Fetch over its quota is answered empty.

Exempt, as in Kafka: ApiVersions and the SASL exchange, and what brokers send each other
(follower Fetches, controller and transaction-marker requests).

Nothing here runs while no quota is configured: callers check `quotas.enabled` first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gregor.configdef import Settings, setting
from gregor.futures import then
from gregor.metadata.store import ENTITY_CONFIGS
from gregor.security.quotas import (
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    UNLIMITED_MUTATIONS,
    ClientQuotaManager,
    ControllerMutationQuota,
    Entity,
    QuotaSettings,
    entity_from_store,
    sanitize,
)

if TYPE_CHECKING:
    from gregor.api.context import RequestContext
    from gregor.metadata.cache import MetadataCache
    from gregor.network.connection import ResponseBody
    from gregor.protocol.schema import Struct

# Never throttled by request_percentage (Kafka: ApiVersions, the SASL exchange and the
# cluster actions brokers send each other). Follower Fetches are exempt too (replica_id >= 0).
EXEMPT_API_KEYS = frozenset({
    4, 5, 6, 7,  # LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown
    17, 18, 36,  # SaslHandshake, ApiVersions, SaslAuthenticate
    27,  # WriteTxnMarkers
    56, 62, 63, 67,  # AlterPartition, BrokerRegistration, BrokerHeartbeat, AllocateProducerIds
})
PRODUCE_API_KEY = 0
FETCH_API_KEY = 1
THROTTLING_QUOTA_EXCEEDED_MESSAGE = "The throttling quota has been exceeded."


@dataclass(frozen=True, slots=True)
class QuotaWindowSettings(Settings):
    """The broker properties the quota manager is built with (gregor.security.quotas.QuotaSettings)."""

    window_num: int = setting("quota.window.num")
    window_size_seconds: int = setting("quota.window.size.seconds")
    controller_window_num: int = setting("controller.quota.window.num")
    controller_window_size_seconds: int = setting("controller.quota.window.size.seconds")
    sensor_expiration_seconds: int = setting("gregor.quota.inactive.sensor.expiration.seconds")
    max_sensors: int = setting("gregor.quota.sensors.max")

    def quota_settings(self) -> QuotaSettings:
        return QuotaSettings(
            window_num=self.window_num,
            window_size_s=float(self.window_size_seconds),
            controller_window_num=self.controller_window_num,
            controller_window_size_s=float(self.controller_window_size_seconds),
            sensor_expiration_s=float(self.sensor_expiration_seconds),
            max_sensors=self.max_sensors,
        )


def follow_quota_configs(quotas: ClientQuotaManager, cache: MetadataCache) -> Callable[[str, str], None]:
    """Load every user and client entity's quotas from the metadata cache, and return the cache
    listener that keeps them current (ENTITY_CONFIGS events name the entity's path: "users/alice",
    "users/alice/clients/app", "clients/<default>")."""

    def entities() -> list[tuple[Entity, dict[str, str]]]:
        out = []
        for entity_type in ("users", "clients"):
            for name, configs in cache.entities(entity_type).items():
                entity = entity_from_store(entity_type, name)
                if entity is not None:
                    out.append((entity, configs))
        return out

    quotas.load(entities())

    def on_change(kind: str, what: str) -> None:
        if kind != ENTITY_CONFIGS:
            return
        entity_type, _, name = what.partition("/")
        entity = entity_from_store(entity_type, name)
        if entity is not None:
            quotas.update(entity, cache.entity_configs(entity_type, name))

    return on_change


def client_of(ctx: RequestContext) -> tuple[str, str]:
    """The sanitized (user, client-id) quotas are looked up by: the principal's name (ANONYMOUS
    before or without authentication, as in Kafka) and the request header's client-id. Kept on the
    connection while its principal and client-id stay the same (they nearly always do)."""
    conn = ctx.connection
    principal = conn.principal
    raw = ctx.header.client_id or ""
    cached = conn.quota_client
    if cached is not None and cached[0] is principal and cached[1] == raw:
        return cached[2]
    names = (sanitize(principal.name), sanitize(raw))
    conn.quota_client = (principal, raw, names)
    return names


def _now() -> float:
    return time.monotonic()


def produce_bytes(req: Struct) -> int:
    """A Produce request's record batch bytes (what producer_byte_rate counts)."""
    nbytes = 0
    for td in req.topic_data:
        for pd in td.partition_data:
            if pd.records is not None:
                nbytes += len(pd.records)
    return nbytes


def fetch_window_bytes(ctx: RequestContext) -> int | None:
    """The most a consumer's Fetch response may carry under its consumer_byte_rate (None: no quota)."""
    user, client = client_of(ctx)
    return ctx.services.quotas.fetch_window_bytes(user, client)


def record_fetch(ctx: RequestContext, nbytes: int) -> int:
    """Record a consumer Fetch response's bytes. When the quota is passed the bytes are taken back
    (the caller answers empty instead, as Kafka does), the connection is muted, and the throttle
    time in ms is returned."""
    user, client = client_of(ctx)
    quotas = ctx.services.quotas
    now = _now()
    ms = quotas.record_fetch(user, client, nbytes, now)
    if ms:
        quotas.unrecord_fetch(user, client, nbytes, now)
        ctx.connection.throttle(ms)
    return ms


def mutation_quota(ctx: RequestContext, strict: bool) -> ControllerMutationQuota:
    """The request's controller_mutation_rate (unlimited when no quota is configured)."""
    quotas = ctx.services.quotas
    if not quotas.enabled:
        return UNLIMITED_MUTATIONS
    user, client = client_of(ctx)
    return quotas.controller_mutation(user, client, strict, _now())


def finish_mutations(ctx: RequestContext, quota: ControllerMutationQuota, body: dict[str, Any]) -> dict[str, Any]:
    """Carry a mutation throttle into the response and mute the connection for it."""
    if quota.throttle_ms:
        body["throttle_time_ms"] = max(body.get("throttle_time_ms", 0), quota.throttle_ms)
        ctx.connection.throttle(quota.throttle_ms)
    return body


def after_request(ctx: RequestContext, api_key: int, req: Struct, resp: ResponseBody | None,
                  elapsed_ns: int) -> ResponseBody | None:
    """Record the time spent on a request (request_percentage) and, for Produce, its record bytes
    (producer_byte_rate); carry the larger throttle (or the one the handler set: Fetch bytes,
    mutations) in the response's throttle_time_ms and mute the connection for it. Produce is
    recorded here rather than in its handler, so the Produce path has no quota code of its own."""
    if api_key in EXEMPT_API_KEYS or (api_key == FETCH_API_KEY and req.replica_id >= 0):
        return resp
    user, client = client_of(ctx)
    quotas = ctx.services.quotas
    now = _now()
    types = quotas.types
    ms = quotas.record_request_time(user, client, elapsed_ns, now) if REQUEST_PERCENTAGE in types else 0
    if api_key == PRODUCE_API_KEY and PRODUCER_BYTE_RATE in types:
        ms = max(ms, quotas.record_produce(user, client, produce_bytes(req), now))
    if not ms:
        return resp
    ctx.connection.throttle(ms)  # also when no response is sent (acks=0), as Kafka mutes then too
    if resp is None:
        return resp

    def patch(body: Any) -> Any:
        if isinstance(body, dict):
            body["throttle_time_ms"] = max(body.get("throttle_time_ms", 0), ms)
        elif hasattr(body, "throttle_time_ms"):
            body.throttle_time_ms = max(body.throttle_time_ms, ms)
        return body

    if isinstance(resp, asyncio.Future):
        return then(resp, patch)
    return patch(resp)
