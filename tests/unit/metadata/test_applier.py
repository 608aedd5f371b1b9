"""The shared change applier on its own: no files, no ZooKeeper, no threads (unit tests).

Every store decides a Change against its state with `decide` and persists the record; the embedded store
(and a store replaying a metadata log) also `replay`s it. These pin the rules and the events both give."""

from __future__ import annotations

import uuid

import pytest

from gregor.metadata.applier import MetadataState, decide, decide_state_update, replay
from gregor.metadata.records import AclsRecord, AssignmentRecord, PartitionStateRecord, TopicRecord
from gregor.metadata.store import (
    ACLS,
    CONFIGS,
    CREATED,
    DELETED,
    PARTITIONS,
    STATE,
    AddPartitions,
    AlterAcls,
    BadVersionError,
    CreateTopic,
    DeleteTopic,
    MetadataError,
    NoSuchTopicError,
    PartitionState,
    ReassignPartitions,
    SetEntityConfigs,
    SetTopicConfigs,
    StateUpdate,
    TopicExistsError,
    TopicMetadata,
)
from gregor.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)


def _topic(name: str, n: int = 2) -> TopicMetadata:
    return TopicMetadata(name, uuid.uuid4(), {p: PartitionState([1, 2], 1, isr=[1, 2]) for p in range(n)})


def _with(*topics: TopicMetadata) -> MetadataState:
    state = MetadataState()
    for t in topics:
        replay(state, decide(CreateTopic(t), state), None)
    return state


def test_create_hands_the_callers_topic_to_the_event_and_keeps_a_copy() -> None:
    state = MetadataState()
    t = _topic("a")
    record = decide(CreateTopic(t), state)
    assert isinstance(record, TopicRecord)
    event = replay(state, record, 7)
    assert event is not None and (event.version, event.kind, event.topic) == (7, CREATED, "a")
    assert event.snapshot is t and state.topics["a"] is not t and state.topics["a"] == t
    with pytest.raises(TopicExistsError):
        decide(CreateTopic(_topic("a")), state)


def test_topic_changes_need_the_topic() -> None:
    state = MetadataState()
    for ch in (DeleteTopic("x"), SetTopicConfigs("x", {}), AddPartitions("x", {}), ReassignPartitions("x", {})):
        with pytest.raises(NoSuchTopicError):
            decide(ch, state)


def test_add_partitions_refuses_existing_ones_and_publishes_the_whole_topic() -> None:
    state = _with(_topic("a", 2))
    with pytest.raises(BadVersionError, match="a has 2 partitions now"):
        decide(AddPartitions("a", {1: PartitionState([1], 1, isr=[1])}), state)
    event = replay(state, decide(AddPartitions("a", {2: PartitionState([2], 2, isr=[2])}), state), 3)
    assert event is not None and event.kind == PARTITIONS and sorted(event.snapshot.partitions) == [0, 1, 2]  # type: ignore[union-attr]
    assert event.snapshot is not state.topics["a"]


def test_reassignment_changes_the_assignment_only() -> None:
    state = _with(_topic("a", 2))
    state.topics["a"].partitions[0].version = 4
    with pytest.raises(NoSuchTopicError, match=r"has no partitions \[5\]"):
        decide(ReassignPartitions("a", {5: PartitionState([3], -1)}), state)
    record = decide(ReassignPartitions("a", {0: PartitionState([1, 2, 3], -1, adding_replicas=[3])}), state)
    assert isinstance(record, AssignmentRecord)
    assert state.topics["a"].partitions[0].replicas == [1, 2]  # deciding changed nothing
    replay(state, record, 1)
    s = state.topics["a"].partitions[0]
    assert (s.replicas, s.adding_replicas, s.leader, s.isr, s.version) == ([1, 2, 3], [3], 1, [1, 2], 4)


def test_state_update_is_conditional_keeps_the_assignment_and_publishes_one_partition() -> None:
    state = _with(_topic("a", 3))
    new = PartitionState([9], 2, leader_epoch=1, isr=[2])
    with pytest.raises(BadVersionError, match="version 0, expected 5"):
        decide_state_update(StateUpdate("a", 0, new, 5), state)
    with pytest.raises(NoSuchTopicError):
        decide_state_update(StateUpdate("a", 7, new, 0), state)
    record = decide_state_update(StateUpdate("a", 0, new, 0), state)
    assert isinstance(record, PartitionStateRecord) and new.version == 0  # the caller's state is not touched
    event = replay(state, record, 2)
    assert event is not None and event.kind == STATE and list(event.partitions or {}) == [0]
    s = state.topics["a"].partitions[0]
    assert (s.replicas, s.leader, s.leader_epoch, s.isr, s.version) == ([1, 2], 2, 1, [2], 1)


def test_configs_deletion_and_acls() -> None:
    state = _with(_topic("a"))
    event = replay(state, decide(SetTopicConfigs("a", {"retention.ms": "1"}), state), 1)
    assert event is not None and event.kind == CONFIGS and state.topics["a"].configs == {"retention.ms": "1"}
    replay(state, decide(SetEntityConfigs("users", "alice", {"producer_byte_rate": "5"}), state), 2)
    replay(state, decide(SetEntityConfigs("users", "alice", {}), state), 3)
    assert state.entity_configs == {}
    pattern = ResourcePattern(ResourceType.TOPIC, "a", PatternType.LITERAL)
    ace = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    event = replay(state, decide(AlterAcls(pattern, frozenset({ace})), state), 4)
    assert event is not None and event.kind == ACLS and state.acls(pattern) == {ace}
    again = decide(AlterAcls(pattern, frozenset({ace})), state)  # nothing new: still the pattern's whole set
    assert again == AclsRecord(pattern, frozenset({ace}))
    event = replay(state, decide(DeleteTopic("a"), state), 5)
    assert event is not None and event.kind == DELETED and "a" not in state.topics


def test_a_replay_from_a_log_builds_no_event() -> None:
    state = MetadataState()
    t = _topic("a")
    assert replay(state, TopicRecord(t)) is None
    assert state.topics["a"] is t  # decoded for the replay alone: taken over, not copied


def test_an_unknown_change_is_an_error() -> None:
    with pytest.raises(MetadataError, match="unknown change"):
        decide("not a change", MetadataState())  # type: ignore[arg-type]
