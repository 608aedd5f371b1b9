"""What the KRaft process tests share: the quorum as kafka-python's admin client describes it, a wait that
returns what it waited for, and reading a topic's values back."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import Consumer
from kafka.admin import KafkaAdminClient

T = TypeVar("T")


def quorum(bootstrap: str) -> dict[str, Any]:
    """DescribeQuorum's partition (leader, epoch, voters, observers), asked through a broker."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        return dict(admin.describe_metadata_quorum()["topics"][0]["partitions"][0])
    finally:
        admin.close()


def wait_value(what: str, fn: Callable[[], T], timeout_s: float = 30.0) -> T:
    """`fn()` once it is truthy; an exception counts as not yet (a node that is down answers nothing), and the
    last value or exception is named when the wait fails."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            v = fn()
            if v:
                return v
            last = v
        except Exception as e:  # noqa: BLE001 - retried until the deadline, the last one reported
            last = e
        time.sleep(0.1)
    raise AssertionError(f"{what} not within {timeout_s} s (last: {last!r})")


def read_values(bootstrap: str, topic: str, count: int, timeout_s: float = 60.0) -> list[str]:
    """The values a new group's consumer reads from the topic's start, until `count` came or the time is up."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[str] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value().decode())
    finally:
        c.close()
    return got
