"""Partition limits (issue 8, finding 2): a broker refuses partitions it could not keep open.

CreateTopics with 100,000 partitions used to be accepted: the broker ran out of file descriptors
(EMFILE) creating the logs and could never start again. Now creation beyond `max.broker.partitions`
or beyond what the open-file limit allows (the soft RLIMIT_NOFILE, raised to the hard limit at start,
minus what connections and other files need) is refused with POLICY_VIOLATION and a message naming
the limit; auto-created topics obey the same limits.
"""

from __future__ import annotations

import resource
from collections.abc import Callable, Iterator

import pytest

from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import iter_records
from tests.broker_process import BrokerProcess
from tests.server.admin_wire import create_partitions, create_topic, error_of, fetch, metadata, produce
from tests.wire import WireClient


def _open_files_limit(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/limits") as fh:
        for line in fh:
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
    raise AssertionError("no open-file limit in /proc")


def test_partitions_beyond_the_broker_cap_are_refused_and_restart_serves(
        start_broker: Callable[..., BrokerProcess]) -> None:
    broker = start_broker()
    c = WireClient(broker.bootstrap, timeout_s=30)
    assert create_topic(c, "keep", 1).error_code == 0
    assert produce(c, "keep", 0, [b"a", b"b", b"c"]).error_code == 0

    code, msg = error_of(create_topic(c, "huge", 100_000))
    assert code == ErrorCode.POLICY_VIOLATION, (code, msg)
    assert "max.broker.partitions" in msg and "10000" in msg and "100000" in msg, msg
    code, msg = error_of(create_partitions(c, "keep", 100_000))
    assert code == ErrorCode.POLICY_VIOLATION and "max.broker.partitions" in msg, (code, msg)
    for count in (100_001, 2**31 - 1):  # refused at once, before any layout of that size exists
        code, msg = error_of(create_topic(c, "huge", count))
        assert code == ErrorCode.POLICY_VIOLATION and "max.broker.partitions" in msg and "larger than 0" not in msg
        code, msg = error_of(create_partitions(c, "keep", count))
        assert code == ErrorCode.POLICY_VIOLATION and "max.broker.partitions" in msg, msg
    code, msg = error_of(create_topic(c, "none", 0))
    assert code == ErrorCode.INVALID_PARTITIONS and "non-positive" in msg, (code, msg)
    assert metadata(c, "huge").topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert len(metadata(c, "keep").topics[0].partitions) == 1

    broker.kill()
    broker.restart()
    c = WireClient(broker.bootstrap)
    got = fetch(c, "keep", 0)
    assert got.error_code == 0
    assert [r.value for r in iter_records(bytes(got.records))] == [b"a", b"b", b"c"]


def test_auto_created_topics_obey_the_cap(start_broker: Callable[..., BrokerProcess]) -> None:
    broker = start_broker({"max.broker.partitions": "10", "num.partitions": "4"})
    c = WireClient(broker.bootstrap)
    for name in ("auto-1", "auto-2"):
        t = metadata(c, name, auto_create=True).topics[0]
        assert t.error_code == 0 and len(t.partitions) == 4
    assert metadata(c, "auto-3", auto_create=True).topics[0].error_code == ErrorCode.POLICY_VIOLATION
    code, msg = error_of(create_topic(c, "explicit", 3))
    assert code == ErrorCode.POLICY_VIOLATION and "above its limit of 10 (max.broker.partitions)" in msg, msg
    assert create_topic(c, "fits", 2).error_code == 0


@pytest.fixture
def low_soft_nofile() -> Iterator[None]:
    """Start brokers with a low soft open-file limit (the hard one unchanged), as many shells do."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_open_file_budget(low_soft_nofile: None, start_broker: Callable[..., BrokerProcess]) -> None:
    broker = start_broker()
    assert broker.proc is not None
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert _open_files_limit(broker.proc.pid)[0] == hard  # raised from 1024 at start

    # A host that allows 1200 files: 1200 - (300 for connections + 256 for other files) = 644 partitions.
    resource.prlimit(broker.proc.pid, resource.RLIMIT_NOFILE, (1200, 1200))
    c = WireClient(broker.bootstrap, timeout_s=60)
    code, msg = error_of(create_topic(c, "too-many", 1000))
    assert code == ErrorCode.POLICY_VIOLATION, (code, msg)
    assert "open-file limit allows" in msg and "RLIMIT_NOFILE 1200" in msg and "644" in msg, msg
    assert create_topic(c, "fits", 600).error_code == 0
    code, msg = error_of(create_partitions(c, "fits", 700))
    assert code == ErrorCode.POLICY_VIOLATION and "open-file limit" in msg, msg
    assert produce(c, "fits", 599, [b"x"]).error_code == 0
    assert fetch(c, "fits", 599).error_code == 0
