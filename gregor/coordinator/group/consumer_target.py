"""The pure parts of a KIP-848 ConsumerGroupHeartbeat, kept out of ConsumerGroupProtocol (which
keeps the group table, the timers and the log): the request and checking its fields, resolving
the members' topic regexes, and computing a group's target assignment with the assignor most
members prefer. None of them writes anything but the ConsumerGroup it is given.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from gregor.coordinator.group.assignors import ASSIGNORS, AssignmentSpec
from gregor.coordinator.group.consumer_state import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    Owned,
)
from gregor.metadata.store import TopicMetadata
from gregor.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("gregor.group")

CONSUMER_GENERATED_MEMBER_ID_VERSION = 1  # KIP-1082: from v1 the consumer makes its own member id


@dataclass(slots=True)
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat request's fields, as the coordinator reads them."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: Owned | None = None
    client_id: str = ""
    client_host: str = ""


def validate_heartbeat(req: HeartbeatRequest, api_version: int, assignors: list[str]) -> None:
    """Kafka's checks of a ConsumerGroupHeartbeat request, with its messages: INVALID_REQUEST,
    INVALID_REGULAR_EXPRESSION or UNSUPPORTED_ASSIGNOR (a KafkaError)."""
    bad = ErrorCode.INVALID_REQUEST
    if not req.member_id and (api_version >= CONSUMER_GENERATED_MEMBER_ID_VERSION or req.member_epoch > 0
                              or req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH):
        raise KafkaError(bad, "MemberId can't be empty.")
    if not req.group_id:
        raise KafkaError(bad, "GroupId can't be empty.")
    if req.instance_id == "":
        raise KafkaError(bad, "InstanceId can't be empty.")
    if req.rack_id == "":
        raise KafkaError(bad, "RackId can't be empty.")
    if req.member_epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise KafkaError(bad, "RebalanceTimeoutMs must be provided in first request.")
        if req.topic_partitions is None or req.topic_partitions:
            raise KafkaError(bad, "TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            raise KafkaError(bad, "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
    elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if req.instance_id is None:
            raise KafkaError(bad, "InstanceId can't be null.")
    elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise KafkaError(bad, "MemberEpoch is invalid.")
    if req.subscribed_topic_regex:
        try:
            re.compile(req.subscribed_topic_regex)
        except re.error as e:
            raise KafkaError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                             f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a valid regular expression: {e}.") from None
    if req.server_assignor is not None and req.server_assignor not in assignors:
        raise KafkaError(ErrorCode.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not supported. "
                         f"Supported assignors: {', '.join(assignors)}.")


def resolve_regexes(cg: ConsumerGroup, topics: Mapping[str, TopicMetadata]) -> None:
    """Each member regex -> the non-internal topic names it matches in full (an invalid one: none)."""
    regexes = {m.subscribed_topic_regex for m in cg.members.values() if m.subscribed_topic_regex}
    resolved: dict[str, frozenset[str]] = {}
    for rx in regexes:
        try:
            pattern = re.compile(rx)
        except re.error:
            resolved[rx] = frozenset()
            continue
        resolved[rx] = frozenset(n for n, t in topics.items() if not t.internal and pattern.fullmatch(n))
    cg.resolved_regex = resolved


def preferred_assignor(cg: ConsumerGroup, assignors: list[str]) -> str:
    """The assignor most members ask for (ties by name), else the first of group.consumer.assignors."""
    votes: dict[str, int] = {}
    for m in cg.members.values():
        if m.server_assignor:
            votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
    if not votes:
        return assignors[0]
    return min(votes, key=lambda a: (-votes[a], a))


def compute_target(group_id: str, cg: ConsumerGroup, assignors: list[str]) -> None:
    """A new target assignment for the group's current epoch, from its members' subscriptions."""
    name = preferred_assignor(cg, assignors)
    spec = AssignmentSpec(
        members={mid: cg.subscribed_topics(m) & frozenset(cg.subscription) for mid, m in cg.members.items()},
        topics=dict(cg.subscription),
        current=cg.target,
    )
    cg.target = ASSIGNORS[name](spec)
    cg.assignment_epoch = cg.group_epoch
    cg.assignor = name
    log.info("consumer group %s: target assignment at epoch %d by %s for %d members", group_id,
             cg.assignment_epoch, name, len(cg.members))
