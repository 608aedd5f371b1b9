"""The quorum's configuration: Kafka's controller.quorum.* and metadata.log.* properties as one typed view,
and the voter set parsed from `controller.quorum.voters`.

`QuorumSettings` is what a node's owner builds from the broker config (`QuorumSettings.from_config`);
`QuorumConfig` is what the sans-IO core needs of it: the node's id, the voters and the timeouts. Bad
input is refused here with a message naming the property, so the core can assume a sane config.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from gregor.configdef import ConfigError, Settings, setting


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_host_port(text: str, prop: str) -> Endpoint:
    """host:port (an IPv6 host in brackets). Raises ConfigError naming `prop`."""
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"Invalid value {text} for configuration {prop}: expected host:port with a port in 1-65535")
    return Endpoint(host, int(port))


def parse_voters(entries: list[str]) -> dict[int, Endpoint]:
    """controller.quorum.voters: id@host:port,... -> {id: endpoint}. Ids are non-negative and unique."""
    prop = "controller.quorum.voters"
    voters: dict[int, Endpoint] = {}
    for entry in entries:
        vid, sep, address = entry.partition("@")
        if not sep or not vid.strip().isdigit():
            raise ConfigError(f"Invalid value {entry} for configuration {prop}: expected id@host:port")
        node = int(vid)
        if node in voters:
            raise ConfigError(f"Invalid value {','.join(entries)} for configuration {prop}: voter {node} is listed "
                              "twice")
        voters[node] = parse_host_port(address, prop)
    return voters


@dataclass(frozen=True, slots=True)
class QuorumSettings(Settings):
    """The broker properties the metadata quorum reads."""

    node_id: int = setting("node.id")
    voters: list[str] = setting("controller.quorum.voters")
    bootstrap_servers: list[str] = setting("controller.quorum.bootstrap.servers")
    election_timeout_ms: int = setting("controller.quorum.election.timeout.ms")
    fetch_timeout_ms: int = setting("controller.quorum.fetch.timeout.ms")
    election_backoff_max_ms: int = setting("controller.quorum.election.backoff.max.ms")
    request_timeout_ms: int = setting("controller.quorum.request.timeout.ms")
    retry_backoff_ms: int = setting("controller.quorum.retry.backoff.ms")
    append_linger_ms: int = setting("controller.quorum.append.linger.ms")
    metadata_log_dir: str | None = setting("metadata.log.dir")
    log_dirs: list[str] | None = setting("log.dirs")
    log_dir: str = setting("log.dir")
    segment_bytes: int = setting("metadata.log.segment.bytes")
    segment_ms: int = setting("metadata.log.segment.ms")
    snapshot_bytes: int = setting("metadata.log.max.record.bytes.between.snapshots")
    snapshot_interval_ms: int = setting("metadata.log.max.snapshot.interval.ms")
    max_request_bytes: int = setting("socket.request.max.bytes")
    max_connections: int = setting("max.connections")

    def log_directory(self) -> str:
        """metadata.log.dir, else the first of log.dirs (else log.dir)."""
        if self.metadata_log_dir:
            return os.path.abspath(self.metadata_log_dir)
        return os.path.abspath((self.log_dirs or [self.log_dir])[0])

    def quorum_config(self) -> QuorumConfig:
        voters = parse_voters(self.voters)
        bootstrap = [parse_host_port(s, "controller.quorum.bootstrap.servers") for s in self.bootstrap_servers]
        if not voters:
            raise ConfigError("controller.quorum.voters is empty: this quorum needs its voters listed (the dynamic "
                              "voter sets of KIP-853 are not supported)")
        if self.node_id < 0 and not bootstrap and not voters:
            raise ConfigError("node.id is -1 and there is no quorum to observe")
        return QuorumConfig(
            node_id=self.node_id, voters=voters, bootstrap_servers=bootstrap,
            election_timeout_ms=self.election_timeout_ms, fetch_timeout_ms=self.fetch_timeout_ms,
            election_backoff_max_ms=self.election_backoff_max_ms, request_timeout_ms=self.request_timeout_ms,
            retry_backoff_ms=self.retry_backoff_ms, append_linger_ms=self.append_linger_ms,
        )


@dataclass(frozen=True)
class QuorumConfig:
    """What the core needs: who this node is, who votes, and Kafka's timeouts (their defaults here too)."""

    node_id: int
    voters: dict[int, Endpoint]
    bootstrap_servers: list[Endpoint] = field(default_factory=list)
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    append_linger_ms: int = 25
    fetch_max_wait_ms: int = 500  # Kafka's KRaft fetch wait (not a config there either)
    cluster_id: str | None = None  # checked on every request when set (INCONSISTENT_CLUSTER_ID)
    listener_name: str = "CONTROLLER"  # the name endpoints are published under (DescribeQuorum v2)

    def __post_init__(self) -> None:
        if not self.voters:
            raise ConfigError("the quorum has no voters")
        for name in ("election_timeout_ms", "fetch_timeout_ms", "election_backoff_max_ms", "request_timeout_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    @property
    def check_quorum_timeout_ms(self) -> int:
        """A leader not fetched from by a majority for this long resigns (Kafka: 1.5 x the fetch timeout)."""
        return self.fetch_timeout_ms * 3 // 2

    @property
    def begin_quorum_epoch_timeout_ms(self) -> int:
        """A voter that has not fetched for this long is told again who leads (Kafka: half the fetch timeout)."""
        return self.fetch_timeout_ms // 2
