"""The fetcher's side of a fetch session (KIP-227; Kafka's FetchSessionHandler), for the replica fetchers.

A follower fetches every partition it follows from a leader in one Fetch, and the leader answers that
fetch at each append. Without a session every such fetch names all of them and every answer lists them
all, data or not. With a session (as Kafka's followers fetch) the first fetch is full and opens it (epoch
0); later ones are incremental: they name only the partitions whose fetch position or limits changed and
the ones to forget, and the leader answers only partitions with records or news (the broker's side is
gregor.api.fetch_session). The leader still looks at every partition of the session on each fetch, as
Kafka's does; what the session saves is the entries encoded, sent and decoded on both sides.

The handler keeps what the leader's session holds (each partition's request fields, as last sent). A
request that fails in any way (a session error, a connection lost while it was in flight: the leader
may or may not have applied it) resets it, and the next fetch is full again.
"""

from __future__ import annotations

from typing import Any

from gregor.protocol.errors import ErrorCode
from gregor.protocol.messages.fetch import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch

TopicPartition = tuple[str, int]

# The request fields a session caches: a change in any of them re-sends the partition.
FIELDS = ("fetch_offset", "current_leader_epoch", "last_fetched_epoch", "log_start_offset", "partition_max_bytes")
SESSION_ERRORS = frozenset({ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH})


class FetchSessionHandler:
    """Builds each Fetch's partitions and session fields against what the leader holds, and learns from
    its answer. One per connection's fetch loop; one request in flight at a time."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._held: dict[TopicPartition, tuple[Any, ...]] = {}  # the leader's session, as we last told it
        self._asked: dict[TopicPartition, tuple[Any, ...]] | None = None  # what the request in flight makes it
        self.full_fetches = 0  # how many full fetches were built (a session that keeps resetting shows here)

    @property
    def incremental(self) -> bool:
        return self.session_id != INVALID_SESSION_ID

    def build(self, wanted: dict[TopicPartition, dict[str, Any]]
              ) -> tuple[int, int, list[dict[str, Any]], list[dict[str, Any]]]:
        """(session_id, epoch, topics, forgotten_topics_data) of the next Fetch for `wanted` (each a Fetch
        partition entry with at least FIELDS and "partition"), in `wanted`'s order."""
        asked = {key: tuple(entry[f] for f in FIELDS) for key, entry in wanted.items()}
        self._asked = asked
        if not self.incremental:
            self.full_fetches += 1
            return INVALID_SESSION_ID, INITIAL_EPOCH, _by_topic(wanted.items()), []
        held = self._held
        send = [(key, entry) for key, entry in wanted.items() if held.get(key) != asked[key]]
        gone: dict[str, list[int]] = {}
        for key in held:
            if key not in asked:
                gone.setdefault(key[0], []).append(key[1])
        forgotten = [{"topic": t, "partitions": ps} for t, ps in gone.items()]
        return self.session_id, self.epoch, _by_topic(send), forgotten

    def answered(self, error_code: int, session_id: int) -> bool:
        """The leader's top-level answer to the last request built: True when its partitions are to be read
        (the session now holds what was asked), False when it refused the session (reset: the next fetch
        is full; nothing is wrong with the connection)."""
        asked, self._asked = self._asked, None
        if error_code != ErrorCode.NONE:
            self.reset()
            return False
        if self.incremental:
            self.epoch = next_epoch(self.epoch)
        elif session_id != INVALID_SESSION_ID:  # a full fetch opened a session
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
        # A full fetch the leader answered without a session (its cache was full) stays full next time.
        self._held = asked if asked is not None and self.incremental else {}
        return True

    def reset(self) -> None:
        """Forget the session (a failed or unanswered request): the next fetch is full and opens a new one."""
        self.session_id, self.epoch, self._held, self._asked = INVALID_SESSION_ID, INITIAL_EPOCH, {}, None


def _by_topic(entries: Any) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, _p), entry in entries:
        topics.setdefault(topic, []).append(entry)
    return [{"topic": t, "partitions": ps} for t, ps in topics.items()]
