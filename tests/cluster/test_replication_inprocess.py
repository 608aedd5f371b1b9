"""Replication through an in-process cluster: 2-3 real Brokers sharing one EmbeddedMetadataStore, each with
its own log dir and a real 127.0.0.1 listener, all on one asyncio loop. Followers fetch from leaders over
real sockets; elections are simulated by writing partition states as a controller would (leader change and
leader epoch + 1); produce and consume go through aiokafka or our own wire client (BrokerClient)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from gregor.broker.broker import Broker
from gregor.client.broker_client import BrokerClient
from gregor.config import BrokerConfig
from gregor.metadata.embedded import EmbeddedMetadataStore
from gregor.metadata.store import SESSION, SESSION_LOST, SESSION_RESTORED, PartitionState, StateUpdate, TopicMetadata
from gregor.protocol.errors import ErrorCode
from gregor.protocol.messages.offsets import OFFSET_COMMIT, OFFSET_FETCH
from gregor.protocol.messages.produce import PRODUCE
from gregor.protocol.records import Record, build_batch

LAG_MS = 1000


class Cluster:
    def __init__(self, root: Path, n: int, props: dict[str, str] | None = None) -> None:
        self.root = root
        self.props = props or {}
        (root / "meta").mkdir(parents=True)
        self.store = EmbeddedMetadataStore(str(root / "meta"), 0)
        self.n = n
        self.brokers: dict[int, Broker] = {}

    async def start(self, i: int) -> Broker:
        config = BrokerConfig({
            "broker.id": str(i), "log.dirs": str(self.root / f"b{i}"), "listeners": "PLAINTEXT://127.0.0.1:0",
            "replica.lag.time.max.ms": str(LAG_MS), "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "group.initial.rebalance.delay.ms": "0", **self.props,
        })
        b = Broker(config, store=self.store)
        await b.start()
        await until(lambda: not b.log_manager.loading)
        self.brokers[i] = b
        return b

    async def stop(self, i: int) -> None:
        await self.brokers.pop(i).shutdown()

    async def close(self) -> None:
        for i in list(self.brokers):
            await self.stop(i)
        self.store.close()

    def bootstrap(self, i: int) -> str:
        return f"127.0.0.1:{self.brokers[i].bound_ports[0]}"

    def create(self, topic: str, replicas: list[int], min_isr: int = 1, partitions: int = 1) -> None:
        states = {p: PartitionState(list(replicas), replicas[0], 0, list(replicas)) for p in range(partitions)}
        self.store.create_topic(TopicMetadata(topic, uuid.uuid4(), states, configs={"min.insync.replicas": str(min_isr)}))

    def state(self, topic: str) -> PartitionState:
        t = self.store.snapshot().topics[topic]
        return t.partitions[0]

    def elect(self, topic: str, leader: int, isr: list[int]) -> None:
        """What a controller writes on an election: the new leader, leader epoch + 1, the ISR."""
        s = self.state(topic)
        new = PartitionState(list(s.replicas), leader, s.leader_epoch + 1, list(isr), s.controller_epoch, s.version)
        assert self.store.update_partition_states([StateUpdate(topic, 0, new, s.version)]) == [s.version + 1]

    def log(self, i: int, topic: str) -> Any:
        return self.brokers[i].replica_manager.partitions[(topic, 0)].log

    def log_bytes(self, i: int, topic: str) -> bytes:
        lg = self.log(i, topic)
        lg.flush()
        return b"".join(Path(seg.log_path).read_bytes() for seg in lg.segments)


async def until(cond: Callable[[], bool], timeout: float = 15.0, what: str = "") -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what or cond}")
        await asyncio.sleep(0.02)


def run(tmp_path: Path, n: int, body: Callable[[Cluster], Awaitable[None]], props: dict[str, str] | None = None
        ) -> None:
    async def main() -> None:
        c = Cluster(tmp_path, n, props)
        try:
            for i in range(n):
                await c.start(i)
            await body(c)
        finally:
            await c.close()
    asyncio.run(main())


async def produce_raw(c: Cluster, i: int, topic: str, n: int, acks: int, *, first: int = 0, pid: int = -1,
                      seq: int = -1, timeout_ms: int = 10_000, partition: int = 0, value_bytes: int = 0) -> Any:
    """One Produce v8 of `n` records to broker `i` over a real socket; the partition's answer."""
    records = [Record(k, 1_700_000_000_000 + first + k, None, b"v%d" % (first + k) + b"x" * value_bytes)
               for k in range(n)]
    batch = build_batch(records, producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq)
    host, port = c.bootstrap(i).split(":")
    client = BrokerClient(host, int(port), "test")
    try:
        resp = await client.request(PRODUCE, 8, {
            "transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]},
            timeout_s=30)
    finally:
        client.close()
    return resp.responses[0].partition_responses[0]


def test_acks_all_waits_for_followers_and_logs_match(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        c.create("t", [0, 1, 2], min_isr=2)
        await until(lambda: all(("t", 0) in b.replica_manager.partitions for b in c.brokers.values()))
        producer = AIOKafkaProducer(bootstrap_servers=c.bootstrap(0), acks="all", linger_ms=5)
        await producer.start()
        try:
            for k in range(200):
                await producer.send("t", b"value-%d" % k, partition=0)
            md = await producer.send_and_wait("t", b"last", partition=0)
        finally:
            await producer.stop()
        assert md.offset == 200
        leader = c.brokers[0].replica_manager.partitions[("t", 0)]
        # Acknowledged acks=all means the HW passed it: every ISR member had fetched it.
        assert leader.high_watermark >= 201
        for i in (1, 2):
            assert leader.followers[i].log_end_offset >= 201
        await until(lambda: all(c.log(i, "t").log_end_offset == 201 for i in (1, 2)), what="followers at 201")
        await until(lambda: all(c.log(i, "t").high_watermark == 201 for i in (1, 2)), what="followers' HW")
        assert c.log_bytes(1, "t") == c.log_bytes(0, "t") == c.log_bytes(2, "t")
        # Consumers see below the HW only: hold the HW by stopping one follower's fetches, append acks=1.
        c.brokers[2].replica_manager.fetcher_manager.remove_partition(("t", 0))
        r = await produce_raw(c, 0, "t", 5, acks=1)
        assert r.error_code == 0 and r.base_offset == 201
        await asyncio.sleep(0.3)
        assert c.log(0, "t").high_watermark == 201 and c.log(0, "t").log_end_offset == 206
        consumer = AIOKafkaConsumer(bootstrap_servers=c.bootstrap(0), enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            tp = TopicPartition("t", 0)
            consumer.assign([tp])
            got = []
            while len(got) < 201:
                batch = await consumer.getmany(tp, timeout_ms=500)
                got.extend(m.offset for m in batch.get(tp, []))
            await asyncio.sleep(0.3)
            more = await consumer.getmany(tp, timeout_ms=300)
            assert not more.get(tp), "a consumer read above the high watermark"
            assert got == list(range(201))
        finally:
            await consumer.stop()

    run(tmp_path, 3, body)


def test_isr_shrinks_and_expands(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        c.create("t", [0, 1, 2], min_isr=2)
        await until(lambda: all(("t", 0) in b.replica_manager.partitions for b in c.brokers.values()))
        assert (await produce_raw(c, 0, "t", 10, acks=-1)).error_code == 0
        # Broker 2 stops fetching but stays registered (cut off: its session is lost as far as it knows), so
        # the controller has nothing to do: the leader's lag check must drop it.
        # (Kafka's rule: a follower at the leader's LEO is caught up, so only new appends make it lag.)
        c.brokers[2].replica_manager.on_metadata_change(SESSION, SESSION_LOST)
        r = await produce_raw(c, 0, "t", 10, acks=-1, first=10)
        # acks=all waited for the shrink (broker 2 held the HW until then; 2 is still >= min.insync.replicas).
        assert r.error_code == 0 and r.base_offset == 10
        assert c.state("t").isr == [0, 1]
        assert c.state("t").leader_epoch == 0  # a leader's ISR change keeps the epoch
        assert c.brokers[0].replica_manager.under_replicated() == [("t", 0)]
        c.brokers[2].replica_manager.on_metadata_change(SESSION, SESSION_RESTORED)  # it catches up and rejoins
        await until(lambda: c.state("t").isr == [0, 1, 2], what="ISR expand back to [0, 1, 2]")
        assert c.brokers[0].replica_manager.under_replicated() == []
        await until(lambda: c.log(2, "t").log_end_offset == 20)
        assert c.log_bytes(2, "t") == c.log_bytes(0, "t")
        # Two followers gone: the ISR falls below min.insync.replicas and acks=all is refused.
        await c.stop(2)
        await c.stop(1)
        assert (await produce_raw(c, 0, "t", 1, acks=1, first=20)).error_code == 0
        await until(lambda: c.state("t").isr == [0], timeout=LAG_MS / 1000 * 6, what="ISR shrink to [0]")
        r = await produce_raw(c, 0, "t", 1, acks=-1, first=21)
        assert r.error_code == ErrorCode.NOT_ENOUGH_REPLICAS

    run(tmp_path, 3, body)


def test_acks_all_in_flight_when_isr_shrinks_below_min(tmp_path: Path) -> None:
    """A produce parked for acks=all while the ISR shrinks below min.insync.replicas: once the HW passes it
    (the lagging follower no longer holds it) it is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND."""
    async def body(c: Cluster) -> None:
        c.create("t", [0, 1], min_isr=2)
        await until(lambda: all(("t", 0) in b.replica_manager.partitions for b in c.brokers.values()))
        assert (await produce_raw(c, 0, "t", 1, acks=-1)).error_code == 0
        # Broker 1 stops fetching but stays registered: only the leader's lag check drops it (a controlled
        # shutdown would have the controller shrink the ISR before the produce, NOT_ENOUGH_REPLICAS).
        c.brokers[1].replica_manager.on_metadata_change(SESSION, SESSION_LOST)
        r = await produce_raw(c, 0, "t", 1, acks=-1, first=1, timeout_ms=20_000)
        assert r.error_code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert c.state("t").isr == [0]

    run(tmp_path, 2, body)


def test_old_leader_truncates_exactly_its_divergent_tail(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        c.create("t", [0, 1, 2])
        await until(lambda: all(("t", 0) in b.replica_manager.partitions for b in c.brokers.values()))
        fm1, fm2 = (c.brokers[i].replica_manager.fetcher_manager for i in (1, 2))
        fm2.remove_partition(("t", 0))  # broker 2 stops fetching: it holds the leader's HW at 0
        assert (await produce_raw(c, 0, "t", 10, acks=1)).error_code == 0
        await until(lambda: c.log(1, "t").log_end_offset == 10, what="broker 1 at 10")
        fm1.remove_partition(("t", 0))
        assert (await produce_raw(c, 0, "t", 5, acks=1, first=10)).error_code == 0  # the tail only 0 has
        assert c.log(0, "t").log_end_offset == 15
        assert c.log(0, "t").high_watermark == 0
        c.elect("t", 1, [1, 2])  # broker 1 leads at epoch 1: broker 0's offsets 10-14 (epoch 0) diverge
        await until(lambda: c.log(0, "t").log_end_offset == 10, what="broker 0 truncated to 10")
        r = await produce_raw(c, 1, "t", 3, acks=-1, first=100)
        assert r.error_code == 0 and r.base_offset == 10
        await until(lambda: all(c.log(i, "t").log_end_offset == 13 for i in (0, 2)), what="convergence")
        assert c.log_bytes(0, "t") == c.log_bytes(1, "t") == c.log_bytes(2, "t")
        assert [e.epoch for e in c.log(0, "t").leader_epoch_cache.entries()] == [0, 1]
        assert c.brokers[0].replica_manager.fetcher_manager.fetching() == {("t", 0): 1}

    run(tmp_path, 3, body)


def test_idempotent_retry_after_failover_is_not_duplicated(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        c.create("t", [0, 1], min_isr=2)
        await until(lambda: all(("t", 0) in b.replica_manager.partitions for b in c.brokers.values()))
        pid = 4242
        r = await produce_raw(c, 0, "t", 5, acks=-1, pid=pid, seq=0)
        assert r.error_code == 0 and r.base_offset == 0
        await until(lambda: c.log(1, "t").log_end_offset == 5)
        c.elect("t", 1, [0, 1])
        await until(lambda: c.brokers[1].replica_manager.partitions[("t", 0)].is_leader)
        retry = await produce_raw(c, 1, "t", 5, acks=-1, pid=pid, seq=0)  # the client never saw the answer
        assert retry.error_code == 0 and retry.base_offset == 0
        assert c.log(1, "t").log_end_offset == 5
        nxt = await produce_raw(c, 1, "t", 2, acks=-1, pid=pid, seq=5, first=5)
        assert nxt.error_code == 0 and nxt.base_offset == 5
        bad = await produce_raw(c, 1, "t", 2, acks=-1, pid=pid, seq=9, first=9)
        assert bad.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

    run(tmp_path, 2, body)


def test_session_lost_refuses_appends_until_restored(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        c.create("t", [0, 1], min_isr=1)
        await until(lambda: all(("t", 0) in b.replica_manager.partitions for b in c.brokers.values()))
        rm0 = c.brokers[0].replica_manager
        rm1 = c.brokers[1].replica_manager
        # As ZooKeeper's session expiry tells the cache's listeners (the embedded store never loses it).
        rm0.on_metadata_change("session", "lost")
        rm1.on_metadata_change("session", "lost")
        assert (await produce_raw(c, 0, "t", 1, acks=1)).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert rm1.fetcher_manager.fetching() == {}
        rm0.on_metadata_change("session", "restored")
        rm1.on_metadata_change("session", "restored")
        assert (await produce_raw(c, 0, "t", 1, acks=-1)).error_code == 0
        assert rm1.fetcher_manager.fetching() == {("t", 0): 0}

    run(tmp_path, 2, body)


def test_follower_stops_fetching_from_an_offline_or_dead_leader(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        c.create("t", [0, 1])
        await until(lambda: c.brokers[1].replica_manager.fetcher_manager.fetching() == {("t", 0): 0})
        c.elect("t", -1, [1])
        await until(lambda: c.brokers[1].replica_manager.fetcher_manager.fetching() == {})
        c.elect("t", 1, [1])
        await until(lambda: c.brokers[1].replica_manager.partitions[("t", 0)].is_leader)
        fm0 = c.brokers[0].replica_manager.fetcher_manager
        await until(lambda: fm0.fetching() == {("t", 0): 1})
        await until(lambda: c.state("t").isr == [1, 0])  # 0 caught up and joined
        await c.stop(1)  # a controlled shutdown: the controller moves the leadership to 0, which stops fetching
        await until(lambda: fm0.fetching() == {} and c.state("t").leader == 0)
        b1 = await c.start(1)  # back as a follower: it fetches from the new leader
        await until(lambda: b1.replica_manager.fetcher_manager.fetching() == {("t", 0): 0})
        assert not b1.replica_manager.partitions[("t", 0)].is_leader

    run(tmp_path, 2, body)


def test_num_replica_fetchers_spread_partitions_over_fetchers(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        c.create("t", [0, 1], partitions=8)
        fm = c.brokers[1].replica_manager.fetcher_manager
        await until(lambda: len(fm.fetching()) == 8, what="8 partitions fetched")
        assert sorted(fm.fetchers) == [(0, 0), (0, 1)]  # (source broker, fetcher id)
        assert sum(len(f.partitions) for f in fm.fetchers.values()) == 8
        producer = AIOKafkaProducer(bootstrap_servers=c.bootstrap(0), acks="all")
        await producer.start()
        try:
            for p in range(8):
                await producer.send_and_wait("t", b"x" * 100, partition=p)
        finally:
            await producer.stop()
        rm1 = c.brokers[1].replica_manager
        await until(lambda: all(rm1.partitions[("t", p)].log.log_end_offset == 1 for p in range(8)))

    run(tmp_path, 2, body, {"num.replica.fetchers": "2"})


def test_a_partition_with_batches_above_replica_fetch_max_bytes_is_not_starved(tmp_path: Path) -> None:
    """Only the first partition with data may exceed replica.fetch.max.bytes by one batch (KIP-74); under
    steady load on another partition, the fetcher's rotation must still bring the large batch's turn."""
    async def body(c: Cluster) -> None:
        c.create("t", [0, 1], partitions=2)
        rm1 = c.brokers[1].replica_manager
        await until(lambda: len(rm1.fetcher_manager.fetching()) == 2)
        stop = asyncio.Event()

        async def load() -> None:
            k = 0
            while not stop.is_set():
                assert (await produce_raw(c, 0, "t", 1, acks=1, partition=0, value_bytes=2000, first=k)).error_code == 0
                k += 1
                await asyncio.sleep(0.005)

        task = asyncio.ensure_future(load())
        try:
            await until(lambda: rm1.partitions[("t", 0)].log.log_end_offset >= 2)
            assert (await produce_raw(c, 0, "t", 3, acks=1, partition=1, value_bytes=3000)).error_code == 0
            await until(lambda: rm1.partitions[("t", 1)].log.log_end_offset == 3, timeout=10, what="partition 1")
        finally:
            stop.set()
            await task

    # Fetches answered once 10,000 bytes are there: the steady partition always has data when read.
    run(tmp_path, 2, body, {"replica.fetch.max.bytes": "1000", "replica.fetch.min.bytes": "10000",
                            "replica.fetch.wait.max.ms": "500"})


def test_isr_write_that_loses_a_race_waits_for_the_metadata_and_proposes_again(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        c.store.create_topic(TopicMetadata("t", uuid.uuid4(), {0: PartitionState([0, 1], 0, 0, [0])}))
        rm0 = c.brokers[0].replica_manager
        await until(lambda: ("t", 0) in rm0.partitions and ("t", 0) in c.brokers[1].replica_manager.partitions)
        part = rm0.partitions[("t", 0)]
        await until(lambda: c.state("t").isr == [0, 1] and part.pending_isr is None, what="the first expansion")
        # A controller takes broker 1 out again (its own epoch 5); its write lands in the store; its event is still queued for this loop, so the leader's
        # conditional write below is made against the version it knew, and loses (BadVersionError).
        s = c.state("t")
        assert c.store.update_partition_states([StateUpdate("t", 0, PartitionState([0, 1], 0, 0, [0], 5, s.version),
                                                            s.version)]) == [s.version + 1]
        rm0.isr.write([(part, [0, 1], "test")])
        assert part.pending_isr == [0, 1]
        await until(lambda: part.pending_isr is None, what="the write's answer")
        assert c.state("t").controller_epoch == 5  # the controller's write stands
        # The follower's next fetches propose the expansion again, from the new version.
        await until(lambda: c.state("t").isr == [0, 1], what="ISR [0, 1]")
        assert c.state("t").controller_epoch == 5 and c.state("t").leader_epoch == 0

    run(tmp_path, 2, body)


def test_parked_acks_all_produce_is_answered_when_leadership_moves(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        c.create("t", [0, 1], min_isr=1)
        await until(lambda: all(("t", 0) in b.replica_manager.partitions for b in c.brokers.values()))
        c.brokers[1].replica_manager.fetcher_manager.remove_partition(("t", 0))  # it never acknowledges
        produce = asyncio.ensure_future(produce_raw(c, 0, "t", 1, acks=-1, timeout_ms=30_000))
        await until(lambda: c.log(0, "t").log_end_offset == 1)
        await asyncio.sleep(0.2)
        assert not produce.done()  # parked on the HW
        c.elect("t", 1, [0, 1])
        r = await asyncio.wait_for(produce, 5)
        assert r.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER

    run(tmp_path, 2, body)


async def _commit(c: Cluster, i: int, group: str, offset: int) -> int:
    """A simple (generation -1) OffsetCommit v7 of t-0 to broker `i`; its error code."""
    host, port = c.bootstrap(i).split(":")
    client = BrokerClient(host, int(port), "test")
    try:
        resp = await client.request(OFFSET_COMMIT, 7, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                     "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
            timeout_s=30)
    finally:
        client.close()
    return int(resp.topics[0].partitions[0].error_code)


async def _committed(c: Cluster, i: int, group: str) -> int:
    host, port = c.bootstrap(i).split(":")
    client = BrokerClient(host, int(port), "test")
    try:
        resp = await client.request(OFFSET_FETCH, 7, {
            "group_id": group, "topics": [{"name": "t", "partition_indexes": [0]}], "require_stable": False},
            timeout_s=30)
    finally:
        client.close()
    return int(resp.topics[0].partitions[0].committed_offset)


def test_offset_commit_waits_for_the_isr(tmp_path: Path) -> None:
    """offsets.commit.required.acks=-1: a commit is answered, and visible, only once the ISR of its
    __consumer_offsets partition has it; a replica that stops fetching (still in the ISR until
    replica.lag.time.max.ms) holds commits back until offsets.commit.timeout.ms, which then fail with
    COORDINATOR_NOT_AVAILABLE and change nothing; once the ISR shrank, a retried commit succeeds."""
    async def body(c: Cluster) -> None:
        c.create("__consumer_offsets", [0, 1, 2])
        c.create("t", [0])
        key = ("__consumer_offsets", 0)
        await until(lambda: all(key in b.replica_manager.partitions for b in c.brokers.values()))
        leader = c.brokers[0].replica_manager.partitions[key]
        assert await _commit(c, 0, "g", 5) == ErrorCode.NONE
        leo = leader.log.log_end_offset
        assert leo >= 1 and all(leader.followers[i].log_end_offset >= leo for i in (1, 2)), \
            "a commit was acknowledged before its followers had it"
        assert await _committed(c, 0, "g") == 5

        c.brokers[2].replica_manager.fetcher_manager.remove_partition(key)
        t0 = asyncio.get_running_loop().time()
        assert await _commit(c, 0, "g", 9) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert asyncio.get_running_loop().time() - t0 >= 0.9  # it waited offsets.commit.timeout.ms
        assert await _committed(c, 0, "g") == 5, "a commit that failed became visible"

        # Retried as a client does: it succeeds once the ISR shrank past the stalled replica (which then
        # resumes fetching when the ISR change reaches it, and may rejoin).
        deadline = asyncio.get_running_loop().time() + 15
        while (code := await _commit(c, 0, "g", 11)) != ErrorCode.NONE:
            assert code == ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert asyncio.get_running_loop().time() < deadline, "commits never succeeded again"
        assert await _committed(c, 0, "g") == 11

    run(tmp_path, 3, body, {"offsets.topic.num.partitions": "1", "offsets.commit.timeout.ms": "1000",
                            "replica.lag.time.max.ms": "3000"})
