"""The records a migration from ZooKeeper leaves for a new quorum, and the file that carries them."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from gregor.metadata import bootstrap
from gregor.metadata import kraft_records as kr
from gregor.metadata.kraft_state import KRaftState
from gregor.metadata.store import MetadataError, MetadataImage, PartitionState, TopicMetadata
from gregor.metadata.zk_migration import ZooKeeperMetadata, bootstrap_records, check_offline, foreign_partitions
from gregor.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)


def _zookeeper(live: tuple[int, ...] = (), moving: bool = False) -> ZooKeeperMetadata:
    orders = TopicMetadata("orders", uuid.uuid4(), {
        0: PartitionState([0, 1, 2], 1, leader_epoch=4, isr=[1, 2], version=9),
        1: PartitionState([1, 2, 0], 2, leader_epoch=1, isr=[2, 0, 1], version=2,
                          adding_replicas=[0] if moving else [])}, {"retention.ms": "123"})
    offsets = TopicMetadata("__consumer_offsets", uuid.uuid4(), {0: PartitionState([0], 0, isr=[0])}, {}, True)
    pattern = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)
    ace = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    image = MetadataImage(12, "AAAAAAAAAAAAAAAAAAAAAQ", (), -1, {"orders": orders, "__consumer_offsets": offsets},
                          {"": {"log.cleaner.backoff.ms": "16000"}},
                          {"users/alice": {"producer_byte_rate": "1048576", "SCRAM-SHA-256": "salt=x,..."}},
                          {pattern: frozenset({ace})})
    return ZooKeeperMetadata("AAAAAAAAAAAAAAAAAAAAAQ", image, 7000, live)


def test_the_records_replay_into_what_zookeeper_held() -> None:
    zk = _zookeeper()
    values = [kr.encode(r) for r in bootstrap_records(zk, {kr.METADATA_VERSION_FEATURE: kr.METADATA_VERSION})]
    state = KRaftState()
    for offset, v in enumerate(values):
        state.replay(kr.decode(v), offset, None)
    assert state.features == {kr.METADATA_VERSION_FEATURE: kr.METADATA_VERSION}
    assert state.next_producer_id == 7000  # ids continue after the blocks ZooKeeper handed out
    assert state.meta.topics == zk.image.topics  # ids, assignments, leader epochs, ISRs, versions, configs
    assert state.meta.broker_configs == zk.image.broker_configs
    assert state.meta.entity_configs == zk.image.entity_configs
    assert state.meta.acl_entries == zk.image.acls
    assert state.brokers == {}  # brokers register with the quorum when they start


def test_a_cluster_still_running_or_moving_data_is_refused() -> None:
    check_offline(_zookeeper())
    with pytest.raises(MetadataError, match="brokers 0, 2 are still registered"):
        check_offline(_zookeeper(live=(0, 2)))
    with pytest.raises(MetadataError, match="orders-1 are being reassigned"):
        check_offline(_zookeeper(moving=True))


def test_a_node_given_another_brokers_data_is_found_out(tmp_path: Path) -> None:
    for name in ("orders-0", "orders-1", "__consumer_offsets-0", "gone-3", "__cluster_metadata-0"):
        (tmp_path / name).mkdir()
    (tmp_path / "meta.properties").write_text("")
    zk = _zookeeper()
    assert foreign_partitions(zk, 0, [str(tmp_path)]) == []
    assert foreign_partitions(zk, 1, [str(tmp_path)]) == ["__consumer_offsets-0 (replicas [0])"]


def test_the_bootstrap_file_round_trips_and_refuses_damage(tmp_path: Path) -> None:
    values = [kr.encode(r) for r in bootstrap_records(_zookeeper(), {kr.METADATA_VERSION_FEATURE: 1})]
    assert bootstrap.read(str(tmp_path)) is None
    path = Path(bootstrap.write(str(tmp_path), values))
    assert bootstrap.read(str(tmp_path)) == values
    data = path.read_bytes()
    path.write_bytes(data[:-10])  # torn
    with pytest.raises(MetadataError, match="bootstrap.checkpoint is damaged"):
        bootstrap.read(str(tmp_path))
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x40  # altered
    path.write_bytes(bytes(flipped))
    with pytest.raises(MetadataError, match="CRC"):
        bootstrap.read(str(tmp_path))


def test_metadata_larger_than_one_batch_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MetadataError, match="too large to migrate in one step"):
        bootstrap.write(str(tmp_path), [b"x" * (1 << 20)] * 9)
    assert bootstrap.read(str(tmp_path)) is None
