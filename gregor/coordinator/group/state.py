"""A classic consumer group's in-memory state: members, generation, protocol, offsets.

The states and their transitions are Kafka's:

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable | CompletingRebalance --join of a new or changed member, leave, expiry--> PreparingRebalance
    PreparingRebalance --no members left--> Empty
    any --group deleted--> Dead

Transitions are made (and checked) by classic_rebalance.ClassicRebalance; this module only
holds the data and the rules that are pure functions of it (protocol selection, who has rejoined).

A `Group` is also the entry of a KIP-848 consumer group in the coordinator's table: then
`consumer` holds its state (gregor.coordinator.group.consumer_state), `state` one of Empty,
Assigning, Reconciling, Stable, and the classic membership fields stay empty. Offsets are
kept here for both kinds.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gregor.coordinator.group.consumer_state import ConsumerGroup

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

ALL_STATES = (EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD)


@dataclass(slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future[Any] | None = None
    sync_future: asyncio.Future[Any] | None = None
    heartbeat_timer: asyncio.TimerHandle | None = None
    is_new: bool = True

    def metadata_for(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(protocol)

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]


@dataclass(eq=False)
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending_members: dict[str, asyncio.TimerHandle] = field(default_factory=dict)  # member id -> expiry
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    # The write sequence of the commit `offsets` holds, per partition: commits waiting for their replicas
    # may finish out of order, and the later write must win, as it does in the log.
    offset_write_seq: dict[tuple[str, int], int] = field(default_factory=dict)
    current_state_timestamp_ms: int = -1
    join_timer: asyncio.TimerHandle | None = None
    initial_delay_remaining_ms: int = 0
    new_member_joined_during_delay: bool = False
    # Set when this is a KIP-848 consumer group (group.protocol=consumer): its members, epochs and
    # assignments; the classic fields above then stay empty and `state` holds the consumer group state.
    consumer: ConsumerGroup | None = None

    def is_(self, state: str) -> bool:
        return self.state == state

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_rejoined(self) -> bool:
        return not self.pending_members and all(m.join_future is not None for m in self.members.values())

    def supports(self, protocol_type: str, protocols: list[str]) -> bool:
        """A joining member must share the group's protocol type and at least one protocol with every member."""
        if not self.members:
            return bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        candidates = set(protocols)
        for m in self.members.values():
            candidates &= set(m.protocol_names())
        return bool(candidates)

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol among those all members support."""
        common: set[str] | None = None
        for m in self.members.values():
            names = set(m.protocol_names())
            common = names if common is None else common & names
        assert common, "members without a common protocol cannot be in one generation"
        votes = Counter(next(n for n in m.protocol_names() if n in common) for m in self.members.values())
        best = max(votes.values())
        # Ties go to the protocol the most members list first among the tied ones (stable choice).
        first_member = next(iter(self.members.values()))
        return next(n for n in first_member.protocol_names() if votes.get(n) == best)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, when the protocol is Kafka's consumer protocol; else None."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            try:
                topics |= set(parse_subscription_topics(m.metadata_for(self.protocol_name)))
            except Exception:
                return None
        return topics


def parse_subscription_topics(data: bytes) -> list[str]:
    """Topics in a ConsumerProtocolSubscription (int16 version, then an array of strings)."""
    from gregor.protocol.primitives import Reader

    r = Reader(data)
    r.int16()
    n = r.array_length()
    return [r.string() or "" for _ in range(n)]
