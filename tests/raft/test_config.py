"""The quorum's properties: Kafka's names and defaults in the broker's table, clear errors for bad values."""

from __future__ import annotations

import pytest

from gregor.config import BrokerConfig
from gregor.configdef import ConfigError
from gregor.raft.config import Endpoint, QuorumConfig, QuorumSettings, parse_voters
from gregor.raft.snapshot_policy import SnapshotPolicy


def test_kafkas_defaults() -> None:
    s = QuorumSettings.from_config(BrokerConfig())
    assert (s.node_id, s.voters, s.bootstrap_servers) == (-1, [], [])
    assert (s.election_timeout_ms, s.fetch_timeout_ms, s.election_backoff_max_ms, s.request_timeout_ms,
            s.retry_backoff_ms, s.append_linger_ms) == (1000, 2000, 1000, 2000, 20, 25)
    assert (s.snapshot_bytes, s.snapshot_interval_ms) == (20 * 1024 * 1024, 3600000)
    assert s.segment_bytes == 1 << 30


def test_voters_and_the_log_directory() -> None:
    s = QuorumSettings.from_config(BrokerConfig({
        "node.id": "2", "controller.quorum.voters": "1@h1:9093, 2@h2:9093,3@[::1]:9095", "log.dirs": "/d1,/d2"}))
    c = s.quorum_config()
    assert c.voters == {1: Endpoint("h1", 9093), 2: Endpoint("h2", 9093), 3: Endpoint("::1", 9095)}
    assert c.is_voter and c.majority == 2 and c.check_quorum_timeout_ms == 3000
    assert s.log_directory() == "/d1"
    assert QuorumSettings.from_config(BrokerConfig({"metadata.log.dir": "/m"})).log_directory() == "/m"


@pytest.mark.parametrize("voters", ["1@h1", "x@h:1", "1@h:0", "1@h:1,1@h:2", "h:9093"])
def test_bad_voters_are_refused_naming_the_property(voters: str) -> None:
    with pytest.raises(ConfigError, match="controller.quorum.voters"):
        parse_voters(voters.split(","))


def test_a_quorum_needs_voters() -> None:
    with pytest.raises(ConfigError, match="controller.quorum.voters"):
        QuorumSettings.from_config(BrokerConfig({"node.id": "1"})).quorum_config()
    with pytest.raises(ConfigError):
        QuorumConfig(node_id=1, voters={})
    with pytest.raises(ConfigError, match="controller.quorum.fetch.timeout.ms"):
        BrokerConfig({"controller.quorum.fetch.timeout.ms": "0"})


def test_snapshot_policy() -> None:
    p = SnapshotPolicy(1000, 60_000, now_ms=0)
    assert not p.due(10)
    p.committed(999)
    assert not p.due(10)
    p.committed(1)
    assert p.due(10)
    p.taken(10)
    assert not p.due(60_009)
    p.committed(1)
    assert p.due(60_010)  # something new, and the interval passed
    assert not SnapshotPolicy(1000, 0, 0).due(10**9)
