"""The quorum core, scenario by scenario, on the simulated network with no random faults: each test sets
up one situation (a crash, a partition, a resignation, a lagging node) and checks what KIP-595,
KIP-630 and KIP-996 say must happen."""

from __future__ import annotations

import json
import random

import pytest

from gregor.protocol.errors import ErrorCode
from gregor.protocol.messages.raft import BEGIN_QUORUM_EPOCH, DESCRIBE_QUORUM, END_QUORUM_EPOCH, VOTE
from gregor.protocol.messages.raft_fetch import RAFT_FETCH
from gregor.raft import wire
from gregor.raft.config import Endpoint, QuorumConfig
from gregor.raft.errors import BufferFullError, InvalidSnapshotError, NotLeaderError, RecordTooLargeError
from gregor.raft.log import OffsetAndEpoch
from gregor.raft.memory_log import MemoryLog
from gregor.raft.node import RaftNode
from gregor.raft.node_base import CANDIDATE, FOLLOWER, LEADER, PROSPECTIVE, RESIGNED, UNATTACHED, Reply, Send
from gregor.raft.quorum_state import ElectionState, MemoryQuorumStateStore
from gregor.raft.records import LEADER_CHANGE
from tests.raft.sim import Simulation


def quiet(voters: int = 3, observers: int = 0, seed: int = 1, **kw: object) -> Simulation:
    params = dict(loss=0.0, dup=0.0, max_delay_ms=2, crash_rate=0.0, partition_rate=0.0, snapshot_bytes=1 << 30)
    params.update(kw)
    return Simulation(seed, voters, observers, **params)  # type: ignore[arg-type]


def elect(sim: Simulation, limit_ms: int = 10_000) -> int:
    assert sim.wait_for(lambda: sim.leader() is not None and all(
        sn.node is None or sn.node.role in (LEADER, FOLLOWER) for sn in sim.nodes.values()), limit_ms) is not None
    leader = sim.leader()
    assert leader is not None
    return leader.node_id


def append(sim: Simulation, values: list[bytes], atomic: bool = False) -> int:
    sn = sim.leader()
    assert sn is not None and sn.node is not None
    n = sn.node
    offset = (n.schedule_atomic_append if atomic else n.schedule_append)(n.epoch, values, sim.now)
    sim.pending_appends.update(values)
    sim.run_node(sn.node_id)
    return offset


def applied_everywhere(sim: Simulation, offset: int, limit_ms: int = 10_000) -> int | None:
    return sim.wait_for(lambda: all(sn.sm is not None and sn.sm.next_offset > offset
                                    for sn in sim.nodes.values() if sn.node is not None), limit_ms)


def isolate(sim: Simulation, nid: int) -> None:
    for other in sim.nodes:
        if other != nid:
            sim.cut.add(frozenset((nid, other)))


def test_a_single_voter_leads_at_once_and_commits_alone() -> None:
    sim = quiet(voters=1)
    assert elect(sim) == 1
    assert sim.now < 2 * sim.election_timeout_ms  # Unattached -> Prospective -> Candidate -> Leader, no peers
    first = sim.nodes[1].sm
    assert first is not None
    off = append(sim, [b"a", b"b"])
    assert applied_everywhere(sim, off) is not None
    assert first.count == 2 and first.leader is not None and first.leader.leader_id == 1


def test_the_leader_hears_of_its_leadership_after_its_leader_change_record() -> None:
    sim = quiet()
    leader = elect(sim)
    seen: list[tuple[str, object]] = []
    n = sim.nodes[leader].node
    assert n is not None

    class Spy:
        def handle_commit(self, batches: list) -> None:
            seen.extend(("commit", b) for b in batches)

        def handle_load_snapshot(self, reader: object) -> None:
            seen.append(("snapshot", reader))

        def handle_leader_change(self, leader: object) -> None:
            seen.append(("leader", leader))

    n.register_listener(Spy())
    sim.wait_for(lambda: any(k == "leader" for k, _ in seen), 5000)
    kinds = [k for k, _ in seen]
    first_leader = kinds.index("leader")
    commits = [b for k, b in seen[:first_leader] if k == "commit"]
    assert commits and commits[-1].control and commits[-1].control[0].type == LEADER_CHANGE  # type: ignore[union-attr]
    lc = commits[-1].control[0].message  # type: ignore[union-attr]
    assert lc.leader_id == leader and sorted(v.voter_id for v in lc.voters) == [1, 2, 3]
    assert leader in [v.voter_id for v in lc.granting_voters]


def test_three_voters_replicate_and_every_listener_applies_the_same_records() -> None:
    sim = quiet()
    elect(sim)
    offsets = [append(sim, [f"r{i}".encode()]) for i in range(20)]
    assert applied_everywhere(sim, offsets[-1]) is not None
    states = {(sn.sm.next_offset, sn.sm.chain) for sn in sim.nodes.values() if sn.sm is not None}
    assert len(states) == 1
    sim.checker.final()


def test_a_vote_is_persisted_before_it_is_answered_and_survives_a_restart() -> None:
    voters = {1: Endpoint("a", 1), 2: Endpoint("b", 2), 3: Endpoint("c", 3)}
    store = MemoryQuorumStateStore()
    log = MemoryLog()
    node = RaftNode(QuorumConfig(node_id=3, voters=voters), log, store, random.Random(1))
    body = VOTE.request.from_bytes(VOTE.request.to_bytes(
        wire.vote_request(None, 3, 5, 1, OffsetAndEpoch(0, -1), False), 2), 2)
    node.handle_request("h1", VOTE.key, 2, body, 10)
    reply = [m for m in node.poll(10) if isinstance(m, Reply)][0]
    assert reply.body["topics"][0]["partitions"][0]["vote_granted"] is True
    assert store.state == ElectionState(5, -1, 1, (1, 2, 3))
    # after a restart, candidate 2 asking in the same epoch is refused; candidate 1 asking again is not
    again = RaftNode(QuorumConfig(node_id=3, voters=voters), log, store, random.Random(2))
    assert (again.role, again.epoch, again.s.voted_id) == (UNATTACHED, 5, 1)
    for candidate, expected in ((2, False), (1, True)):
        b = VOTE.request.from_bytes(VOTE.request.to_bytes(
            wire.vote_request(None, 3, 5, candidate, OffsetAndEpoch(0, -1), False), 2), 2)
        again.handle_request("h", VOTE.key, 2, b, 20)
        r = [m for m in again.poll(20) if isinstance(m, Reply)][0]
        assert r.body["topics"][0]["partitions"][0]["vote_granted"] is expected


def test_a_vote_goes_only_to_a_log_at_least_as_up_to_date() -> None:
    voters = {1: Endpoint("a", 1), 2: Endpoint("b", 2), 3: Endpoint("c", 3)}
    sim = quiet()
    leader = elect(sim)
    off = append(sim, [b"x"])
    assert applied_everywhere(sim, off) is not None
    follower = next(n for n in sim.nodes if n != leader)
    node = sim.nodes[follower].node
    assert node is not None
    stale = OffsetAndEpoch(0, -1)
    epoch = node.epoch + 1
    b = VOTE.request.from_bytes(VOTE.request.to_bytes(wire.vote_request(None, follower, epoch, leader, stale, False),
                                                      2), 2)
    node.handle_request("h", VOTE.key, 2, b, sim.now)
    r = [m for m in node.poll(sim.now) if isinstance(m, Reply)][0]
    part = r.body["topics"][0]["partitions"][0]
    assert part["vote_granted"] is False and part["leader_epoch"] == epoch  # it moved to the epoch, did not vote
    assert voters  # the three-voter layout the simulation uses


def test_a_partitioned_voter_does_not_disturb_the_quorum_when_it_returns() -> None:
    """KIP-996: cut off, it pre-votes in its epoch and loses, never bumping it; back, it just follows."""
    sim = quiet()
    leader = elect(sim)
    epoch = sim.nodes[leader].node.epoch  # type: ignore[union-attr]
    lonely = next(n for n in sim.nodes if n != leader)
    isolate(sim, lonely)
    sim.wait_for(lambda: False, 10 * sim.fetch_timeout_ms)
    n = sim.nodes[lonely].node
    assert n is not None and n.role == PROSPECTIVE and n.epoch == epoch
    sim.cut.clear()
    assert sim.wait_for(lambda: n.role == FOLLOWER, 5000) is not None
    assert sim.leader() is not None and sim.leader().node_id == leader  # type: ignore[union-attr]
    assert all(sn.node.epoch == epoch for sn in sim.nodes.values() if sn.node is not None)  # type: ignore[union-attr]


def test_a_follower_that_hears_from_its_leader_refuses_pre_votes() -> None:
    sim = quiet()
    leader = elect(sim)
    follower = next(n for n in sim.nodes if n != leader)
    other = next(n for n in sim.nodes if n not in (leader, follower))
    node = sim.nodes[follower].node
    assert node is not None and node.role == FOLLOWER
    sim.wait_for(lambda: node.s.has_fetched, 2000)
    b = VOTE.request.from_bytes(VOTE.request.to_bytes(
        wire.vote_request(None, follower, node.epoch, other, OffsetAndEpoch(10**6, 10**4), True), 2), 2)
    node.handle_request("h", VOTE.key, 2, b, sim.now)
    r = [m for m in node.poll(sim.now) if isinstance(m, Reply)][0]
    part = r.body["topics"][0]["partitions"][0]
    assert part["vote_granted"] is False and part["leader_id"] == leader
    assert node.role == FOLLOWER


def test_an_isolated_leader_resigns_and_refuses_appends() -> None:
    """Check quorum: no majority fetched for 1.5 fetch timeouts, the leader stops taking writes."""
    sim = quiet()
    leader = elect(sim)
    isolate(sim, leader)
    n = sim.nodes[leader].node
    assert n is not None
    epoch = n.epoch
    took = sim.wait_for(lambda: n.role != LEADER, 10_000)
    assert took is not None and took <= sim.fetch_timeout_ms * 3 // 2 + 50
    with pytest.raises(NotLeaderError):
        n.schedule_append(epoch, [b"late"], sim.now)
    sim.cut.clear()
    assert sim.wait_for(lambda: sim.leader() is not None and n.role == FOLLOWER, 20_000) is not None


def test_a_restarted_leader_does_not_lead_its_old_epoch_again() -> None:
    sim = quiet()
    leader = elect(sim)
    epoch = sim.nodes[leader].node.epoch  # type: ignore[union-attr]
    sim.crash(leader)
    sim.start(leader)
    n = sim.nodes[leader].node
    assert n is not None and n.role == RESIGNED and n.epoch == epoch
    elect(sim, 20_000)
    assert sim.leader().node.epoch > epoch  # type: ignore[union-attr]


def test_a_resigning_leader_hands_over_faster_than_the_fetch_timeout() -> None:
    sim = quiet()
    leader = elect(sim)
    n = sim.nodes[leader].node
    assert n is not None
    start = sim.now
    n.resign(n.epoch)
    sim.run_node(leader)
    took = sim.wait_for(lambda: sim.leader() is not None and sim.leader().node_id != leader, 10_000)  # type: ignore[union-attr]
    assert took is not None and sim.now - start < sim.fetch_timeout_ms


@pytest.mark.parametrize("preferred", [[3, 2], [2, 3]])
def test_a_fetch_answered_before_the_resignation_does_not_undo_it(preferred: list[int]) -> None:
    """The leader answers a fetch, then resigns and sends EndQuorumEpoch: the two go over different
    connections, and the follower can read the resignation first (seen on loopback under load). The older
    answer must not restart the fetch timeout: the follower stands for election when EndQuorumEpoch said,
    not a whole fetch timeout (20 s here) later."""
    voters = {1: Endpoint("a", 1), 2: Endpoint("b", 2), 3: Endpoint("c", 3)}
    config = QuorumConfig(node_id=3, voters=voters, fetch_timeout_ms=20_000)
    node = RaftNode(config, MemoryLog(), MemoryQuorumStateStore(), random.Random(1))
    now = 100
    v = wire.SEND_VERSION[wire.BEGIN_QUORUM_EPOCH_KEY]
    begin = BEGIN_QUORUM_EPOCH.request.from_bytes(BEGIN_QUORUM_EPOCH.request.to_bytes(
        wire.begin_quorum_epoch_request(None, 3, 1, 1, config.listener_name, voters[1]), v), v)
    node.handle_request("begin", wire.BEGIN_QUORUM_EPOCH_KEY, v, begin, now)
    fetch = next(m for m in node.poll(now) if isinstance(m, Send) and m.api_key == wire.FETCH_KEY)
    assert node.role == FOLLOWER and node.s.leader_id == 1

    v = wire.SEND_VERSION[wire.END_QUORUM_EPOCH_KEY]
    end = END_QUORUM_EPOCH.request.from_bytes(END_QUORUM_EPOCH.request.to_bytes(
        wire.end_quorum_epoch_request(None, 1, 1, preferred, config.listener_name, voters[1]), v), v)
    node.handle_request("end", wire.END_QUORUM_EPOCH_KEY, v, end, now + 1)
    v = wire.SEND_VERSION[wire.FETCH_KEY]
    answer = RAFT_FETCH.response.from_bytes(RAFT_FETCH.response.to_bytes(
        wire.fetch_response(0, 0, 1, 1, -1, 0), v), v)
    node.handle_response(fetch.request_id, answer, now + 2)  # sent before the resignation, read after it
    assert node.s.has_fetched  # it did hear from the leader

    later = now + 2 + config.election_backoff_max_ms
    assert node.next_deadline_ms() is not None and node.next_deadline_ms() <= later  # type: ignore[operator]
    node.poll(later)
    assert node.role in (PROSPECTIVE, CANDIDATE, LEADER), node.describe()


def test_the_high_watermark_waits_for_an_entry_of_the_leaders_epoch() -> None:
    """Raft's figure 8: entries of older epochs are committed only by committing one of the leader's own."""
    from gregor.raft.leader_state import LeaderState
    ls = LeaderState(1, epoch=4, epoch_start_offset=10, voters=[1, 2, 3], granting=[1, 2], now_ms=0,
                     check_quorum_timeout_ms=3000, max_observers=10)
    assert not ls.update_local(10)  # the leader has the old entries 0-9 and its LeaderChange at 10, unflushed
    assert not ls.update_replica(2, 10, 11, 5)  # a majority holds 0-9: still not committed
    assert ls.high_watermark is None
    assert not ls.update_local(11)  # the LeaderChange is on the leader alone
    assert ls.update_replica(2, 11, 11, 6) and ls.high_watermark == 11


def test_a_follower_fetches_only_what_is_flushed() -> None:
    sim = quiet(flush_delays_ms=(500,))
    leader = elect(sim, 30_000)
    off = append(sim, [b"slow"])
    follower = next(n for n in sim.nodes if n != leader)
    fn = sim.nodes[follower].node
    assert fn is not None
    sim.wait_for(lambda: fn.log.end_offset > off, 5000)
    assert fn.log.flushed_offset < fn.log.end_offset
    assert not [p for p in fn.inflight.values() if p.api_key == wire.FETCH_KEY]
    ln = sim.nodes[leader].node
    assert ln is not None and ln.high_watermark <= off  # not committed while nobody has it durable


def test_a_node_far_behind_catches_up_from_a_snapshot() -> None:
    sim = quiet(snapshot_bytes=500)
    leader = elect(sim)
    lagging = next(n for n in sim.nodes if n != leader)
    sim.crash(lagging)
    for i in range(60):
        append(sim, [f"record-{i}-{'y' * 50}".encode()])
        sim.wait_for(lambda: False, 5)
    ln = sim.nodes[leader].node
    assert ln is not None
    sim.wait_for(lambda: ln.log.log_start_offset > 20, 5000)
    assert ln.log.latest_snapshot_id is not None
    sim.start(lagging)
    assert applied_everywhere(sim, ln.log.end_offset - 1, 20_000) is not None
    assert sim.stats["snapshot_loads"] >= 1
    assert sim.nodes[lagging].log.log_start_offset > 0
    sim.checker.final()


def test_an_uncommitted_suffix_is_truncated_by_the_next_leader() -> None:
    sim = quiet()
    leader = elect(sim)
    base = append(sim, [b"committed"])
    assert applied_everywhere(sim, base) is not None
    isolate(sim, leader)
    n = sim.nodes[leader].node
    assert n is not None
    lost = n.schedule_append(n.epoch, [b"never"], sim.now)
    sim.run_node(leader)
    sim.wait_for(lambda: n.log.end_offset > lost, 1000)
    assert sim.wait_for(lambda: any(sn.node is not None and sn.node.role == LEADER and sn.node_id != leader
                                    for sn in sim.nodes.values()), 20_000) is not None
    new = next(sn for sn in sim.nodes.values() if sn.node is not None and sn.node.role == LEADER
               and sn.node_id != leader)
    assert new.node is not None
    again = new.node.schedule_append(new.node.epoch, [b"instead"], sim.now)
    sim.run_node(new.node_id)
    sim.cut.clear()
    assert applied_everywhere(sim, again, 20_000) is not None
    values = [v for _n, _e, vals, _c in sim.checker.delivered.values() for v in vals]
    assert b"never" not in values and b"instead" in values and b"committed" in values


def test_an_observer_follows_but_does_not_count() -> None:
    sim = quiet(voters=1, observers=1)
    elect(sim)
    off = append(sim, [b"seen"])
    assert applied_everywhere(sim, off) is not None
    obs = sim.nodes[100].node
    assert obs is not None and obs.role == FOLLOWER and obs.leader_id == 1
    sim.crash(100)
    off = append(sim, [b"without"])
    assert sim.wait_for(lambda: sim.nodes[1].sm.next_offset > off, 2000) is not None  # type: ignore[union-attr]


def test_append_errors() -> None:
    sim = quiet(voters=1)
    elect(sim)
    n = sim.nodes[1].node
    assert n is not None
    with pytest.raises(NotLeaderError):
        n.schedule_append(n.epoch + 1, [b"x"], sim.now)
    with pytest.raises(RecordTooLargeError):
        n.schedule_append(n.epoch, [b"x" * (9 << 20)], sim.now)
    with pytest.raises(RecordTooLargeError):
        n.schedule_atomic_append(n.epoch, [b"x" * (3 << 20)] * 3, sim.now)
    with pytest.raises(BufferFullError):
        for _ in range(100):
            n.schedule_append(n.epoch, [b"x" * (4 << 20)], sim.now)
    with pytest.raises(InvalidSnapshotError):
        n.create_snapshot(n.high_watermark + 1, 0)


def test_describe_quorum_from_the_leader_and_from_a_follower() -> None:
    sim = quiet(observers=1)
    leader = elect(sim)
    off = append(sim, [b"a"])
    assert applied_everywhere(sim, off) is not None
    body = DESCRIBE_QUORUM.request.from_bytes(DESCRIBE_QUORUM.request.to_bytes(wire.describe_quorum_request(), 2), 2)
    n = sim.nodes[leader].node
    assert n is not None
    n.handle_request("d", DESCRIBE_QUORUM.key, 2, body, sim.now)
    r = [m for m in n.poll(sim.now) if isinstance(m, Reply)][0]
    decoded = DESCRIBE_QUORUM.response.from_bytes(DESCRIBE_QUORUM.response.to_bytes(r.body, 2), 2)
    p = decoded.topics[0].partitions[0]
    assert (p.error_code, p.leader_id, p.high_watermark) == (0, leader, n.high_watermark)
    assert sorted(v.replica_id for v in p.current_voters) == [1, 2, 3]
    assert all(v.log_end_offset == n.log.end_offset for v in p.current_voters)
    assert [o.replica_id for o in p.observers] == [100]
    assert sorted(x.node_id for x in decoded.nodes) == [1, 2, 3]
    other = sim.nodes[next(x for x in (1, 2, 3) if x != leader)].node
    assert other is not None
    other.handle_request("d", DESCRIBE_QUORUM.key, 2, body, sim.now)
    r = [m for m in other.poll(sim.now) if isinstance(m, Reply)][0]
    assert r.body["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_restart_replays_from_the_latest_snapshot_then_the_log() -> None:
    sim = quiet(voters=1, snapshot_bytes=300)
    elect(sim)
    for i in range(30):
        append(sim, [f"v{i}".encode() * 10])
        sim.wait_for(lambda: False, 3)
    sim.wait_for(lambda: sim.nodes[1].sm.next_offset >= sim.nodes[1].log.end_offset, 2000)  # type: ignore[union-attr]
    before = (sim.nodes[1].sm.next_offset, sim.nodes[1].sm.chain)  # type: ignore[union-attr]
    snap = sim.nodes[1].log.latest_snapshot_id
    assert snap is not None and 0 < snap.offset < before[0]
    sim.crash(1)
    sim.start(1)
    elect(sim)
    sim.wait_for(lambda: sim.nodes[1].sm.next_offset >= before[0], 5000)  # type: ignore[union-attr]
    sm = sim.nodes[1].sm
    assert sm is not None and sim.stats["snapshot_loads"] >= 1
    assert sim.checker.states[before[0]][0] == before[1]


def test_a_candidate_restarting_keeps_asking_in_its_epoch() -> None:
    voters = {1: Endpoint("a", 1), 2: Endpoint("b", 2), 3: Endpoint("c", 3)}
    store = MemoryQuorumStateStore()
    store.write(ElectionState(7, -1, 2, (1, 2, 3)))
    node = RaftNode(QuorumConfig(node_id=2, voters=voters), MemoryLog(), store, random.Random(3))
    assert (node.role, node.epoch) == (CANDIDATE, 7)
    out = node.poll(0)
    assert sorted(m.destination for m in out) == [1, 3]
    assert json.loads(store.state.to_json())["votedId"] == 2  # type: ignore[union-attr]
