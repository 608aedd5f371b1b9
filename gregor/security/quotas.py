"""Client quotas (KIP-13, KIP-124, KIP-219, KIP-546, KIP-599), sans-IO: what a client may use and
how long it is throttled when it used more.

Quota types, by their entity config keys:
- `producer_byte_rate`: bytes/s of the record batches a client produces;
- `consumer_byte_rate`: bytes/s of the Fetch responses it is sent;
- `request_percentage`: time the event loop spends on its requests, as a percentage of one
  thread, over the quota window (KIP-124);
- `controller_mutation_rate`: partitions created, deleted or added per second (KIP-599), a token
  bucket whose burst is the rate times the window.

Which quota applies to a (user, client-id) is decided per quota type by the first entity in
Kafka's precedence (KIP-55/KIP-546) that sets it:

    /config/users/<user>/clients/<client-id>      /config/users/<default>/clients/<client-id>
    /config/users/<user>/clients/<default>        /config/users/<default>/clients/<default>
    /config/users/<user>                          /config/users/<default>
                                                  /config/clients/<client-id>
                                                  /config/clients/<default>

(read down the left column, then the right). The rate is shared by the clients the matched
entity names: a quota set for a client-id is shared by every user of that client-id, one set
for `<default>` user is each user's own, as Kafka's metric tags make it.

Rates are Kafka's windowed rate (gregor.rate.SampledRate) over `quota.window.num`
samples of `quota.window.size.seconds`. When recording makes a rate pass its quota the client
is throttled for the time that brings the rate over the whole window back to the quota,
(rate - quota) / quota x window, bounded by the full window (num x size), as Kafka's
ClientQuotaManager computes it; a token bucket throttles for the time its debt takes to refill.

Memory is bounded: a sensor (one rate per quota type and entity) that recorded nothing for
`gregor.quota.inactive.sensor.expiration.seconds` (Kafka expires them after an hour) is dropped,
and at most `gregor.quota.sensors.max` are tracked; past that the least recently used goes.

Sans-IO: callers pass times (seconds on a monotonic clock) and get throttle times in ms.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gregor.rate import SampledRate
from gregor.security.principal import desanitize, sanitize  # noqa: F401 - re-exported to the quota handlers

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
QUOTA_TYPES: dict[str, str] = {  # key -> Kafka's config type (whole numbers for "long")
    PRODUCER_BYTE_RATE: "long",
    CONSUMER_BYTE_RATE: "long",
    REQUEST_PERCENTAGE: "double",
    CONTROLLER_MUTATION_RATE: "double",
}

# Entity types, as the DescribeClientQuotas/AlterClientQuotas protocol names them.
USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
DEFAULT = "<default>"  # the default entity's name in the metadata store (Kafka's ZooKeeper name)
NANOS_TO_PERCENTAGE = 100.0 / 1e9  # request time in ns -> percentage-seconds of one thread

# An entity: (sanitized user or DEFAULT or None, sanitized client-id or DEFAULT or None); None
# when the entity does not name that type. Sanitized as Kafka does (URL encoding), so a real
# name can never read "<default>" and a user name with "/" cannot break the store's paths.
Entity = tuple[str | None, str | None]


def store_key(entity: Entity) -> tuple[str, str]:
    """(entity_type, entity) in the metadata store's terms: "users" "alice", "users"
    "alice/clients/app", "clients" "<default>"."""
    user, client = entity
    if user is not None:
        return "users", user if client is None else f"{user}/clients/{client}"
    assert client is not None, "an entity names a user, a client-id or both"
    return "clients", client


def entity_from_store(entity_type: str, entity: str) -> Entity | None:
    """The inverse of store_key; None for names that are not quota entities."""
    if entity_type == "clients":
        return (None, entity) if entity and "/" not in entity else None
    if entity_type != "users":
        return None
    user, sep, client = entity.partition("/clients/")
    if not user or "/" in user or (sep and (not client or "/" in client)):
        return None
    return (user, client if sep else None)


def quota_configs(configs: Mapping[str, str]) -> dict[str, float]:
    """The quota values among an entity's configs (which also hold e.g. SCRAM credentials);
    values that do not parse are ignored (they were validated when stored)."""
    out: dict[str, float] = {}
    for key, value in configs.items():
        if key in QUOTA_TYPES:
            try:
                v = float(value)
            except ValueError:
                continue
            if v > 0 and math.isfinite(v):
                out[key] = v
    return out


def validate_quota_value(key: str, value: float) -> str | None:
    """Why `key=value` cannot be stored (Kafka's messages), or None when it can."""
    kind = QUOTA_TYPES.get(key)
    if kind is None:
        return f"Invalid configuration key {key}"
    if not math.isfinite(value) or value <= 0:
        return f"Quota {key} must be a positive number, got {value}"
    if kind == "long" and (value != math.floor(value) or value > 2**63 - 1):
        return f"Configuration {key} must be a Long value"
    return None


def format_quota_value(key: str, value: float) -> str:
    """As stored: whole numbers for Kafka's long quotas, Java's double formatting otherwise."""
    if QUOTA_TYPES.get(key) == "long":
        return str(int(value))
    return repr(float(value))


def precedence(user: str, client: str) -> tuple[tuple[Entity, Entity], ...]:
    """KIP-546's order for a sanitized (user, client-id): (entity to look up, the entity whose
    rate it shares: the metric tags, "" where the quota does not distinguish)."""
    return (
        ((user, client), (user, client)),
        ((user, DEFAULT), (user, client)),
        ((user, None), (user, "")),
        ((DEFAULT, client), (user, client)),
        ((DEFAULT, DEFAULT), (user, client)),
        ((DEFAULT, None), (user, "")),
        ((None, client), ("", client)),
        ((None, DEFAULT), ("", client)),
    )


@dataclass(frozen=True, slots=True)
class QuotaSettings:
    """The broker configs the quotas read (Kafka's names; see gregor.security.config)."""

    window_num: int = 11  # quota.window.num
    window_size_s: float = 1.0  # quota.window.size.seconds
    controller_window_num: int = 11  # controller.quota.window.num
    controller_window_size_s: float = 1.0  # controller.quota.window.size.seconds
    sensor_expiration_s: float = 3600.0  # gregor.quota.inactive.sensor.expiration.seconds
    max_sensors: int = 10_000  # gregor.quota.sensors.max


class TokenBucket:
    """KIP-599's bucket: refills at `rate` per second up to a burst of rate x window; recording
    takes tokens and may leave it in debt, which is what throttles."""

    __slots__ = ("burst", "last_record_s", "rate", "tokens", "updated_s")

    def __init__(self, rate: float, window_s: float, now: float) -> None:
        self.rate = rate
        self.burst = rate * window_s
        self.tokens = self.burst
        self.updated_s = now
        self.last_record_s = now

    def _refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + self.rate * max(now - self.updated_s, 0.0))
        self.updated_s = now

    def measure(self, now: float) -> float:
        self._refill(now)
        return self.tokens

    def record(self, permits: float, now: float) -> None:
        self._refill(now)
        self.tokens = min(self.burst, self.tokens - permits)
        self.last_record_s = now

    def throttle_ms(self, now: float) -> int:
        """How long the debt takes to refill (0 when not in debt)."""
        tokens = self.measure(now)
        return 0 if tokens >= 0 else round(-tokens / self.rate * 1000)


@dataclass(slots=True)
class ControllerMutationQuota:
    """One request's view of its controller_mutation_rate (KIP-599). Strict (CreateTopics v6+,
    DeleteTopics v5+, CreatePartitions v3+): a topic is refused with THROTTLING_QUOTA_EXCEEDED when
    the bucket is already in debt; the topic that puts it in debt is still accepted, as in Kafka.
    Permissive (older versions): everything is accepted and the client throttled after."""

    bucket: TokenBucket | None
    strict: bool
    now: float
    throttle_ms: int = 0

    def exceeded(self) -> bool:
        """Whether the next mutation must be refused (strict quotas only)."""
        if self.bucket is None or not self.strict:
            return False
        if self.bucket.measure(self.now) < 0:
            self.throttle_ms = max(self.throttle_ms, self.bucket.throttle_ms(self.now))
            return True
        return False

    def record(self, permits: int) -> None:
        if self.bucket is None or permits <= 0:
            return
        self.bucket.record(permits, self.now)
        if not self.strict:
            self.throttle_ms = max(self.throttle_ms, self.bucket.throttle_ms(self.now))


UNLIMITED_MUTATIONS = ControllerMutationQuota(None, False, 0.0)


class ClientQuotaManager:
    """Every quota type's entities, rates and throttle times. Event-loop thread only.

    `enabled` is False while no entity sets any quota: the broker's request path checks only
    that attribute, so quotas cost nothing until one is configured."""

    def __init__(self, settings: QuotaSettings | None = None) -> None:
        self.settings = settings or QuotaSettings()
        self.enabled = False
        self.types: frozenset[str] = frozenset()  # the quota keys some entity sets: the others cost nothing
        self.max_throttle_ms = round(self.settings.window_num * self.settings.window_size_s * 1000)
        self._quotas: dict[Entity, dict[str, float]] = {}
        # (user, client) -> per quota key: (bound, sensor tags) or None; rebuilt on config changes.
        self._resolved: dict[tuple[str, str], dict[str, tuple[float, Entity] | None]] = {}
        self._sensors: OrderedDict[tuple[str, Entity], SampledRate | TokenBucket] = OrderedDict()
        self._next_expiry_s = 0.0

    # --- configuration ---------------------------------------------------------------
    def load(self, entities: Iterable[tuple[Entity, Mapping[str, str]]]) -> None:
        """Replace every entity's quotas (at start, from the metadata cache)."""
        self._quotas = {}
        for entity, configs in entities:
            values = quota_configs(configs)
            if values:
                self._quotas[entity] = values
        self._changed()

    def update(self, entity: Entity, configs: Mapping[str, str]) -> None:
        """One entity's configs changed (an ENTITY_CONFIGS event)."""
        values = quota_configs(configs)
        if values == self._quotas.get(entity, {}):
            return
        if values:
            self._quotas[entity] = values
        else:
            self._quotas.pop(entity, None)
        self._changed()

    def _changed(self) -> None:
        self.enabled = bool(self._quotas)
        self.types = frozenset(k for values in self._quotas.values() for k in values)
        self._resolved.clear()
        # Rates keep their history across a change of bound, as Kafka's sensors do; a token
        # bucket is rebuilt when its rate changed (controller_mutation).

    def quotas(self) -> dict[Entity, dict[str, float]]:
        return self._quotas

    def resolve(self, user: str, client: str) -> dict[str, tuple[float, Entity] | None]:
        """The quota bound and sensor tags of each quota type for a sanitized (user, client-id)."""
        key = (user, client)
        got = self._resolved.get(key)
        if got is not None:
            return got
        got = {}
        order = precedence(user, client)
        for qkey in QUOTA_TYPES:
            got[qkey] = None
            for entity, tags in order:
                values = self._quotas.get(entity)
                if values is not None and qkey in values:
                    got[qkey] = (values[qkey], tags)
                    break
        if len(self._resolved) >= self.settings.max_sensors:
            self._resolved.clear()  # bounded; rebuilt on demand
        self._resolved[key] = got
        return got

    # --- sensors ---------------------------------------------------------------------
    def _sensor(self, qkey: str, tags: Entity, now: float) -> SampledRate:
        k = (qkey, tags)
        sensor = self._sensors.get(k)
        if sensor is None:
            self._expire(now)
            sensor = SampledRate(self.settings.window_num, self.settings.window_size_s)
            self._sensors[k] = sensor
        else:
            self._sensors.move_to_end(k)
        assert isinstance(sensor, SampledRate)
        return sensor

    def _expire(self, now: float) -> None:
        """Drop sensors idle past the expiration (least recently used first; looked at most once a
        minute), and the least recently used while at gregor.quota.sensors.max."""
        sensors = self._sensors
        while len(sensors) >= self.settings.max_sensors:
            sensors.popitem(last=False)
        if now < self._next_expiry_s:
            return
        self._next_expiry_s = now + min(self.settings.sensor_expiration_s, 60.0)
        horizon = now - self.settings.sensor_expiration_s
        while sensors:
            k, s = next(iter(sensors.items()))
            if s.last_record_s > horizon:
                break
            del sensors[k]

    def sensor_count(self) -> int:
        return len(self._sensors)

    def _record(self, qkey: str, user: str, client: str, value: float, now: float) -> int:
        resolved = self._resolved.get((user, client)) or self.resolve(user, client)
        got = resolved[qkey]
        if got is None:
            return 0
        bound, tags = got
        if now >= self._next_expiry_s:
            self._expire(now)
        sensor = self._sensors.get((qkey, tags))
        if sensor is None:
            sensor = self._sensor(qkey, tags, now)
        else:
            self._sensors.move_to_end((qkey, tags))
        rate, window_s = sensor.record_and_measure(value, now)  # type: ignore[union-attr]
        if rate <= bound:
            return 0
        return min(round((rate - bound) / bound * window_s * 1000), self.max_throttle_ms)

    # --- the quota types ---------------------------------------------------------------
    def record_produce(self, user: str, client: str, nbytes: int, now: float) -> int:
        """Record a Produce request's record bytes; the throttle time in ms."""
        return self._record(PRODUCER_BYTE_RATE, user, client, nbytes, now)

    def fetch_window_bytes(self, user: str, client: str) -> int | None:
        """The most one Fetch response may carry: what the quota allows over the window's minimum
        span, samples - 1 (Kafka's getMaxValueInQuotaWindow; a larger response is throttled even
        after a quiet spell). None when the client has no fetch quota."""
        got = self.resolve(user, client)[CONSUMER_BYTE_RATE]
        if got is None:
            return None
        span_s = max(self.settings.window_num - 1, 1) * self.settings.window_size_s
        return max(int(min(got[0] * span_s, 2**31 - 1)), 1)

    def record_fetch(self, user: str, client: str, nbytes: int, now: float) -> int:
        """Record a Fetch response's bytes; the throttle time in ms. When it is positive the
        caller sends an empty response instead and takes the bytes back (unrecord_fetch)."""
        return self._record(CONSUMER_BYTE_RATE, user, client, nbytes, now)

    def unrecord_fetch(self, user: str, client: str, nbytes: int, now: float) -> None:
        got = self.resolve(user, client)[CONSUMER_BYTE_RATE]
        if got is not None:
            self._sensor(CONSUMER_BYTE_RATE, got[1], now).record(-nbytes, now)

    def record_request_time(self, user: str, client: str, nanos: int, now: float) -> int:
        """Record time spent on a request (request_percentage); the throttle time in ms."""
        return self._record(REQUEST_PERCENTAGE, user, client, nanos * NANOS_TO_PERCENTAGE, now)

    def controller_mutation(self, user: str, client: str, strict: bool, now: float) -> ControllerMutationQuota:
        got = self.resolve(user, client)[CONTROLLER_MUTATION_RATE]
        if got is None:
            return UNLIMITED_MUTATIONS
        rate, tags = got
        k = (CONTROLLER_MUTATION_RATE, tags)
        bucket = self._sensors.get(k)
        if not isinstance(bucket, TokenBucket) or bucket.rate != rate:
            self._expire(now)
            window_s = self.settings.controller_window_num * self.settings.controller_window_size_s
            bucket = TokenBucket(rate, window_s, now)
            self._sensors[k] = bucket
        else:
            self._sensors.move_to_end(k)
        return ControllerMutationQuota(bucket, strict, now)

    # --- DescribeClientQuotas ------------------------------------------------------------
    def describe(self, exact: Mapping[str, str | None], any_of: Iterable[str], strict: bool
                 ) -> list[tuple[Entity, dict[str, float]]]:
        """Entities matching a filter (Kafka's ClientQuotasImage.describe): every type in
        `exact` named (None: the default entity) as given, every type in `any_of` named at all;
        with `strict`, no other types. Names in and out are sanitized."""
        wanted_any = set(any_of)
        out = []
        for entity, values in self._quotas.items():
            names = {t: n for t, n in ((USER, entity[0]), (CLIENT_ID, entity[1])) if n is not None}
            if strict and len(names) != len(exact) + len(wanted_any):
                continue
            ok = all(t in names and names[t] == (DEFAULT if n is None else n) for t, n in exact.items())
            if ok and all(t in names for t in wanted_any):
                out.append((entity, dict(values)))
        return out
