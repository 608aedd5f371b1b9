"""What the layer above registers with the quorum (Kafka's RaftClient.Listener), and how each listener is
brought along the committed log.

A listener is handed, in order and once each:

- `handle_load_snapshot(reader)`: the state as of a snapshot, when the records it would need next are
  no longer in the log (at start, when a snapshot exists; on a follower that fetched one). The listener
  replaces its state with the snapshot's and then continues from the snapshot's end offset.
- `handle_commit(batches)`: committed batches (every offset at or below the high watermark) from
  where it stopped, control batches included, so offsets have no gaps.
- `handle_leader_change(leader)`: a new leader or epoch. On the leader itself this comes only once
  the listener has been handed everything committed before the epoch began (its LeaderChange record),
  so a controller never acts on a state older than its own leadership.

Calls come from the node's thread (the driver's event loop), from inside `RaftNode.poll`; a listener
may call the node back (schedule_append, create_snapshot) from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

from gregor.raft.records import Batch
from gregor.raft.snapshots import SnapshotReader

DELIVERY_BYTES_PER_POLL = 8 << 20  # committed bytes handed to one listener per poll (the rest on the next)


class LeaderAndEpoch(NamedTuple):
    leader_id: int  # -1: unknown
    epoch: int


class RaftListener(Protocol):
    def handle_commit(self, batches: list[Batch]) -> None: ...

    def handle_load_snapshot(self, reader: SnapshotReader) -> None: ...

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None: ...


@dataclass
class ListenerContext:
    listener: RaftListener
    next_offset: int = 0  # the first offset it has not been handed
    last_leader: LeaderAndEpoch | None = None
    loaded_snapshot: bool = False
