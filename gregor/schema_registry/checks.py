"""Schema-checked topics: each produced batch's schema ids checked against a schema registry.

A topic with `confluent.value.schema.validation=true` (or the key's) takes only records whose value is
in Confluent's wire format with a schema id the registry holds under the subject the topic's
`confluent.value.subject.name.strategy` names, as Confluent Server checks them. The record walk (C, in
gregor.protocol.record_walk) already refused records without the prefix and reported each batch's
distinct ids, so what is left here is per batch, never per record: a few cache lookups, and on a miss
one lookup per unknown id in the registry, asynchronously.

The registry is a `SchemaSource` (gregor.schema_registry.sources): the one this broker runs, read
directly (its applied state, no HTTP), or an external one over Confluent's REST API
(`confluent.schema.registry.url`). What the source says about an id (its subjects, its schema) is kept
in a least-recently-used cache of `confluent.schema.registry.cache.size` ids. An id that accepts is used
until evicted (or, with the broker's own registry, until its state changes); an id that is unknown, or
not under the subject a record needs, is asked again only after `confluent.schema.registry.cache.refresh.ms`,
so a producer sending bad ids costs the registry one lookup per id per interval. The lookups a batch
needs run one after another in order of first appearance and stop at the first that refuses it (a
hostile batch of random ids costs one lookup, not one per record), at most
`confluent.schema.registry.max.inflight.lookups` at once broker-wide, the same id looked up once for
every batch that waits for it, all within `confluent.schema.registry.request.timeout.ms`.

Failures: a record whose id is unknown, or not registered under its subject, is refused with
INVALID_RECORD and a KIP-467 record error per such record ("offset 3 in the batch: value: unknown schema
id 42"); nothing of the batch is appended. A registry that cannot answer in time (down, refusing the
broker's credentials, still starting) makes the batch fail with REQUEST_TIMED_OUT and "schema registry
unavailable: ...": a retriable error, so producers retry rather than lose records, as Confluent Server
answers a retriable error when its registry is unreachable. Null keys and values (tombstones) pass, as
in Confluent Server.

Deep checks (`gregor.value.schema.validation.deep=true`) decode every checked payload with its schema
(gregor.schema_registry.formats.payloads) on the produce path's validation threads.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from gregor.configdef import Settings, setting
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import BatchHeader, decode_records
from gregor.protocol.validator import FIELD_NAMES, KEY_FIELD, VALUE_FIELD, BatchValidationError, SchemaIds
from gregor.storage.config import RECORD_NAME_STRATEGY, TOPIC_NAME_STRATEGY, LogConfig

log = logging.getLogger("gregor.schema_registry.checks")

_ACCEPT = ""  # a verdict: the id is fine for the field


@dataclass(frozen=True, slots=True)
class SchemaCheckSettings(Settings):
    """The broker properties of schema checks (the registry's own are RegistryConfig)."""

    registry_urls: list[str] = setting("confluent.schema.registry.url")
    user_info: str | None = setting("confluent.basic.auth.user.info")
    truststore: str | None = setting("confluent.ssl.truststore.location")
    cache_size: int = setting("confluent.schema.registry.cache.size")
    refresh_ms: int = setting("confluent.schema.registry.cache.refresh.ms")
    timeout_ms: int = setting("confluent.schema.registry.request.timeout.ms")
    max_inflight_lookups: int = setting("confluent.schema.registry.max.inflight.lookups")


# --- what a topic asks ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldPolicy:
    """How one field (0 key, 1 value) of a topic's records is checked."""

    field: int
    topic: str
    strategy: str
    deep: bool
    key: str = field(init=False, compare=False)  # names what decides the subject, for the accepted-ids cache

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.field}|{self.strategy}|{self.topic}")

    @property
    def name(self) -> str:
        return FIELD_NAMES[self.field]

    @property
    def needs_record_name(self) -> bool:
        return self.strategy != TOPIC_NAME_STRATEGY

    def subject(self, record_name: str | None) -> str | None:
        """The subject an id must be registered under (None: the strategy needs a record name there is not)."""
        if self.strategy == TOPIC_NAME_STRATEGY:
            return f"{self.topic}-{self.name}"
        if record_name is None:
            return None
        return record_name if self.strategy == RECORD_NAME_STRATEGY else f"{self.topic}-{record_name}"


@dataclass(frozen=True, slots=True)
class SchemaPolicy:
    """A schema-checked topic's checks: per field, None when the field is not checked."""

    key: FieldPolicy | None
    value: FieldPolicy | None

    @property
    def fields(self) -> int:
        """The walk's fields (gregor.protocol.validator.KEY_FIELD / VALUE_FIELD)."""
        return (KEY_FIELD if self.key else 0) | (VALUE_FIELD if self.value else 0)

    @property
    def deep(self) -> bool:
        return bool((self.key and self.key.deep) or (self.value and self.value.deep))

    def pairs(self, ids: SchemaIds) -> Iterator[tuple[FieldPolicy, int]]:
        """(field policy, schema id) for every distinct id of the batch, keys first."""
        for fp, field_ids in ((self.key, ids.keys), (self.value, ids.values)):
            if fp is not None:
                for sid in field_ids:
                    yield fp, sid


def schema_policy(topic: str, cfg: LogConfig) -> SchemaPolicy | None:
    """The topic's schema checks, None for a topic that has none."""
    if not (cfg.confluent_key_schema_validation or cfg.confluent_value_schema_validation):
        return None
    key = FieldPolicy(0, topic, cfg.confluent_key_subject_name_strategy, cfg.gregor_key_schema_validation_deep) \
        if cfg.confluent_key_schema_validation else None
    value = FieldPolicy(1, topic, cfg.confluent_value_subject_name_strategy, cfg.gregor_value_schema_validation_deep) \
        if cfg.confluent_value_schema_validation else None
    return SchemaPolicy(key, value)


# --- what the registry says about an id ---------------------------------------------------------------


@dataclass(slots=True)
class SchemaInfo:
    """One schema id as the registry last answered: `known` False for an id it does not hold; `checked_at`
    (time.monotonic) when it was last asked (0: never, only read from a local state); `token` the source's
    state when this was built (gregor.schema_registry.sources: the local registry's applied offset)."""

    schema_id: int
    known: bool
    subjects: frozenset[str] = frozenset()
    schema: tuple[str, str, tuple[Any, ...]] | None = None  # (type, text, references)
    checked_at: float = 0.0
    token: int = 0
    record_name: str | None = None
    named: bool = False  # record_name was computed
    decoder: Callable[[bytes], str | None] | None = None
    decodable: bool | None = None  # None: decoder not built yet; False: payloads of this schema are not checked


class SchemaSource(Protocol):
    """A schema registry as the checks use it (gregor.schema_registry.sources has the two kinds)."""

    def token(self) -> int:
        """Changes whenever what `peek` would answer may have changed."""

    def peek(self, schema_id: int, cached: SchemaInfo | None) -> SchemaInfo | None:
        """The id's info from what the source holds now, without waiting; None when only `fetch` can tell."""

    async def fetch(self, schema_id: int) -> SchemaInfo:
        """Ask the registry (after catching up with it); raises KafkaError REQUEST_TIMED_OUT when it cannot answer."""

    async def parse(self, info: SchemaInfo) -> Any:
        """The id's schema parsed (gregor.schema_registry.formats), references resolved."""

    def note(self) -> str:
        """What is known of why the registry does not answer ("" if nothing)."""

    async def close(self) -> None: ...


def unavailable(why: str) -> KafkaError:
    return KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"schema registry unavailable: {why}")


# --- the checks ---------------------------------------------------------------------------------------


BadIds = dict[tuple[int, int], str]  # (field, schema id) -> why records with it are refused


@dataclass(slots=True)
class _Lookups:
    inflight: dict[int, asyncio.Future[SchemaInfo]] = field(default_factory=dict)
    slots: asyncio.Semaphore | None = None


class SchemaChecks:
    """The broker's schema checks (see the module docstring): one per broker, on its event loop."""

    def __init__(self, settings: SchemaCheckSettings, source: SchemaSource) -> None:
        self.settings = settings
        self.source = source
        self.refresh_s = settings.refresh_ms / 1000
        self.timeout_s = settings.timeout_ms / 1000
        self._cache: collections.OrderedDict[int, SchemaInfo] = collections.OrderedDict()
        # (field policy key, schema id) -> the source's token when it was accepted: the per-batch fast path.
        self._accepted: dict[tuple[str, int], int] = {}
        self._lookups = _Lookups()

    async def close(self) -> None:
        """At broker shutdown: lookups under way end with the source (their batches get REQUEST_TIMED_OUT)."""
        await self.source.close()

    # --- per batch ----------------------------------------------------------------------------------
    def check(self, policy: SchemaPolicy, ids: SchemaIds) -> BadIds | Awaitable[BadIds] | None:
        """The batch's ids against the registry: None when every id is fine; the refused ids; or, when the
        registry must be asked, an awaitable of the refused ids (empty when none), which raises KafkaError
        REQUEST_TIMED_OUT when it cannot be asked in time."""
        token, accepted = self.source.token(), self._accepted
        for fp, field_ids in ((policy.key, ids.keys), (policy.value, ids.values)):
            if fp is not None:
                for sid in field_ids:
                    if accepted.get((fp.key, sid)) != token:
                        return self._check_slowly(policy, ids, token)
        return None  # the common case: every id of the batch was accepted for its field since the source changed

    def _check_slowly(self, policy: SchemaPolicy, ids: SchemaIds, token: int) -> BadIds | Awaitable[BadIds] | None:
        todo: list[tuple[FieldPolicy, int]] = []
        bad: BadIds = {}
        now = time.monotonic()
        for fp, sid in policy.pairs(ids):
            verdict = self._verdict(fp, sid, now)
            if verdict is None:
                todo.append((fp, sid))
            elif verdict != _ACCEPT:
                bad[(fp.field, sid)] = verdict
            else:
                self._accept(fp, sid, token)
        if bad:
            return bad  # the batch is refused: nothing more to look up
        return self._check_later(todo) if todo else None

    def _accept(self, fp: FieldPolicy, sid: int, token: int) -> None:
        accepted = self._accepted
        accepted[(fp.key, sid)] = token
        if len(accepted) > self.settings.cache_size:
            del accepted[next(iter(accepted))]  # the oldest entry

    async def _check_later(self, todo: list[tuple[FieldPolicy, int]]) -> BadIds:
        bad: BadIds = {}
        try:
            async with asyncio.timeout(self.timeout_s):
                for fp, sid in todo:
                    verdict = self._verdict(fp, sid, time.monotonic())
                    if verdict is None and fp.needs_record_name:
                        info = self._info(sid)
                        if info is not None and info.known and not info.named:  # its record name, without asking again
                            await self._name(info)
                            verdict = self._verdict(fp, sid, time.monotonic())
                    if verdict is None:
                        if bad:
                            continue  # refused already: no lookup for the rest, only what is known of them
                        await self._refresh(sid, fp.needs_record_name)
                        verdict = self._verdict(fp, sid, time.monotonic(), fresh=True)
                    if verdict:
                        bad[(fp.field, sid)] = verdict
                    else:
                        self._accept(fp, sid, self.source.token())
        except TimeoutError:
            ids = ", ".join(str(sid) for _, sid in todo)
            note = self.source.note()
            raise unavailable(f"looking up schema id(s) {ids} took more than {self.settings.timeout_ms} ms "
                              f"(confluent.schema.registry.request.timeout.ms){'; ' + note if note else ''}") from None
        return bad

    def _verdict(self, fp: FieldPolicy, sid: int, now: float, fresh: bool = False) -> str | None:
        """_ACCEPT, why the id is refused, or None when the registry must be asked first. `fresh`: the info
        was just fetched, so a refusal is final."""
        info = self._info(sid)
        if info is None:
            return None
        certain = fresh or now - info.checked_at < self.refresh_s
        if not info.known:
            return f"unknown schema id {sid}" if certain else None
        name = None
        if fp.needs_record_name:
            if not info.named:
                return None
            name = info.record_name
        subject = fp.subject(name)
        if subject is None:
            return (f"schema id {sid} has no record name for {fp.strategy.rpartition('.')[2]} "
                    f"(confluent.{fp.name}.subject.name.strategy)") if certain else None
        if subject in info.subjects:
            return _ACCEPT
        return f"schema id {sid} is not registered under subject {subject}" if certain else None

    def _info(self, sid: int) -> SchemaInfo | None:
        info = self._cache.get(sid)
        token = self.source.token()
        if info is not None:
            self._cache.move_to_end(sid)
            if info.token == token:
                return info
        peeked = self.source.peek(sid, info)
        if peeked is not None and peeked is not info:
            self._put(peeked)
        return peeked

    def _put(self, info: SchemaInfo) -> None:
        self._cache[info.schema_id] = info
        self._cache.move_to_end(info.schema_id)
        while len(self._cache) > self.settings.cache_size:
            self._cache.popitem(last=False)

    async def _refresh(self, sid: int, need_name: bool) -> SchemaInfo:
        """Ask the registry about `sid` (once for all batches waiting on it), and name its record if asked."""
        pending = self._lookups.inflight.get(sid)
        if pending is None:
            pending = asyncio.ensure_future(self._fetch(sid))
            self._lookups.inflight[sid] = pending
            pending.add_done_callback(lambda f: self._done(sid, f))
        info = await asyncio.shield(pending)
        if need_name and info.known and not info.named:
            await self._name(info)
        return info

    def _done(self, sid: int, fut: asyncio.Future[SchemaInfo]) -> None:
        self._lookups.inflight.pop(sid, None)
        if not fut.cancelled():
            fut.exception()  # retrieved: its waiters may all have timed out

    async def _name(self, info: SchemaInfo) -> None:
        """The record name of a known id's schema (parsed off the loop; None when it has none)."""
        from gregor.schema_registry.formats.payloads import record_name

        parsed = await self._parsed(info)
        info.record_name = record_name(parsed) if parsed is not None else None
        info.named = True

    async def _fetch(self, sid: int) -> SchemaInfo:
        if self._lookups.slots is None:
            self._lookups.slots = asyncio.Semaphore(self.settings.max_inflight_lookups)
        async with self._lookups.slots:
            info = await self.source.fetch(sid)
        old = self._cache.get(sid)
        if old is not None and old.known and info.known and old.schema == info.schema:  # keep what was parsed
            info.record_name, info.named, info.decoder, info.decodable = old.record_name, old.named, old.decoder, old.decodable
        self._put(info)
        return info

    async def _parsed(self, info: SchemaInfo) -> Any:
        try:
            return await self.source.parse(info)
        except KafkaError:
            raise
        except Exception:  # a schema the registry holds but cannot be parsed here has no name and no decoder
            return None

    # --- deep checks --------------------------------------------------------------------------------
    async def decoders(self, policy: SchemaPolicy, ids: SchemaIds) -> dict[tuple[int, int], Callable[[bytes], str | None]]:
        """The decoders of the batch's ids for the fields checked deeply, built (off the loop) if need be.
        Ids whose schema cannot be decoded safely are left out (their payloads are not decoded)."""
        from gregor.schema_registry.formats.payloads import decoder

        out = {}
        async with asyncio.timeout(self.timeout_s):
            for fp, sid in policy.pairs(ids):
                if not fp.deep:
                    continue
                info = self._info(sid)
                if info is None or not info.known:
                    info = await self._refresh(sid, False)
                if info.decodable is None:
                    parsed = await self._parsed(info)
                    built = await asyncio.to_thread(decoder, parsed) if parsed is not None else None
                    info.decoder, info.decodable = built, built is not None
                    if built is None:  # once per id: the id check still applies, the payloads are not decoded
                        log.warning("Schema id %d: its payloads are not decoded by deep checks (%s)", sid,
                                    "its schema does not parse here" if parsed is None else
                                    "an array or map of items that take no bytes")
                if info.decoder is not None:
                    out[(fp.field, sid)] = info.decoder
        return out


def refused(bad: BadIds, records: list[tuple[int, bytes | None, bytes | None]]) -> BatchValidationError:
    """The batch's refusal: a record error for every record whose key or value carries a refused id."""
    errors = []
    for i, key, value in records:
        for f, data in ((0, key), (1, value)):
            if data is not None and len(data) >= 5:
                why = bad.get((f, int.from_bytes(data[1:5], "big")))
                if why is not None:
                    errors.append((i, f"offset {i} in the batch: {FIELD_NAMES[f]}: {why}"))
                    break
    return _refusal(errors)


def undecodable(decoders: dict[tuple[int, int], Callable[[bytes], str | None]], policy: SchemaPolicy,
                records: list[tuple[int, bytes | None, bytes | None]]) -> BatchValidationError | None:
    """Deep checks of one batch's records (on a validation thread): the refusal of those that do not decode."""
    errors = []
    for i, key, value in records:
        for fp, data in ((policy.key, key), (policy.value, value)):
            if fp is None or not fp.deep or data is None:
                continue
            sid = int.from_bytes(data[1:5], "big")
            decode = decoders.get((fp.field, sid))
            why = decode(data[5:]) if decode is not None else None
            if why is not None:
                errors.append((i, f"offset {i} in the batch: {fp.name} (schema id {sid}) {why}"))
                break
    return _refusal(errors) if errors else None


def _refusal(errors: list[tuple[int, str]]) -> BatchValidationError:
    n = len(errors)
    first = errors[0][1] if errors else "schema validation failed"
    return BatchValidationError(f"{n} record{'s' if n != 1 else ''} refused by schema validation: {first}",
                                "INVALID_RECORD", record_errors=errors)


def batch_records(buf: memoryview, h: BatchHeader, limit: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """(index in the batch, key, value) of a validated batch's records, decompressed under `limit` (the
    refusal and deep-check paths only: a Python object per record)."""
    return [(r.offset - h.base_offset, r.key, r.value) for r in decode_records(buf, h, limit)]
