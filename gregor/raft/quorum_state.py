"""The election state that must survive a crash, in KIP-595's `quorum-state` file.

A voter may vote once per epoch and must never forget it did: the file is written (to a temporary
file, fsynced, renamed over the old one, the directory fsynced) before a vote is granted, before a
candidate asks for votes in its new epoch and before a leader acts in its epoch. One JSON object on
one line, Kafka's version 0 layout:

    {"clusterId":"","leaderId":1,"leaderEpoch":5,"votedId":1,"appliedOffset":0,
     "currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}

`MemoryQuorumStateStore` is the simulation's: a write is durable at once, as the file's is once
`write` returns.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

FILE_NAME = "quorum-state"
DATA_VERSION = 0


class QuorumStateError(Exception):
    """The quorum-state file cannot be read: the node must not start (it might vote twice)."""


@dataclass(frozen=True, slots=True)
class ElectionState:
    epoch: int = 0
    leader_id: int = -1
    voted_id: int = -1
    voters: tuple[int, ...] = field(default_factory=tuple)

    def to_json(self) -> str:
        return json.dumps({
            "clusterId": "", "leaderId": self.leader_id, "leaderEpoch": self.epoch, "votedId": self.voted_id,
            "appliedOffset": 0, "currentVoters": [{"voterId": v} for v in self.voters], "data_version": DATA_VERSION,
        }, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, where: str) -> ElectionState:
        try:
            obj = json.loads(text.splitlines()[0] if text else "")
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            version = obj.get("data_version")
            if version not in (0, 1):
                raise ValueError(f"data_version {version!r} is not 0 or 1")
            voters = obj.get("currentVoters") or []
            return cls(int(obj.get("leaderEpoch", 0)), int(obj.get("leaderId", -1)), int(obj.get("votedId", -1)),
                       tuple(int(v["voterId"]) for v in voters))
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise QuorumStateError(f"{where}: unreadable quorum state ({e}); it holds this node's votes, so the "
                                   "node does not start without it: restore it or reformat the node") from None


class FileQuorumStateStore:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        os.makedirs(directory, exist_ok=True)

    def read(self) -> ElectionState | None:
        try:
            with open(self.path, encoding="utf-8") as fh:
                text = fh.read()
        except FileNotFoundError:
            return None
        return ElectionState.from_json(text, self.path)

    def write(self, state: ElectionState) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(state.to_json())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        fd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class MemoryQuorumStateStore:
    def __init__(self) -> None:
        self.state: ElectionState | None = None
        self.writes = 0

    def read(self) -> ElectionState | None:
        return self.state

    def write(self, state: ElectionState) -> None:
        self.state = state
        self.writes += 1
