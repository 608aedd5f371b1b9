"""A transactional id's state, as the transaction coordinator keeps it (Kafka's TransactionMetadata).

States and their numbers in `__transaction_state` records (Kafka's, so its tools can read them):

    EMPTY (0) --AddPartitions--> ONGOING (1) --EndTxn--> PREPARE_COMMIT (2) / PREPARE_ABORT (3)
        --markers written--> COMPLETE_COMMIT (4) / COMPLETE_ABORT (5) --AddPartitions--> ONGOING ...

DEAD (6) is an expired id; PREPARE_EPOCH_FENCE (7) an open transaction being aborted because a new
producer with the same id called InitProducerId (it is written as PREPARE_ABORT with the new epoch).

A change is first written to the log and applied only once the write is replicated: while it is in
flight `pending` holds the target and requests for the id get CONCURRENT_TRANSACTIONS (retriable).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

EMPTY = 0
ONGOING = 1
PREPARE_COMMIT = 2
PREPARE_ABORT = 3
COMPLETE_COMMIT = 4
COMPLETE_ABORT = 5
DEAD = 6
PREPARE_EPOCH_FENCE = 7

STATE_NAMES = {
    EMPTY: "Empty", ONGOING: "Ongoing", PREPARE_COMMIT: "PrepareCommit", PREPARE_ABORT: "PrepareAbort",
    COMPLETE_COMMIT: "CompleteCommit", COMPLETE_ABORT: "CompleteAbort", DEAD: "Dead",
    PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
STATES_BY_NAME = {v: k for k, v in STATE_NAMES.items()}

NO_PRODUCER_ID = -1
NO_EPOCH = -1
MAX_EPOCH = 32767 - 1  # Short.MAX_VALUE - 1: at this epoch a new producer id is handed out instead

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int = EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1  # when the open transaction's first partition was added
    last_update_ms: int = -1
    last_producer_epoch: int = NO_EPOCH  # the epoch before a fence, so a timed-out producer may re-init (KIP-588)
    pending: TransactionMetadata | None = None  # a written change not yet replicated

    @property
    def state_name(self) -> str:
        return STATE_NAMES.get(self.state, str(self.state))

    def copy_with(self, **changes: object) -> TransactionMetadata:
        """The target of a transition (what is written); `pending` is the caller's to set."""
        changes.setdefault("partitions", set(self.partitions))
        return replace(self, pending=None, **changes)  # type: ignore[arg-type]

    def apply(self, target: TransactionMetadata) -> None:
        """The written target is replicated: it becomes the state."""
        self.producer_id = target.producer_id
        self.producer_epoch = target.producer_epoch
        self.timeout_ms = target.timeout_ms
        self.state = target.state
        self.partitions = set(target.partitions)
        self.start_ms = target.start_ms
        self.last_update_ms = target.last_update_ms
        self.last_producer_epoch = target.last_producer_epoch
        self.pending = None
