"""Fetch sessions (KIP-227): the broker remembers what a fetcher asks for, so it need not ask again.

A consumer fetching many partitions would otherwise send every partition's offsets in every
Fetch and get every partition back, data or not. With a session the client sends a full
fetch once (epoch 0); the broker caches its partitions and answers with a session id. Later
requests are incremental (epoch 1, 2, ...): they name only the partitions whose fetch offset
or limits changed and the topics to forget, and the response carries only partitions that
have records, an error, or a changed high watermark, last stable offset or log start offset.

Request metadata, as Kafka reads it:
- session 0, epoch -1: a sessionless full fetch (what clients without sessions send);
- session S, epoch -1: close S, then a sessionless full fetch;
- epoch 0: close S if given, then a full fetch that opens a new session if the cache has room;
- epoch N > 0: an incremental fetch on S: FETCH_SESSION_ID_NOT_FOUND when S is unknown,
  INVALID_FETCH_SESSION_EPOCH when N is not the epoch S expects.

The cache (`FetchSessionCache`) holds at most `max.incremental.fetch.session.cache.slots`
sessions and `gregor.fetch.session.cache.max.partitions` partitions in all. When full, a new
session takes the slot of one unused for `MIN_EVICTION_MS` (Kafka's constant, 2 minutes), or
else of the least valuable one if that is worth less than the newcomer: followers' sessions
above consumers', then more partitions above fewer, as Kafka orders them; otherwise the fetch
is answered sessionless (session id 0), which every client handles. An incremental fetch that
would push the cache past its partition bound closes its session (FETCH_SESSION_ID_NOT_FOUND),
so the client falls back to a full fetch.

The Fetch handler calls `resolve()` before reading and `FetchContext.filter()` on the topics it
built; everything else about sessions lives here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gregor.configdef import Settings, setting
from gregor.protocol.errors import ErrorCode
from gregor.protocol.messages.fetch import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch

MIN_EVICTION_MS = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: a session this idle is stale


@dataclass(slots=True)
class CachedPartition:
    """A session's partition: what the fetcher asked for last, and what it was last told.

    The request fields keep the Fetch request's names so the handler reads it like a request
    entry."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1
    last_fetched_epoch: int = -1
    high_watermark: int = -1  # as last sent (-1: never sent)
    last_stable_offset: int = -1
    fetcher_log_start_offset: int = -1  # the broker's log start offset as last sent

    def update_request(self, p: Any) -> None:
        self.fetch_offset = p.fetch_offset
        self.partition_max_bytes = p.partition_max_bytes
        self.current_leader_epoch = p.current_leader_epoch
        self.log_start_offset = p.log_start_offset
        self.last_fetched_epoch = p.last_fetched_epoch

    def must_respond(self, resp: dict[str, Any]) -> bool:
        """Whether an incremental response must carry this partition; records what it carries."""
        changed = bool(resp["error_code"]) or _size(resp["records"]) > 0
        if resp["high_watermark"] != self.high_watermark:
            self.high_watermark = resp["high_watermark"]
            changed = True
        if resp["last_stable_offset"] != self.last_stable_offset:
            self.last_stable_offset = resp["last_stable_offset"]
            changed = True
        if resp["log_start_offset"] != self.fetcher_log_start_offset:
            self.fetcher_log_start_offset = resp["log_start_offset"]
            changed = True
        return changed


def _size(records: Any) -> int:
    return 0 if records is None else len(records)


@dataclass(slots=True)
class FetchSession:
    session_id: int
    privileged: bool  # a follower's session (replica fetches) outranks consumers'
    partitions: dict[tuple[str, int], CachedPartition]  # in fetch order
    created_ms: int
    last_used_ms: int
    epoch: int = 1  # the epoch the next incremental request must carry

    def read_list(self) -> list[tuple[str, list[CachedPartition]]]:
        """The session's partitions grouped by topic in session order (consecutive ones of a
        topic share an entry), the shape the Fetch handler reads from."""
        out: list[tuple[str, list[CachedPartition]]] = []
        for (topic, _), cp in self.partitions.items():
            if out and out[-1][0] == topic:
                out[-1][1].append(cp)
            else:
                out.append((topic, [cp]))
        return out

    def value_key(self) -> tuple[bool, int, int]:
        """Kafka's EvictableKey order: consumers before followers, then fewer partitions first."""
        return (self.privileged, len(self.partitions), self.session_id)


@dataclass(frozen=True, slots=True)
class FetchSessionSettings(Settings):
    max_sessions: int = setting("max.incremental.fetch.session.cache.slots")
    max_partitions: int = setting("gregor.fetch.session.cache.max.partitions")


class FetchSessionCache:
    """At most `max_sessions` sessions holding at most `max_partitions` partitions in all: one per
    broker, created by it (`from_settings`)."""

    def __init__(self, max_sessions: int, max_partitions: int, clock_ms: Callable[[], int] | None = None,
                 rng: random.Random | None = None) -> None:
        self.max_sessions = max_sessions
        self.max_partitions = max_partitions
        self.sessions: dict[int, FetchSession] = {}
        self.total_partitions = 0
        self.clock_ms = clock_ms or (lambda: int(time.monotonic() * 1000))
        self.rng = rng or random.Random()
        self.evictions = 0

    @classmethod
    def from_settings(cls, settings: FetchSessionSettings) -> FetchSessionCache:
        return cls(settings.max_sessions, settings.max_partitions)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        s = self.sessions.pop(session_id, None)
        if s is not None:
            self.total_partitions -= len(s.partitions)
        return s

    def _new_id(self) -> int:
        while True:
            sid = self.rng.randint(1, 2**31 - 1)
            if sid not in self.sessions:
                return sid

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Make room for a session of `size` partitions: evict a stale session, or else the least
        valuable one if the newcomer outranks it. False when nothing may go."""
        stale = min(self.sessions.values(), key=lambda s: s.last_used_ms, default=None)
        if stale is not None and stale.last_used_ms < now_ms - MIN_EVICTION_MS:
            self.remove(stale.session_id)
            self.evictions += 1
            return True
        candidates = [s for s in self.sessions.values() if privileged or not s.privileged]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.value_key)
        if (privileged, size) <= victim.value_key()[:2]:
            return False
        self.remove(victim.session_id)
        self.evictions += 1
        return True

    def maybe_create(self, privileged: bool, partitions: dict[tuple[str, int], CachedPartition]) -> int:
        """A new session holding `partitions`; its id, or INVALID_SESSION_ID when there is no room."""
        size = len(partitions)
        if self.max_sessions <= 0 or size > self.max_partitions:
            return INVALID_SESSION_ID
        now = self.clock_ms()
        while len(self.sessions) >= self.max_sessions or self.total_partitions + size > self.max_partitions:
            if not self.sessions or not self._try_evict(privileged, size, now):
                return INVALID_SESSION_ID
        sid = self._new_id()
        self.sessions[sid] = FetchSession(sid, privileged, partitions, now, now)
        self.total_partitions += size
        return sid

    def touch(self, session: FetchSession) -> None:
        session.last_used_ms = self.clock_ms()


@dataclass(slots=True)
class FetchContext:
    """How one Fetch request is served: what to read, and how to shape the response."""

    session_id: int = INVALID_SESSION_ID
    error: ErrorCode = ErrorCode.NONE
    incremental: bool = False
    session: FetchSession | None = None
    # For an incremental fetch, what to read (the session's partitions); None: the request's own.
    read: list[tuple[str, list[Any]]] | None = None

    def filter(self, topics: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The response's topics as this context sends them: all of them for a full fetch (noting
        what the session's partitions were told), or, incrementally, only partitions that must
        respond; partitions that carried records move to the end of the session's order, so the
        next fetch starts with those that did not (Kafka's fairness rule)."""
        s = self.session
        if s is None:
            return topics
        parts = s.partitions
        if not self.incremental:
            for t in topics:
                for p in t["partitions"]:
                    cp = parts.get((t["topic"], p["partition_index"]))
                    if cp is not None:
                        cp.must_respond(p)
            return topics
        out: list[dict[str, Any]] = []
        moved: list[tuple[str, int]] = []
        for t in topics:
            name = t["topic"]
            kept = []
            for p in t["partitions"]:
                key = (name, p["partition_index"])
                cp = parts.get(key)
                if cp is None or cp.must_respond(p):
                    kept.append(p)
                    if cp is not None and _size(p["records"]) > 0:
                        moved.append(key)
            if kept:
                out.append({"topic": name, "partitions": kept})
        for key in moved:
            parts[key] = parts.pop(key)
        return out


def _request_partitions(req: Any, into: dict[tuple[str, int], CachedPartition] | None = None
                        ) -> dict[tuple[str, int], CachedPartition]:
    """The request's partitions merged into `into` (a session's, or a new dict for a full fetch), in
    request order; a partition already there, or named twice, takes the request's last entry."""
    out: dict[tuple[str, int], CachedPartition] = {} if into is None else into
    for t in req.topics:
        for p in t.partitions:
            key = (t.topic, p.partition)
            cp = out.get(key)
            if cp is None:
                out[key] = cp = CachedPartition(p.partition, p.fetch_offset, p.partition_max_bytes)
            cp.update_request(p)
    return out


def resolve(cache: FetchSessionCache, req: Any, version: int, privileged: bool = False) -> FetchContext:
    """Read a Fetch request's session metadata: close, open or advance its session. The caller
    answers `ctx.error` at top level (session id 0, no partitions) when it is set; otherwise it
    reads `ctx.read` (or the request's partitions when None) and sends `ctx.filter(topics)`
    with `ctx.session_id`."""
    if version < 7:
        return FetchContext()
    session_id, epoch = req.session_id, req.session_epoch
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)
        if epoch == FINAL_EPOCH:
            return FetchContext()
        partitions = _request_partitions(req)
        sid = cache.maybe_create(privileged, partitions)
        if sid == INVALID_SESSION_ID:
            return FetchContext()
        return FetchContext(session_id=sid, session=cache.get(sid))
    session = cache.get(session_id)
    if session is None:
        return FetchContext(error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    if session.epoch != epoch:
        return FetchContext(error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    parts = session.partitions
    before = len(parts)
    _request_partitions(req, parts)
    for t in req.forgotten_topics_data:
        for idx in t.partitions:
            parts.pop((t.topic, idx), None)
    cache.total_partitions += len(parts) - before
    if cache.total_partitions > cache.max_partitions:
        cache.remove(session_id)  # the client falls back to a full fetch, which may go sessionless
        return FetchContext(error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    session.epoch = next_epoch(epoch)
    cache.touch(session)
    return FetchContext(session_id=session_id, incremental=True, session=session, read=session.read_list())

