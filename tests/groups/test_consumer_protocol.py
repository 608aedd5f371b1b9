"""The KIP-848 consumer group protocol (group.protocol=consumer): through confluent-kafka and
member processes, and at the wire for the rules a client does not show (epochs, revocation
before reassignment, the errors of the KIP)."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from gregor.coordinator.group.assignors import AssignmentSpec, range_, uniform
from gregor.protocol.errors import ErrorCode
from tests.broker_process import BrokerProcess
from tests.groups.common import complete_lines, fill_topic, read_records, start_worker
from tests.wire import WireClient

# Fast timing for tests: members heartbeat every 300 ms and are fenced 3 s after their last one.
KIP848_BROKER = {
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": "3000",
    "group.consumer.min.session.timeout.ms": "1000",
}
CONSUMER = {"group.protocol": "consumer"}


def _worker(b: BrokerProcess, group: str, topic: str, mode: str, out: Path, delay_ms: int = 0) -> subprocess.Popen[bytes]:
    return start_worker(b, group, topic, mode, out, delay_ms, CONSUMER)


def _events(path: Path) -> list[tuple[str, float, set[int]]]:
    """The worker's ("assigned" | "revoked", time, partitions): incremental with this protocol."""
    out = []
    for ln in complete_lines(path):
        if ln.startswith(("# assigned", "# revoked")):
            _, kind, at, *parts = ln.split()
            out.append((kind, float(at), {int(x) for x in (parts[0] if parts else "").split(",") if x}))
    return out


def _owned(path: Path, until: float = float("inf")) -> set[int]:
    owned: set[int] = set()
    for kind, at, parts in _events(path):
        if at <= until:
            owned = owned | parts if kind == "assigned" else owned - parts
    return owned


def _commit(c: Consumer, m: Any, tolerate: tuple[int, ...] = ()) -> bool:
    """A synchronous commit; STALE_MEMBER_EPOCH (the epoch moved on while in flight) is retried, as Java does.
    False when it failed with a code in `tolerate` (the message will come again)."""
    for attempt in range(20):
        try:
            c.commit(message=m, asynchronous=False)
            return True
        except KafkaException as e:
            if e.args[0].code() in tolerate:
                return False
            if e.args[0].code() != KafkaError.STALE_MEMBER_EPOCH or attempt == 19:
                raise
            time.sleep(0.05)
    return False


# --- through confluent-kafka -------------------------------------------------------------

def test_three_members_split_six_partitions(start_broker: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    b = start_broker(KIP848_BROKER)
    n = 30_000
    fill_topic(b, "orders", 6, n)
    outs = [tmp_path / f"w{i}.txt" for i in range(3)]
    procs = [_worker(b, "g1", "orders", "alo", out) for out in outs]
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # while they consume: the group as ListGroups and describe show it
        listed = {g.group_id: g for g in admin.list_consumer_groups().result(10).valid}
        if "g1" in listed and len(admin.describe_consumer_groups(["g1"])["g1"].result(10).members) == 3:
            break
        time.sleep(0.2)
    assert listed["g1"].type == ConsumerGroupType.CONSUMER
    while len(read_records(outs)) < n and time.monotonic() < deadline + 30:
        time.sleep(0.1)
    done_at = time.time()  # all consumed; the workers stay 6 s more before they close (and revoke all)
    desc = admin.describe_consumer_groups(["g1"])["g1"].result(10)
    assert desc.type == ConsumerGroupType.CONSUMER and desc.partition_assignor == "uniform"
    assert desc.state == ConsumerGroupState.STABLE
    assert sorted(len(m.assignment.topic_partitions) for m in desc.members) == [2, 2, 2]
    for p in procs:
        assert p.wait(60) == 0
    counts = Counter(read_records(outs))
    assert set(counts) == set(range(n)) and max(counts.values()) == 1, "each message processed exactly once"
    finals = [_owned(o, done_at) for o in outs]
    assert [len(f) for f in finals] == [2, 2, 2]
    assert sorted(p for f in finals for p in f) == list(range(6))


def test_member_close_moves_its_partitions_without_duplicates(start_broker: Callable[..., BrokerProcess]) -> None:
    b = start_broker(KIP848_BROKER)
    n = 3000
    fill_topic(b, "moves", 6, n)
    seen: list[tuple[int, int]] = []  # (consumer, value)
    lock = threading.Lock()
    closing = threading.Event()
    owned_at_close: list[set[int]] = []
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g2", "auto.offset.reset": "earliest",
                          "enable.auto.commit": False, **CONSUMER})
            c.subscribe(["moves"])
            idle_since = time.monotonic()
            while time.monotonic() - idle_since < 4:
                if i == 0 and closing.is_set():
                    owned_at_close.append({tp.partition for tp in c.assignment()})
                    break
                m = c.poll(0.1)
                if m is None or m.error() is not None:
                    continue
                idle_since = time.monotonic()
                with lock:
                    seen.append((i, int(m.value())))
                    if len(seen) >= n // 4:
                        closing.set()
                _commit(c, m)  # commit after processing
                time.sleep(0.002)
            c.close()  # the consumer revokes its partitions and leaves (member epoch -1)
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    counts = Counter(v for _, v in seen)
    assert set(counts) == set(range(n)), "nothing lost"
    assert max(counts.values()) == 1, "no message processed twice"
    assert owned_at_close and owned_at_close[0], "the closing member owned partitions"
    assert any(i != 0 for i, _ in seen[-n // 4:]), "the others consumed after it left"


def test_killed_member_partitions_move_after_session_timeout(start_broker: Callable[..., BrokerProcess],
                                                              tmp_path: Path) -> None:
    b = start_broker(KIP848_BROKER)
    n = 6000
    fill_topic(b, "jobs", 6, n)
    outs = [tmp_path / f"w{i}.txt" for i in range(3)]
    procs = [_worker(b, "g3", "jobs", "alo", out, delay_ms=2) for out in outs]
    deadline = time.monotonic() + 30
    while len(read_records(outs)) < n // 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    killed_at = time.time()
    victim_parts = _owned(outs[0], killed_at)
    procs[0].kill()  # SIGKILL: no leave heartbeat, no final commit
    procs[0].wait()
    while len(set(read_records(outs))) < n and time.monotonic() < deadline + 30:
        time.sleep(0.1)
    done_at = time.time()  # the survivors close (and revoke all) 6 s after this
    for p in procs[1:]:
        assert p.wait(60) == 0
    assert victim_parts, "the killed member owned partitions"
    assert set(read_records(outs)) == set(range(n)), "at-least-once: nothing skipped"
    assert sorted(_owned(outs[1], done_at) | _owned(outs[2], done_at)) == list(range(6)), "survivors hold them all"
    moved_at = min(at for o in outs[1:] for kind, at, parts in _events(o)
                   if kind == "assigned" and at > killed_at and parts & victim_parts)
    # Its partitions stay reserved until the broker fences it: 3 s after its last heartbeat (<= 0.3 s before the kill).
    assert 2.5 <= moved_at - killed_at < 15, moved_at - killed_at


def _describe_epoch(b: BrokerProcess, group: str) -> int:
    w = WireClient(b.bootstrap)
    try:
        r = w.request(69, 0, {"group_ids": [group], "include_authorized_operations": False})
    finally:
        w.close()
    assert r.groups[0].error_code == 0, r.groups[0]
    return r.groups[0].group_epoch


def test_offsets_survive_restart_and_members_rejoin(start_broker: Callable[..., BrokerProcess]) -> None:
    b = start_broker(KIP848_BROKER)
    fill_topic(b, "resume", 3, 300)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g4", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, **CONSUMER})
    c.subscribe(["resume"])
    values: list[int] = []
    deadline = time.monotonic() + 30
    while len(values) < 150 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            values.append(int(m.value()))
            _commit(c, m)
    epoch_before = _describe_epoch(b, "g4")
    probe = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g4"})
    tps = [TopicPartition("resume", p) for p in range(3)]
    committed = {tp.partition: tp.offset for tp in probe.committed(tps, timeout=10)}
    probe.close()
    assert sum(max(o, 0) for o in committed.values()) == 150

    assert b.stop() == 0
    b.restart()  # the consumer stays up: its next heartbeat gets UNKNOWN_MEMBER_ID and it rejoins
    deadline = time.monotonic() + 40
    failed_commits = 0
    while len(set(values)) < 300 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            assert m.offset() >= max(committed[m.partition()], 0), "resumed from the committed offset"
            values.append(int(m.value()))
            # Members are not persisted: until the member has rejoined, its commits are refused.
            failed_commits += not _commit(c, m, tolerate=(KafkaError.UNKNOWN_MEMBER_ID,))
    assert set(values) == set(range(300)), "the rejoined member read the rest"
    assert len(values) - 300 <= failed_commits, "only messages whose commit was refused came again"
    assert _describe_epoch(b, "g4") > epoch_before, "the group epoch survived the restart"
    c.close()

    b.kill()  # SIGKILL too: the offsets are in the log
    b.restart()
    probe = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g4"})
    after = {tp.partition: tp.offset for tp in probe.committed(tps, timeout=10)}
    probe.close()
    assert sum(after.values()) == 300
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    listed = {g.group_id: g for g in admin.list_consumer_groups().result(10).valid}
    assert listed["g4"].type == ConsumerGroupType.CONSUMER


# --- at the wire -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def wire_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("kip848"), {**KIP848_BROKER, "group.consumer.max.size": "3"}).start()
    yield b
    b.kill()


class Member:
    """One member driven by hand with ConsumerGroupHeartbeat v1."""

    def __init__(self, w: WireClient, group: str, topics: list[str], instance_id: str | None = None,
                 assignor: str | None = None, rebalance_timeout_ms: int = 30000) -> None:
        self.w, self.group, self.topics = w, group, topics
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.member_id = str(uuid.uuid4())
        self.instance_id = instance_id
        self.assignor = assignor
        self.epoch = 0
        self.owned: dict[uuid.UUID, list[int]] = {}

    def heartbeat(self, epoch: int | None = None, owned: dict[uuid.UUID, list[int]] | None = None,
                  full: bool = False, version: int = 1) -> Any:
        epoch = self.epoch if epoch is None else epoch
        body: dict[str, Any] = {"group_id": self.group, "member_id": self.member_id, "member_epoch": epoch,
                                "instance_id": self.instance_id, "server_assignor": self.assignor}
        if epoch == 0 or full:
            body.update(rebalance_timeout_ms=self.rebalance_timeout_ms, subscribed_topic_names=self.topics,
                        topic_partitions=[] if epoch == 0 else self._tps(self.owned))
        if owned is not None:
            body["topic_partitions"] = self._tps(owned)
        r = self.w.request(68, version, body)
        if r.error_code == 0:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.owned = {tp.topic_id: sorted(tp.partitions) for tp in r.assignment.topic_partitions}
        return r

    @staticmethod
    def _tps(owned: dict[uuid.UUID, list[int]]) -> list[dict[str, Any]]:
        return [{"topic_id": t, "partitions": ps} for t, ps in owned.items()]

    def partitions(self) -> list[int]:
        return sorted(p for ps in self.owned.values() for p in ps)


def _topic_id(w: WireClient, name: str) -> uuid.UUID:
    r = w.request(3, 12, {"topics": [{"topic_id": uuid.UUID(int=0), "name": name}],
                          "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    assert r.topics[0].error_code == 0
    return r.topics[0].topic_id


@pytest.fixture
def wire(wire_broker: BrokerProcess) -> Iterator[WireClient]:
    w = WireClient(wire_broker.bootstrap)
    yield w
    w.close()


def _newfill_topic(b: BrokerProcess, partitions: int) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": b.bootstrap})  # kept alive until the result is in
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
    return name


def test_partition_moves_only_after_its_owner_revokes_it(wire_broker: BrokerProcess, wire: WireClient) -> None:
    t = _newfill_topic(wire_broker, 4)
    tid = _topic_id(wire, t)
    a, b = Member(wire, "w-revoke", [t]), Member(wire, "w-revoke", [t])
    r = a.heartbeat()
    assert (r.error_code, r.member_epoch, a.partitions()) == (0, 1, [0, 1, 2, 3])
    r = b.heartbeat()  # group epoch 2: two partitions are b's target, but a still holds them
    assert (r.error_code, r.member_epoch, b.partitions()) == (0, 2, [])
    r = a.heartbeat()  # a is told to give two up; it stays at epoch 1 until it has
    assert (r.member_epoch, len(a.partitions())) == (1, 2)
    kept = a.partitions()
    r = b.heartbeat()
    assert b.partitions() == [], "not before a has revoked them"
    r = a.heartbeat(owned={tid: kept})  # a acknowledges: it no longer owns the others
    assert (r.error_code, r.member_epoch, r.assignment) == (0, 2, None)
    r = b.heartbeat()
    assert (r.error_code, r.member_epoch) == (0, 2)
    assert sorted(a.partitions() + b.partitions()) == [0, 1, 2, 3] and len(b.partitions()) == 2
    # A partition increase bumps the group epoch; the new partitions are assigned too.
    admin = AdminClient({"bootstrap.servers": wire_broker.bootstrap})
    admin.create_partitions([NewPartitions(t, 6)])[t].result(10)
    a.heartbeat(owned={tid: a.partitions()})
    b.heartbeat(owned={tid: b.partitions()})
    a.heartbeat(owned={tid: a.partitions()})
    assert a.epoch == b.epoch == 3
    assert sorted(a.partitions() + b.partitions()) == list(range(6)) and len(a.partitions()) == 3


def test_member_that_does_not_revoke_in_time_is_fenced(wire_broker: BrokerProcess, wire: WireClient) -> None:
    t = _newfill_topic(wire_broker, 4)
    tid = _topic_id(wire, t)
    a = Member(wire, "w-slow", [t], rebalance_timeout_ms=500)
    a.heartbeat()
    b = Member(wire, "w-slow", [t])
    b.heartbeat()
    everything = {tid: [0, 1, 2, 3]}
    assert a.heartbeat(owned=everything).member_epoch == 1  # asked to revoke two; it keeps reporting them
    time.sleep(1.0)
    assert a.heartbeat(owned=everything).error_code == ErrorCode.UNKNOWN_MEMBER_ID  # fenced after 500 ms
    b.heartbeat()
    assert b.partitions() == [0, 1, 2, 3]


def test_heartbeat_errors(wire_broker: BrokerProcess, wire: WireClient) -> None:
    t = _newfill_topic(wire_broker, 2)
    a = Member(wire, "w-errors", [t])
    assert a.heartbeat().error_code == 0
    assert a.heartbeat(epoch=a.epoch + 1).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert Member(wire, "w-errors", [t]).heartbeat(epoch=3).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert Member(wire, "w-errors", [t], assignor="sticky").heartbeat().error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    anon = Member(wire, "w-errors", [t])
    anon.member_id = ""
    assert anon.heartbeat().error_code == ErrorCode.INVALID_REQUEST  # v1: the client names itself
    r = anon.heartbeat(version=0)  # v0: the coordinator names the member
    assert r.error_code == 0 and r.member_id
    bad = {"group_id": "w-errors", "member_id": "x", "member_epoch": 0, "rebalance_timeout_ms": 1000,
           "subscribed_topic_names": None, "topic_partitions": []}
    assert wire.request(68, 1, bad).error_code == ErrorCode.INVALID_REQUEST  # no subscription on join
    assert wire.request(68, 1, {**bad, "subscribed_topic_regex": "(["}).error_code == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert Member(wire, "w-errors", [t]).heartbeat().error_code == 0
    assert Member(wire, "w-errors", [t]).heartbeat().error_code == ErrorCode.GROUP_MAX_SIZE_REACHED  # max.size 3
    leave = a.heartbeat(epoch=-1)
    assert (leave.error_code, leave.member_epoch) == (0, -1)
    assert a.heartbeat(epoch=1).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_static_member_keeps_its_assignment_across_a_restart(wire_broker: BrokerProcess, wire: WireClient) -> None:
    t = _newfill_topic(wire_broker, 2)
    a = Member(wire, "w-static", [t], instance_id="i1")
    assert a.heartbeat().error_code == 0 and a.partitions() == [0, 1]
    epoch = _describe_epoch(wire_broker, "w-static")
    assert Member(wire, "w-static", [t], instance_id="i1").heartbeat().error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    r = a.heartbeat(epoch=-2)  # temporary leave: its partitions stay reserved for i1
    assert (r.error_code, r.member_epoch) == (0, -2)
    other = Member(wire, "w-static", [t])
    assert other.heartbeat().error_code == 0 and other.partitions() == [], "i1's partitions are not free"
    again = Member(wire, "w-static", [t], instance_id="i1")  # the restarted instance, under a new member id
    r = again.heartbeat()
    assert (r.error_code, r.member_epoch, len(again.partitions())) == (0, epoch + 1, 1)  # its share, at once
    other.heartbeat()
    assert sorted(again.partitions() + other.partitions()) == [0, 1]
    assert a.heartbeat(epoch=1).error_code == ErrorCode.FENCED_INSTANCE_ID
    assert _describe_epoch(wire_broker, "w-static") == epoch + 1  # only `other` joining moved it


def test_range_assignor_and_regex_subscription(wire_broker: BrokerProcess, wire: WireClient) -> None:
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": wire_broker.bootstrap})
    for suffix in ("a", "b"):
        admin.create_topics([NewTopic(f"{prefix}-{suffix}", 2, 1)])[f"{prefix}-{suffix}"].result(10)
    ids = {_topic_id(wire, f"{prefix}-{s}"): s for s in ("a", "b")}
    members = [Member(wire, "w-range", [], assignor="range") for _ in range(2)]
    body = {"rebalance_timeout_ms": 30000, "subscribed_topic_names": [], "subscribed_topic_regex": f"{prefix}-.*",
            "server_assignor": "range", "topic_partitions": [], "member_epoch": 0, "group_id": "w-range"}
    for m in members:
        r = wire.request(68, 1, {**body, "member_id": m.member_id})
        assert r.error_code == 0
        m.epoch = r.member_epoch
    for m in members:  # the first member gives up half; then everyone converges
        for _ in range(3):
            r = m.heartbeat(full=True, owned=m.owned)
    for m in members:
        m.heartbeat(full=True, owned=m.owned)
    got = [{ids[t]: ps for t, ps in m.owned.items()} for m in members]
    ordered = sorted(got, key=lambda g: g.get("a", [9]))
    assert ordered == [{"a": [0], "b": [0]}, {"a": [1], "b": [1]}], got  # range: co-partitioned
    d = wire.request(69, 1, {"group_ids": ["w-range"], "include_authorized_operations": False}).groups[0]
    assert (d.error_code, d.group_state, d.assignor_name) == (0, "Stable", "range")
    assert {m.subscribed_topic_regex for m in d.members} == {f"{prefix}-.*"}


def test_offset_commit_and_fetch_check_the_member_epoch(wire_broker: BrokerProcess, wire: WireClient) -> None:
    t = _newfill_topic(wire_broker, 1)
    a = Member(wire, "w-offsets", [t])
    a.heartbeat()

    def commit(member_id: str, epoch: int) -> int:
        r = wire.request(8, 9, {"group_id": "w-offsets", "generation_id_or_member_epoch": epoch, "member_id": member_id,
                                "topics": [{"name": t, "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                                       "committed_metadata": None}]}]})
        return r.topics[0].partitions[0].error_code

    def fetch(member_id: str | None, epoch: int) -> int:
        r = wire.request(9, 9, {"groups": [{"group_id": "w-offsets", "member_id": member_id, "member_epoch": epoch,
                                            "topics": None}], "require_stable": False})
        return r.groups[0].error_code

    assert commit(a.member_id, a.epoch) == 0
    assert commit(a.member_id, a.epoch - 1) == ErrorCode.STALE_MEMBER_EPOCH
    assert commit("nobody", a.epoch) == ErrorCode.UNKNOWN_MEMBER_ID
    assert commit("", -1) == ErrorCode.UNKNOWN_MEMBER_ID  # from outside the group while it has members
    assert fetch(a.member_id, a.epoch) == 0 and fetch(None, -1) == 0
    assert fetch(a.member_id, a.epoch + 1) == ErrorCode.STALE_MEMBER_EPOCH
    offset_delete = {"group_id": "w-offsets", "topics": [{"name": t, "partitions": [{"partition_index": 0}]}]}
    r = wire.request(47, 0, offset_delete)
    assert r.topics[0].partitions[0].error_code == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    assert wire.request(42, 2, {"groups_names": ["w-offsets"]}).results[0].error_code == ErrorCode.NON_EMPTY_GROUP
    a.heartbeat(epoch=-1)
    assert commit("", -1) == 0  # the group is empty now: admin-style commits work
    assert wire.request(47, 0, offset_delete).topics[0].partitions[0].error_code == 0
    assert wire.request(42, 2, {"groups_names": ["w-offsets"]}).results[0].error_code == 0
    described = wire.request(69, 0, {"group_ids": ["w-offsets"], "include_authorized_operations": False}).groups[0]
    assert described.error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_group_types_do_not_mix(wire_broker: BrokerProcess, wire: WireClient) -> None:
    t = _newfill_topic(wire_broker, 1)
    a = Member(wire, "w-mixed", [t])
    a.heartbeat()
    join = {"group_id": "w-mixed", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}
    assert wire.request(11, 5, join).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    d = wire.request(15, 5, {"groups": ["w-mixed"]}).groups[0]
    assert (d.error_code, d.group_state) == (0, "Dead")  # DescribeGroups shows classic groups only
    assert wire.request(15, 6, {"groups": ["w-mixed"]}).groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    listed = {g.group_id: g for g in wire.request(16, 5, {"states_filter": [], "types_filter": ["consumer"]}).groups}
    assert listed["w-mixed"].group_type == "consumer" and listed["w-mixed"].protocol_type == "consumer"
    a.heartbeat(epoch=-1)
    r = wire.request(11, 5, join)  # an empty consumer group becomes classic on a JoinGroup
    assert r.error_code == ErrorCode.MEMBER_ID_REQUIRED  # KIP-394's first step: it is a classic group now
    classic = Member(wire, "w-mixed", [t])
    assert classic.heartbeat().error_code == ErrorCode.GROUP_ID_NOT_FOUND
    described = wire.request(69, 0, {"group_ids": ["w-mixed"], "include_authorized_operations": False}).groups[0]
    assert described.error_code == ErrorCode.GROUP_ID_NOT_FOUND


# --- the assignors -----------------------------------------------------------------------

def _spec(members: dict[str, list[str]], topics: dict[str, int], current: dict[str, Any] | None = None) -> AssignmentSpec:
    ids = {t: uuid.UUID(int=i + 1) for i, t in enumerate(sorted(topics))}
    return AssignmentSpec({m: frozenset(ts) for m, ts in members.items()},
                          {t: (ids[t], n) for t, n in topics.items()}, current or {})


def test_uniform_assignor_is_balanced_and_sticky() -> None:
    spec = _spec({"a": ["x", "y"], "b": ["x", "y"], "c": ["x", "y"]}, {"x": 4, "y": 3})
    first = uniform(spec)
    sizes = sorted(sum(len(ps) for ps in a.values()) for a in first.values())
    assert sizes == [2, 2, 3]
    # d joins: everyone keeps what they can and gives up only what d needs.
    second = uniform(_spec({m: ["x", "y"] for m in "abcd"}, {"x": 4, "y": 3}, first))
    moved = sum(len(first[m].get(t, frozenset()) - second[m].get(t, frozenset())) for m in first for t in first[m])
    assert moved == 1 and sorted(sum(len(ps) for ps in a.values()) for a in second.values()) == [1, 2, 2, 2]
    # Different subscriptions: a member only gets its topics, and the load is spread.
    het = uniform(_spec({"a": ["x"], "b": ["x", "y"], "c": ["y"]}, {"x": 4, "y": 2}))
    x_id, y_id = uuid.UUID(int=1), uuid.UUID(int=2)
    assert set(het["a"]) <= {x_id} and set(het["c"]) <= {y_id}
    assert sorted(sum(len(ps) for ps in a.values()) for a in het.values()) == [2, 2, 2]


def test_range_assignor_co_partitions() -> None:
    out = range_(_spec({"m1": ["x", "y"], "m2": ["x", "y"]}, {"x": 3, "y": 3}))
    x_id, y_id = uuid.UUID(int=1), uuid.UUID(int=2)
    assert out["m1"] == {x_id: frozenset({0, 1}), y_id: frozenset({0, 1})}
    assert out["m2"] == {x_id: frozenset({2}), y_id: frozenset({2})}


def test_consumer_group_timing_is_validated_at_startup() -> None:
    from gregor.config import BrokerConfig, ConfigError
    from gregor.coordinator.group.consumer_protocol import ConsumerGroupProtocol, ConsumerGroupSettings

    def make(props: dict[str, str]) -> ConsumerGroupProtocol:
        return ConsumerGroupProtocol(ConsumerGroupSettings.from_config(BrokerConfig(props)), {}, lambda *a: None,
                                     lambda *a: None)

    assert make({}).session_timeout_ms == 45000 and make({}).heartbeat_interval_ms == 5000  # Kafka's defaults
    with pytest.raises(ConfigError, match="session.timeout"):
        make({"group.consumer.session.timeout.ms": "3000"})  # below group.consumer.min.session.timeout.ms
    with pytest.raises(ConfigError, match="less than"):
        make({"group.consumer.session.timeout.ms": "45000", "group.consumer.heartbeat.interval.ms": "45000",
              "group.consumer.max.heartbeat.interval.ms": "60000"})
    with pytest.raises(ConfigError):
        make({"group.consumer.assignors": "sticky"})
