"""The replica data path at the wire: follower fetches move the HW and release acks=all, pipelined
requests are answered in order while an earlier one waits in the purgatory, OffsetForLeaderEpoch.

A lone broker cannot host a partition with two replicas unless a second broker is registered, and
registrations live in the broker's memory; so the replication tests run the real Broker in this
process, on its own event loop thread and real sockets, register a second broker id with it, and
play that follower over the wire with Fetch requests carrying its replica id.
"""

from __future__ import annotations

import select
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gregor.metadata.store import BrokerInfo
from gregor.protocol import apis
from gregor.protocol.errors import ErrorCode
from gregor.protocol.frames import decode_response
from gregor.protocol.records import Record, build_batch, iter_headers
from tests.broker_process import BrokerProcess
from tests.in_process import InProcessBroker
from tests.wire import WireClient

PRODUCE, FETCH, METADATA, API_VERSIONS, CREATE_TOPICS, OFFSET_FOR_LEADER_EPOCH = 0, 1, 3, 18, 19, 23
FOLLOWER = 1


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[InProcessBroker]:
    b = InProcessBroker({"log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0"})
    b.wait_loaded()
    b.call(b.broker.store.register_broker, BrokerInfo(FOLLOWER, "127.0.0.1", 1))
    yield b
    b.stop()


def _create_replicated(c: WireClient, topic: str) -> None:
    r = c.request(CREATE_TOPICS, 5, {
        "topics": [{"name": topic, "num_partitions": -1, "replication_factor": -1,
                    "assignments": [{"partition_index": 0, "broker_ids": [0, FOLLOWER]}], "configs": []}],
        "timeout_ms": 10_000, "validate_only": False})
    assert r.topics[0].error_code == 0, r


def _produce_body(topic: str, n: int, acks: int, timeout_ms: int = 10_000) -> dict[str, Any]:
    batch = build_batch([Record(i, 1_700_000_000_000 + i, None, b"x" * 50) for i in range(n)])
    return {"transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}


def _fetch_body(topic: str, offset: int, replica_id: int = -1, min_bytes: int = 1, max_wait_ms: int = 0,
                current_leader_epoch: int = -1) -> dict[str, Any]:
    return {"replica_id": replica_id, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "current_leader_epoch": current_leader_epoch, "fetch_offset": offset,
                 "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def _recv(c: WireClient, api_key: int, version: int) -> tuple[int, Any]:
    return decode_response(c.recv_frame(), apis.BY_KEY[api_key], version)


def _nothing_to_read(c: WireClient, wait_s: float) -> bool:
    return not select.select([c.sock], [], [], wait_s)[0]


def _records(p: Any) -> int:
    return sum(h.records_count for h in iter_headers(p.records or b""))


def test_acks_all_waits_for_the_follower_and_later_requests_keep_their_order(replicated: InProcessBroker) -> None:
    producer, follower, consumer = (WireClient(replicated.bootstrap) for _ in range(3))
    _create_replicated(producer, "rep")
    produce_id = producer.send(PRODUCE, 9, _produce_body("rep", 5, acks=-1))
    versions_id = producer.send(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert _nothing_to_read(producer, 0.5), "acks=all answered before the follower had the batch"
    # The follower fetches from 0 and gets the batch (up to the LEO, above the HW): its LEO is still 0.
    r = follower.request(FETCH, 12, _fetch_body("rep", 0, replica_id=FOLLOWER))
    p = r.responses[0].partitions[0]
    assert (p.error_code, p.high_watermark, _records(p)) == (0, 0, 5)
    c = consumer.request(FETCH, 12, _fetch_body("rep", 0)).responses[0].partitions[0]
    assert (c.high_watermark, _records(c)) == (0, 0)  # consumers see nothing above the HW
    assert _nothing_to_read(producer, 0.2)
    # Its next fetch says it has them: the HW moves to 5 and the Produce is answered, then ApiVersions.
    r = follower.request(FETCH, 12, _fetch_body("rep", 5, replica_id=FOLLOWER))
    assert r.responses[0].partitions[0].high_watermark == 5
    got, resp = _recv(producer, PRODUCE, 9)
    assert got == produce_id
    pr = resp.responses[0].partition_responses[0]
    assert (pr.error_code, pr.base_offset) == (0, 0)
    got, resp = _recv(producer, API_VERSIONS, 3)
    assert got == versions_id and resp.error_code == 0
    c = consumer.request(FETCH, 12, _fetch_body("rep", 0)).responses[0].partitions[0]
    assert (c.high_watermark, _records(c)) == (5, 5)


def test_acks_all_times_out_and_a_parked_follower_fetch_wakes_on_append(replicated: InProcessBroker) -> None:
    producer, follower = WireClient(replicated.bootstrap), WireClient(replicated.bootstrap)
    _create_replicated(producer, "slowrep")
    fetch_id = follower.send(FETCH, 12, _fetch_body("slowrep", 0, replica_id=FOLLOWER, max_wait_ms=10_000))
    assert _nothing_to_read(follower, 0.3)  # parked: nothing to replicate yet
    t0 = time.monotonic()
    r = producer.request(PRODUCE, 9, _produce_body("slowrep", 3, acks=-1, timeout_ms=700))
    elapsed = time.monotonic() - t0
    pr = r.responses[0].partition_responses[0]
    assert pr.error_code == ErrorCode.REQUEST_TIMED_OUT and 0.6 < elapsed < 5
    # The append woke the follower's parked fetch long before its max wait, with the batch.
    got, resp = _recv(follower, FETCH, 12)
    assert got == fetch_id and _records(resp.responses[0].partitions[0]) == 3
    # acks=1 does not wait; a replica id that is not assigned is refused.
    assert producer.request(PRODUCE, 9, _produce_body("slowrep", 1, acks=1)).responses[0] \
        .partition_responses[0].error_code == 0
    stranger = follower.request(FETCH, 12, _fetch_body("slowrep", 0, replica_id=7)).responses[0].partitions[0]
    assert stranger.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    stranger = follower.request(FETCH, 12, _fetch_body("slowrep", 0, replica_id=7, current_leader_epoch=0))
    assert stranger.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_parked_fetch_then_metadata_answered_in_order(broker: BrokerProcess) -> None:
    c = WireClient(broker.bootstrap)
    c.request(METADATA, 12, {"topics": [{"topic_id": None, "name": "ordered"}], "allow_auto_topic_creation": True})
    t0 = time.monotonic()
    fetch_id = c.send(FETCH, 12, _fetch_body("ordered", 0, min_bytes=1 << 20, max_wait_ms=800))
    meta_id = c.send(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
    got, _ = _recv(c, FETCH, 12)
    assert got == fetch_id and time.monotonic() - t0 >= 0.7  # the Fetch waited its max wait
    got, resp = _recv(c, METADATA, 12)
    assert got == meta_id and any(t.name == "ordered" for t in resp.topics)


def test_offset_for_leader_epoch(broker: BrokerProcess) -> None:
    c = WireClient(broker.bootstrap)
    c.request(METADATA, 12, {"topics": [{"topic_id": None, "name": "epochs"}], "allow_auto_topic_creation": True})
    assert c.request(PRODUCE, 9, _produce_body("epochs", 7, acks=-1)).responses[0] \
        .partition_responses[0].error_code == 0
    versions = {k.api_key: (k.min_version, k.max_version)
                for k in c.request(API_VERSIONS, 3, {"client_software_name": "t",
                                                     "client_software_version": "1"}).api_keys}
    assert versions[OFFSET_FOR_LEADER_EPOCH] == (2, 4)

    def ask(version: int, leader_epoch: int, current: int = -1, topic: str = "epochs", replica_id: int = -1) -> Any:
        body = {"replica_id": replica_id, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": current, "leader_epoch": leader_epoch}]}]}
        return c.request(OFFSET_FOR_LEADER_EPOCH, version, body).topics[0].partitions[0]

    for v in (2, 3, 4):
        p = ask(v, 0)
        assert (p.error_code, p.leader_epoch, p.end_offset) == (0, 0, 7)
    p = ask(4, 3)  # an epoch this log never had: unknown, no error (Kafka's answer)
    assert (p.error_code, p.leader_epoch, p.end_offset) == (0, -1, -1)
    assert ask(4, 0, current=1).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert ask(4, 0, topic="no-such-topic").error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    p = ask(3, 0, replica_id=5)  # a follower's question is answered the same way by the leader
    assert (p.error_code, p.end_offset) == (0, 7)


def test_unsupported_offset_for_leader_epoch_version_closes(broker: BrokerProcess) -> None:
    c = WireClient(broker.bootstrap)
    c.send_raw(struct.pack(">ihhih", 10, OFFSET_FOR_LEADER_EPOCH, 1, 1, -1))  # v1: removed in Kafka 4.0
    assert c.closed_by_peer()
