"""The KRaft metadata log's records and the active controller's pure decisions, on their own (unit tests):
records survive their encoding, a replayed state survives a snapshot of it, and AlterPartition and
metadata changes are decided by Kafka's rules."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from gregor.controller.quorum_controller import decide_alter_partition
from gregor.metadata import kraft_records as kr
from gregor.metadata.kraft import decide_changes
from gregor.metadata.kraft_state import KRaftState
from gregor.metadata.records import TopicRecord
from gregor.metadata.store import (
    AlterAcls,
    CreateTopic,
    PartitionState,
    SetTopicConfigs,
    TopicExistsError,
    TopicMetadata,
)
from gregor.protocol.errors import ErrorCode
from gregor.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)


def _register(state: KRaftState, broker_id: int, offset: int) -> None:
    rec = kr.RegisterBrokerRecord(broker_id, uuid.uuid4(), (kr.Endpoint("PLAINTEXT", "h", 9000 + broker_id,
                                                                        "PLAINTEXT"),),
                                  None, True, "PLAINTEXT")
    state.replay(kr.decode(kr.encode(rec)), offset, None)


def _state_with_topic() -> tuple[KRaftState, uuid.UUID]:
    s = KRaftState()
    for b, off in ((1, 10), (2, 11), (3, 12)):
        _register(s, b, off)
        s.replay(kr.UnfenceBrokerRecord(b, off), off + 100, None)
    tid = uuid.uuid4()
    topic = TopicMetadata("t", tid, {0: PartitionState([1, 2, 3], 1, 4, [1, 2, 3], version=7)})
    s.replay(kr.decode(kr.encode(TopicRecord(topic))), 200, None)
    return s, tid


def test_registration_fencing_and_producer_ids_replay() -> None:
    s = KRaftState()
    _register(s, 1, 5)
    assert s.brokers[1].epoch == 5 and s.brokers[1].fenced and s.live_brokers() == ()
    s.replay(kr.decode(kr.encode(kr.UnfenceBrokerRecord(1, 5))), 6, None)
    assert [b.broker_id for b in s.live_brokers()] == [1] and s.live_brokers()[0].port == 9001
    s.replay(kr.decode(kr.encode(kr.FenceBrokerRecord(1, 5))), 7, None)
    assert s.live_brokers() == ()
    s.replay(kr.decode(kr.encode(kr.ProducerIdsRecord(1, 5, 2000))), 8, None)
    assert s.next_producer_id == 2000


def test_a_snapshot_of_the_state_replays_to_the_same_state() -> None:
    s, tid = _state_with_topic()
    s.replay(kr.ProducerIdsRecord(1, 10, 3000), 300, None)
    s.replay(kr.FeatureLevelRecord(kr.METADATA_VERSION_FEATURE, kr.METADATA_VERSION), 301, None)
    s.replay(kr.FenceBrokerRecord(3, 12), 302, None)
    copy = KRaftState()
    for record in s.records():
        copy.replay(kr.decode(kr.encode(record)), -1, None)
    assert copy.brokers == s.brokers
    assert [b.broker_id for b in copy.live_brokers()] == [1, 2]
    assert copy.next_producer_id == 3000 and copy.features == s.features
    t = copy.meta.topics["t"]
    assert t.topic_id == tid and t.partitions[0].isr == [1, 2, 3] and t.partitions[0].version == 7


def test_changes_decided_in_one_write_see_each_other() -> None:
    s, _ = _state_with_topic()
    new = TopicMetadata("u", uuid.uuid4(), {0: PartitionState([1], 1, isr=[1])})
    pattern = ResourcePattern(ResourceType.TOPIC, "u", PatternType.LITERAL)
    ace = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    changes = [kr.decode_change(kr.encode_change(c)) for c in (
        CreateTopic(new), CreateTopic(new), SetTopicConfigs("u", {"retention.ms": "1000"}),
        AlterAcls(pattern, frozenset({ace}), frozenset()))]
    results, values = decide_changes(s, changes)
    assert results[0] is None and isinstance(results[1], TopicExistsError) and results[2:] == [None, None]
    assert len(values) == 3
    for i, v in enumerate(values):  # the records replay as the controller decided them
        s.replay(kr.decode(v), 400 + i, None)
    assert s.meta.topics["u"].configs == {"retention.ms": "1000"}
    assert "t" in s.meta.topics


def _alter(s: KRaftState, tid: uuid.UUID, broker: int, leader_epoch: int, partition_epoch: int,
           isr: list[int]) -> dict:
    req = [SimpleNamespace(topic_id=tid, get=lambda k, d=None: {"topic_id": tid}.get(k, d), partitions=[
        SimpleNamespace(partition_index=0, leader_epoch=leader_epoch, partition_epoch=partition_epoch,
                        new_isr_with_epochs=[SimpleNamespace(broker_id=b) for b in isr])])]
    out, values = decide_alter_partition(s, broker, 3, req)
    for v in values:
        s.replay(kr.decode(v), 500, None)
    return dict(out[0]["partitions"][0])


def test_alter_partition_rules() -> None:
    s, tid = _state_with_topic()
    assert _alter(s, tid, 2, 4, 7, [1, 2])["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert _alter(s, tid, 1, 3, 7, [1, 2])["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
    assert _alter(s, tid, 1, 4, 6, [1, 2])["error_code"] == ErrorCode.INVALID_UPDATE_VERSION
    assert _alter(s, tid, 1, 4, 7, [2, 3])["error_code"] == ErrorCode.INVALID_REQUEST  # the leader must stay
    ok = _alter(s, tid, 1, 4, 7, [1, 2])
    assert ok["error_code"] == ErrorCode.NONE and ok["isr"] == [1, 2] and ok["partition_epoch"] > 7
    assert s.meta.topics["t"].partitions[0].isr == [1, 2]
    s.replay(kr.FenceBrokerRecord(3, 12), 600, None)  # a fenced replica may not join the ISR (KIP-841)
    assert _alter(s, tid, 1, 4, ok["partition_epoch"], [1, 2, 3])["error_code"] == ErrorCode.INELIGIBLE_REPLICA
