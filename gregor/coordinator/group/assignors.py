"""Server-side assignors of the KIP-848 consumer group protocol: `uniform` and `range`.

An assignor is a pure function from an `AssignmentSpec` (each member's subscribed topics,
the subscribed topics' ids and partition counts, and the current target assignment) to a
new target assignment: member id -> {topic id: partitions}. The broker property
`group.consumer.assignors` lists the enabled ones (the first is the default); a member
may ask for one with `server_assignor` in its heartbeat.

- uniform (Kafka's UniformAssignor): every member gets as many partitions as the others,
  give or take one, among the partitions it may take; assignments are sticky, so a change
  of membership moves as few partitions as it can.
- range (Kafka's RangeAssignor): each topic's partitions are cut into contiguous ranges
  over its subscribers sorted by member id, so members with the same subscription get
  the same partition numbers of co-partitioned topics. Not sticky here (Kafka's keeps
  a member's range when it can).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

TopicId = uuid.UUID
TopicPartition = tuple[TopicId, int]
Assignment = dict[TopicId, frozenset[int]]


@dataclass(frozen=True, slots=True)
class AssignmentSpec:
    members: dict[str, frozenset[str]]  # member id -> subscribed topic names
    topics: dict[str, tuple[TopicId, int]]  # subscribed topic name -> (topic id, partition count)
    current: dict[str, Assignment]  # the previous target assignment, for stickiness

    def subscribers(self) -> dict[str, list[str]]:
        """Topic name -> the members (sorted) subscribed to it; only topics that exist."""
        out: dict[str, list[str]] = {}
        for m in sorted(self.members):
            for t in self.members[m]:
                if t in self.topics:
                    out.setdefault(t, []).append(m)
        return out


def _as_assignment(held: list[TopicPartition]) -> Assignment:
    out: dict[TopicId, set[int]] = {}
    for tid, p in held:
        out.setdefault(tid, set()).add(p)
    return {tid: frozenset(ps) for tid, ps in out.items()}


def uniform(spec: AssignmentSpec) -> dict[str, Assignment]:
    members = sorted(spec.members)
    if not members:
        return {}
    subscribers = spec.subscribers()
    name_of = {tid: name for name, (tid, _) in spec.topics.items()}
    owner: dict[TopicPartition, str] = {}
    held: dict[str, list[TopicPartition]] = {m: [] for m in members}

    # 1. Stickiness: each member keeps what it had, while it still subscribes to it and it exists.
    for m in members:
        for tid, parts in sorted(spec.current.get(m, {}).items()):
            name = name_of.get(tid)
            if name is None or name not in spec.members[m]:
                continue
            count = spec.topics[name][1]
            for p in sorted(parts):
                if p < count and (tid, p) not in owner:
                    owner[(tid, p)] = m
                    held[m].append((tid, p))

    all_parts = [(spec.topics[t][0], p) for t in sorted(subscribers) for p in range(spec.topics[t][1])]
    subscriptions = {spec.members[m] & frozenset(subscribers) for m in members}
    if len(subscriptions) == 1:
        # 2a. Everyone subscribes to the same topics: quotas of total // n, the remainder going to
        # the members that already hold the most (fewest moves), then fill from the free pool.
        base, extra = divmod(len(all_parts), len(members))
        by_held = sorted(members, key=lambda m: (-len(held[m]), m))
        quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_held)}
        for m in members:
            while len(held[m]) > quota[m]:
                del owner[held[m].pop()]
        free = iter(tp for tp in all_parts if tp not in owner)
        for m in by_held:
            while len(held[m]) < quota[m]:
                tp = next(free)
                owner[tp] = m
                held[m].append(tp)
        return {m: _as_assignment(held[m]) for m in members}

    # 2b. Different subscriptions: each free partition goes to its least-loaded subscriber (topics
    # with the fewest subscribers first), then partitions move from a member to a less loaded
    # subscriber while that narrows the gap by two or more. Each move lowers the sum of squared
    # loads, so this ends; the cap is a guard.
    for t in sorted(subscribers, key=lambda t: (len(subscribers[t]), t)):
        tid, count = spec.topics[t]
        for p in range(count):
            if (tid, p) not in owner:
                m = min(subscribers[t], key=lambda x: (len(held[x]), x))
                owner[(tid, p)] = m
                held[m].append((tid, p))
    for _ in range(len(all_parts) + 1):
        moved = False
        for a in sorted(members, key=lambda x: (-len(held[x]), x)):
            for tp in list(held[a]):
                b = min(subscribers[name_of[tp[0]]], key=lambda x: (len(held[x]), x))
                if len(held[b]) + 1 < len(held[a]):
                    held[a].remove(tp)
                    held[b].append(tp)
                    owner[tp] = b
                    moved = True
        if not moved:
            break
    return {m: _as_assignment(held[m]) for m in members}


def range_(spec: AssignmentSpec) -> dict[str, Assignment]:
    out: dict[str, dict[TopicId, frozenset[int]]] = {m: {} for m in spec.members}
    for t, subs in spec.subscribers().items():
        tid, count = spec.topics[t]
        base, extra = divmod(count, len(subs))
        start = 0
        for i, m in enumerate(subs):
            n = base + (1 if i < extra else 0)
            if n:
                out[m][tid] = frozenset(range(start, start + n))
            start += n
    return out


ASSIGNORS: dict[str, Callable[[AssignmentSpec], dict[str, Assignment]]] = {"uniform": uniform, "range": range_}
