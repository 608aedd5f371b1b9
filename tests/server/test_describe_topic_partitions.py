"""DescribeTopicPartitions (KIP-966) against one broker process, on the wire: every partition of a topic
walked in pages through the cursor, a cursor in the middle of a topic, the limit reached at a topic's
end, an unknown topic, a topic the principal may not DESCRIBE (named: TOPIC_AUTHORIZATION_FAILED; all
topics: left out), max.request.partition.size.limit bounding what a client asks for, and kafka-python's
admin client paging (confluent-kafka 2.16's describe_topics uses Metadata, not this API)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaAdminClient

from gregor.protocol.errors import ErrorCode
from gregor.protocol.schema import Struct
from gregor.tools.local_broker import BrokerProcess
from tests.wire import WireClient

DESCRIBE_TOPIC_PARTITIONS = 75
TOPICS = {"dtp-many": 45, "dtp-one": 1, "dtp-two": 2, "dtp-secret": 3}
BOUND = 20  # max.request.partition.size.limit of the broker under test


@pytest.fixture(scope="module")
def b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("dtp"), {
        "max.request.partition.size.limit": str(BOUND),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "true"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for fut in admin.create_topics([NewTopic(t, n, 1) for t, n in TOPICS.items()]).values():
            fut.result(30)
        deny = AclBinding(ResourceType.TOPIC, "dtp-secret", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                          AclOperation.DESCRIBE, AclPermissionType.DENY)
        for fut in admin.create_acls([deny]).values():
            fut.result(30)
        yield broker
    finally:
        broker.kill()


def describe(c: WireClient, topics: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None) -> Struct:
    return c.request(DESCRIBE_TOPIC_PARTITIONS, 0, {
        "topics": [{"name": t} for t in topics], "response_partition_limit": limit,
        "cursor": None if cursor is None else {"topic_name": cursor[0], "partition_index": cursor[1]}})


def walk(c: WireClient, topics: list[str], limit: int) -> tuple[list[tuple[str, int]], list[Any], int]:
    """Every (topic, partition) the pages hold, the topic entries, and how many pages it took."""
    got: list[tuple[str, int]] = []
    entries: list[Any] = []
    cursor: tuple[str, int] | None = None
    pages = 0
    while True:
        r = describe(c, topics, limit, cursor)
        pages += 1
        assert sum(len(t.partitions) for t in r.topics) <= min(limit, BOUND)
        for t in r.topics:
            entries.append(t)
            got.extend((t.name, p.partition_index) for p in t.partitions)
        if r.next_cursor is None:
            return got, entries, pages
        cursor = (r.next_cursor.topic_name, r.next_cursor.partition_index)
        assert pages < 50


def test_pages_cover_every_partition_once(b: BrokerProcess) -> None:
    c = WireClient(b.bootstrap)
    got, entries, pages = walk(c, ["dtp-many", "dtp-one", "dtp-two"], 7)
    want = [(t, p) for t in sorted(["dtp-many", "dtp-one", "dtp-two"]) for p in range(TOPICS[t])]
    assert got == want  # in name order, each partition once
    assert pages == -(-len(want) // 7)
    for t in entries:
        assert t.error_code == ErrorCode.NONE and t.topic_id.int != 0 and t.is_internal is False
        assert t.topic_authorized_operations > 0
        for p in t.partitions:
            assert p.error_code == ErrorCode.NONE and p.leader_id == 0 and p.leader_epoch >= 0
            assert p.replica_nodes == [0] and p.isr_nodes == [0] and p.offline_replicas == []
            assert p.eligible_leader_replicas == [] and p.last_known_elr == []


def test_cursor_in_the_middle_and_at_a_topic_end(b: BrokerProcess) -> None:
    c = WireClient(b.bootstrap)
    r = describe(c, ["dtp-many"], 10, ("dtp-many", 17))
    assert [p.partition_index for p in r.topics[0].partitions] == list(range(17, 27))
    assert (r.next_cursor.topic_name, r.next_cursor.partition_index) == ("dtp-many", 27)
    # The limit reached exactly at the end of a topic: the next page starts at the next topic's partition 0.
    r = describe(c, ["dtp-many", "dtp-one"], 5, ("dtp-many", 40))
    assert [p.partition_index for p in r.topics[0].partitions] == [40, 41, 42, 43, 44]
    assert (r.next_cursor.topic_name, r.next_cursor.partition_index) == ("dtp-one", 0)
    # The last page has no next cursor.
    r = describe(c, ["dtp-many"], 10, ("dtp-many", 40))
    assert len(r.topics[0].partitions) == 5 and r.next_cursor is None
    # The client's limit is bounded by max.request.partition.size.limit.
    r = describe(c, ["dtp-many"], 2000)
    assert len(r.topics[0].partitions) == BOUND
    assert (r.next_cursor.topic_name, r.next_cursor.partition_index) == ("dtp-many", BOUND)
    # A cursor naming a topic not asked for is an invalid request.
    r = describe(c, ["dtp-one"], 10, ("dtp-many", 0))
    assert [t.error_code for t in r.topics] == [ErrorCode.INVALID_REQUEST]


def test_unknown_and_unauthorized_topics(b: BrokerProcess) -> None:
    c = WireClient(b.bootstrap)
    r = describe(c, ["dtp-nope", "dtp-one", "dtp-secret"])
    by_name = {t.name: t for t in r.topics}
    assert by_name["dtp-nope"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert by_name["dtp-nope"].partitions == []
    assert by_name["dtp-secret"].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert by_name["dtp-secret"].partitions == []
    assert by_name["dtp-one"].error_code == ErrorCode.NONE and len(by_name["dtp-one"].partitions) == 1
    # All topics (an empty list): the undescribable one is left out, every other partition is there.
    got, entries, _ = walk(c, [], 9)
    names = {t.name for t in entries}
    assert "dtp-secret" not in names and {"dtp-many", "dtp-one", "dtp-two"} <= names
    assert sorted(set(got)) == got
    assert sum(1 for t, _ in got if t == "dtp-many") == TOPICS["dtp-many"]


def test_kafka_python_pages(b: BrokerProcess) -> None:
    """kafka-python's admin client (describe_topic_partitions, API 75) walks a topic with its cursor."""
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        got: list[int] = []
        cursor = None
        pages = 0
        while True:
            page = admin.describe_topic_partitions(["dtp-many"], response_partition_limit=10, cursor=cursor)
            pages += 1
            (t,) = page["topics"]
            assert t["error_code"] == 0 and t["name"] == "dtp-many"
            got.extend(p["partition_index"] for p in t["partitions"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert got == list(range(TOPICS["dtp-many"])) and pages == 5
    finally:
        admin.close()
