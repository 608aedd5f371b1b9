"""ZooKeeperMetadataStore against a real ZooKeeper: Kafka's znodes, conditional writes, fencing, watches
seen from a second store, session expiry and restoration, producer id blocks, scale."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid

import pytest
from kazoo.client import KazooClient

from gregor.config import BrokerConfig
from gregor.metadata.store import (
    BROKERS,
    CONFIGS,
    CREATED,
    DELETED,
    ENTITY_CONFIGS,
    SESSION,
    SESSION_LOST,
    SESSION_RESTORED,
    STATE,
    AddPartitions,
    BadVersionError,
    BrokerInfo,
    ControllerMovedError,
    CreateTopic,
    DeleteTopic,
    MetadataError,
    MetadataEvent,
    NoSuchTopicError,
    PartitionState,
    ReassignPartitions,
    SetTopicConfigs,
    StateUpdate,
    TopicExistsError,
    TopicMetadata,
)
from gregor.metadata.zookeeper import ZooKeeperMetadataStore, ZooKeeperSettings, parse_connect
from gregor.tools.local_zookeeper import ZooKeeperServer
from gregor.tools.ports import pick_port
from tests.conftest import StoreFactory
from tests.waiting import wait_for


def _topic(name: str, n: int = 3, replicas: list[int] | None = None) -> TopicMetadata:
    r = replicas or [1, 2, 3]
    return TopicMetadata(name, uuid.uuid4(), {p: PartitionState(list(r), r[0], isr=list(r)) for p in range(n)},
                         {"retention.ms": "1000"})


class Events:
    """Subscribes on a loop running on its own thread, as the broker's cache does."""

    def __init__(self, store: ZooKeeperMetadataStore) -> None:
        self.loop = asyncio.new_event_loop()
        self.items: list[MetadataEvent] = []
        self._t = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._t.start()
        store.subscribe(self.loop, self.items.append)

    def kinds(self) -> list[tuple[str, str | None]]:
        return [(e.kind, e.topic) for e in self.items]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._t.join(5)
        self.loop.close()


def test_chroot_cluster_id_and_kafka_znode_formats(stores: StoreFactory, raw_zk: KazooClient) -> None:
    a = stores(1, **{"broker.rack": "r1"})
    b = stores(2)
    assert a.cluster_id == b.cluster_id and len(a.cluster_id) == 22  # created once, by the first
    assert json.loads(raw_zk.get("/cluster/id")[0]) == {"version": "1", "id": a.cluster_id}
    epoch = a.register_broker(BrokerInfo(1, "127.0.0.1", 9092, "r1"))
    reg, stat = raw_zk.get("/brokers/ids/1")
    doc = json.loads(reg)
    assert stat.ephemeralOwner != 0 and epoch == stat.czxid
    assert doc["version"] == 5 and doc["endpoints"] == ["PLAINTEXT://127.0.0.1:9092"] and doc["rack"] == "r1"
    assert doc["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"} and doc["jmx_port"] == -1
    t = _topic("t1", 2)
    t.partitions[1].adding_replicas = [3]
    a.create_topic(t)
    topic = json.loads(raw_zk.get("/brokers/topics/t1")[0])
    assert topic["version"] == 3 and topic["partitions"] == {"0": [1, 2, 3], "1": [1, 2, 3]}
    assert topic["adding_replicas"] == {"1": [3]} and topic["removing_replicas"] == {}
    assert uuid.UUID(bytes=__import__("base64").urlsafe_b64decode(topic["topic_id"] + "==")) == t.topic_id
    state = json.loads(raw_zk.get("/brokers/topics/t1/partitions/0/state")[0])
    assert state == {"controller_epoch": 0, "leader": 1, "version": 1, "leader_epoch": 0, "isr": [1, 2, 3],
                     "leader_recovery_state": 0}
    assert json.loads(raw_zk.get("/config/topics/t1")[0]) == {"version": 1, "config": {"retention.ms": "1000"}}
    # the other store saw all of it through its watches
    wait_for(lambda: "t1" in b.snapshot().topics and [x.broker_id for x in b.snapshot().brokers] == [1])
    seen = b.snapshot()
    assert seen.brokers[0].rack == "r1" and seen.brokers[0].epoch == epoch
    assert seen.topics["t1"].topic_id == t.topic_id and seen.topics["t1"].partitions[1].adding_replicas == [3]
    assert seen.topics["t1"].configs == {"retention.ms": "1000"} and not seen.topics["t1"].internal


def test_duplicate_broker_id_is_refused_and_unregister_frees_it(stores: StoreFactory) -> None:
    a, b = stores(1), stores(1)
    a.register_broker(BrokerInfo(1, "h", 1))
    with pytest.raises(MetadataError, match="broker id 1 is already registered"):
        b.register_broker(BrokerInfo(1, "h", 2))
    a.unregister_broker(1)
    assert a.snapshot().brokers == ()
    assert b.register_broker(BrokerInfo(1, "h", 2)) > 0
    wait_for(lambda: [x.port for x in a.snapshot().brokers] == [2])


def test_writes_are_read_back_before_they_return(stores: StoreFactory) -> None:
    """Read-your-writes: the version a write returns is in the store's image, and its event published."""
    s = stores(1)
    ev = Events(s)
    try:
        res = s.apply([CreateTopic(_topic("a")), CreateTopic(_topic("a")), DeleteTopic("nope"),
                       SetTopicConfigs("a", {"cleanup.policy": "compact"}),
                       AddPartitions("a", {3: PartitionState([2, 3], 2, isr=[2, 3])}),
                       ReassignPartitions("a", {0: PartitionState([1, 2, 3, 4], 1, adding_replicas=[4])})])
        assert isinstance(res[1], TopicExistsError) and isinstance(res[2], NoSuchTopicError)
        v_create, v_conf, v_add, v_reassign = res[0], res[3], res[4], res[5]
        assert isinstance(v_create, int) and v_create == v_conf == v_add == v_reassign  # one read-back for all
        img = s.snapshot()
        assert img.version >= v_reassign
        a = img.topics["a"]
        assert a.configs == {"cleanup.policy": "compact"} and sorted(a.partitions) == [0, 1, 2, 3]
        assert a.partitions[3].replicas == [2, 3] and a.partitions[0].adding_replicas == [4]
        assert a.partitions[0].replicas == [1, 2, 3, 4] and a.partitions[0].leader == 1  # state untouched
        with pytest.raises(BadVersionError):
            s.add_partitions("a", {3: PartitionState([1], 1, isr=[1])})
        s.delete_topic("a")
        assert "a" not in s.snapshot().topics
        with pytest.raises(NoSuchTopicError):
            s.set_topic_configs("a", {})
        wait_for(lambda: len(ev.items) >= 5)
        kinds = [k for k, _ in ev.kinds()]
        assert kinds[0] == CREATED and CONFIGS in kinds and kinds[-1] == DELETED
        versions = [e.version for e in ev.items]
        assert versions == sorted(versions) and len(set(versions)) == len(versions)
    finally:
        ev.close()


def test_conditional_state_updates_and_controller_epoch_fencing(stores: StoreFactory) -> None:
    a, b = stores(1), stores(2)
    a.register_broker(BrokerInfo(1, "h", 1))
    b.register_broker(BrokerInfo(2, "h", 2))
    a.create_topic(_topic("t", 2))
    e1 = a.elect_controller(1)
    assert e1 == 1 and b.elect_controller(2) is None and a.elect_controller(1) == 1
    wait_for(lambda: b.snapshot().controller_id == 1)
    new = PartitionState([1, 2, 3], 2, leader_epoch=1, isr=[2, 3])
    res = a.update_partition_states([StateUpdate("t", 0, new, 0), StateUpdate("t", 1, new, 5),
                                     StateUpdate("nope", 0, new, 0)], controller_epoch=e1)
    assert res[0] == 1 and isinstance(res[1], BadVersionError) and isinstance(res[2], NoSuchTopicError)
    st = a.snapshot().topics["t"].partitions[0]
    assert (st.leader, st.leader_epoch, st.isr, st.controller_epoch, st.version) == (2, 1, [2, 3], 1, 1)
    # a leader's own ISR write: conditional on the version only
    assert b.update_partition_state("t", 0, PartitionState([1, 2, 3], 2, 1, [2], 1), 1) == 2
    # the controller moves: a's writes with its epoch are fenced
    a.resign_controller(1, e1)
    wait_for(lambda: b.snapshot().controller_id == -1)
    e2 = b.elect_controller(2)
    assert e2 == 2
    res = a.update_partition_states([StateUpdate("t", 0, new, 2)], controller_epoch=e1)
    assert isinstance(res[0], ControllerMovedError)
    # even a stale holder that still believes in its epoch (kept from before) is fenced by ZooKeeper
    a._controller_epoch = (e1, 0)  # as if a's session still thought it held epoch 1 at that znode version
    res = a.update_partition_states([StateUpdate("t", 0, new, 2)], controller_epoch=e1)
    assert isinstance(res[0], ControllerMovedError)
    assert b.update_partition_states([StateUpdate("t", 0, new, 2)], controller_epoch=e2) == [3]
    wait_for(lambda: a.snapshot().topics["t"].partitions[0].version == 3)
    assert a.snapshot().topics["t"].partitions[0].controller_epoch == 2


def test_two_brokers_race_for_the_same_state_version(stores: StoreFactory) -> None:
    a, b = stores(1), stores(2)
    a.create_topic(_topic("t", 1))
    wait_for(lambda: "t" in b.snapshot().topics)
    results: list[object] = []

    def write(s: ZooKeeperMetadataStore, leader: int) -> None:
        results.append(s.update_partition_states([StateUpdate("t", 0, PartitionState([1, 2, 3], leader, 1, [leader]), 0)])[0])

    threads = [threading.Thread(target=write, args=(s, i)) for i, s in ((1, a), (2, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(type(r).__name__ for r in results) == ["BadVersionError", "int"]


def test_watches_deliver_other_stores_changes_as_events(stores: StoreFactory) -> None:
    a, b = stores(1), stores(2)
    ev = Events(b)
    try:
        # Each change waits for b's event before the next: ZooKeeper's watches are one-shot, so b may read
        # two quick changes of one node as one (a topic created with its partitions' later state already
        # in it), which is the protocol's semantics, not what this test is about.
        a.register_broker(BrokerInfo(1, "h", 1))
        a.create_topic(_topic("w", 3))
        wait_for(lambda: (CREATED, "w") in ev.kinds())
        a.update_partition_state("w", 1, PartitionState([1, 2, 3], 3, 1, [3]), 0)
        wait_for(lambda: (STATE, "w") in ev.kinds())
        a.set_topic_configs("w", {"retention.ms": "7"})
        wait_for(lambda: (CONFIGS, "w") in ev.kinds())
        a.elect_controller(1)
        wait_for(lambda: any(e.kind == BROKERS and e.controller_id == 1 for e in ev.items))
        a.delete_topic("w")
        wait_for(lambda: (DELETED, "w") in ev.kinds())
        kinds = ev.kinds()
        assert kinds.index((CREATED, "w")) < kinds.index((STATE, "w")) < kinds.index((DELETED, "w"))
        assert (BROKERS, None) in kinds and (CONFIGS, "w") in kinds
        state = next(e for e in ev.items if e.kind == STATE)
        assert state.partitions is not None and list(state.partitions) == [1] and state.partitions[1].leader == 3
        assert any(e.kind == BROKERS and e.controller_id == 1 for e in ev.items)
        versions = [e.version for e in ev.items]
        assert versions == sorted(versions)
    finally:
        ev.close()


def test_producer_id_blocks_from_two_stores_never_overlap(stores: StoreFactory, raw_zk: KazooClient) -> None:
    a, b = stores(1), stores(2)
    got: list[tuple[int, int]] = []
    lock = threading.Lock()

    def take(s: ZooKeeperMetadataStore) -> None:
        for _ in range(25):
            r = s.allocate_producer_ids(1000)
            with lock:
                got.append(r)

    threads = [threading.Thread(target=take, args=(s,)) for s in (a, b, a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    starts = sorted(f for f, _ in got)
    assert starts == list(range(0, 100 * 1000, 1000))  # each block exactly once, none skipped
    doc = json.loads(raw_zk.get("/latest_producer_id_block")[0])
    assert doc["version"] == 1 and doc["block_start"] == "99000" and doc["block_end"] == "99999"


def test_session_expiry_publishes_lost_then_restores_registration_and_picture(
        stores: StoreFactory, raw_zk: KazooClient, zk_connect: str) -> None:
    s = stores(1)
    other = stores(2)
    ev = Events(s)
    try:
        old_epoch = s.register_broker(BrokerInfo(1, "h", 1))
        s.elect_controller(1)
        s.create_topic(_topic("keep", 1))
        s.create_topic(_topic("gone", 1))
        # Expire s's session: a second client with the same session id and password closes it.
        hosts, _ = parse_connect(zk_connect)
        thief = KazooClient(hosts=hosts, client_id=s.client_id)
        thief.start(timeout=10)
        thief.stop()
        thief.close()
        wait_for(lambda: (SESSION, None) in ev.kinds())
        lost = next(e for e in ev.items if e.kind == SESSION)
        assert lost.session == SESSION_LOST
        other.delete_topic("gone")  # while s is away
        wait_for(lambda: any(e.kind == SESSION and e.session == SESSION_RESTORED for e in ev.items), 20)
        img = s.snapshot()
        (me,) = img.brokers
        assert me.broker_id == 1 and me.epoch > old_epoch  # registered again: a new broker epoch
        assert sorted(img.topics) == ["keep"] and img.controller_id == -1  # the controllership went with it
        kinds = ev.kinds()
        restored = kinds.index((SESSION, None), kinds.index((SESSION, None)) + 1)
        assert (DELETED, "gone") in kinds[:restored] and (CREATED, "keep") in kinds[kinds.index((SESSION, None)):restored]
        assert raw_zk.exists("/brokers/ids/1") is not None
        assert s.elect_controller(1) == 2  # and it may be elected again, at a new epoch
    finally:
        ev.close()


def test_unreachable_zookeeper_fails_with_the_address() -> None:
    port = pick_port()
    with pytest.raises(MetadataError, match=f"127.0.0.1:{port}"):
        ZooKeeperMetadataStore(ZooKeeperSettings.from_config(BrokerConfig(
            {"zookeeper.connect": f"127.0.0.1:{port}/x", "zookeeper.connection.timeout.ms": "500"})))


def test_scale_100_topics_and_a_1000_partition_topic(stores: StoreFactory, capsys: pytest.CaptureFixture[str],
                                                    zookeeper_server: ZooKeeperServer) -> None:
    """Figures for the report: creation, a fresh store's full load, and a 1,000-update fenced batch."""
    a = stores(1)
    a.register_broker(BrokerInfo(1, "h", 1))
    t0 = time.monotonic()
    res = a.apply([CreateTopic(_topic(f"s{i}", 10)) for i in range(100)])
    t_100 = time.monotonic() - t0
    assert all(isinstance(r, int) for r in res)
    t0 = time.monotonic()
    a.create_topic(_topic("big", 1000))
    t_big = time.monotonic() - t0
    t0 = time.monotonic()
    b = stores(2)
    t_load = time.monotonic() - t0
    assert len(b.snapshot().topics["big"].partitions) == 1000 and len(b.snapshot().topics) == 101
    e = a.elect_controller(1)
    assert e is not None
    updates = [StateUpdate("big", p, PartitionState([1, 2, 3], 2, 1, [2, 3]), 0) for p in range(1000)]
    t0 = time.monotonic()
    res = a.update_partition_states(updates, controller_epoch=e)
    t_upd = time.monotonic() - t0
    assert res == [1] * 1000
    t0 = time.monotonic()
    wait_for(lambda: all(s.leader == 2 for s in b.snapshot().topics["big"].partitions.values()), 30)
    t_seen = time.monotonic() - t0
    with capsys.disabled():
        print(f"\n[zk scale] 100 x 10-partition topics: {t_100 * 1000:.0f} ms; 1 x 1,000: {t_big * 1000:.0f} ms; "
              f"a new store loads 2,000 partitions in {t_load * 1000:.0f} ms; 1,000 fenced state updates "
              f"{t_upd * 1000:.0f} ms (published included), seen by the other store {t_seen * 1000:.0f} ms later")
    assert t_upd < 10  # pipelined: not 1,000 sequential round trips with their re-reads


def test_a_topic_larger_than_one_multi_is_created_seen_and_deleted(stores: StoreFactory, raw_zk: KazooClient) -> None:
    """5,000 partitions exceed one request (jute.maxbuffer): written in several multis; a store watching
    meanwhile ends with every partition, and the deletion removes every znode."""
    a, b = stores(1), stores(2)
    a.create_topic(_topic("huge", 5000))
    assert len(a.snapshot().topics["huge"].partitions) == 5000
    wait_for(lambda: "huge" in b.snapshot().topics and len(b.snapshot().topics["huge"].partitions) == 5000, 30)
    assert b.snapshot().topics["huge"].partitions[4999].isr == [1, 2, 3]
    a.add_partitions("huge", {p: PartitionState([2], 2, isr=[2]) for p in range(5000, 7500)})
    wait_for(lambda: len(b.snapshot().topics["huge"].partitions) == 7500, 30)
    a.delete_topic("huge")
    assert raw_zk.exists("/brokers/topics/huge") is None and raw_zk.exists("/config/topics/huge") is None
    wait_for(lambda: "huge" not in b.snapshot().topics, 30)


def test_a_zookeeper_restart_within_the_session_timeout_changes_nothing(tmp_path: object) -> None:
    """SUSPENDED, not LOST: the session outlives a ZooKeeper restart (its sessions are in the data dir),
    so no SESSION event, the same registration, and the watches still work afterwards."""
    zk = ZooKeeperServer(str(tmp_path)).start()
    s = t = None
    try:
        props = {"zookeeper.connect": zk.connect + "/c", "zookeeper.session.timeout.ms": "15000"}
        s = ZooKeeperMetadataStore(ZooKeeperSettings.from_config(BrokerConfig({**props, "broker.id": "1"})))
        ev = Events(s)
        epoch = s.register_broker(BrokerInfo(1, "h", 1))
        zk.kill()
        time.sleep(1.0)
        zk.start()
        t = ZooKeeperMetadataStore(ZooKeeperSettings.from_config(BrokerConfig({**props, "broker.id": "2"})))
        wait_for(lambda: [b.epoch for b in t.snapshot().brokers] == [epoch], 10)  # the same registration
        t.create_topic(_topic("after", 1))
        wait_for(lambda: "after" in s.snapshot().topics, 15)  # s's watches survived the reconnection
        assert not any(e.kind == SESSION for e in ev.items)
        ev.close()
    finally:
        for x in (s, t):
            if x is not None:
                x.close()
        zk.kill()


def test_dynamic_broker_configs_in_kafka_znodes(stores: StoreFactory, raw_zk: KazooClient) -> None:
    """/config/brokers/<id> and /config/brokers/<default> as Kafka writes them; a second store sees each
    change as a BROKER_CONFIGS event and in its snapshot, also one made directly in ZooKeeper (as
    Kafka's own tools would), and an emptied entity disappears."""
    from gregor.metadata.store import BROKER_CONFIGS, DEFAULT_ENTITY

    a, b = stores(1), stores(2)
    seen = Events(b)
    try:
        a.set_broker_configs("1", {"leader.replication.throttled.rate": "1000"})
        a.set_broker_configs(DEFAULT_ENTITY, {"follower.replication.throttled.rate": "5"})
        assert json.loads(raw_zk.get("/config/brokers/1")[0]) == {
            "version": 1, "config": {"leader.replication.throttled.rate": "1000"}}
        assert json.loads(raw_zk.get("/config/brokers/<default>")[0])["config"] == {
            "follower.replication.throttled.rate": "5"}
        wait_for(lambda: b.snapshot().broker_configs == {"1": {"leader.replication.throttled.rate": "1000"},
                                                      DEFAULT_ENTITY: {"follower.replication.throttled.rate": "5"}})
        raw_zk.set("/config/brokers/1", json.dumps({"version": 1, "config": {"leader.replication.throttled.rate": "7"}}).encode())
        wait_for(lambda: b.snapshot().broker_configs.get("1") == {"leader.replication.throttled.rate": "7"})
        a.set_broker_configs("1", {})
        wait_for(lambda: "1" not in b.snapshot().broker_configs)
        events = [(e.entity, e.configs) for e in seen.items if e.kind == BROKER_CONFIGS]
        assert events == [("1", {"leader.replication.throttled.rate": "1000"}),
                          (DEFAULT_ENTITY, {"follower.replication.throttled.rate": "5"}),
                          ("1", {"leader.replication.throttled.rate": "7"}), ("1", {})]
        c = stores(3)  # a store started later reads them all at once
        assert c.snapshot().broker_configs == {DEFAULT_ENTITY: {"follower.replication.throttled.rate": "5"}}
    finally:
        seen.close()


def test_user_and_client_configs_reach_other_stores_through_change_notifications(
        stores: StoreFactory, raw_zk: KazooClient) -> None:
    """Kafka's layout: /config/users/<u>[/clients/<c>], /config/clients/<c>, with a sequential
    /config/changes/config_change_ per write; another broker's store reads them, and a new store loads them."""
    a, b = stores(1), stores(2)
    ev = Events(b)
    try:
        a.set_entity_configs("users", "alice", {"SCRAM-SHA-256": "salt=x,stored_key=y,server_key=z,iterations=4096"})
        a.set_entity_configs("users", "alice/clients/app", {"producer_byte_rate": "1024"})
        a.set_entity_configs("clients", "<default>", {"consumer_byte_rate": "2048"})
        wait_for(lambda: sum(e.kind == ENTITY_CONFIGS for e in ev.items) >= 3)
        got = {e.entity: e.configs for e in ev.items if e.kind == ENTITY_CONFIGS}
        assert got["users/alice/clients/app"] == {"producer_byte_rate": "1024"}
        assert got["clients/<default>"] == {"consumer_byte_rate": "2048"}
        doc = json.loads(raw_zk.get("/config/users/alice/clients/app")[0])
        assert doc == {"version": 1, "config": {"producer_byte_rate": "1024"}}
        notes = raw_zk.get_children("/config/changes")
        assert len(notes) == 3 and all(n.startswith("config_change_") for n in notes)
        assert json.loads(raw_zk.get(f"/config/changes/{sorted(notes)[0]}")[0]) == {
            "version": 2, "entity_path": "users/alice"}
        a.set_entity_configs("clients", "<default>", {})
        wait_for(lambda: any(e.kind == ENTITY_CONFIGS and e.entity == "clients/<default>" and not e.configs
                          for e in ev.items))
        c = stores(3)
        assert c.snapshot().entity_configs == {
            "users/alice": {"SCRAM-SHA-256": "salt=x,stored_key=y,server_key=z,iterations=4096"},
            "users/alice/clients/app": {"producer_byte_rate": "1024"}}
        with pytest.raises(ValueError):
            a.set_entity_configs("users", "alice/app", {"x": "1"})
    finally:
        ev.close()


def test_change_notifications_purged_after_expiration(stores: StoreFactory, raw_zk: KazooClient,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka's policy for both kinds of sequential notification (/config/changes, /kafka-acl-changes): a
    reader deletes the ones older than the expiration (15 minutes; 300 ms here) once it has read them, and
    keeps the young ones; another broker still gets every change."""
    from gregor.metadata import zk_config_reader
    from gregor.security.acl import (
        AccessControlEntry,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourcePattern,
        ResourceType,
    )

    monkeypatch.setattr(zk_config_reader, "CHANGE_EXPIRATION_MS", 300)
    a, b = stores(1), stores(2)
    ace = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    topic = ResourcePattern(ResourceType.TOPIC, "purged", PatternType.LITERAL)
    a.set_entity_configs("users", "old", {"consumer_byte_rate": "1"})
    a.alter_acls(topic, frozenset({ace}))
    assert len(raw_zk.get_children("/config/changes")) == 1 and len(raw_zk.get_children("/kafka-acl-changes")) == 1
    time.sleep(0.5)  # both notifications expire
    a.set_entity_configs("users", "new", {"consumer_byte_rate": "2"})
    a.alter_acls(topic, remove=frozenset({ace}))
    wait_for(lambda: b.snapshot().entity_configs.get("users/new") == {"consumer_byte_rate": "2"}
          and topic not in b.snapshot().acls)
    wait_for(lambda: len(raw_zk.get_children("/config/changes")) == 1 and len(raw_zk.get_children("/kafka-acl-changes")) == 1)
    assert b.snapshot().entity_configs["users/old"] == {"consumer_byte_rate": "1"}
    (note,) = raw_zk.get_children("/config/changes")
    assert json.loads(raw_zk.get(f"/config/changes/{note}")[0])["entity_path"] == "users/new"
