"""What the quorum's client API raises, each with a message that says what to do."""

from __future__ import annotations


class RaftError(Exception):
    """Base of the quorum's errors."""


class NotLeaderError(RaftError):
    """An append or snapshot asked of a node that is not the leader of that epoch (any more).

    `leader_id` and `epoch` are the node's view of the current leader (-1: unknown)."""

    def __init__(self, message: str, leader_id: int = -1, epoch: int = -1) -> None:
        super().__init__(message)
        self.leader_id = leader_id
        self.epoch = epoch


class RecordTooLargeError(RaftError):
    """A record (or an atomic group of records) larger than one batch of the metadata log can hold."""


class BufferFullError(RaftError):
    """Appends not yet written exceed the leader's bound: the caller retries after the log catches up."""


class InvalidSnapshotError(RaftError):
    """A snapshot asked for at an offset that is not committed, or below the log's start."""
